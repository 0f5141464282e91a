"""`run_tool`: reads the tool_use from the store, runs it, stores the tool_result."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from opentelemetry.trace import Span
from pydantic import ValidationError
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from activities.heartbeat import heartbeating
from activities.tools.base import ToolError, ToolOutput, Workspace
from activities.tools.bash import run_bash
from activities.tools.edit import run_edit
from activities.tools.environment import (
    RUN_TAG,
    SETTINGS_ENV,
    kill_orphaned_mcp_servers,
    kill_tagged,
    proc_stat,
    session_and_agents_prefixes,
    tool_tag_prefix,
)
from activities.tools.glob import run_glob
from activities.tools.grep import run_grep
from activities.tools.links import FILE_TOOLS, judged_at
from activities.tools.notebook_edit import run_notebook_edit
from activities.tools.read import run_read
from activities.tools.sandbox import SandboxUnavailable, policy_for
from activities.tools.schedule import CronTools, run_cron_elsewhere, run_schedule_wakeup
from activities.tools.skill import run_skill
from activities.tools.todo import run_todo_write
from activities.tools.web_fetch import ModelClient, run_web_fetch, run_web_fetch_alone
from activities.tools.write import run_write
from activities.transcript import StoreError, TranscriptError, TranscriptStore, off_loop
from activities.workspace import WorkspaceHosts, map_paths
from durable_agent import telemetry
from durable_agent.devserver import pid_alive
from durable_agent.engine.contracts import (
    EndProcessesInput,
    EndProcessesOutput,
    EndToolProcessesInput,
    RunToolInput,
    RunToolOutput,
)
from durable_agent.engine.messages import TextBlock, ToolResultBlock, ToolUseBlock
from durable_agent.engine.permissions import (
    Behavior,
    PermissionContext,
    SandboxSpec,
    check,
    read_denied,
)
from durable_agent.engine.tools import (
    TOOL_SPECS,
    BashInput,
    CronCreateInput,
    CronDeleteInput,
    CronListInput,
    ToolName,
    WebFetchInput,
)
from durable_agent.mcp.connections import McpConnections
from durable_agent.names import Activities

ToolImpl = Callable[[Any, Workspace], Awaitable[ToolOutput]]


async def run_agent_elsewhere(args: Any, ws: Workspace) -> ToolOutput:
    """A valid Agent call is a child workflow (workflows/agents.py), never this activity."""
    return ToolOutput("The Agent tool could not start the agent here.", is_error=True)


TOOL_IMPLS: dict[str, ToolImpl] = {
    ToolName.READ: run_read,
    ToolName.WRITE: run_write,
    ToolName.EDIT: run_edit,
    ToolName.BASH: run_bash,
    ToolName.GREP: run_grep,
    ToolName.GLOB: run_glob,
    ToolName.TODO_WRITE: run_todo_write,
    ToolName.AGENT: run_agent_elsewhere,
    ToolName.TASK_STOP: run_agent_elsewhere,
    ToolName.WEB_FETCH: run_web_fetch_alone,
    ToolName.NOTEBOOK_EDIT: run_notebook_edit,
    ToolName.SKILL: run_skill,
    ToolName.SCHEDULE_WAKEUP: run_schedule_wakeup,
    ToolName.CRON_CREATE: run_cron_elsewhere,
    ToolName.CRON_LIST: run_cron_elsewhere,
    ToolName.CRON_DELETE: run_cron_elsewhere,
}
PREVIEW_CHARS = 120
MCP_CALL_SECONDS = 600.0
"""An MCP call that takes longer is an error result (MCP_TOOL_TIMEOUT in Claude Code)."""
MCP_OUTPUT_TOKENS = 25_000


def _validation_message(name: str, exc: ValidationError) -> str:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'input'}: {err['msg']}" for err in exc.errors()
    )
    return f"InputValidationError: {name} input is invalid: {problems}"


async def execute_tool(
    name: str,
    raw_input: dict[str, Any],
    workspace: str,
    read_roots: tuple[Path, ...] = (),
    permissions: PermissionContext | None = None,
    sandbox: SandboxSpec | None = None,
    model_client: ModelClient | None = None,
    cron: CronTools | None = None,
) -> ToolOutput:
    """Run one tool; every failure becomes an error output, never an exception. With
    `permissions`, what its Read deny rules cover is left out of search results; with
    `sandbox`, Bash runs under bubblewrap; WebFetch asks its small model through
    `model_client`; the cron tools manage the session's jobs through `cron`."""
    spec = TOOL_SPECS.get(name)
    impl = TOOL_IMPLS.get(name)
    if spec is None or impl is None:
        return ToolOutput(f"No such tool available: {name}", is_error=True)
    try:
        args = spec.parse(raw_input)
    except ValidationError as exc:
        return ToolOutput(_validation_message(name, exc), is_error=True)
    hidden = judge = None
    if permissions is not None:
        hidden = functools.partial(_hidden, ctx=permissions)
        judge = functools.partial(_judge, name=name, raw=raw_input, ctx=permissions)
    try:
        extra = tuple(permissions.additional_directories) if permissions else ()
        ws = await off_loop(Workspace.open, workspace, read_roots, hidden, extra, judge)
        if isinstance(args, BashInput) and sandbox is not None:
            policy = await off_loop(policy_for, sandbox, permissions, str(ws.root))
            return await run_bash(args, ws, policy)
        if isinstance(args, WebFetchInput):
            return await run_web_fetch(args, model_client, permissions)
        if isinstance(args, CronCreateInput | CronListInput | CronDeleteInput) and cron:
            return await cron.run(args)
        return await impl(args, ws)
    except ToolError as exc:
        return ToolOutput(str(exc), is_error=True)
    except SandboxUnavailable as exc:
        return ToolOutput(f"The command did not run: {exc}", is_error=True)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a tool bug must not fail the workflow
        return ToolOutput(f"{name} failed: {type(exc).__name__}: {exc}", is_error=True)


