"""The environment a tool process or hook runs with: the worker's, minus our secrets and plumbing.

The model's credentials (`ANTHROPIC_API_KEY`, `ANTHROPIC_AUTH_TOKEN`, `ANTHROPIC_CUSTOM_HEADERS`),
the Temporal connection (`TEMPORAL_*`: address, API key, TLS key and its path), durable-agent's own
settings (`DURABLE_AGENT_*`: a store URL, a codec key) and whatever the operator names in
`DURABLE_AGENT_WITHHOLD_ENV` are for the worker, never for a command the model wrote or a hook a
settings file names. Neither sees them in its own environment (a settings file's `env` cannot
set them either), nor in the worker's (`protect_worker_process`, before the first tool or hook):
- `/proc/$PPID/environ` (and `ps eww`) shows the block the worker was started with, whatever
  os.environ became since: the worker blanks their values there (`scrub_initial_environment`).
- `/proc/$PPID/mem` (and ptrace, process_vm_readv) would show them in the worker's heap: the
  worker is not dumpable, which stops a process of the same user; and, run as root, it takes
  CAP_SYS_PTRACE (and the other capabilities that read another process's or the kernel's
  memory) out of its bounding set, so no process it starts has them, and root without
  CAP_SYS_PTRACE cannot read a process that holds it either.
A root tool still holds CAP_SYS_ADMIN (bubblewrap needs it) and so can reconfigure the kernel;
for a workspace you do not trust, run the worker as a plain user or turn the sandbox on.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path

from durable_agent import reaper
from durable_agent.names import agents_prefix
from durable_agent.reaper import (  # noqa: F401 — proc_stat re-exported
    WORKER_TAG_NAME,
    kill_scanned,
    proc_stat,
    scan_environ,
)
from durable_agent.secrets import WITHHOLD_ENV, is_private  # noqa: F401 — re-exported


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


_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_LOWER = 47, 3
_MEMORY_READING_CAPS = {"CAP_SYS_MODULE": 16, "CAP_SYS_RAWIO": 17, "CAP_SYS_PTRACE": 19,
                        "CAP_PERFMON": 38, "CAP_BPF": 39}  # fmt: skip
"""Capabilities no process the worker starts may hold: each reads another process's memory
(ptrace), the kernel's (/dev/mem, /proc/kcore) or loads code that can (modules, BPF, perf)."""


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [(f, ctypes.c_uint32) for f in ("effective", "permitted", "inheritable")]


