"""User hooks in Claude Code's format: settings.json `hooks`, JSON on stdin, exit 2 = blocking.

Settings are read from the user file (`$DURABLE_AGENT_SETTINGS`, default ~/.claude/settings.json)
and the workspace's `.claude/settings.json` and `.claude/settings.local.json`.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporalio import activity

from activities.credentials import settings_path
from durable_agent.engine.contracts import StopHooksInput, StopHooksOutput

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
    event: str, target: str, payload: dict[str, Any], workspace: Path
) -> list[HookOutcome]:
    """Run each matching hook with the payload as JSON on stdin, in the workspace."""
    outcomes = []
    body = json.dumps({"hook_event_name": event, "cwd": str(workspace), **payload}).encode()
    for hook in load_hooks(event, target, workspace):
        proc = await asyncio.create_subprocess_exec(
            "sh", "-c", hook.command, cwd=workspace, start_new_session=True,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            out, err = await asyncio.wait_for(proc.communicate(body), hook.timeout)
            code: int | None = proc.returncode
        except TimeoutError:
            proc.kill()
            await proc.wait()
            out, err, code = b"", f"timed out after {hook.timeout:g}s".encode(), None
        outcomes.append(
            HookOutcome(
                command=hook.command,
                exit_code=code,
                stdout=out.decode(errors="replace")[:OUTPUT_CHARS],
                stderr=err.decode(errors="replace")[:OUTPUT_CHARS],
            )
        )
    return outcomes


class HookActivities:
    """Hooks that the loop runs as activities."""

    def __init__(self, transcript_path: Callable[[str], Path]) -> None:
        self.transcript_path = transcript_path

    @activity.defn(name="run_stop_hooks")
    async def run_stop_hooks(self, req: StopHooksInput) -> StopHooksOutput:
        """Claude Code's Stop hooks: exit 2 or {"decision": "block"} feeds the reason back to
        the model; {"continue": false} ends the query."""
        payload = {
            "session_id": req.session_id,
            "transcript_path": str(self.transcript_path(req.session_id)),
            "stop_hook_active": req.stop_hook_active,
        }
        out = StopHooksOutput()
        for outcome in await run_hooks("Stop", "", payload, Path(req.workspace)):
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
