"""User hooks in Claude Code's format: settings.json `hooks`, JSON on stdin, exit 2 = blocking.

Settings are read from the user file (`$DURABLE_AGENT_SETTINGS`, default ~/.claude/settings.json)
and the workspace's `.claude/settings.json` and `.claude/settings.local.json`.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import json
import os
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporalio import activity

from activities.credentials import settings_path
from activities.heartbeat import heartbeating
from activities.tools.environment import (
    RUN_TAG_NAME,
    kill_tagged,
    session_tag_prefix,
    tool_environment,
)
from activities.transcript import off_loop, write_file_atomic
from durable_agent.engine.contracts import StopHooksInput, StopHooksOutput
from durable_agent.names import Activities

DEFAULT_TIMEOUT_SECONDS = 60
OUTPUT_CHARS = 4_000


class HookCommand(BaseModel):
    command: str
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    source: str = ""


class HookOutcome(BaseModel):
    command: str
    exit_code: int | None
    stdout: str = ""
    stderr: str = ""

    @property
    def blocking(self) -> bool:
        return self.exit_code == 2


def settings_files(workspace: Path) -> list[Path]:
    local = workspace / ".claude"
    return [settings_path(), local / "settings.json", local / "settings.local.json"]


def _matches(matcher: str, target: str) -> bool:
    if matcher in ("", "*"):
        return True
    if any(ch in matcher for ch in "|()[]^$+?\\"):
        return re.fullmatch(matcher, target) is not None
    return fnmatch.fnmatchcase(target, matcher)


def load_hooks(event: str, target: str, workspace: Path) -> list[HookCommand]:
    """The command hooks configured for `event` whose matcher accepts `target`."""
    found: list[HookCommand] = []
    for path in settings_files(workspace):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        groups = data.get("hooks", {}).get(event, []) if isinstance(data, dict) else []
        for group in groups if isinstance(groups, list) else []:
            if not isinstance(group, dict) or not _matches(str(group.get("matcher", "")), target):
                continue
            for hook in group.get("hooks", []):
                if isinstance(hook, dict) and hook.get("type") == "command" and hook.get("command"):
                    timeout = float(hook.get("timeout", DEFAULT_TIMEOUT_SECONDS))
                    found.append(
                        HookCommand(command=hook["command"], timeout=timeout, source=str(path))
                    )
    return found


async def run_hooks(
    event: str,
    target: str,
    payload: dict[str, Any],
    workspace: Path,
    ledger: Path | None = None,
) -> list[HookOutcome]:
    """Run each matching hook with the payload as JSON on stdin, in the workspace, heartbeating.

    With a `ledger` directory (inside an activity), each hook's start and outcome are recorded
    under the activity's id: a retried attempt reuses an outcome and never re-runs a hook that an
    earlier attempt started (it may have partly run); it ends what that attempt left running
    (hook processes carry a tag of their run in their environment, as tool processes do)."""
    outcomes = []
    body = json.dumps({"hook_event_name": event, "cwd": str(workspace), **payload}).encode()
    key = _ledger_key(event) if ledger is not None else None
    async with heartbeating():
        hooks = await off_loop(load_hooks, event, target, workspace)
        for index, hook in enumerate(hooks):
            record = ledger / f"{key}-{index}" if ledger is not None and key else None
            outcome = None
            if record is not None:
                outcome = await off_loop(_recorded, record, hook, payload)
            if outcome is None:
                if record is not None:
                    await off_loop(write_file_atomic, record.with_suffix(".started"), hook.command)
                tag = _tag(record, payload) if record is not None else None
                outcome = await _run_one(hook, body, workspace, tag)
                if record is not None:
                    done = outcome.model_dump_json()
                    await off_loop(write_file_atomic, record.with_suffix(".json"), done)
            outcomes.append(outcome)
    return outcomes


def _ledger_key(event: str) -> str | None:
    if not activity.in_activity():
        return None
    info = activity.info()
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{info.workflow_run_id}-{info.activity_id}-{event}")


def _tag(record: Path, payload: dict[str, Any]) -> str:
    """The run tag of one hook's run (`RUN_TAG_NAME` in its processes' environment): under the
    session's prefix, so the session-end sweep ends what a hook left running too."""
    return f"{session_tag_prefix(str(payload.get('session_id', '')))}hook/{record.name}"


def _recorded(record: Path, hook: HookCommand, payload: dict[str, Any]) -> HookOutcome | None:
    done = record.with_suffix(".json")
    if done.exists():
        return HookOutcome.model_validate_json(done.read_text(encoding="utf-8"))
    if record.with_suffix(".started").exists():
        # An earlier attempt started it and recorded no outcome: its worker is gone (or lost
        # the activity), and the hook may still be running: end it, do not run it again.
        kill_tagged(_tag(record, payload))
        return HookOutcome(
            command=hook.command,
            exit_code=None,
            stderr="interrupted (its worker stopped); not re-run, to avoid running it twice",
        )
    return None


async def _run_one(
    hook: HookCommand, body: bytes, workspace: Path, tag: str | None = None
) -> HookOutcome:
    env = tool_environment(workspace)
    if tag is not None:
        env[RUN_TAG_NAME] = tag
    proc = await asyncio.create_subprocess_exec(
        "sh", "-c", hook.command, cwd=workspace, start_new_session=True,
        env=env, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(body), hook.timeout)
        code: int | None = proc.returncode
    except TimeoutError:
        _kill_group(proc.pid)
        await proc.wait()
        out, err, code = b"", f"timed out after {hook.timeout:g}s".encode(), None
    except BaseException:
        _kill_group(proc.pid)  # cancelled: the worker is stopping
        raise
    return HookOutcome(
        command=hook.command,
        exit_code=code,
        stdout=out.decode(errors="replace")[:OUTPUT_CHARS],
        stderr=err.decode(errors="replace")[:OUTPUT_CHARS],
    )


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class HookActivities:
    """Hooks that the loop runs as activities."""

    def __init__(
        self, transcript_path: Callable[[str], Path], ledger: Callable[[str], Path] | None = None
    ) -> None:
        self.transcript_path = transcript_path
        self.ledger = ledger

    @activity.defn(name=Activities.RUN_STOP_HOOKS)
    async def run_stop_hooks(self, req: StopHooksInput) -> StopHooksOutput:
        """Claude Code's Stop hooks: exit 2 or {"decision": "block"} feeds the reason back to
        the model; {"continue": false} ends the query."""
        payload = {
            "session_id": req.session_id,
            "transcript_path": str(self.transcript_path(req.session_id)),
            "stop_hook_active": req.stop_hook_active,
        }
        out = StopHooksOutput()
        ledger = self.ledger(req.session_id) if self.ledger else None
        for outcome in await run_hooks("Stop", "", payload, Path(req.workspace), ledger):
            decision = _json(outcome.stdout) if outcome.exit_code == 0 else {}
            if decision.get("continue") is False:
                out.prevent_continuation = True
                out.stop_reason = str(decision.get("stopReason") or "")
            elif outcome.blocking:
                out.blocking_errors.append(outcome.stderr.strip() or "a Stop hook blocked stopping")
            elif decision.get("decision") == "block":
                out.blocking_errors.append(
                    str(decision.get("reason") or "a Stop hook blocked stopping")
                )
        return out


def _json(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