def _drop_inheritable(libc: ctypes.CDLL, caps: list[int]) -> None:
    """Take `caps` out of this process's inheritable set (an exec'd program run as root gets
    its inheritable set back in its permitted one, bounding set or not)."""
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words
    data = (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        return
    if not any(data[c // 32].inheritable & (1 << c % 32) for c in caps):
        return
    for c in caps:
        data[c // 32].inheritable &= ~(1 << c % 32) & 0xFFFFFFFF
    libc.capset(ctypes.byref(header), data)


def protect_worker_process() -> None:
    """Once per process, before it runs a tool or hook: blank the private values of its
    initial environment block, make it non-dumpable, and take the memory-reading capabilities
    out of what its children can hold (see the module's docstring). Linux only; each step that
    the platform or the process's privileges refuse is skipped."""
    global _protected
    if _protected:
        return
    _protected = True
    scrub_initial_environment()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return
    prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    caps = sorted(_MEMORY_READING_CAPS.values())
    for cap in caps:  # EPERM without CAP_SETPCAP (not root: nothing to drop), EINVAL if unknown
        prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
        prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_LOWER, cap, 0, 0)
    _drop_inheritable(libc, caps)


_protected = False


def tool_environment(
    workspace: Path | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """`base` (default: this process's environment) without private names, plus the settings'
    `env` (`SETTINGS_ENV`); `CLAUDE_PROJECT_DIR` set to the workspace when one is given, as
    Claude Code does for hooks and tools; this worker process named (`WORKER_TAG_NAME`). The
    first call protects this process (`protect_worker_process`) and starts its reaper
    (`start_reaper`): whoever asks for a tool's environment is about to start one."""
    protect_worker_process()
    env = {k: v for k, v in (os.environ if base is None else base).items() if not is_private(k)}
    extra = SETTINGS_ENV.get()
    if extra:
        env.update((k, v) for k, v in extra.items() if not is_private(k))
    if workspace is not None:
        env["CLAUDE_PROJECT_DIR"] = str(workspace)
    tag = RUN_TAG.get()
    if tag:
        env[RUN_TAG_NAME] = tag
    start_reaper()
    env[WORKER_TAG_NAME] = worker_tag()
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


def tool_tag_prefix(session_id: str, tool_use_id: str) -> str:
    """What the tags of one tool call's runs (each attempt's) start with."""
    return f"{session_tag_prefix(session_id)}{tool_use_id}/"


def session_and_agents_prefixes(session_id: str) -> tuple[str, str]:
    """The tag prefixes of a session's tool runs and of its sub-agents' (whose session ids are
    `<session>.agent-<call>`, workflows/agents.py): what the session's end sweeps."""
    return session_tag_prefix(session_id), agents_prefix(session_id)


def _started(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot), or None when there is none."""
    fields = proc_stat(pid)
    return fields[19] if fields is not None else None


def mcp_tag(session_id: str) -> str:
    """The tag of the MCP servers this worker process starts for a session: under the
    session's prefix (its end sweeps them) and naming this process (pid and start time), so
    that a server whose worker died is known for an orphan (`kill_orphaned_mcp_servers`)."""
    return f"{session_tag_prefix(session_id)}mcp/{worker_tag()}"


def mcp_run_tag(session_id: str) -> dict[str, str]:
    """The environment variables that tag a session's MCP server (`mcp_tag`) and name its
    worker process for the reaper (which it starts, `start_reaper`)."""
    start_reaper()
    return {RUN_TAG_NAME: mcp_tag(session_id), WORKER_TAG_NAME: worker_tag()}


def kill_orphaned_mcp_servers(session_id: str) -> int:
    """SIGKILL the session's MCP servers on this machine whose worker process is gone: a
    killed worker's stdio server (and what it started) lives on, and a call it was serving
    goes on with its side effects after the call was taken over and reported interrupted."""
    killed = 0
    for pid, tag in _tagged(f"{session_tag_prefix(session_id)}mcp/", prefix=True):
        owner, _, started = tag.rsplit("/", 1)[1].partition(".")
        if owner.isdigit() and _started(int(owner)) == started:
            continue  # its worker lives: a connection of that worker's
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed += 1
    return killed


def tagged_processes(tag: str | tuple[str, ...], prefix: bool = False) -> list[int]:
    """Live processes of this machine whose environment carries `RUN_TAG_NAME=tag` (with
    `prefix`, any tag that starts with `tag`; several tags: any of them)."""
    return [pid for pid, _ in _tagged(tag, prefix)]


def _tagged(tag: str | tuple[str, ...], prefix: bool) -> list[tuple[int, str]]:
    """`tagged_processes`, each with the tag it carries."""
    return scan_environ(_needles(tag), prefix)


def _needles(tag: str | tuple[str, ...]) -> tuple[bytes, ...]:
    return tuple(f"{RUN_TAG_NAME}={t}".encode() for t in ((tag,) if isinstance(tag, str) else tag))


def kill_tagged(tag: str | tuple[str, ...], prefix: bool = False) -> int:
    """SIGKILL every process an execution started (a lost attempt's leftovers, or with `prefix`
    all of a session's); how many."""
    return kill_scanned(_needles(tag), prefix)


def worker_tag() -> str:
    """This worker process, as its tools' environment names it (`WORKER_TAG_NAME`): its pid and
    start time, so that a later process with the same pid is not taken for it. Read from /proc
    once per process (a forked child reads its own)."""
    global _tag
    pid = os.getpid()
    if _tag is None or _tag[0] != pid:
        _tag = (pid, f"{pid}.{_started(pid)}")
    return _tag[1]


_tag: tuple[int, str] | None = None


def start_reaper() -> None:
    """Once per process, before its first tool, hook or MCP server: start the reaper that ends
    them all if this process dies (durable_agent/reaper.py). Where it cannot start, tools
    still run (as they did before it)."""
    with _reaper_lock:  # tools start from the event loop and from threads
        if _reaper_owner != os.getpid():  # none tried yet, or this is a forked child
            _reaper_for(os.getpid())


def _reaper_for(pid: int) -> None:
    global _reaper, _reaper_pipe, _reaper_owner
    _reaper_owner = pid
    read, write = os.pipe()  # both close-on-exec: no tool inherits the write end
    try:
        _reaper = subprocess.Popen(
            [sys.executable, "-I", "-S", reaper.__file__, str(read), worker_tag()],
            pass_fds=(read,), env={"PATH": os.environ.get("PATH", "")},
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    except OSError:
        os.close(write)
        _reaper = None
        return
    finally:
        os.close(read)
    _reaper_pipe = write


def stand_down() -> None:
    """This process exits on purpose: its reaper leaves its processes be (a session's own end
    still ends them). Called on the way out (`hard_exit`, a recycle's exec, atexit)."""
    global _reaper_pipe
    if _reaper_pipe is None or _reaper_owner != os.getpid():
        return
    with contextlib.suppress(OSError):
        os.write(_reaper_pipe, b"x")
        os.close(_reaper_pipe)
    _reaper_pipe = None


def reaper_pid() -> int | None:
    """The pid of this process's reaper, a child that is no tool's (`child_processes`)."""
    return _reaper.pid if _reaper is not None and _reaper_owner == os.getpid() else None


_reaper: subprocess.Popen[bytes] | None = None
_reaper_pipe: int | None = None
_reaper_owner: int | None = None
_reaper_lock = threading.Lock()
atexit.register(stand_down)
