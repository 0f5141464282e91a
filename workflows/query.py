"""QueryWorkflow: one prompt → Terminal. The reference engine's `while True` query loop: the
engine decides each step (`durable_agent.engine.steps.decide`), this workflow runs it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from datetime import timedelta
from typing import Any, TypeVar, assert_never

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from durable_agent.engine.bounds import add_collapsed, add_denials, carried_events
    from durable_agent.engine.context import estimate_text_tokens
    from durable_agent.engine.contracts import (
        AppendEntryInput,
        ApprovalAnswer,
        ApprovalRequest,
        CallModelInput,
        CompactInput,
        HookCallbackAnswer,
        HookCallbackRequest,
        PlanCollapseInput,
        QueryInput,
        RetryNotice,
        RunToolInput,
        RunToolOutput,
        StopHooksInput,
        ToolCall,
        ToolReady,
    )
    from durable_agent.engine.hooks import (
        SDK_CALLBACK,
        HookCommandSpec,
        HookEventInput,
        HookEventResult,
        HookRun,
        aggregate,
        callbacks_for,
        hooks_for,
    )
    from durable_agent.engine.loop import (
        after_compaction,
        after_model_response,
        after_stop_hooks,
        compaction_failed,
        model_request,
        prepare_request,
        token_budget,
        tools_done,
    )
    from durable_agent.engine.messages import ToolResultBlock
    from durable_agent.engine.permissions import (
        Behavior,
        Decision,
        check,
        grant_for,
        granted,
        headless,
    )
    from durable_agent.engine.state import (
        EagerTools,
        PendingUser,
        PermissionDenial,
        Phase,
        ProgressEvent,
        ProgressKind,
        QueryResult,
        State,
        Terminal,
        ToolResultRef,
        Transition,
    )
    from durable_agent.engine.steps import (
        INTERRUPTED,
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
    from durable_agent.engine.tool_hooks import (
        POST_TOOL_USE,
        POST_TOOL_USE_FAILURE,
        PRE_TOOL_USE,
        USER_PROMPT_SUBMIT,
        feedback_text,
        pre_tool_gate,
        prompt_with_context,
        result_field,
        tool_feedback,
        user_notes,
    )
    from durable_agent.names import Queries, Signals, Updates, Workflows
    from workflows import activity_options as steps

from workflows.failures import duration, error_text, error_type, model_error, tool_failure
from workflows.streaming_tools import CallNotes, StreamingToolExecutor

T = TypeVar("T")

STOP_HOOKS_PATCH = "stop-hooks-v1"
"""Histories recorded before Stop hooks existed end without the hooks activity."""
READ_ONLY_TOOLS_IN_STEP_PATCH = "read-only-tools-in-step-v1"
"""Read, Grep and Glob run inside the model-call step: a turn that only reads costs one
activity, not two and a signal. Histories from before ran them as run_tool activities."""
STOP_HOOKS_SNAPSHOT_PATCH = "stop-hooks-snapshot-v1"
"""Stop hooks come from the prompt's settings snapshot (no activity when there are none) and
get Claude Code's whole input; before, an activity read the settings files every time."""
HOOK_EVENTS_PATCH = "hook-events-v1"
"""UserPromptSubmit, PreToolUse, PostToolUse and PostToolUseFailure hooks run (a run_hooks
activity each) when the settings snapshot has them; before, only Stop and PreCompact did."""
LATE_SIGNAL_PATCH = "late-tool-signal-v1"
"""A tool_use_ready of an attempt older than one already heard from is ignored; before, it
discarded the newer attempt's executor and the prompt waited forever on its tools."""
BOUNDED_STATE_PATCH = "bounded-state-v1"
"""Denials are kept summarised and capped, collapsed ids capped, and the newest progress events
carried across continue-as-new; before, all of them grew with the prompt or were lost."""


async def _refused(call: ToolCall, reason: str, notes: CallNotes) -> RunToolOutput:
    """The answer to a tool call the permission rules, the mode or a hook refused: it never
    runs, and the denial is listed in the prompt's result."""
    notes.denial = reason
    text = f"{reason.rstrip('.')}. The call did not run."
    return RunToolOutput(
        tool_use_id=call.id,
        is_error=True,
        preview=text,
        content_chars=len(text),
        inline=ToolResultBlock(tool_use_id=call.id, content=text, is_error=True),
        denied=True,
    )


class _Interrupted(Exception):
    """Raised inside the loop when the user's interrupt cancelled the running step."""


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


