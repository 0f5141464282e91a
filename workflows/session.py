"""SessionWorkflow: the QueryEngine. Holds the conversation head across prompts."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import VersioningBehavior
from temporalio.exceptions import ActivityError, ChildWorkflowError, FailureError
from temporalio.workflow import ChildWorkflowHandle

with workflow.unsafe.imports_passed_through():
    from durable_agent.engine.contracts import (
        ConfigChange,
        EndProcessesInput,
        MidTurnPrompt,
        MidTurnPrompts,
        PromptAccepted,
        PromptRequest,
        QueryInput,
        SessionInput,
        SessionStatus,
    )
    from durable_agent.engine.hooks import HookEventInput, hooks_for
    from durable_agent.engine.messages import Usage
    from durable_agent.engine.schedules import MAX_CRON_JOBS, ScheduledPrompt, add_wakeups
    from durable_agent.engine.settings import without_env_values
    from durable_agent.engine.state import MAX_PROMPT_CHARS, QueryResult
    from durable_agent.engine.tool_hooks import tool_hook_settings, with_sdk_hooks
    from durable_agent.mcp.contracts import CloseMcpInput, ConnectMcpInput, RefreshMcpToolsInput
    from durable_agent.names import Queries, Signals, Updates, Workflows
    from workflows.activity_options import (
        close_mcp,
        connect_mcp,
        end_session_processes,
        refresh_mcp,
        run_hooks,
        transcript_location,
    )
    from workflows.query import QueryWorkflow
    from workflows.schedules import end_schedules, wait_idle


MID_TURN_PATCH = "mid-turn-prompts-v1"
"""A plain prompt sent while another runs is passed on to it, to reach the model with the next
tool results (Claude Code's queued messages); before, it waited for the running one to end."""
CANCEL_PATCH = "session-cancel-clean-up-v1"
"""A cancelled session releases what it holds on workers (processes, schedules, MCP)."""
LOCAL_STEPS_PATCH = "session-local-steps-v1"
"""The session's own short steps on the shared queue (where its transcript is, ending its
processes) run as local activities, in the workflow task that needs them: two activity tasks
and two workflow tasks fewer per session (bench/sessions_per_worker.py)."""
MCP_ON_HOST_PATCH = "mcp-on-host-v1"
"""A travelling session's MCP connections: listed (then closed) wherever, refreshed and closed
on its workspace's host, where its MCP calls run and open theirs."""

MAX_QUEUED_PROMPTS = 20
"""Prompts a session holds while one runs; more is almost surely a runaway client."""


def query_workflow_id(session_id: str, index: int) -> str:
    return f"{session_id}-q{index}"


def _summary(req: PromptRequest) -> str:
    """The prompt's workflow as the Web UI lists it."""
    if req.compact:
        return f"/compact {req.prompt}"[:200]
    if req.scheduled is not None:
        return f"[{req.scheduled}] {req.prompt}"[:200]
    return req.prompt[:200]


@workflow.defn(name=Workflows.SESSION)
class SessionWorkflow:
    @workflow.init
    def __init__(self, inp: SessionInput) -> None:
        self._session_id = inp.session_id
        # A prompt sent while another runs waits in `queued`: whether one "is running" is
        # workflow state, rebuilt from history on replay, and an Update may arrive in the same
        # activation as the running prompt's completion.
        self._state = inp.initial_state()
        self._running: str | None = None
        self._stopping = False
        self._transcript_path = ""
        self._config = inp.config
        self._passing: asyncio.Future[None] | None = None
        self._close_when_idle = inp.close_when_idle

    @workflow.update(name=Updates.SUBMIT_PROMPT)
    def submit_prompt(self, req: PromptRequest) -> PromptAccepted:
        """Queue a prompt; returns the id its QueryWorkflow will have (it starts when the prompts
        before it have finished)."""
        self._state.queued.append(req)
        index = self._state.queries + len(self._state.queued)
        return PromptAccepted(
            query_workflow_id=query_workflow_id(self._session_id, index), index=index
        )

    @submit_prompt.validator
    def _validate_prompt(self, req: PromptRequest) -> None:
        if req.compact:
            state = self._state
            if state.head_uuid is None and state.queries == 0 and not state.queued:
                raise ValueError("there is nothing to compact yet: the session has no conversation")
        elif not req.prompt.strip():
            raise ValueError("the prompt is empty")
        if len(req.prompt) > MAX_PROMPT_CHARS:
            raise ValueError(
                f"the prompt has {len(req.prompt):,} characters (at most {MAX_PROMPT_CHARS:,}); "
                "put long material in a file in the workspace and refer to it"
            )
        if self._state.closed:
            raise ValueError("this session is closed; start a new one")
        if len(self._state.queued) >= MAX_QUEUED_PROMPTS:
            raise ValueError(
                f"{len(self._state.queued)} prompts are already waiting in this session; "
                "wait for them or interrupt the running one"
            )
        if req.max_turns is not None and req.max_turns < 1:
            raise ValueError("max_turns must be at least 1")

    @workflow.update(name=Updates.CONFIGURE)
    def configure(self, change: ConfigChange) -> str:
        """The model or permission mode of the prompts that start from now on."""
        cfg = self._config
        if change.model is not None:
            cfg = cfg.model_copy(update={"model": change.model})
        perms = cfg.call.permissions
        if change.permission_mode is not None and perms is not None:
            perms = perms.model_copy(update={"mode": change.permission_mode})
            cfg = cfg.model_copy(
                update={"call": cfg.call.model_copy(update={"permissions": perms})}
            )
        if change.sdk_hooks:
            settings = dict(cfg.settings or {})
            settings["hooks"] = with_sdk_hooks(settings.get("hooks"), change.sdk_hooks)
            call = cfg.call.model_copy(update={"tool_hooks": tool_hook_settings(settings["hooks"])})
            cfg = cfg.model_copy(update={"settings": settings, "call": call})
        self._config = cfg
        mode = perms.mode.value if perms else "unchecked"
        return f"model {cfg.model}, permission mode {mode}"

    @configure.validator
    def _valid_change(self, change: ConfigChange) -> None:
        if change.model is not None and not change.model.strip():
            raise ValueError("the model name is empty")
        if change.permission_mode is not None and self._config.call.permissions is None:
            raise ValueError("this session checks no permissions: it has no mode to change")

    @workflow.signal(name=Signals.INTERRUPT)
    async def interrupt(self) -> None:
        """Interrupt the running prompt, if any."""
        if self._running is not None:
            try:
                await workflow.get_external_workflow_handle(self._running).signal(Signals.INTERRUPT)
            except FailureError:
                # The prompt finished while the signal was on its way: nothing to interrupt,
                # and the session must not fail over it.
                workflow.logger.info("interrupt arrived after %s ended", self._running)

    @workflow.signal(name=Signals.SCHEDULED_PROMPT)
    def scheduled_prompt(self, sent: ScheduledPrompt) -> None:
        """A cron job fired: its prompt is queued, to run between prompts (dropped when the
        session is closed or full, or while the job's last prompt still waits)."""
        state = self._state
        if state.closed or len(state.queued) >= MAX_QUEUED_PROMPTS:
            workflow.logger.info("prompt of job %s dropped: session closed or full", sent.job_id)
        elif not sent.prompt.strip() or len(sent.prompt) > MAX_PROMPT_CHARS:
            workflow.logger.info("prompt of job %s dropped: empty or too long", sent.job_id)
        elif all(req.scheduled != sent.job_id for req in state.queued):
            state.queued.append(PromptRequest(prompt=sent.prompt, scheduled=sent.job_id))

    @workflow.update(name=Updates.CANCEL_WAKEUP)
    def cancel_wakeup(self, wakeup_id: str) -> str:
        """Drop a pending wake-up: its prompt never runs."""
        state = self._state
        gone = next(w for w in state.wakeups if w.id == wakeup_id)
        state.wakeups = [w for w in state.wakeups if w.id != wakeup_id]
        return f"wake-up {wakeup_id} cancelled ({gone.reason})"

    @cancel_wakeup.validator
    def _pending_wakeup(self, wakeup_id: str) -> None:
        pending = [w.id for w in self._state.wakeups]
        if wakeup_id not in pending:
            listed = f"pending: {', '.join(pending)}" if pending else "none is pending"
            raise ValueError(f"no wake-up {wakeup_id} in this session ({listed})")

    @workflow.signal(name=Signals.CLOSE)
    def close(self) -> None:
        """End the session once the running prompt (if any) finishes."""
        self._state.closed = True

    @workflow.signal(name=Signals.STOP)
    async def stop(self) -> None:
        """End the session now (its front-end was stopped, as `timeout` stops `claude -p`): the
        waiting prompts never run, the running one is interrupted (one that is still starting,
        as soon as it has started), and the session ends as when closed."""
        self._stopping = True
        self._state.closed = True
        self._state.queued.clear()
        await self.interrupt()

    @workflow.query(name=Queries.STATUS)
    def status(self) -> SessionStatus:
        state = self._state
        return SessionStatus(
            session_id=self._session_id,
            running_query_id=self._running,
            head_uuid=state.head_uuid,
            queries=state.queries,
            last_result=state.last_result,
            last_error=state.last_error,
            closed=state.closed,
            queued=len(state.queued),
            permission_mode=perms.mode.value if (perms := self._config.call.permissions) else None,
            sandboxed=self._config.sandbox is not None,
            settings=without_env_values(self._config.settings),
            session_grants=list(state.session_grants),
            todos=list(state.todos),
            mcp=list(state.mcp or []),
            wakeups=list(state.wakeups),
            close_when_idle=self._close_when_idle,
        )

    @workflow.query(name=Queries.TRANSCRIPT_PATH)
    def transcript_path(self) -> str:
        return self._transcript_path

    @workflow.run
    async def run(self, inp: SessionInput) -> SessionStatus:
        self._transcript_path = await transcript_location(
            self._session_id, local=workflow.patched(LOCAL_STEPS_PATCH)
        )
        state = self._state
        runs_here = 0
        if self._config.mcp_servers and state.mcp is None:
            await self._mcp_tools()  # at once: the front-end's init lists them, with status
        try:
            while True:
                await wait_idle(state, inp.close_when_idle)
                if not state.queued:
                    break
                if (
                    runs_here >= inp.queries_per_run
                    or workflow.info().is_continue_as_new_suggested()
                ):
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    workflow.continue_as_new(
                        SessionInput(
                            session_id=self._session_id,
                            config=self._config,
                            close_when_idle=inp.close_when_idle,
                            queries_per_run=inp.queries_per_run,
                            state=state,
                        )
                    )
                runs_here += 1
                await self._run_prompt(inp, state.queued.pop(0))
                # A cancel that came while the prompt ran went to its child, and the SDK lets
                # the child's outcome through instead: the session ends here all the same.
                if workflow.cancellation_reason() is not None and workflow.patched(CANCEL_PATCH):
                    raise asyncio.CancelledError("the session was cancelled during a prompt")
        except asyncio.CancelledError:
            # Cancelled (`temporal workflow cancel`, the Web UI): the session ends here, and
            # what it leaves on workers goes as at its normal end (no SessionEnd hooks: a
            # cancel asks for an end now). A terminate runs no workflow code: nothing to do.
            if workflow.patched(CANCEL_PATCH):
                await self._release()
            raise
        await self._session_end_hooks()
        await self._release()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self.status()

    async def _release(self) -> None:
        """What the session holds outside its history: the processes its tools (and its
        sub-agents') left running, its schedules, this worker's MCP connections."""
        state = self._state
        if workflow.patched("session-end-processes-v1"):
            # Nothing a tool of this session started outlives it (`nohup … &`, `cmd &`).
            ending = EndProcessesInput(session_id=self._session_id)
            host = state.workspace.host_queue if state.workspace else None
            try:
                await end_session_processes(
                    ending, host, local=host is None and workflow.patched(LOCAL_STEPS_PATCH)
                )
            except ActivityError as exc:  # its workspace's host is gone, and its processes
                workflow.logger.warning("could not end the session's processes: %s", exc)
        await end_schedules(self._session_id, state)
        if self._config.mcp_servers and state.mcp is not None:
            try:  # this worker's connections (another worker's close with its process)
                await close_mcp(CloseMcpInput(session_id=self._session_id), self._mcp_host())
            except ActivityError as exc:
                workflow.logger.warning("could not close the MCP connections: %s", exc)

    def _mcp_host(self) -> str | None:
        """Where the session's MCP connections are: on its travelling workspace's host (its
        MCP calls run there), else on the worker that runs each step."""
        workspace = self._state.workspace
        if workspace is None or not workflow.patched(MCP_ON_HOST_PATCH):
            return None
        return workspace.host_queue

    async def _mcp_tools(self) -> None:
        """The MCP servers' tools for the next prompt: connected the first time (each server's
        status recorded), then only the lists a server said changed (`tools/list_changed`)
        listed again. A failure costs the tools, not the prompt."""
        state, cfg = self._state, self._config
        try:
            if state.mcp is None:
                travels = state.workspace is not None and workflow.patched(MCP_ON_HOST_PATCH)
                out = await connect_mcp(
                    ConnectMcpInput(
                        session_id=self._session_id,
                        servers=cfg.mcp_servers,
                        workspace=cfg.workspace,
                        keep=not travels,
                    )
                )
                state.mcp = out.servers
            else:
                out = await refresh_mcp(
                    RefreshMcpToolsInput(
                        session_id=self._session_id,
                        servers=cfg.mcp_servers,
                        workspace=cfg.workspace,
                    ),
                    self._mcp_host(),
                )
                fresh = {s.name: s for s in out.servers}
                state.mcp = [fresh.pop(s.name, s) for s in state.mcp] + list(fresh.values())
        except ActivityError as exc:
            workflow.logger.warning("MCP servers could not be reached: %s", exc)
            if state.mcp is None:
                state.mcp = []
        tools = [t for server in state.mcp if server.status == "connected" for t in server.tools]
        call = cfg.call.model_copy(update={"mcp_tools": tools})
        self._config = cfg.model_copy(update={"call": call})

    async def _session_end_hooks(self) -> None:
        """SessionEnd hooks of the settings snapshot (they observe; nothing they say counts)."""
        hooks = (self._config.settings or {}).get("hooks")
        commands = hooks_for(hooks, "SessionEnd", "other") if hooks else []
        if not commands or not workflow.patched("session-end-hooks-v1"):
            return
        perms = self._config.call.permissions
        req = HookEventInput(
            session_id=self._session_id,
            workspace=self._config.workspace,
            event="SessionEnd",
            target="other",
            payload={
                "reason": "other",
                "permission_mode": perms.mode.value if perms else "default",
            },
            commands=commands,
            heartbeat_seconds=self._config.activity.tool_heartbeat_seconds,
        )
        try:
            await run_hooks(req, "SessionEnd hooks")
        except ActivityError as exc:
            workflow.logger.warning("SessionEnd hooks failed: %s", exc)

    async def _run_prompt(self, inp: SessionInput, req: PromptRequest) -> None:
        state = self._state
        index = state.queries + 1
        child_id = query_workflow_id(self._session_id, index)
        # Counted before the start is awaited: an Update accepted meanwhile numbers after it.
        state.queries = index
        if self._config.mcp_servers:  # (a config field older histories do not have)
            await self._mcp_tools()
        config = self._config
        if req.checkpoint_id is not None and state.workspace is not None:
            state.workspace = state.workspace.model_copy(
                update={"checkpoint_id": req.checkpoint_id}
            )
        if req.max_turns is not None:
            config = config.model_copy(update={"max_turns": req.max_turns})
        handle = await workflow.start_child_workflow(
            QueryWorkflow.run,
            QueryInput(
                session_id=self._session_id,
                prompt=req.prompt,
                parent_uuid=state.head_uuid,
                config=config,
                context_tokens=state.context_tokens,
                session_grants=list(state.session_grants),
                session_start="startup" if index == 1 else req.session_start,
                compact=req.compact,
                workspace=state.workspace,
                seen=state.seen,
                todos=state.todos,
            ),
            id=child_id,
            static_summary=_summary(req),
            execution_timeout=timedelta(days=30),
        )
        self._running = child_id
        if self._stopping:  # stopped while it started (never so in a history from before STOP)
            await self.interrupt()
        if workflow.patched(MID_TURN_PATCH):
            self._passing = asyncio.ensure_future(self._pass_on(handle, child_id))
        try:
            result = await handle
        except ChildWorkflowError as exc:
            state.last_error = f"query {child_id} failed: {exc.cause or exc}"
            state.last_result = None
        else:
            state.last_result = result
            state.last_error = None
            state.head_uuid = result.head_uuid
            state.context_tokens = result.context_tokens
            state.session_grants = list(result.session_grants)
            if result.workspace is not None:
                state.workspace = result.workspace
            if result.seen is not None:
                state.seen = result.seen
            if result.todos is not None:
                state.todos = result.todos
            if result.wakeups:
                state.wakeups = add_wakeups(state.wakeups, result.wakeups)
            if result.cron_jobs:
                jobs = [j for j in state.cron_jobs if j not in result.cron_jobs]
                state.cron_jobs = [*jobs, *result.cron_jobs][-MAX_CRON_JOBS:]
            if result.absorbed:
                await self._answer_absorbed(result)
        finally:
            self._running = None

    async def _pass_on(self, handle: ChildWorkflowHandle[Any, Any], child_id: str) -> None:
        """While `child_id` runs, pass it the plain prompts at the head of the queue (a
        `/compact` or a prompt with a turn limit or files of its own waits, and so does
        everything after it, to keep the order)."""
        state = self._state

        def waiting() -> list[PromptRequest]:
            head: list[PromptRequest] = []
            for req in state.queued:
                if not req.mid_turn():
                    break
                head.append(req)
            return [req for req in head if req.mid_turn_id is None]

        while True:
            await workflow.wait_condition(lambda: self._running != child_id or bool(waiting()))
            if self._running != child_id:
                return
            batch = waiting()
            for req in batch:
                req.mid_turn_id = str(workflow.uuid4())
            sent = MidTurnPrompts(
                prompts=[MidTurnPrompt(id=r.mid_turn_id or "", prompt=r.prompt) for r in batch]
            )
            try:
                await handle.signal(Signals.MID_TURN_PROMPTS, sent)
            except FailureError:  # it ended meanwhile: they run after it, as before
                return

    async def _answer_absorbed(self, result: QueryResult) -> None:
        """The queued prompts the finished one gave the model: each gets its workflow (the id
        its sender follows), which returns that result at once, in the queue's order."""
        state = self._state
        self._running = None  # nothing more is passed on to it
        taken = set(result.absorbed)
        while state.queued and state.queued[0].mid_turn_id in taken:
            req = state.queued.pop(0)
            state.queries += 1
            child_id = query_workflow_id(self._session_id, state.queries)
            answered = result.model_copy(
                update={
                    "message": f"answered by {result.query_workflow_id}: this prompt reached "
                    "the model with its tool results",
                    "turn_count": 0,
                    "usage": Usage(),
                    "usage_by_model": {},
                    "api_duration_ms": 0,
                    "query_workflow_id": child_id,
                    "absorbed": [],
                    "transitions": [],
                    "retries": {},
                }
            )
            await workflow.execute_child_workflow(
                QueryWorkflow.run,
                QueryInput(
                    session_id=self._session_id,
                    prompt=req.prompt,
                    parent_uuid=state.head_uuid,
                    config=self._config,
                    answered=answered,
                ),
                id=child_id,
                static_summary=req.prompt[:200],
                execution_timeout=timedelta(days=1),
            )


# Under Worker Versioning (a worker with DURABLE_AGENT_DEPLOYMENT) a session moves to each new
# build as it becomes current: it lives for days, and its code stays replayable through
# workflow.patched, checked against tests/histories. Its prompts (QueryWorkflow) and their
# sub-agents stay on the build that started them (the worker's default, PINNED). A behaviour
# may only be declared to a versioned worker (the server refuses it from any other), hence a
# class of its own that only a versioned worker registers.
@workflow.defn(name=Workflows.SESSION, versioning_behavior=VersioningBehavior.AUTO_UPGRADE)
class AutoUpgradingSessionWorkflow(SessionWorkflow):
    @workflow.run
    async def run(self, inp: SessionInput) -> SessionStatus:
        return await super().run(inp)
