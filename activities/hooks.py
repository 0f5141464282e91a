"""User hooks in Claude Code's format: settings.json `hooks`, JSON on stdin, exit 2 = blocking.

`run_hooks` (the activity) runs the handlers the workflow chose from its settings snapshot;
`run_stop_hooks` and PreCompact still read the settings files here: the user file
(`$DURABLE_AGENT_SETTINGS`, default ~/.claude/settings.json) and the workspace's
`.claude/settings.json` and `.claude/settings.local.json`. What the handlers' exits and output
mean is decided in `durable_agent.engine.hooks`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.credentials import settings_path
from activities.heartbeat import heartbeating
from activities.tools.environment import (
    RUN_TAG_NAME,
    SETTINGS_ENV,
    kill_tagged,
    session_tag_prefix,
    tool_environment,
)
from activities.transcript import off_loop, write_file_atomic
from activities.workspace import WorkspaceHosts
from durable_agent.engine.contracts import StopHooksInput, StopHooksOutput
from durable_agent.engine.hooks import (
    DEFAULT_TIMEOUT_SECONDS,
    HookCommandSpec,
    HookEventInput,
    HookEventResult,
    HookRun,
    aggregate,
    dedupe,
    hooks_for,
)
from durable_agent.engine.messages import ToolResultBlock
from durable_agent.engine.state import ToolResultRef
from durable_agent.engine.tool_hooks import result_field
from durable_agent.names import Activities

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "HookActivities",
    "HookCommand",
    "HookOutcome",
    "load_hooks",
    "run_commands",
    "run_hooks",
]

ResultLoader = Callable[[str, str, str], ToolResultBlock | None]
"""(session_id, tool_use_id, run_id) → the stored tool result (`TranscriptStore.get_tool_result`)."""

HookCommand = HookCommandSpec
HookOutcome = HookRun
"""The names these had before they moved to the engine."""

STDOUT_BYTES = 1 << 20
"""Stdout kept for parsing: whole JSON (an updatedInput with a file's content) up to 1 MiB."""
STDERR_BYTES = 64 << 10
"""What the engine shows of stderr is capped again (MAX_TEXT_CHARS)."""


def settings_files(workspace: Path) -> list[Path]:
    local = workspace / ".claude"
    return [settings_path(), local / "settings.json", local / "settings.local.json"]


def load_hooks(event: str, target: str, workspace: Path) -> list[HookCommandSpec]:
    """The command hooks configured for `event` whose matcher accepts `target`."""
    found: list[HookCommandSpec] = []
    for path in settings_files(workspace):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        hooks = data.get("hooks") if isinstance(data, dict) else None
        found.extend(hooks_for(hooks, event, target, source=str(path)))
    return dedupe(found)


async def run_hooks(
    event: str,
    target: str,
    payload: dict[str, Any],
    workspace: Path,
    ledger: Path | HookLedger | None = None,
) -> list[HookRun]:
    """The hooks of `event` from the settings files, run by `run_commands` with the payload (and
    `hook_event_name`, `cwd`) as JSON on stdin."""
    hooks = await off_loop(load_hooks, event, target, workspace)
    body = {"hook_event_name": event, "cwd": str(workspace), **payload}
    session_id = str(payload.get("session_id", ""))
    return await run_commands(hooks, event, body, workspace, ledger, session_id)


async def run_commands(
    commands: list[HookCommandSpec],
    event: str,
    body: dict[str, Any],
    workspace: Path,
    ledger: Path | HookLedger | None = None,
    session_id: str = "",
    ledger_name: str | None = None,
) -> list[HookRun]:
    """Run the handlers in parallel, each with its own timeout, `body` as JSON on stdin, in the
    workspace, heartbeating; their runs in the order given.

    With a `ledger` directory (inside an activity), each hook's start and outcome are recorded
    under the activity's id: a retried attempt reuses an outcome and never re-runs a hook that an
    earlier attempt started (it may have partly run); it ends what that attempt left running
    (hook processes carry a tag of their run in their environment, as tool processes do)."""
    data = json.dumps(body).encode()
    key = _ledger_key(event, ledger_name) if ledger is not None else None
    book = FileLedger(ledger) if isinstance(ledger, Path) else ledger

    async def one(index: int, hook: HookCommandSpec) -> HookRun:
        name = f"{key}-{index}" if book is not None and key else None
        if book is None or name is None:
            return await _run_one(hook, data, workspace)
        outcome = await off_loop(_recorded, book, name, hook, session_id)
        if outcome is None:
            await off_loop(book.start, name, hook.command)
            outcome = await _run_one(hook, data, workspace, _tag(name, session_id))
            await off_loop(book.finish, name, outcome.model_dump_json())
        return outcome

    async with heartbeating(), asyncio.TaskGroup() as group:
        tasks = [group.create_task(one(i, hook)) for i, hook in enumerate(commands)]
    return [task.result() for task in tasks]


def _ledger_key(event: str, name: str | None = None) -> str | None:
    """The hook step's key in the ledger: its workflow run and `name` (the same on every host
    of a travelling workspace), else its activity's id."""
    if not activity.in_activity():
        return None
    info = activity.info()
    step = name or info.activity_id
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{info.workflow_run_id}-{step}-{event}")


def _tag(name: str, session_id: str) -> str:
    """The run tag of one hook's run (`RUN_TAG_NAME` in its processes' environment): under the
    session's prefix, so the session-end sweep ends what a hook left running too."""
    return f"{session_tag_prefix(session_id)}hook/{name}"


class HookLedger(Protocol):
    """Where each hook run's start and outcome are recorded (by `name`: the activity, event
    and handler), so that a retried activity never runs a hook twice."""

    def outcome(self, name: str) -> str | None: ...
    def started(self, name: str) -> bool: ...
    def start(self, name: str, command: str) -> None: ...
    def finish(self, name: str, outcome: str) -> None: ...


@dataclass
class FileLedger:
    """The ledger as files of one directory (`<name>.started`, `<name>.json`)."""

    folder: Path

    def outcome(self, name: str) -> str | None:
        try:
            return (self.folder / f"{name}.json").read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def started(self, name: str) -> bool:
        return (self.folder / f"{name}.started").exists()

    def start(self, name: str, command: str) -> None:
        write_file_atomic(self.folder / f"{name}.started", command)

    def finish(self, name: str, outcome: str) -> None:
        write_file_atomic(self.folder / f"{name}.json", outcome)


def _recorded(
    book: HookLedger, name: str, hook: HookCommandSpec, session_id: str
) -> HookRun | None:
    done = book.outcome(name)
    if done is not None:
        return HookRun.model_validate_json(done)
    if book.started(name):
        # An earlier attempt started it and recorded no outcome: its worker is gone (or lost
        # the activity), and the hook may still be running: end it, do not run it again.
        kill_tagged(_tag(name, session_id))
        return HookRun(
            command=hook.command,
            exit_code=None,
            stderr="interrupted (its worker stopped); not re-run, to avoid running it twice",
            interrupted=True,
        )
    return None


async def _run_one(
    hook: HookCommandSpec, body: bytes, workspace: Path, tag: str | None = None
) -> HookRun:
    env = tool_environment(workspace)
    if tag is not None:
        env[RUN_TAG_NAME] = tag
    try:
        proc = await asyncio.create_subprocess_exec(
            "sh", "-c", hook.command, cwd=workspace, start_new_session=True,
            env=env, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
    except OSError as exc:
        return HookRun(command=hook.command, exit_code=None, stderr=f"could not start: {exc}")
    assert proc.stdin and proc.stdout and proc.stderr
    try:
        async with asyncio.timeout(hook.timeout):
            out, err, _ = await asyncio.gather(
                _read_capped(proc.stdout, STDOUT_BYTES),
                _read_capped(proc.stderr, STDERR_BYTES),
                _feed(proc.stdin, body),
            )
            code = await proc.wait()
    except TimeoutError:
        _kill_group(proc.pid)
        await proc.wait()
        message = f"timed out after {hook.timeout:g}s"
        return HookRun(command=hook.command, exit_code=None, stderr=message, timed_out=True)
    except BaseException:
        _kill_group(proc.pid)  # cancelled: the worker is stopping
        raise
    return HookRun(
        command=hook.command,
        exit_code=code,
        stdout=out.decode(errors="replace"),
        stderr=err.decode(errors="replace"),
    )


async def _read_capped(stream: asyncio.StreamReader, limit: int) -> bytes:
    """Everything up to `limit` bytes; the rest is read and dropped (a hook that prints without
    end neither fills the worker's memory nor blocks on a full pipe)."""
    kept = bytearray()
    while chunk := await stream.read(64 << 10):
        if len(kept) < limit:
            kept += chunk[: limit - len(kept)]
    return bytes(kept)


async def _feed(stdin: asyncio.StreamWriter, body: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # it need not read stdin
        stdin.write(body)
        await stdin.drain()
        stdin.close()


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class HookActivities:
    """Hooks that the loop runs as activities."""

    def __init__(
        self,
        transcript_path: Callable[[str], Path],
        ledger: Callable[[str], Path | HookLedger] | None = None,
        results: ResultLoader | None = None,
        hosts: WorkspaceHosts | None = None,
    ) -> None:
        self.transcript_path = transcript_path
        self.ledger = ledger
        self.results = results
        self.hosts = hosts
        """This worker's copies of travelling workspaces (a shared store), None without one."""

    @activity.defn(name=Activities.RUN_HOOKS)
    async def run_hooks(self, req: HookEventInput) -> HookEventResult:
        """Every handler chosen for one event (`hooks_for` on the settings snapshot), in
        parallel; stdin is the event's payload with Claude Code's common fields. With a
        travelling workspace, in this host's copy of it (held meanwhile: no sweep drops it)."""
        if req.hosted is None:
            return await self._run_hooks(req)
        if self.hosts is None:
            raise ApplicationError("this worker hosts no workspaces", non_retryable=True)
        async with self.hosts.in_copy(req.session_id, req.hosted) as tree:
            return await self._run_hooks(req.model_copy(update={"workspace": str(tree)}))

    async def _run_hooks(self, req: HookEventInput) -> HookEventResult:
        body = {
            "session_id": req.session_id,
            "transcript_path": str(await off_loop(self.transcript_path, req.session_id)),
            "cwd": req.workspace,
            **req.payload,
            "hook_event_name": req.event,
        }
        body["session_id"] = req.session_id
        if req.tool_result is not None:
            text = await off_loop(self._result_text, req.session_id, req.tool_result)
            body[result_field(req.event)] = text
        ledger = self.ledger(req.session_id) if self.ledger else None
        token = SETTINGS_ENV.set(req.env)
        try:
            runs = await run_commands(
                dedupe(req.commands), req.event, body, Path(req.workspace), ledger,
                req.session_id, req.ledger_name,
            )  # fmt: skip
        finally:
            SETTINGS_ENV.reset(token)
        return aggregate(req.event, [*req.recorded_runs, *runs])

    def _result_text(self, session_id: str, ref: ToolResultRef) -> str:
        block = ref.inline
        if block is None and self.results is not None:
            block = self.results(session_id, ref.tool_use_id, ref.run_id)
        return block.text() if block is not None else ""

    @activity.defn(name=Activities.RUN_STOP_HOOKS)
    async def run_stop_hooks(self, req: StopHooksInput) -> StopHooksOutput:
        """Claude Code's Stop hooks: exit 2 or {"decision": "block"} feeds the reason back to
        the model; {"continue": false} ends the query."""
        payload = {
            "session_id": req.session_id,
            "transcript_path": str(await off_loop(self.transcript_path, req.session_id)),
            "stop_hook_active": req.stop_hook_active,
        }
        ledger = self.ledger(req.session_id) if self.ledger else None
        result = aggregate(
            "Stop", await run_hooks("Stop", "", payload, Path(req.workspace), ledger)
        )
        return StopHooksOutput(
            blocking_errors=[result.reason] if result.blocked else [],
            prevent_continuation=result.prevent_continuation,
            stop_reason=result.stop_reason,
        )