def _hidden(path: str, ctx: PermissionContext) -> bool:
    return read_denied(path, ctx)


def _judge(
    given: str, real: str, name: str, raw: dict[str, Any], ctx: PermissionContext
) -> str | None:
    """Refuse a path that leads where the rules deny the call, at the moment it is used (a
    link put in its way since the call was decided). An ask is not refused here: the call's
    decision already weighed where the path led then, and may have been approved."""
    if name not in FILE_TOOLS:
        return None
    as_given = check(name, {**raw, FILE_TOOLS[name]: given}, ctx)
    led = judged_at(name, raw, ctx, given, real, as_given)
    if led is None or led.behavior != Behavior.DENY:
        return None
    return f"{led.reason}; nothing was read or written"


def preview(name: str, text: str) -> str:
    """One line for the UI: the last line of a command's output, else the first; line count."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip().strip("-=")]
    if not lines:
        return "(no output)"
    line = lines[0]
    if name == ToolName.BASH:
        line = lines[-1]
        if line.startswith("Exit code") and len(lines) > 1:
            line = f"{lines[-2]} [{line.lower()}]"
    if len(line) > PREVIEW_CHARS:
        line = line[: PREVIEW_CHARS - 1] + "…"
    return f"{line} (+{len(lines) - 1} lines)" if len(lines) > 1 else line


@contextlib.contextmanager
def tool_span(block: ToolUseBlock) -> Iterator[Span]:
    """The OpenTelemetry span of one tool execution (GenAI semantic conventions)."""
    with telemetry.tracer().start_as_current_span(f"execute_tool {block.name}") as span:
        span.set_attributes(
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": block.name,
             "gen_ai.tool.call.id": block.id}
        )  # fmt: skip
        yield span


IN_STEP_TOOLS = frozenset({ToolName.READ, ToolName.GREP, ToolName.GLOB})
"""Short and read-only whatever their input: the model-call step may run them itself (a
retried step runs them again, which changes nothing)."""


IN_STEP_INLINE_CHARS = 4_000
"""A read this short travels whole in the step's output (so in history) instead of a stored
file: one fsync and rename less a turn; a longer one is stored and only its preview travels."""


async def overflow_here(store: TranscriptStore, session_id: str) -> tuple[Path, ...]:
    """The session's overflow folder, its files readable here: a shared store copies them in
    (in a thread); the files store has them in place, and no thread hop is spent on it."""
    if store.shared:
        await off_loop(store.fetch_overflow, session_id)
    return (store.overflow_dir(session_id),)


async def run_in_step(
    store: TranscriptStore,
    session_id: str,
    block: ToolUseBlock,
    workspace: str,
    run_id: str,
    permissions: PermissionContext | None = None,
) -> RunToolOutput:
    """Run a read-only tool inside the step that needs it and store its result, as run_tool
    would, unless it is short (kept inline then, and when the store cannot hold it: the model
    must see it)."""
    overflow = await overflow_here(store, session_id)
    with tool_span(block) as span:
        output = await execute_tool(block.name, block.input, workspace, overflow, permissions)
        span.set_attribute("durable_agent.tool.is_error", output.is_error)
    result = ToolResultBlock(tool_use_id=block.id, content=output.content, is_error=output.is_error)
    if len(result.text()) <= IN_STEP_INLINE_CHARS:
        return describe(block.name, result, inline=True, run_id=run_id)
    try:
        await off_loop(store.put_tool_result, session_id, result, run_id)
    except (StoreError, OSError):
        return describe(block.name, result, inline=True, run_id=run_id)
    return describe(block.name, result, inline=False, run_id=run_id)


class ToolActivities:
    """Tool activities; receives the store it writes results to."""

    def __init__(
        self,
        store: TranscriptStore,
        hosts: WorkspaceHosts | None = None,
        model_client: ModelClient | None = None,
        temporal: Client | None = None,
        mcp: McpConnections | None = None,
    ) -> None:
        self.store = store
        self.mcp = mcp
        """This worker's MCP connections (one per session and server), for MCP tools."""
        self.temporal = temporal
        """The worker's client, for the cron tools (None: they answer that they cannot run)."""
        self.hosts = hosts
        """This worker's copies of travelling workspaces (a shared store), None without one."""
        self.model_client = model_client
        """The model activity's client, for the tools that ask a model (WebFetch)."""
        self._live: dict[str, asyncio.Task[ToolOutput]] = {}
        """Executions running in this process, by run tag. When the server loses track of an
        attempt (a restart while it runs: its heartbeats could not reach it) the retry may come
        to this same process while the tool still runs: it waits for it, never kills it."""
        self._recording: set[asyncio.Future[None]] = set()
        self._watching: set[asyncio.Future[None]] = set()
        """Executions whose attempt the server lost, watched for a retry elsewhere
        (`_end_if_superseded`)."""

    async def _call_mcp(self, req: RunToolInput, block: ToolUseBlock) -> ToolOutput:
        """An MCP tool: through this worker's connection to its server (opened if need be)."""
        assert req.mcp_server is not None and req.mcp_tool is not None
        if self.mcp is None:
            return ToolOutput("This worker has no MCP connections.", is_error=True)
        out = await self.mcp.call_tool(
            req.session_id, req.mcp_server, req.mcp_tool, dict(block.input),
            MCP_CALL_SECONDS, req.workspace, MCP_OUTPUT_TOKENS,
        )  # fmt: skip
        if out.notice:
            activity.logger.warning("MCP server %s: %s", req.mcp_server.name, out.notice)
        text = "\n".join(b.text for b in out.content if isinstance(b, TextBlock))
        plain = all(isinstance(b, TextBlock) for b in out.content)
        blocks = () if plain else tuple(out.content)
        return ToolOutput(text or "(no output)", is_error=out.is_error, blocks=blocks)

    async def _execute(self, req: RunToolInput, block: ToolUseBlock) -> ToolOutput:
        overflow = await overflow_here(self.store, req.session_id)
        if req.mcp_server is not None:
            running = self._call_mcp(req, block)
        else:
            running = execute_tool(
                block.name,
                block.input,
                req.workspace,
                overflow,
                req.permissions,
                req.sandbox,
                self.model_client,
                self._cron_tools(req),
            )
        task = asyncio.ensure_future(running)
        tag = _run_tag(req)
        self._live[tag] = task
        task.add_done_callback(lambda done: self._forget(tag, done))
        return await self._await_execution(req, task)

    def _cron_tools(self, req: RunToolInput) -> CronTools | None:
        if self.temporal is None:
            return None
        return CronTools(self.temporal, req.session_id, req.tool_use_id)

    async def _await_execution(
        self, req: RunToolInput, task: asyncio.Task[ToolOutput]
    ) -> ToolOutput:
        """The execution's output, heartbeating meanwhile. Cancelled because the server lost this
        attempt (not found, timed out), the tool runs on and its result is recorded for the
        retry; cancelled for any other reason (an interrupt, the worker stopping), it is ended."""
        try:
            async with heartbeating():
                return await asyncio.shield(task)
        except asyncio.CancelledError:
            if _server_lost_attempt() and not task.done():
                task.add_done_callback(functools.partial(self._record_orphan, req))
                watching = asyncio.ensure_future(self._end_if_superseded(req, task))
                self._watching.add(watching)
                watching.add_done_callback(self._watching.discard)
            else:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            raise

    async def _end_if_superseded(self, req: RunToolInput, task: asyncio.Task[ToolOutput]) -> None:
        """An execution whose attempt the server lost runs on, for a retry on this worker (which
        waits for it, `_live`). A retry that ran on another machine (this one was cut off,
        stopped or asleep past the heartbeat timeout) has told the model the call was
        interrupted and marked it superseded (`_run_once`): then it is ended here, so that it
        does not go on with its side effects while the model may run the call again."""
        while not task.done():
            await asyncio.sleep(SUPERSEDED_CHECK_SECONDS)
            try:
                superseded = await off_loop(
                    self.store.tool_superseded, req.session_id, req.tool_use_id, req.run_id
                )
            except Exception:  # noqa: BLE001 — the store unreachable: ask again
                continue
            if superseded and not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
                await off_loop(kill_tagged, _run_tag(req))
                LOG.warning(
                    "ended %s of session %s: a retry on another machine reported it interrupted",
                    req.tool_use_id, req.session_id,
                )  # fmt: skip
                return

    def _forget(self, tag: str, task: asyncio.Task[ToolOutput]) -> None:
        if self._live.get(tag) is task:
            del self._live[tag]

    def _record_orphan(self, req: RunToolInput, task: asyncio.Task[ToolOutput]) -> None:
        """Store what an execution whose attempt the server lost produced, for the retry."""
        if task.cancelled() or task.exception() is not None:
            return
        output = task.result()
        result = output.result(req.tool_use_id)
        saving = asyncio.ensure_future(
            off_loop(self.store.put_tool_result, req.session_id, result, req.run_id)
        )
        self._recording.add(saving)
        saving.add_done_callback(self._saved)

    def _saved(self, saving: asyncio.Future[None]) -> None:
        self._recording.discard(saving)
        if not saving.cancelled() and saving.exception() is not None:
            activity.logger.warning("could not record a tool result: %s", saving.exception())

    @activity.defn(name=Activities.RUN_TOOL)
    async def run_tool(self, req: RunToolInput) -> RunToolOutput:
        recorded = await off_loop(self._recorded_result, req)
        if recorded is not None:  # an earlier attempt finished; its completion was lost
            return _output(req, recorded)
        try:
            block = await off_loop(
                self.store.tool_use, req.session_id, req.assistant_uuid, req.tool_use_id
            )
        except TranscriptError as exc:
            output = ToolOutput(f"tool call could not be loaded: {exc}", is_error=True)
        else:
            if req.input_override is not None:  # a PreToolUse hook's updatedInput
                block = block.model_copy(update={"input": req.input_override})
            if req.hosted is not None:
                ran = await self._run_hosted(req, block)
            else:
                ran = await self._run_once(req, block)
            if isinstance(ran, ToolResultBlock):  # the earlier attempt's own, recorded result
                return _output(req, ran)
            output = ran
        result = output.result(req.tool_use_id)
        try:
            await off_loop(self.store.put_tool_result, req.session_id, result, req.run_id)
        except (StoreError, OSError) as exc:  # a full disk, a read-only store, ...
            # The tool ran: its result must reach the model even if the store cannot hold it.
            return _output(req, kept_inline(result, exc), inline=True)
        return _output(req, result)

    async def _run_hosted(
        self, req: RunToolInput, block: ToolUseBlock
    ) -> ToolOutput | ToolResultBlock:
        """Run the tool in this host's copy of the travelling workspace (made to hold the
        session's checkpoint first), its paths mapped from the model's to the copy's and back.
        A side-effecting call whose earlier attempt ran on a host since lost is reported as
        such, never run again."""
        assert req.hosted is not None
        if self.hosts is None:
            raise ApplicationError(
                "this worker hosts no workspaces (it has no shared store)", non_retryable=True
            )
        spec = TOOL_SPECS.get(block.name)
        changes = spec is None or not spec.is_read_only(block.input)
        async with self.hosts.in_copy(req.session_id, req.hosted, changes) as tree:
            seen = req.workspace
            here = req.model_copy(update={"workspace": str(tree)})
            mapped = block.model_copy(update={"input": map_paths(block.input, seen, str(tree))})
            ran = await self._run_once(here, mapped)
        if isinstance(ran, ToolResultBlock):
            return ran
        content = map_paths(ran.content, str(tree), seen)
        if ran.content == INTERRUPTED_TEXT:
            started = await off_loop(
                self.store.tool_started, req.session_id, req.tool_use_id, req.run_id
            )
            if started is not None and started.get("queue") != self.hosts.host_queue:
                content = HOST_LOST_TEXT  # it started on a host since lost
        return ToolOutput(content, is_error=ran.is_error)

    @activity.defn(name=Activities.END_SESSION_PROCESSES)
    async def end_session_processes(self, req: EndProcessesInput) -> EndProcessesOutput:
        """End what the session's tools and its sub-agents' left running on this machine
        (`nohup … &` daemons, background jobs): every process whose environment carries one of
        their run tags."""
        prefixes = session_and_agents_prefixes(req.session_id)
        killed = await off_loop(kill_tagged, prefixes, prefix=True)
        if self.hosts is not None:  # its copy of the workspace, if it holds one
            await off_loop(self.hosts.drop, req.session_id)
        self.store.forget(req.session_id)  # nothing reads its transcript here any more
        if killed:
            activity.logger.info("ended %d process(es) of session %s", killed, req.session_id)
        return EndProcessesOutput(killed=killed)

    @activity.defn(name=Activities.END_TOOL_PROCESSES)
    async def end_tool_processes(self, req: EndToolProcessesInput) -> EndProcessesOutput:
        """End what an interrupted tool call's runs left running on this machine: a run whose
        worker died meanwhile never heard its cancel, and its command goes on, orphaned, until
        the session ends."""
        tags: str | tuple[str, ...] = session_and_agents_prefixes(req.session_id)
        if req.tool_use_id is not None:
            tags = tool_tag_prefix(req.session_id, req.tool_use_id)
        killed = await off_loop(kill_tagged, tags, True)
        if killed:
            activity.logger.info(
                "ended %d process(es) of interrupted %s", killed, req.tool_use_id or req.session_id
            )
        return EndProcessesOutput(killed=killed)

    async def _run_once(
        self, req: RunToolInput, block: ToolUseBlock
    ) -> ToolOutput | ToolResultBlock:
        """Run the tool, unless it has side effects and an earlier attempt already started it:
        then that attempt's result once it records one, else say it was interrupted rather than
        run it twice (DESIGN §3 "started"/"finished")."""
        spec = TOOL_SPECS.get(block.name)
        side_effect = spec is None or not spec.is_read_only(block.input)
        if side_effect:
            started = await off_loop(
                self.store.tool_started, req.session_id, req.tool_use_id, req.run_id
            )
            if started is not None:
                live = self._live.get(_run_tag(req))
                if live is not None:  # the lost attempt still runs here: its output is ours
                    return await self._await_execution(req, live)
                finished = await self._await_live_owner(req, started)
                if finished is not None:
                    return finished
                await off_loop(kill_tagged, _run_tag(req))  # what the lost attempt left running
                if req.mcp_server is not None:  # a dead worker's server may still run the call
                    await off_loop(kill_orphaned_mcp_servers, req.session_id)
                with contextlib.suppress(Exception):  # its worker, if alive elsewhere, ends it
                    await off_loop(
                        self.store.mark_tool_superseded, req.session_id, req.tool_use_id,
                        req.run_id, _owner_record(),
                    )  # fmt: skip
                return ToolOutput(INTERRUPTED_TEXT, is_error=True)
            try:
                await off_loop(self._mark_started, req)
            except (StoreError, OSError) as exc:  # unrecorded, a retry could run it twice
                return ToolOutput(
                    f"{block.name} did not run: the session store could not record its start "
                    f"({exc}).",
                    is_error=True,
                )
        with tool_span(block) as span:
            token, env = RUN_TAG.set(_run_tag(req)), SETTINGS_ENV.set(req.env)
            try:
                output = await self._execute(req, block)
            finally:
                SETTINGS_ENV.reset(env)
                RUN_TAG.reset(token)
            span.set_attribute("durable_agent.tool.is_error", output.is_error)
        return output

    def _recorded_result(self, req: RunToolInput) -> ToolResultBlock | None:
        """This execution's stored result, if an attempt recorded one (blocking)."""
        return self.store.get_tool_result(req.session_id, req.tool_use_id, req.run_id)

    def _mark_started(self, req: RunToolInput) -> None:
        """Record this process as the one about to run the execution (blocking)."""
        record = _owner_record()
        if req.hosted is not None and self.hosts is not None:
            record["queue"] = self.hosts.host_queue  # the host whose copy it changes
        self.store.mark_tool_started(req.session_id, req.tool_use_id, req.run_id, record)

    async def _await_live_owner(
        self, req: RunToolInput, started: dict[str, Any]
    ) -> ToolResultBlock | None:
        """An earlier attempt whose process is still alive on this host (the server lost track of
        it, the worker did not die) may still finish: wait for its result while it lives."""
        async with heartbeating():
            while await off_loop(_owner_alive, started):
                await asyncio.sleep(0.2)
                found = await off_loop(self._recorded_result, req)
                if found is not None:
                    return found
        return await off_loop(self._recorded_result, req)


