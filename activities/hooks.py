"""User hooks in Claude Code's format: settings.json `hooks`, JSON on stdin, exit 2 = blocking.

Settings are read from the user file (`$DURABLE_AGENT_SETTINGS`, default ~/.claude/settings.json)
and the workspace's `.claude/settings.json` and `.claude/settings.local.json`.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from activities.credentials import settings_path

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
