"""The environment a tool process or hook runs with: the worker's, minus our secrets and plumbing.

The model's credentials (`ANTHROPIC_API_KEY`, `ANTHROPIC_AUTH_TOKEN`), the Temporal connection
(`TEMPORAL_*`) and durable-agent's own settings (`DURABLE_AGENT_*`) are for the worker, never for
a command the model wrote or a hook a settings file names. Neither sees them in its own
environment, nor in the worker's: `/proc/$PPID/environ` shows the block the worker was started
with, so before its first tool or hook runs the worker blanks their values there
(`scrub_initial_environment`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path

_SECRET_NAMES = frozenset({"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"})
_PRIVATE_PREFIXES = ("TEMPORAL_", "DURABLE_AGENT_")


def is_private(name: str) -> bool:
    return name in _SECRET_NAMES or name.startswith(_PRIVATE_PREFIXES)


def scrub_initial_environment() -> int:
    """Blank the private values in this process's initial environment block, which every
    process of the same user can read at /proc/PID/environ; how many. They stay where this
    process reads them: os.environ, and libc's environment (re-set first, on the heap, so a
    concurrent getenv never sees a half-blanked value). Linux only; elsewhere, or when
    /proc/self/mem cannot be written, nothing (0)."""
    for name, value in os.environb.items():
        if is_private(os.fsdecode(name)):
            os.putenv(name, value)
    try:
        # env_start and env_end are fields 50 and 51; the name before them may hold spaces.
        fields = Path("/proc/self/stat").read_bytes().rsplit(b")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])
        blanked = 0
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            offset = start
            for entry in mem.read(end - start).split(b"\0"):
                name, sep, value = entry.partition(b"=")
                if sep and value and is_private(os.fsdecode(name)):
                    mem.seek(offset + len(name) + 1)
                    mem.write(b"\0" * len(value))
                    blanked += 1
                offset += len(entry) + 1
    except (OSError, ValueError, IndexError):
        return 0
    return blanked


_scrubbed = False


def tool_environment(
    workspace: Path | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """`base` (default: this process's environment) without private names, plus the settings'
    `env` (`SETTINGS_ENV`); `CLAUDE_PROJECT_DIR` set to the workspace when one is given, as
    Claude Code does for hooks and tools. The first
    call scrubs this process's initial environment block (every process is started with one)."""
    global _scrubbed
    if not _scrubbed:
        scrub_initial_environment()
        _scrubbed = True
    env = {k: v for k, v in (os.environ if base is None else base).items() if not is_private(k)}
    extra = SETTINGS_ENV.get()
    if extra:
        env.update((k, v) for k, v in extra.items() if not is_private(k))
    if workspace is not None:
        env["CLAUDE_PROJECT_DIR"] = str(workspace)
    tag = RUN_TAG.get()
    if tag:
        env[RUN_TAG_NAME] = tag
    return env


SETTINGS_ENV: ContextVar[Mapping[str, str] | None] = ContextVar("settings_env", default=None)
"""The settings' `env` for the tool or hook running in this context: added to its environment
on purpose, except the private names (a settings file cannot hand a tool the model's key)."""

RUN_TAG_NAME = "DA_TOOL_RUN"
RUN_TAG: ContextVar[str | None] = ContextVar("tool_run_tag", default=None)
"""Set by run_tool for one execution: every process it starts carries the tag in its
environment, so they can be found again, even after `setsid`/`nohup` left the process group."""


def session_tag_prefix(session_id: str) -> str:
    """What every tag of one session's tool runs starts with (`session/tool_use_id/run_id`)."""
    return f"{session_id}/"


def tagged_processes(tag: str, prefix: bool = False) -> list[int]:
    """Live processes of this machine whose environment carries `RUN_TAG_NAME=tag` (with
    `prefix`, any tag that starts with `tag`)."""
    needle = f"{RUN_TAG_NAME}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        entries = environ.split(b"\0")
        if any(e.startswith(needle) for e in entries) if prefix else needle in entries:
            found.append(int(entry.name))
    return found


KILL_SCANS = 3
KILL_RESCAN_SECONDS = 0.02


def kill_tagged(tag: str, prefix: bool = False) -> int:
    """SIGKILL every process an execution started (a lost attempt's leftovers, or with `prefix`
    all of a session's); how many."""
    killed: set[int] = set()
    for _ in range(KILL_SCANS):
        # Scanned more than once: a process in the middle of exec shows an empty environment
        # for a moment, and one may fork a child just before it is killed.
        pids = [p for p in tagged_processes(tag, prefix) if p != os.getpid() and p not in killed]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed.update(pids)
        time.sleep(KILL_RESCAN_SECONDS)
    return len(killed)
