"""QueryWorkflow: one prompt → Terminal. The reference engine's `while True` query loop: the
engine decides each step (`durable_agent.engine.steps.decide`), this workflow runs it.

Its parts live beside it: the state they share (`loop_context`), the hooks (`hook_runs`), the
durable approval of a tool call (`approvals`), compaction (`compaction`), the tool calls of an
answer (`streaming_tools`). The workflow's signals, updates and queries stay here, thin."""

from __future__ import annotations

import asyncio
from typing import Any, assert_never

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from durable_agent.engine.bounds import add_collapsed, add_denials, carried_events
    from durable_agent.engine.context import estimate_text_tokens
    from durable_agent.engine.contracts import (
        AppendEntryInput,
        ApprovalAnswer,
        ApprovalRequest,
        BetweenTurnsInput,
        BetweenTurnsOutput,
        CallModelInput,
        EndToolProcessesInput,
        HookCallbackAnswer,
        HookCallbackRequest,
        MidTurnPrompts,
        PlanCollapseInput,
        QueryInput,
        RetryNotice,
        RunToolInput,
        RunToolOutput,
        SummaryInput,
        ToolCall,
        ToolReady,
    )
    from durable_agent.engine.loop import (
        after_model_response,
        model_request,
        prepare_request,
        token_budget,
        tools_done,
    )
    from durable_agent.engine.permissions import Behavior, headless
    from durable_agent.engine.state import (
        EagerTools,
        PendingUser,
        PermissionDenial,
        Phase,
        ProgressEvent,
        ProgressKind,
        QueryConfig,
        QueryResult,
        SeenFiles,
        State,
        Terminal,
        ToolResultRef,
        Transition,
    )
    from durable_agent.engine.steps import (
        CallModel,
        Compact,
        ContinueAsNew,
        DrainResults,
        Facts,
        Finish,
        RunTools,
        Step,
        StopHooks,
        decide,
    )
    from durable_agent.engine.todos import todo_text
    from durable_agent.engine.tool_hooks import (
        POST_TOOL_USE,
        POST_TOOL_USE_FAILURE,
        PRE_TOOL_USE,
        feedback_text,
    )
    from durable_agent.engine.tools import AgentInput, ToolName
    from durable_agent.names import Queries, Signals, Updates, Workflows
    from workflows import activity_options as steps

from workflows.agents import SubAgents
from workflows.approvals import Approvals
from workflows.compaction import Compaction
from workflows.failures import duration, error_type, model_error, tool_failure
from workflows.hook_runs import (
    HOOK_EVENTS_PATCH,
    STOP_HOOKS_PATCH,
    STOP_HOOKS_SNAPSHOT_PATCH,
    HookRuns,
    refused,
)
from workflows.hosting import HOST_LOSS_PATCH, HOST_LOST_FEEDBACK, Hosting
from workflows.loop_context import LoopContext, _Interrupted
from workflows.schedules import keep_scheduled
from workflows.streaming_tools import CallNotes, StreamingToolExecutor

__all__ = [
    "BOUNDED_STATE_PATCH",
    "BUG_EXCEPTION_TYPES",
    "HOOK_EVENTS_PATCH",
    "INTERRUPTED_TOOL_PROCESSES_PATCH",
    "LATE_SIGNAL_PATCH",
    "READ_ONLY_TOOLS_IN_STEP_PATCH",
    "STOP_HOOKS_PATCH",
    "STOP_HOOKS_SNAPSHOT_PATCH",
    "STORED_ANSWER_TOOLS_PATCH",
    "QueryWorkflow",
]