SUPERSEDED_CHECK_SECONDS = 1.0
"""How often an execution whose attempt the server lost looks whether a retry elsewhere has
reported it interrupted (`_end_if_superseded`)."""
LOG = logging.getLogger(__name__)

INTERRUPTED_TEXT = (
    "This tool call was interrupted (the worker running it stopped) before its result was "
    "recorded. It may have partly run; it was not re-run, to avoid running it twice."
)

HOST_LOST_TEXT = (
    "This tool call may have run: the machine holding the workspace was lost before its "
    "result was recorded. It was not re-run. File changes since the last checkpoint are lost: "
    "the workspace is as it was after the last tool batch that was checkpointed."
)


def _server_lost_attempt() -> bool:
    """Whether this activity was cancelled because the server no longer knows this attempt
    (it timed it out, or it was not found), rather than asked to stop."""
    details = activity.cancellation_details() if activity.in_activity() else None
    return (
        details is not None
        and (details.not_found or details.timed_out)
        and not details.cancel_requested
    )


def _run_tag(req: RunToolInput) -> str:
    return f"{req.session_id}/{req.tool_use_id}/{req.run_id}"


def _owner_record() -> dict[str, Any]:
    info = activity.info() if activity.in_activity() else None
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "boot": _boot_id(),
        "attempt": info.attempt if info else 0,
    }


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _owner_alive(started: dict[str, Any]) -> bool:
    """Whether the process that recorded `started` is another live process on this machine.

    This process's own earlier attempts are in ToolActivities._live while they run."""
    pid = started.get("pid")
    if started.get("host") != socket.gethostname() or started.get("boot") != _boot_id():
        return False
    if not isinstance(pid, int) or pid == os.getpid():
        return False
    return pid_alive(pid) and not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    fields = proc_stat(pid)
    return fields is None or fields[0] == "Z"