@workflow.defn(name=Workflows.QUERY, failure_exception_types=BUG_EXCEPTION_TYPES)
class QueryWorkflow:
    """The prompt's state is `self._state` alone (carried whole across continue-as-new); the
    rest is what is in flight (activities, tool executors) and what the user sent (interrupt).
    Handlers never hold a State across an await: a signal may have changed it meanwhile."""

    @workflow.init
    def __init__(self, inp: QueryInput) -> None:
        self._inp = inp
        self._cfg = inp.config
        if inp.state is not None:
            self._state = inp.state
        elif inp.compact:  # `/compact`: the conversation so far, no new prompt
            self._state = State(
                head_uuid=inp.parent_uuid,
                context_tokens=inp.context_tokens,
                session_grants=tuple(inp.session_grants),
                turn_count=0,
            )
        else:
            self._state = State(
                head_uuid=inp.parent_uuid,
                pending=PendingUser(
                    uuid=str(workflow.uuid4()), parent_uuid=inp.parent_uuid, prompt=inp.prompt
                ),
                context_tokens=inp.context_tokens + estimate_text_tokens(inp.prompt),
                session_grants=tuple(inp.session_grants),
            )
        self._interrupted = False
        self._events: list[ProgressEvent] = list(inp.events)  # the run before's newest
        self._running: list[asyncio.Future[Any]] = []
        self._phase = "starting"
        self._call_id: str | None = None
        self._executors: dict[int, StreamingToolExecutor] = {}
        self._approvals: dict[str, ApprovalRequest] = {}
        self._answers: dict[str, ApprovalAnswer] = {}
        self._hook_requests: dict[str, HookCallbackRequest] = {}
        self._hook_answers: dict[str, HookCallbackAnswer] = {}

    @workflow.run
    async def run(self, inp: QueryInput) -> QueryResult:
        budget = token_budget(self._cfg, inp.prompt)
        if inp.state is None and inp.compact:
            await self._manual_compact(inp.prompt)
        elif inp.state is None:
            await self._prompt_hooks(inp.prompt)
        while True:
            step: Step = decide(self._state, self._cfg, self._facts(budget))
            self._state = step.state
            for note in step.notes:
                self._emit(ProgressKind.STATUS, note)
            match step:
                case ContinueAsNew():
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    carried: dict[str, Any] = {"state": self._state}
                    if workflow.patched(BOUNDED_STATE_PATCH):
                        carried["events"] = carried_events(self._events)
                    workflow.continue_as_new(inp.model_copy(update=carried))
                case Compact(reactive=reactive):
                    await self._compact(reactive)
                case CallModel():
                    await self._call_model()
                case DrainResults(target_tokens=target):
                    await self._drain(target)
                case RunTools():
                    await self._run_tools()
                case StopHooks():
                    await self._stop_hooks()
                case Finish():
                    return await self._finish(step)
                case _:
                    assert_never(step)

    def _facts(self, budget: int | None) -> Facts:
        return Facts(
            new_uuid=lambda: str(workflow.uuid4()),
            interrupted=self._interrupted,
            continue_as_new_suggested=workflow.info().is_continue_as_new_suggested(),
            token_budget=budget,
        )

    # --- what the user and the model activity send ------------------------------------------

    @workflow.signal(name=Signals.INTERRUPT)
    def interrupt(self) -> None:
        """Cancel the running model call or tools; the query ends aborted_*."""
        self._interrupted = True
        for task in self._running:
            task.cancel()
        for executor in self._executors.values():
            executor.interrupt()

    @workflow.signal(name=Signals.TOOL_USE_READY)
    def tool_use_ready(self, ready: ToolReady) -> None:
        """A tool_use block is complete in the model's stream: it may start now."""
        if self._interrupted:
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

    @workflow.signal(name=Signals.MODEL_RETRY)
    def model_retry(self, notice: RetryNotice) -> None:
        """The model activity failed an attempt and Temporal will retry it: show why."""
        retries = dict(self._state.retries)
        retries[notice.error_type] = retries.get(notice.error_type, 0) + 1
        self._state = self._state.model_copy(update={"retries": retries})
        wait = (
            ""
            if notice.delay_seconds is None
            else f", next try in {duration(notice.delay_seconds)}"
        )
        workflow.set_current_details(
            f"{notice.error_type}, attempt {notice.attempt}{wait}: {notice.message}"
        )
        said = f": {notice.message[:200]}" if notice.error_type.startswith("Connection") else ""
        self._emit(
            ProgressKind.RETRY,
            f"{notice.error_type} (attempt {notice.attempt}){wait}{said}",
            is_error=True,
        )

    @workflow.update(name=Updates.APPROVE_TOOL)
    def approve_tool(self, answer: ApprovalAnswer) -> str:
        """A person's answer to a waiting tool call; the call goes on at once."""
        self._answers[answer.request_id] = answer
        return f"{answer.behavior}: {self._approvals[answer.request_id].summary}"

    @approve_tool.validator
    def _waiting(self, answer: ApprovalAnswer) -> None:
        if answer.request_id not in self._approvals or answer.request_id in self._answers:
            waiting = ", ".join(self._approvals) or "none"
            raise ValueError(
                f"no tool call {answer.request_id!r} waits for approval (waiting: {waiting})"
            )

    @workflow.query(name=Queries.APPROVALS)
    def approvals(self) -> list[ApprovalRequest]:
        return [r for r in self._approvals.values() if r.request_id not in self._answers]

    @workflow.query(name=Queries.PROGRESS)
    def progress(self, since: int = 0) -> list[ProgressEvent]:
        return [e for e in self._events if e.index >= since]

    @workflow.query(name=Queries.PHASE)
    def phase(self) -> str:
        return self._phase

    def _emit(self, kind: ProgressKind, text: str, is_error: bool = False) -> None:
        """Record a progress event; indices run on across continue-as-new."""
        index = self._state.event_count
        self._events.append(ProgressEvent(index=index, kind=kind, text=text, is_error=is_error))
        self._state = self._state.model_copy(update={"event_count": index + 1})

    async def _guarded(self, awaitable: Awaitable[T]) -> T:
        """Await an activity so that an interrupt cancels it and surfaces as _Interrupted."""
        task = asyncio.ensure_future(awaitable)
        self._running.append(task)
        try:
            return await task
        except (ActivityError, CancelledError, asyncio.CancelledError) as exc:
            if self._interrupted:
                raise _Interrupted from exc
            raise
        finally:
            self._running.remove(task)

    # --- the steps --------------------------------------------------------------------------

    async def _call_model(self) -> None:
        cfg = self._cfg
        state, request = prepare_request(self._state, cfg)
        self._state = state
        self._phase = "streaming"
        workflow.set_current_details(f"turn {state.turn_count}: waiting for the model")
        assistant_uuid = self._call_id = str(workflow.uuid4())
        call = CallModelInput(
            session_id=self._inp.session_id,
            parent_uuid=state.head_uuid,
            new_user=state.pending,
            assistant_uuid=assistant_uuid,
            config=cfg.call,
            workspace=cfg.workspace,
            request=request,
            run_read_only_tools=cfg.call.eager_tools != EagerTools.NONE
            and workflow.patched(READ_ONLY_TOOLS_IN_STEP_PATCH),
        )
        try:
            out = await self._guarded(
                steps.call_model(call, cfg, summary=f"turn {state.turn_count}: {request.model}")
            )
        except _Interrupted:
            self._discard_executors()  # still Phase.CALL: the interrupt ends the prompt
            return
        except ActivityError as exc:
            self._discard_executors()
            self._state = self._state.failed(model_error(exc, cfg), error_type(exc) or "")
            return
        self._state = after_model_response(self._state, out, cfg, str(workflow.uuid4()))
        if self._state.phase != Phase.TOOLS:
            self._discard_executors()
        if out.text and self._state.phase != Phase.RECOVER:
            self._emit(ProgressKind.TEXT, out.text)

    async def _run_tools(self) -> None:
        """The tools of the answer: those of its attempt that started while the stream ran go
        on, the rest start now, as `can_execute_tool` allows; other attempts' are discarded.
        Without streaming execution nothing has started, and this is the whole run."""
        answer = self._state.answer
        assert answer is not None
        self._phase = "tools"
        executor = self._executors.pop(answer.attempt, None)
        if executor is None:
            assert self._state.head_uuid is not None
            executor = self._executor(self._state.head_uuid)
        self._discard_executors()
        self._executors = {answer.attempt: executor}
        if self._interrupted:
            executor.interrupt()
        executor.completed(answer.tool_calls, answer.done)
        executor.reconcile(answer.tool_calls)
        executor.end_stream()
        await executor.remaining_results()
        self._executors = {}
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
            self._state = add_denials(self._state, denials)
        elif denials:
            self._state = self._state.model_copy(
                update={"permission_denials": (*self._state.permission_denials, *denials)}
            )
        feedback = feedback_text([line for _, said in notes for line in said.feedback])
        stop = next((said.stop for _, said in notes if said.stop is not None), None)
        self._state = tools_done(
            self._state, refs, chars, self._cfg, str(workflow.uuid4()), feedback, stop
        )

    def _executor(self, assistant_uuid: str) -> StreamingToolExecutor:
        cfg = self._cfg

        async def run(call: ToolCall, run_id: str, notes: CallNotes) -> RunToolOutput:
            """PreToolUse hooks, the permission decision, the tool, PostToolUse hooks."""
            decision, tool_input = call.permission, None
            pre = self._tool_hooks(PRE_TOOL_USE, call.name)
            if pre:
                gated = await self._pre_tool_hooks(call, pre, notes)
                if isinstance(gated, RunToolOutput):
                    return gated
                decision, tool_input = gated
            if decision is not None and decision.behavior == Behavior.ASK:
                decision = await self._ask(call, decision, tool_input)
            if decision is not None:
                decision = headless(decision)  # nobody can approve: ask = deny
                if decision.behavior != Behavior.ALLOW:
                    return await _refused(call, decision.reason, notes)
            workflow.set_current_details(f"running {call.summary}")
            req = RunToolInput(
                session_id=self._inp.session_id,
                assistant_uuid=assistant_uuid,
                tool_use_id=call.id,
                name=call.name,
                workspace=cfg.workspace,
                run_id=run_id,
                permissions=cfg.call.permissions,
                sandbox=cfg.sandbox,
                env=self._settings_env(),
                input_override=tool_input,
            )
            output = await steps.run_tool(req, cfg, call.summary, call.read_only)
            event = POST_TOOL_USE_FAILURE if output.is_error else POST_TOOL_USE
            post = self._tool_hooks(event, call.name)
            if post:
                ref = ToolResultRef(tool_use_id=call.id, inline=output.inline, run_id=run_id)
                await self._post_tool_hooks(event, call, post, tool_input, ref, notes)
            return output

        return StreamingToolExecutor(
            run, self._emit, tool_failure, cfg.tool_concurrency, cfg.call.eager_tools
        )

    async def _ask(
        self, call: ToolCall, asks: Decision, tool_input: dict[str, Any] | None
    ) -> Decision:
        """A call the rules ask about: allowed by an earlier "always" answer of the session, or
        (when someone can answer) it waits for the `approve_tool` Update, durably: through
        worker restarts and CLIs coming and going. Headless, the ask stands (and is denied)."""
        ctx = self._cfg.call.permissions
        shown = tool_input if tool_input is not None else call.permission_input or {}
        if ctx is not None:
            allowed = granted(call.name, shown, ctx, self._state.session_grants)
            if allowed is not None:
                return allowed
        if not self._cfg.approvals:
            return asks
        always = grant_for(call.name, shown, ctx).label() if ctx is not None else call.name
        self._approvals[call.id] = ApprovalRequest(
            request_id=call.id,
            tool_name=call.name,
            tool_input=shown,
            summary=call.summary,
            reason=asks.reason,
            always=always,
        )
        self._emit(ProgressKind.APPROVAL, f"{call.summary} waits for your approval: {asks.reason}")
        await self._observe(
            "Notification",
            "permission_prompt",
            message=f"Claude needs your permission to use {call.name}",
            notification_type="permission_prompt",
        )
        workflow.set_current_details(f"waiting for approval: {call.summary}")
        try:
            await workflow.wait_condition(lambda: call.id in self._answers)
        finally:
            self._approvals.pop(call.id, None)
        answer = self._answers.pop(call.id)
        by = f" ({answer.by})" if answer.by else ""
        if answer.behavior == "deny":
            said = f": {answer.message}" if answer.message else ""
            self._emit(ProgressKind.STATUS, f"{call.summary}: denied{by}")
            return Decision(behavior=Behavior.DENY, reason=f"The user denied this call{said}")
        if answer.always and ctx is not None:
            grants = (*self._state.session_grants, grant_for(call.name, shown, ctx))
            self._state = self._state.model_copy(update={"session_grants": grants})
        self._emit(ProgressKind.STATUS, f"{call.summary}: allowed{by}")
        return Decision(behavior=Behavior.ALLOW, reason="allowed by the user")

    # --- hooks around prompts and tool calls ----------------------------------------------

    def _hooks(self, event: str, target: str | None) -> list[HookCommandSpec]:
        """The settings snapshot's handlers of `event` for `target` (none without a snapshot)."""
        return self._handlers((self._cfg.settings or {}).get("hooks"), event, target)

    def _tool_hooks(self, event: str, tool_name: str) -> list[HookCommandSpec]:
        return self._handlers(self._cfg.call.tool_hooks, event, tool_name)

    def _handlers(self, hooks: Any, event: str, target: str | None) -> list[HookCommandSpec]:
        """Command handlers and the Agent SDK's callbacks (`SDK_CALLBACK` specs)."""
        found = [*hooks_for(hooks, event, target), *callbacks_for(hooks, event, target)]
        return found if found and workflow.patched(HOOK_EVENTS_PATCH) else []

    def _settings_env(self) -> dict[str, str]:
        env = (self._cfg.settings or {}).get("env")
        return {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}

    def _hook_payload(self, **fields: Any) -> dict[str, Any]:
        ctx = self._cfg.call.permissions
        return {**fields, "permission_mode": ctx.mode.value if ctx else "default"}

    async def _hook_event(
        self,
        event: str,
        target: str | None,
        commands: list[HookCommandSpec],
        payload: dict[str, Any],
        tool_result: ToolResultRef | None = None,
    ) -> HookEventResult | None:
        """Run one event's hooks (an activity: a replay reads its result from history, never
        re-runs them); None when the activity failed. The user sees the hooks' messages. The
        Agent SDK's callbacks among them are asked first, through the front-end."""
        sdk = [c for c in commands if c.command.startswith(SDK_CALLBACK)]
        commands = [c for c in commands if not c.command.startswith(SDK_CALLBACK)]
        recorded = await self._sdk_hooks(event, sdk, payload, tool_result) if sdk else []
        if not commands:  # only the SDK's: nothing for an activity to run
            result = aggregate(event, recorded)
        else:
            req = HookEventInput(
                session_id=self._inp.session_id,
                workspace=self._cfg.workspace,
                event=event,
                target=target,
                payload=payload,
                commands=commands,
                heartbeat_seconds=self._cfg.activity.tool_heartbeat_seconds,
                tool_result=tool_result,
                env=self._settings_env(),
                recorded_runs=recorded,
            )
            summary = f"{event} hooks" + (f": {target}" if target else "")
            try:
                result = await steps.run_hooks(req, summary)
            except ActivityError as exc:
                self._emit(ProgressKind.STATUS, f"{event} hooks failed: {error_text(exc)}", True)
                return None
        for note in user_notes(result):
            self._emit(ProgressKind.STATUS, f"{event} hook: {note}", is_error=True)
        return result

    async def _sdk_hooks(
        self,
        event: str,
        callbacks: list[HookCommandSpec],
        payload: dict[str, Any],
        tool_result: ToolResultRef | None,
    ) -> list[HookRun]:
        """Wait (durably) for the SDK's answers to its hook callbacks of this event; a callback
        that does not answer within its timeout counts as a hook that timed out."""
        request_id = str(workflow.uuid4())
        data = {
            **payload,
            "hook_event_name": event,
            "session_id": self._inp.session_id,
            "cwd": self._cfg.workspace,
        }
        if tool_result is not None and tool_result.inline is not None:
            data[result_field(event)] = tool_result.inline.text()
        ids = [c.command.removeprefix(SDK_CALLBACK) for c in callbacks]
        tool_use_id = payload.get("tool_use_id")
        self._hook_requests[request_id] = HookCallbackRequest(
            request_id=request_id,
            event=event,
            callback_ids=ids,
            input=data,
            tool_use_id=tool_use_id if isinstance(tool_use_id, str) else None,
            tool_result=tool_result
            if tool_result is not None and tool_result.inline is None
            else None,
        )
        self._emit(ProgressKind.HOOK, f"{event}: waiting for the SDK's hook callbacks")
        timeout = max(c.timeout for c in callbacks)
        try:
            await workflow.wait_condition(
                lambda: request_id in self._hook_answers, timeout=timedelta(seconds=timeout)
            )
        except TimeoutError:
            pass
        finally:
            self._hook_requests.pop(request_id, None)
        answer = self._hook_answers.pop(request_id, None)
        if answer is None:
            late = f"the SDK did not answer within {timeout:g}s"
            return [
                HookRun(command=c.command, exit_code=None, stderr=late, timed_out=True)
                for c in callbacks
            ]
        runs = []
        for i, spec in enumerate(callbacks):
            output = answer.outputs[i] if i < len(answer.outputs) else None
            error = answer.errors[i] if i < len(answer.errors) else ""
            if output is None:
                runs.append(HookRun(command=spec.command, exit_code=1, stderr=error or "no output"))
            else:
                runs.append(HookRun(command=spec.command, exit_code=0, stdout=json.dumps(output)))
        return runs

    @workflow.update(name=Updates.HOOK_CALLBACK_RESULT)
    def hook_callback_result(self, answer: HookCallbackAnswer) -> str:
        self._hook_answers[answer.request_id] = answer
        return f"{len(answer.outputs)} answer(s) recorded"

    @hook_callback_result.validator
    def _hook_waiting(self, answer: HookCallbackAnswer) -> None:
        if answer.request_id not in self._hook_requests or answer.request_id in self._hook_answers:
            raise ValueError(f"no hook callback {answer.request_id!r} is waiting")

    @workflow.query(name=Queries.HOOK_REQUESTS)
    def hook_requests(self) -> list[HookCallbackRequest]:
        return [r for r in self._hook_requests.values() if r.request_id not in self._hook_answers]

    async def _pre_tool_hooks(
        self, call: ToolCall, commands: list[HookCommandSpec], notes: CallNotes
    ) -> RunToolOutput | tuple[Decision | None, dict[str, Any] | None]:
        """The PreToolUse verdict: a refusal, or the permission decision and the input to run
        (`updatedInput`, checked against the rules again)."""
        payload = self._hook_payload(
            tool_name=call.name, tool_input=call.permission_input or {}, tool_use_id=call.id
        )
        result = await self._hook_event(PRE_TOOL_USE, call.name, commands, payload)
        if result is None:  # an unknown verdict never lets a call through
            return await _refused(call, "Its PreToolUse hooks could not run", notes)
        notes.feedback.extend(tool_feedback(PRE_TOOL_USE, call.name, result))
        if result.prevent_continuation:
            notes.stop = result.stop_reason or "a PreToolUse hook stopped the prompt"
            return await _refused(call, f"Stopped by a PreToolUse hook: {notes.stop}", notes)
        rules, ctx, updated = call.permission, self._cfg.call.permissions, result.updated_input
        if updated is not None and ctx is not None:
            rules = check(call.name, updated, ctx)
        return pre_tool_gate(rules, result), updated

    async def _post_tool_hooks(
        self,
        event: str,
        call: ToolCall,
        commands: list[HookCommandSpec],
        tool_input: dict[str, Any] | None,
        result_ref: ToolResultRef,
        notes: CallNotes,
    ) -> None:
        """PostToolUse(Failure): what they say goes to Claude after the results. The tool has
        run: an interrupt here keeps its result."""
        payload = self._hook_payload(
            tool_name=call.name,
            tool_input=tool_input if tool_input is not None else call.permission_input or {},
            tool_use_id=call.id,
        )
        if event == POST_TOOL_USE_FAILURE:
            payload["is_interrupt"] = False
        try:
            result = await self._hook_event(event, call.name, commands, payload, result_ref)
        except (CancelledError, asyncio.CancelledError):
            return
        if result is not None:
            notes.feedback.extend(tool_feedback(event, call.name, result))
            if result.prevent_continuation:
                notes.stop = result.stop_reason or f"a {event} hook stopped the prompt"

    async def _prompt_hooks(self, prompt: str) -> None:
        """SessionStart (the session's first prompt), then UserPromptSubmit: a block (or
        `continue: false`) erases the prompt and ends the query `hook_stopped`, the reason
        shown to the user only; what either adds to the context is added to the prompt."""
        context = await self._session_start_context(self._inp.session_start)
        commands = self._hooks(USER_PROMPT_SUBMIT, None)
        if context:
            self._add_context(prompt, context)
        if not commands:
            return
        payload = self._hook_payload(prompt=prompt)
        try:
            result = await self._guarded(
                self._hook_event(USER_PROMPT_SUBMIT, None, commands, payload)
            )
        except _Interrupted:
            return  # the loop ends the prompt aborted
        state = self._state
        if result is None or state.pending is None:
            return
        if result.blocked or result.prevent_continuation:
            why = result.reason if result.blocked else result.stop_reason
            message = (
                f"the prompt was blocked by a UserPromptSubmit hook: {why or 'no reason given'}"
            )
            erased = state.model_copy(
                update={"pending": None, "context_tokens": self._inp.context_tokens}
            )
            self._state = erased.ended(Terminal.HOOK_STOPPED, message)
            return
        if result.additional_context:
            self._add_context(prompt, [*context, *result.additional_context])

    def _add_context(self, prompt: str, context: list[str]) -> None:
        """The pending prompt with what SessionStart / UserPromptSubmit hooks added."""
        state = self._state
        assert state.pending is not None
        text = prompt_with_context(prompt, context)
        self._state = state.model_copy(
            update={
                "pending": state.pending.model_copy(update={"prompt": text}),
                "context_tokens": self._inp.context_tokens + estimate_text_tokens(text),
            }
        )

    async def _session_start_context(self, source: str | None) -> list[str]:
        """SessionStart hooks (source `startup` before a session's first prompt, `resume`
        before the first one a returning CLI sends, `compact` after a compaction): what they
        add to Claude's context."""
        commands = self._hooks("SessionStart", source) if source is not None else []
        if not commands:
            return []
        payload = self._hook_payload(source=source, model=self._cfg.model)
        try:
            result = await self._guarded(
                self._hook_event("SessionStart", source, commands, payload)
            )
        except _Interrupted:
            return []
        return list(result.additional_context) if result is not None else []

    async def _observe(self, event: str, target: str | None, **fields: Any) -> None:
        """An event whose hooks can only observe (Notification, PostCompact, StopFailure)."""
        commands = self._hooks(event, target)
        if commands:
            await self._hook_event(event, target, commands, self._hook_payload(**fields))

    def _discard_executors(self) -> None:
        for executor in self._executors.values():
            executor.discard()
        self._executors = {}
        self._call_id = None

    async def _stop_hooks(self) -> None:
        """Claude is done: the user's Stop hooks may send it back to work, or stop the query."""
        if not workflow.patched(STOP_HOOKS_PATCH):
            self._state = self._state.at(Phase.HOOKS_PASSED)
            return
        if self._cfg.settings is not None and workflow.patched(STOP_HOOKS_SNAPSHOT_PATCH):
            await self._stop_hooks_from_settings()
            return
        req = StopHooksInput(
            session_id=self._inp.session_id,
            workspace=self._cfg.workspace,
            stop_hook_active=self._state.stop_hook_active,
            heartbeat_seconds=self._cfg.activity.tool_heartbeat_seconds,
        )
        try:
            out = await self._guarded(steps.run_stop_hooks(req))
        except _Interrupted:
            self._state = self._state.at(Phase.HOOKS_PASSED)
            return
        except ActivityError as exc:
            self._emit(
                ProgressKind.STATUS, f"Stop hooks did not run: {error_text(exc)}", is_error=True
            )
            self._state = self._state.at(Phase.HOOKS_PASSED)
            return
        self._state = after_stop_hooks(
            self._state,
            out.blocking_errors,
            out.prevent_continuation,
            out.stop_reason,
            str(workflow.uuid4()),
        )

    async def _stop_hooks_from_settings(self) -> None:
        """The Stop hooks of the settings snapshot, with Claude Code's input; none: no step."""
        commands = self._hooks("Stop", None)
        if not commands:
            self._state = self._state.at(Phase.HOOKS_PASSED)
            return
        state = self._state
        payload = self._hook_payload(
            stop_hook_active=state.stop_hook_active,
            last_assistant_message=state.answer.text if state.answer else "",
        )
        try:
            result = await self._guarded(self._hook_event("Stop", None, commands, payload))
        except _Interrupted:
            self._state = self._state.at(Phase.HOOKS_PASSED)
            return
        if result is None:
            self._state = self._state.at(Phase.HOOKS_PASSED)
            return
        self._state = after_stop_hooks(
            self._state,
            [result.reason] if result.blocked else [],
            result.prevent_continuation,
            result.stop_reason,
            str(workflow.uuid4()),
        )

    async def _manual_compact(self, instructions: str) -> None:
        """`/compact [instructions]`: summarise now and end; no model turn follows."""
        if self._state.head_uuid is None:  # the prompts before it were all blocked
            self._state = self._state.ended(Terminal.COMPLETED, "there was nothing to compact")
            return
        compacted = await self._compact(reactive=False, instructions=instructions)
        if compacted:
            self._state = self._state.ended(Terminal.COMPLETED)
        elif self._interrupted:
            self._state = self._state.ended(Terminal.ABORTED_STREAMING, INTERRUPTED)
        else:
            self._state = self._state.ended(
                Terminal.MODEL_ERROR, "the conversation was not compacted (the summary failed)"
            )

    async def _compact(self, reactive: bool, instructions: str | None = None) -> bool:
        """Summarise into a compact boundary (True when done). Interrupted, the phase is
        unchanged (the interrupt ends the prompt); failed, autocompact counts a failure,
        reactive gives up. `instructions` (not None): a manual `/compact`."""
        cfg, state = self._cfg, self._state
        trigger = "manual" if instructions is not None else "reactive" if reactive else "auto"
        matcher = (
            "auto" if trigger == "auto" else "manual"
        )  # the hooks' `trigger` (PreCompact's too)
        self._phase = "compacting"
        workflow.set_current_details(f"compacting {state.context_tokens:,} tokens ({trigger})")
        req = CompactInput(
            session_id=self._inp.session_id,
            parent_uuid=state.head_uuid,
            pending=state.pending,
            config=cfg.call,
            workspace=cfg.workspace,
            microcompact_keep=cfg.microcompact_keep_recent,
            request=model_request(state, cfg),
            boundary_uuid=str(workflow.uuid4()),
            summary_uuid=str(workflow.uuid4()),
            trigger=trigger,
            pre_tokens=state.context_tokens,
            pre_compact=None if cfg.settings is None else self._hooks("PreCompact", matcher),
            custom_instructions=instructions or "",
        )
        try:
            out = await self._guarded(steps.autocompact(req, cfg))
        except _Interrupted:
            return False
        except ActivityError as exc:
            self._emit(
                ProgressKind.STATUS, f"{trigger} compact failed: {error_text(exc)}", is_error=True
            )
            self._state = compaction_failed(self._state, reactive)
            return False
        for note in out.hook_notes:
            self._emit(ProgressKind.STATUS, note, is_error=True)
        await self._observe("PostCompact", matcher, trigger=matcher)
        self._emit(
            ProgressKind.STATUS,
            f"compacted the conversation ({trigger}): {out.pre_tokens:,} → {out.post_tokens:,} tokens",
        )
        self._state = after_compaction(
            self._state,
            cfg,
            out.summary_uuid,
            out.pre_tokens,
            out.post_tokens,
            str(workflow.uuid4()),
            reactive,
        )
        context = await self._session_start_context("compact")
        if context:  # SessionStart "compact": its context follows the summary
            text = prompt_with_context("", context).strip()
            pending = PendingUser(
                uuid=str(workflow.uuid4()), parent_uuid=self._state.head_uuid, prompt=text
            )
            tokens = self._state.context_tokens + estimate_text_tokens(text)
            self._state = self._state.model_copy(
                update={"pending": pending, "context_tokens": tokens}
            )
        return True

    async def _drain(self, target_tokens: int) -> None:
        state = self._state
        planned = await steps.plan_collapse(
            PlanCollapseInput(
                session_id=self._inp.session_id,
                parent_uuid=state.head_uuid,
                pending=state.pending,
                request=model_request(state, self._cfg),
                target_tokens=target_tokens,
            )
        )
        if not planned.tool_use_ids:
            self._state = self._state.model_copy(update={"collapse_drained": True})
            return
        self._emit(
            ProgressKind.STATUS, f"cleared {len(planned.tool_use_ids)} large old tool results"
        )
        collapsed = (*self._state.collapsed_ids, *planned.tool_use_ids)
        if workflow.patched(BOUNDED_STATE_PATCH):
            collapsed = add_collapsed(self._state, planned.tool_use_ids)
        self._state = self._state.next(
            Transition.COLLAPSE_DRAIN_RETRY, collapse_drained=True, collapsed_ids=collapsed
        )

    async def _finish(self, step: Finish) -> QueryResult:
        """Store the pending user entry (so the transcript stays valid), then return."""
        pending = self._state.pending
        if pending is not None:
            stored = await steps.append_entry(
                AppendEntryInput(session_id=self._inp.session_id, entry=pending)
            )
            self._state = self._state.model_copy(update={"head_uuid": stored.uuid, "pending": None})
        if step.message:
            self._emit(
                ProgressKind.STATUS, step.message, is_error=step.terminal != Terminal.COMPLETED
            )
        ending = self._state.ending
        if step.terminal == Terminal.MODEL_ERROR and ending is not None:
            kind = ending.error_type or "unknown"
            await self._observe("StopFailure", kind, error_type=kind, error=step.message)
        state = self._state
        self._phase = "done"
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
            model=state.model or self._cfg.model,
            fallback_used=state.model is not None,
            usage_by_model=state.usage_by_model,
            retries=dict(state.retries),
            permission_denials=list(state.permission_denials),
            denials_dropped=state.denials_dropped,
            session_grants=list(state.session_grants),
            api_duration_ms=state.api_duration_ms,
        )