FILE_TOOL_NAMES = frozenset({"Read", "Write", "Edit", "NotebookEdit"})
"""The tools whose files the loop watches between turns (activities/turns.py)."""
READ_ONLY_TOOLS_IN_STEP_PATCH = "read-only-tools-in-step-v1"
"""Read, Grep and Glob run inside the model-call step: a turn that only reads costs one
activity, not two and a signal. Histories from before ran them as run_tool activities."""
LATE_SIGNAL_PATCH = "late-tool-signal-v1"
"""A tool_use_ready of an attempt older than one already heard from is ignored; before, it
discarded the newer attempt's executor and the prompt waited forever on its tools."""
STORED_ANSWER_TOOLS_PATCH = "stored-answer-tools-v1"
"""An answer the model step read back from the store (an earlier attempt streamed it; its
completion was lost) keeps that attempt's early-started tools; before, they were discarded and
run again under the same ids (a Bash twice, with eager_tools=all)."""
INTERRUPTED_TOOL_PROCESSES_PATCH = "interrupted-tool-processes-v1"
"""An interrupted tool call's processes are ended where it ran once its activity stops (a
worker that died never heard the cancel). Histories from before left them to the session's end."""
BOUNDED_STATE_PATCH = "bounded-state-v1"
"""Denials are kept summarised and capped, collapsed ids capped, and the newest progress events
carried across continue-as-new; before, all of them grew with the prompt or were lost."""


BUG_EXCEPTION_TYPES: list[type[BaseException]] = [
    AssertionError,
    AttributeError,
    LookupError,
    NameError,
    TypeError,
    ValueError,  # pydantic's ValidationError too
    ArithmeticError,
    _Interrupted,
]
"""A bug in our own loop code fails the prompt (the session records it and takes the next
one) instead of retrying its workflow task forever. Anything else, a non-determinism error
after a bad deploy above all, keeps retrying, so that a fixed worker can carry the prompt on;
`status` shows such a workflow."""


def parsed_agent(tool_input: dict[str, Any]) -> AgentInput | None:
    """A PreToolUse hook's updatedInput for an Agent call (None: not valid)."""
    try:
        return AgentInput.model_validate(tool_input)
    except ValueError:
        return None


def mcp_route(cfg: QueryConfig, name: str) -> dict[str, Any]:
    """An MCP tool's server and its own name for the tool (none for our tools)."""
    if not name.startswith("mcp__"):
        return {}
    tool = next((t for t in cfg.call.mcp_tools if t.name == name), None)
    server = next((s for s in cfg.mcp_servers if tool and s.name == tool.server), None)
    if tool is None or server is None:
        return {}
    return {"mcp_server": server, "mcp_tool": tool.tool}


def first_seen(cfg: QueryConfig) -> SeenFiles:
    """A session's first prompt watches the memory files its system prompt holds."""
    wanted = cfg.attachments
    return SeenFiles(stamps=dict(wanted.memory_stamps) if wanted is not None else {})