INLINE_MAX_BYTES = 200_000
"""The most of a result the store could not keep that travels in history instead (a payload's
limit is 256 KiB; the tools' own limits keep text results below this, not images)."""


def kept_inline(result: ToolResultBlock, why: BaseException) -> ToolResultBlock:
    """`result` to travel in history because the store could not keep it: whole when small
    enough, else its text cut short and the model told the rest was lost."""
    if len(result.model_dump_json().encode("utf-8")) <= INLINE_MAX_BYTES:
        return result
    text = result.text()[: INLINE_MAX_BYTES // 8]  # 4 bytes a character at most, escapes
    note = f"[the rest of this output was lost: the session store could not keep it ({why})]"
    return result.model_copy(update={"content": f"{text}\n\n{note}"})


def _output(req: RunToolInput, result: ToolResultBlock, inline: bool = False) -> RunToolOutput:
    return describe(req.name, result, inline)


def describe(name: str, result: ToolResultBlock, inline: bool, run_id: str = "") -> RunToolOutput:
    """What the workflow gets of a tool's result: a preview and its size (the whole result is in
    the store, or `inline` when the store could not keep it)."""
    text = result.text()
    return RunToolOutput(
        tool_use_id=result.tool_use_id,
        is_error=result.is_error,
        preview=preview(name, text),
        content_chars=len(text),
        inline=result if inline else None,
        run_id=run_id,
    )