@workflow.defn(name=Workflows.QUERY, failure_exception_types=BUG_EXCEPTION_TYPES)
class QueryWorkflow:
    """The prompt's state is `self._ctx.state` alone (carried whole across continue-as-new); the
    rest is what is in flight (activities, tool executors) and what the user sent (interrupt).
    Handlers never hold a State across an await: a signal may have changed it meanwhile."""

    @workflow.init
    def __init__(self, inp: QueryInput) -> None:
        if inp.state is not None:
            state = inp.state
        elif inp.compact:  # `/compact`: the conversation so far, no new prompt
            state = State(
                head_uuid=inp.parent_uuid,
                context_tokens=inp.context_tokens,
                session_grants=tuple(inp.session_grants),
                turn_count=0,
                seen=inp.seen or first_seen(inp.config),
                todos=tuple(inp.todos),
            )
        else:
            state = State(
                head_uuid=inp.parent_uuid,
                pending=PendingUser(
                    uuid=str(workflow.uuid4()), parent_uuid=inp.parent_uuid, prompt=inp.prompt
                ),
                context_tokens=inp.context_tokens + estimate_text_tokens(inp.prompt),
                session_grants=tuple(inp.session_grants),
                seen=inp.seen or first_seen(inp.config),
                todos=tuple(inp.todos),
            )
        self._ctx = LoopContext(inp, state)
        self._call_id: str | None = None
        self._executors: dict[int, StreamingToolExecutor] = {}
        self._hosting = Hosting(inp.session_id, inp.workspace)
        self._hooks = HookRuns(self._ctx, self._hosting)
        self._approvals = Approvals(self._ctx, self._hooks)
        self._compaction = Compaction(self._ctx, self._hooks)
        self._agents = SubAgents(self._ctx, self._hooks, self._hosting)
        self._summaries: list[str] = []
        self._summarizing: list[asyncio.Future[None]] = []

    @workflow.run
    async def run(self, inp: QueryInput) -> QueryResult:
        if inp.answered is not None:  # it reached the model during the prompt before
            return inp.answered
        budget = token_budget(self._ctx.cfg, inp.prompt)
        if inp.state is None and inp.compact:
            await self._compaction.manual(inp.prompt)
        elif inp.state is None and inp.config.agent_depth == 0:  # a sub-agent's is no prompt
            await self._hooks.prompt_hooks(inp.prompt)
            await self._changed_files()
        while True:
            step: Step = decide(self._ctx.state, self._ctx.cfg, self._facts(budget))
            self._ctx.state = step.state
            for note in step.notes:
                self._ctx.emit(ProgressKind.STATUS, note)
            match step:
                case ContinueAsNew():
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    carried: dict[str, Any] = {"state": self._ctx.state}
                    if self._hosting.enabled:
                        carried["workspace"] = self._hosting.workspace
                    if workflow.patched(BOUNDED_STATE_PATCH):
                        carried["events"] = carried_events(self._ctx.events)
                    workflow.continue_as_new(inp.model_copy(update=carried))
                case Compact(reactive=reactive):
                    await self._compaction.compact(reactive)
                case CallModel():
                    await self._call_model()
                case DrainResults(target_tokens=target):
                    await self._drain(target)
                case RunTools():
                    await self._run_tools()
                case StopHooks():
                    await self._hooks.stop_hooks()
                case Finish() if self._agents.busy or self._agents.reports:
                    await self._background_reports(step)
                case Finish():
                    return await self._finish(step)
                case _:
                    assert_never(step)

    def _facts(self, budget: int | None) -> Facts:
        return Facts(
            new_uuid=lambda: str(workflow.uuid4()),
            interrupted=self._ctx.interrupted,
            continue_as_new_suggested=workflow.info().is_continue_as_new_suggested(),
            token_budget=budget,
        )

    # --- what the user and the model activity send ------------------------------------------

    @workflow.signal(name=Signals.INTERRUPT)
    def interrupt(self) -> None:
        """Cancel the running model call or tools; the query ends aborted_*."""
        self._ctx.interrupt()
        for executor in self._executors.values():
            executor.interrupt()
        self._agents.interrupt()

    @workflow.signal(name=Signals.TOOL_USE_READY)
    def tool_use_ready(self, ready: ToolReady) -> None:
        """A tool_use block is complete in the model's stream: it may start now."""
        if self._ctx.interrupted:
            return
        if ready.call_id != self._call_id:
            return  # a call that is over: nothing of it may run now
        executor = self._executors.get(ready.attempt)
        if executor is None:
            newer = any(attempt > ready.attempt for attempt in self._executors)
            if newer and workflow.patched(LATE_SIGNAL_PATCH):
                return  # a late signal of a failed attempt: its blocks are void already
            for old in self._executors.values():
                old.discard()  # a new attempt: the blocks of earlier ones are void
            executor = self._executors[ready.attempt] = self._executor(ready.call_id)
        executor.add_tool(ready.call)

    @workflow.signal(name=Signals.MID_TURN_PROMPTS)
    def mid_turn_prompts(self, sent: MidTurnPrompts) -> None:
        """Prompts the session received while this one runs: the model gets them after the
        next batch's tool results; those it never gets stay the session's to run after."""
        more = tuple((p.id, p.prompt) for p in sent.prompts)
        self._ctx.state = self._ctx.state.model_copy(
            update={"mid_turn": (*self._ctx.state.mid_turn, *more)}
        )

    @workflow.signal(name=Signals.MODEL_RETRY)
    def model_retry(self, notice: RetryNotice) -> None:
        """The model activity failed an attempt and Temporal will retry it: show why."""
        retries = dict(self._ctx.state.retries)
        retries[notice.error_type] = retries.get(notice.error_type, 0) + 1
        self._ctx.state = self._ctx.state.model_copy(update={"retries": retries})
        wait = (
            ""
            if notice.delay_seconds is None
            else f", next try in {duration(notice.delay_seconds)}"
        )
        workflow.set_current_details(
            f"{notice.error_type}, attempt {notice.attempt}{wait}: {notice.message}"
        )
        said = f": {notice.message[:200]}" if notice.error_type.startswith("Connection") else ""
        self._ctx.emit(
            ProgressKind.RETRY,
            f"{notice.error_type} (attempt {notice.attempt}){wait}{said}",
            is_error=True,
        )

    @workflow.update(name=Updates.APPROVE_TOOL)
    def approve_tool(self, answer: ApprovalAnswer) -> str:
        """A person's answer to a waiting tool call; the call goes on at once."""
        return self._approvals.record(answer)

    @approve_tool.validator
    def _waiting(self, answer: ApprovalAnswer) -> None:
        self._approvals.check_waiting(answer)

    @workflow.query(name=Queries.APPROVALS)
    def approvals(self) -> list[ApprovalRequest]:
        return self._approvals.waiting()

    @workflow.update(name=Updates.HOOK_CALLBACK_RESULT)
    def hook_callback_result(self, answer: HookCallbackAnswer) -> str:
        """The SDK's answers to the hook callbacks of a waiting event."""
        return self._hooks.record(answer)

    @hook_callback_result.validator
    def _hook_waiting(self, answer: HookCallbackAnswer) -> None:
        self._hooks.check_waiting(answer)

    @workflow.query(name=Queries.HOOK_REQUESTS)
    def hook_requests(self) -> list[HookCallbackRequest]:
        return self._hooks.waiting()

    @workflow.query(name=Queries.PROGRESS)
    def progress(self, since: int = 0) -> list[ProgressEvent]:
        return [e for e in self._ctx.events if e.index >= since]

    @workflow.query(name=Queries.PHASE)
    def phase(self) -> str:
        return self._ctx.phase

    # --- the steps --------------------------------------------------------------------------

    async def _call_model(self) -> None:
        cfg = self._ctx.cfg
        state, request = prepare_request(self._ctx.state, cfg)
        self._ctx.state = state
        self._ctx.phase = "streaming"
        workflow.set_current_details(f"turn {state.turn_count}: waiting for the model")
        assistant_uuid = self._call_id = str(workflow.uuid4())
        call = CallModelInput(
            session_id=self._ctx.inp.session_id,
            parent_uuid=state.head_uuid,
            new_user=state.pending,
            assistant_uuid=assistant_uuid,
            config=cfg.call,
            workspace=cfg.workspace,
            request=request,
            run_read_only_tools=cfg.call.eager_tools != EagerTools.NONE
            and not self._hosting.enabled  # the model step runs anywhere, not on the host
            and workflow.patched(READ_ONLY_TOOLS_IN_STEP_PATCH),
        )
        try:
            out = await self._ctx.guarded(
                steps.call_model(call, cfg, summary=f"turn {state.turn_count}: {request.model}")
            )
        except _Interrupted:
            self._discard_executors()  # still Phase.CALL: the interrupt ends the prompt
            return
        except ActivityError as exc:
            self._discard_executors()
            self._ctx.state = self._ctx.state.failed(model_error(exc, cfg), error_type(exc) or "")
            return
        if state.pending is not None and state.pending.prompt_ids and out.withheld is None:
            # The prompts sent meanwhile reached the model: this prompt's result answers them.
            absorbed = (*self._ctx.state.absorbed, *state.pending.prompt_ids)
            self._ctx.state = self._ctx.state.model_copy(update={"absorbed": absorbed})
        self._ctx.state = after_model_response(self._ctx.state, out, cfg, str(workflow.uuid4()))
        if self._ctx.state.phase != Phase.TOOLS:
            self._discard_executors()
        self._show_summaries()  # the last batch's, written while this call ran
        if out.text and self._ctx.state.phase != Phase.RECOVER:
            self._ctx.emit(ProgressKind.TEXT, out.text)

    async def _run_tools(self) -> None:
        """The tools of the answer: those of its attempt that started while the stream ran go
        on, the rest start now, as `can_execute_tool` allows; other attempts' are discarded.
        Without streaming execution nothing has started, and this is the whole run."""
        answer = self._ctx.state.answer
        assert answer is not None
        self._ctx.phase = "tools"
        executor = self._executors.pop(answer.attempt, None)
        if executor is None and workflow.patched(STORED_ANSWER_TOOLS_PATCH):
            executor = self._executor_of_answer({c.id for c in answer.tool_calls})
        if executor is None:
            assert self._ctx.state.head_uuid is not None
            executor = self._executor(self._ctx.state.head_uuid)
        self._discard_executors()
        self._executors = {answer.attempt: executor}
        if self._ctx.interrupted:
            executor.interrupt()
        executor.completed(answer.tool_calls, answer.done)
        executor.reconcile(answer.tool_calls)
        executor.end_stream()
        await executor.remaining_results()
        self._executors = {}
        lost = self._hosting.lost_count
        await self._hosting.checkpoint()
        refs, chars = executor.results(answer.tool_calls)
        notes = executor.notes(answer.tool_calls)
        denials = [
            PermissionDenial(
                tool_name=call.name,
                tool_use_id=call.id,
                tool_input=call.permission_input or {},
                reason=said.denial,
            )
            for call, said in notes
            if said.denial is not None
        ]
        if denials and workflow.patched(BOUNDED_STATE_PATCH):
            self._ctx.state = add_denials(self._ctx.state, denials)
        elif denials:
            self._ctx.state = self._ctx.state.model_copy(
                update={"permission_denials": (*self._ctx.state.permission_denials, *denials)}
            )
        lines = [line for _, said in notes for line in said.feedback]
        told = self._hosting.lost_count > lost
        if self._hosting.enabled and workflow.patched(HOST_LOSS_PATCH):
            told = told or self._hosting.changes_lost  # also a host lost during the batch
            self._hosting.changes_lost = False
        if told:
            lines.append(HOST_LOST_FEEDBACK)
        feedback = feedback_text(lines)
        stop = next((said.stop for _, said in notes if said.stop is not None), None)
        ran = [call for call, said in notes if said.denial is None]
        self._keep_todos(ran)
        keep_scheduled(self._ctx, ran)
        context = [*await self._between_turns(ran), *self._agents.take_reports()]
        mid_turn = self._ctx.state.mid_turn if stop is None else ()
        if mid_turn:
            self._ctx.state = self._ctx.state.model_copy(update={"mid_turn": ()})
            self._ctx.emit(
                ProgressKind.STATUS,
                f"{len(mid_turn)} prompt(s) sent meanwhile go to the model with the results",
            )
        self._ctx.state = tools_done(
            self._ctx.state, refs, chars, self._ctx.cfg, str(workflow.uuid4()), feedback, stop,
            context, mid_turn,
        )  # fmt: skip
        self._summarize(refs)

    def _summarize(self, refs: list[ToolResultRef]) -> None:
        """Start the batch's one-line summary beside the next model call; it is shown at the
        next iteration (`_show_summaries`), or not at all when it fails."""
        if not self._ctx.cfg.tool_summaries or not refs or self._ctx.state.head_uuid is None:
            return
        req = SummaryInput(
            session_id=self._ctx.inp.session_id,
            assistant_uuid=self._ctx.state.head_uuid,
            results=refs,
        )

        async def summarize() -> None:
            try:
                out = await steps.summarize_tools(req)
            except ActivityError as exc:
                workflow.logger.info("no summary of the tool batch: %s", exc)
                return
            if out.summary:
                self._summaries.append(out.summary)

        self._summarizing.append(asyncio.ensure_future(summarize()))

    def _show_summaries(self, wait: bool = False) -> None:
        """The summaries that are ready, as progress lines (the ones still running are dropped
        when `wait`: the prompt is ending)."""
        for line in self._summaries:
            self._ctx.emit(ProgressKind.STATUS, f"summary: {line}")
        self._summaries = []
        running = [task for task in self._summarizing if not task.done()]
        if wait:
            for task in running:
                task.cancel()
            running = []
        self._summarizing = running

    async def _background_reports(self, step: Finish) -> None:
        """Claude finished while its background agents run: their reports, as they come, are
        a new user entry and it goes on; once none is left, the prompt ends as it would have."""
        if step.terminal != Terminal.COMPLETED:
            self._agents.interrupt()  # an interrupt, a limit, an error: no new turn
            await workflow.wait_condition(lambda: not self._agents.busy)
            self._agents.take_reports()
            return
        reports = await self._agents.wait_for_reports()
        if not reports:
            return  # all done, their reports given: the prompt ends at the next step
        state = self._ctx.state
        pending = PendingUser(
            uuid=str(workflow.uuid4()), parent_uuid=state.head_uuid, prompt="\n\n".join(reports)
        )
        added = estimate_text_tokens(pending.prompt or "")
        self._ctx.state = state.next(
            Transition.BACKGROUND_AGENT_REPORTS,
            pending=pending,
            context_tokens=state.context_tokens + added,
            notice="continuing: background agent reports",
        )

    def _keep_todos(self, ran: list[ToolCall]) -> None:
        """The list of the batch's last TodoWrite that ran becomes the session's, and is shown."""
        lists = [call.todos for call in ran if call.todos is not None]
        if lists:
            self._ctx.state = self._ctx.state.model_copy(update={"todos": tuple(lists[-1])})
            self._ctx.emit(ProgressKind.STATUS, todo_text(lists[-1]))

    async def _between_turns(self, ran: list[ToolCall]) -> list[str]:
        """After a batch that read or wrote files: their stamps, and the CLAUDE.md of a folder
        below the workspace first read from (engine/state.py `Attachments`)."""
        wanted = self._ctx.cfg.attachments
        files = [call.id for call in ran if call.name in FILE_TOOL_NAMES]
        if wanted is None or not files:
            return []
        out = await self._look(
            tool_use_ids=files,
            assistant_uuid=self._ctx.state.head_uuid,
            nested_memory=wanted.nested_memory,
        )
        return out.context if out is not None else []

    async def _changed_files(self) -> None:
        """As a prompt starts: a note for each file read or written before that changed since
        (the user edited it between prompts), after the prompt."""
        wanted = self._ctx.cfg.attachments
        pending = self._ctx.state.pending
        if wanted is None or not wanted.changed_files or pending is None:
            return
        if not self._ctx.state.seen.stamps or self._ctx.state.ending is not None:
            return
        out = await self._look(check_changes=True)
        if out is None or not out.context:
            return
        state = self._ctx.state
        added = sum(estimate_text_tokens(text) for text in out.context)
        if state.pending is not None:
            pending = state.pending.model_copy(
                update={"context": [*state.pending.context, *out.context]}
            )
            self._ctx.state = state.model_copy(
                update={"pending": pending, "context_tokens": state.context_tokens + added}
            )

    async def _look(self, **what: Any) -> BetweenTurnsOutput | None:
        """The between_turns step where the tools run; its failure costs only the context it
        would have added (the prompt goes on)."""
        req = BetweenTurnsInput(
            session_id=self._ctx.inp.session_id,
            workspace=self._ctx.cfg.workspace,
            seen=self._ctx.state.seen,
            **what,
        )
        try:
            out = await self._hosting.run(req, steps.between_turns, changes=False)
        except ActivityError as exc:
            workflow.logger.warning("could not look at the files between turns: %s", exc)
            return None
        self._ctx.state = self._ctx.state.model_copy(update={"seen": out.seen})
        return out

    def _executor(self, assistant_uuid: str) -> StreamingToolExecutor:
        cfg, hooks = self._ctx.cfg, self._hooks

        async def run(call: ToolCall, run_id: str, notes: CallNotes) -> RunToolOutput:
            """PreToolUse hooks, the permission decision, the tool, PostToolUse hooks."""
            decision, tool_input = call.permission, None
            pre = hooks.tool_handlers(PRE_TOOL_USE, call.name)
            if pre:
                gated = await hooks.pre_tool(call, pre, notes)
                if isinstance(gated, RunToolOutput):
                    return gated
                decision, tool_input = gated
            if decision is not None and decision.behavior == Behavior.ASK:
                decision = await self._approvals.ask(call, decision, tool_input)
            if decision is not None:
                decision = headless(decision)  # nobody can approve: ask = deny
                if decision.behavior != Behavior.ALLOW:
                    return await refused(call, decision.reason, notes)
            workflow.set_current_details(f"running {call.summary}")
            req = RunToolInput(
                session_id=self._ctx.inp.session_id,
                assistant_uuid=assistant_uuid,
                tool_use_id=call.id,
                name=call.name,
                workspace=cfg.workspace,
                run_id=run_id,
                permissions=cfg.call.permissions,
                sandbox=cfg.sandbox,
                env=hooks.settings_env(),
                input_override=tool_input,
                **mcp_route(cfg, call.name),
            )
            agent = call.agent if tool_input is None else parsed_agent(tool_input)
            if call.name == ToolName.AGENT and agent is not None:
                output = await self._agents.run(call, agent, run_id)
            elif call.name == ToolName.TASK_STOP and call.task_stop is not None:
                output = await self._agents.stop(call, call.task_stop)
            else:
                output = await self._run_tool(req, call)
            event = POST_TOOL_USE_FAILURE if output.is_error else POST_TOOL_USE
            post = hooks.tool_handlers(event, call.name)
            if post:
                ref = ToolResultRef(tool_use_id=call.id, inline=output.inline, run_id=run_id)
                await hooks.post_tool(event, call, post, tool_input, ref, notes)
            return output

        return StreamingToolExecutor(
            run, self._ctx.emit, tool_failure, cfg.tool_concurrency, cfg.call.eager_tools
        )

    async def _run_tool(self, req: RunToolInput, call: ToolCall) -> RunToolOutput:
        """The run_tool step: in place, or on the host of the travelling workspace. An
        interrupted one then has its processes ended where it ran: its worker may have died
        before the cancel reached it, and its command would go on until the session ends."""
        cfg = self._ctx.cfg

        async def step(req: RunToolInput, queue: str | None) -> RunToolOutput:
            try:
                return await steps.run_tool(req, cfg, call.summary, call.read_only, queue)
            except (asyncio.CancelledError, ActivityError):
                if self._ctx.interrupted and workflow.patched(INTERRUPTED_TOOL_PROCESSES_PATCH):
                    await self._end_tool_processes(req, queue)
                raise

        return await self._hosting.run(req, step, changes=not call.read_only)

    async def _end_tool_processes(self, req: RunToolInput, queue: str | None) -> None:
        ending = EndToolProcessesInput(session_id=req.session_id, tool_use_id=req.tool_use_id)
        try:
            await steps.end_tool_processes(ending, queue)
        except ActivityError as exc:  # its host is gone, and its processes with it
            workflow.logger.warning("could not end an interrupted tool's processes: %s", exc)

    def _executor_of_answer(self, ids: set[str]) -> StreamingToolExecutor | None:
        """An earlier attempt's executor whose tools are this answer's: the step answered from
        the store what that attempt streamed (its completion was lost), so the tools it
        started early go on rather than start again. tool_use ids are the API's, one answer's
        own."""
        for attempt in sorted(self._executors, reverse=True):
            executor = self._executors[attempt]
            if executor.tools and all(t.call.id in ids for t in executor.tools):
                return self._executors.pop(attempt)
        return None

    def _discard_executors(self) -> None:
        for executor in self._executors.values():
            executor.discard()
        self._executors = {}
        self._call_id = None

    async def _drain(self, target_tokens: int) -> None:
        state = self._ctx.state
        planned = await steps.plan_collapse(
            PlanCollapseInput(
                session_id=self._ctx.inp.session_id,
                parent_uuid=state.head_uuid,
                pending=state.pending,
                request=model_request(state, self._ctx.cfg),
                target_tokens=target_tokens,
            )
        )
        if not planned.tool_use_ids:
            self._ctx.state = self._ctx.state.model_copy(update={"collapse_drained": True})
            return
        self._ctx.emit(
            ProgressKind.STATUS, f"cleared {len(planned.tool_use_ids)} large old tool results"
        )
        collapsed = (*self._ctx.state.collapsed_ids, *planned.tool_use_ids)
        if workflow.patched(BOUNDED_STATE_PATCH):
            collapsed = add_collapsed(self._ctx.state, planned.tool_use_ids)
        self._ctx.state = self._ctx.state.next(
            Transition.COLLAPSE_DRAIN_RETRY, collapse_drained=True, collapsed_ids=collapsed
        )

    async def _finish(self, step: Finish) -> QueryResult:
        """Store the pending user entry (so the transcript stays valid), then return."""
        self._show_summaries(wait=True)
        pending = self._ctx.state.pending
        if pending is not None and pending.prompt_ids:
            # The prompt ends before the model saw the prompts sent meanwhile: they stay the
            # session's, to run after it (not stored here, or they would be in it twice).
            back = tuple(zip(pending.prompt_ids, pending.prompts, strict=True))
            pending = pending.model_copy(update={"prompts": [], "prompt_ids": []})
            self._ctx.state = self._ctx.state.model_copy(
                update={"pending": pending, "mid_turn": (*back, *self._ctx.state.mid_turn)}
            )
        if pending is not None:
            stored = await steps.append_entry(
                AppendEntryInput(session_id=self._ctx.inp.session_id, entry=pending)
            )
            self._ctx.state = self._ctx.state.model_copy(
                update={"head_uuid": stored.uuid, "pending": None}
            )
        if step.message:
            self._ctx.emit(
                ProgressKind.STATUS, step.message, is_error=step.terminal != Terminal.COMPLETED
            )
        ending = self._ctx.state.ending
        if step.terminal == Terminal.MODEL_ERROR and ending is not None:
            kind = ending.error_type or "unknown"
            await self._hooks.observe("StopFailure", kind, error_type=kind, error=step.message)
        state = self._ctx.state
        self._ctx.phase = "done"
        workflow.set_current_details(f"finished: {step.terminal.value}")
        return QueryResult(
            terminal=step.terminal,
            message=step.message,
            head_uuid=state.head_uuid,
            turn_count=state.turn_count,
            usage=state.usage,
            final_text=step.final_text,
            transitions=list(state.transitions),
            transitions_dropped=sum(state.dropped_transitions.values()),
            query_workflow_id=workflow.info().workflow_id,
            compactions=state.compactions,
            context_tokens=state.context_tokens,
            model=state.model or self._ctx.cfg.model,
            fallback_used=state.model is not None,
            usage_by_model=state.usage_by_model,
            retries=dict(state.retries),
            permission_denials=list(state.permission_denials),
            denials_dropped=state.denials_dropped,
            session_grants=list(state.session_grants),
            api_duration_ms=state.api_duration_ms,
            workspace=self._hosting.workspace,
            seen=state.seen,
            todos=list(state.todos),
            absorbed=list(state.absorbed),
            wakeups=list(state.wakeups),
            cron_jobs=list(state.cron_jobs),
        )
