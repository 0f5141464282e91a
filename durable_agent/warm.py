"""The warm worker: a worker process the embedded dev server keeps beside it, so that a `run`
needs no worker of its own (`import anthropic` alone takes 1.4–2 s here) and reaches its first
model request in well under a second and a half.

A session must run exactly as in the CLI's own worker: with this shell's environment (the API
key and endpoint, and everything a tool inherits) and this code. So a warm worker serves a
queue named after a fingerprint of both, and a CLI uses it only when its own fingerprint finds
a live one; any difference (an exported variable, an edited source file) and the CLI runs its
own worker as before. The fingerprint is a hash: the environment's values are not in it.

The worker records itself in `$DURABLE_AGENT_HOME/warm/<fingerprint>.json` once it polls; it
ends with the dev server (`durable-agent server --stop` stops it too) and removes the record.
Light on purpose: the CLI imports this module on every start.
"""

from __future__ import annotations

import functools
import hashlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ValidationError

from durable_agent.devserver import pid_alive

PACKAGES = ("durable_agent", "workflows", "activities")
WARM_ENV = "DURABLE_AGENT_WARM_WORKER"
"""`0` turns the warm worker off: no CLI starts one or uses one."""

VOLATILE = frozenset({"PWD", "OLDPWD", "SHLVL", "_", "COLUMNS", "LINES",
                      "_DURABLE_AGENT_SETTLED_RSS", "_DURABLE_AGENT_HOST_QUEUE"})  # fmt: skip
"""Variables that differ between two prompts typed in the same shell and that no tool sees
differently (tools run in the workspace, and their shell sets these itself); and what a
recycled worker passes its fresh process (durable_agent/operating.py, `SETTLED_ENV`,
`HOST_QUEUE_ENV`: its idle size and its host queue), which change nothing a tool does."""


@functools.cache
def code_build_id() -> str:
    """The worker's build id: a hash of our own source. Without one the SDK hashes the code of
    every loaded module (anthropic, pydantic, …), ~0.2 s of every CLI start, 1.5 s without a
    bytecode cache."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent.parent
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return f"durable-agent-{digest.hexdigest()[:16]}"


def enabled(env: Mapping[str, str] = os.environ) -> bool:
    return env.get(WARM_ENV, "1") != "0"


def fingerprint(env: Mapping[str, str] = os.environ) -> str:
    """This code and this environment (but the volatile variables), as a 16-hex-digit hash."""
    digest = hashlib.sha256(code_build_id().encode())
    for name in sorted(set(env) - VOLATILE):
        digest.update(f"\0{name}\0{env[name]}".encode(errors="surrogateescape"))
    return digest.hexdigest()[:16]


def warm_queue(fp: str) -> str:
    return f"durable-agent-warm-{fp}"


class WarmRecord(BaseModel):
    pid: int
    task_queue: str


def _dir(home: Path) -> Path:
    return home / "warm"


def record_path(home: Path, fp: str) -> Path:
    return _dir(home) / f"{fp}.json"


def starting_path(home: Path, fp: str) -> Path:
    """The pid of a warm worker spawned and not yet polling (its imports take seconds in a
    fresh clone): a run that finds it waits for it rather than start a worker of its own."""
    return _dir(home) / f"{fp}.starting"


def starting(home: Path, env: Mapping[str, str] = os.environ) -> int | None:
    """The pid of the warm worker for this environment and code that is starting, if any."""
    return _starting_pid(starting_path(home, fingerprint(env))) if enabled(env) else None


def _starting_pid(marker: Path) -> int | None:
    """The pid a starting marker names, if it is a live warm worker."""
    try:
        pid = int(marker.read_text())
    except (OSError, ValueError):
        return None
    return pid if is_warm_worker(pid) else None


def log_path(home: Path, fp: str) -> Path:
    return _dir(home) / f"{fp}.log"


def _read(path: Path) -> WarmRecord | None:
    try:
        return WarmRecord.model_validate_json(path.read_text())
    except (OSError, ValidationError):
        return None


def is_warm_worker(pid: int) -> bool:
    """A live process that is a warm worker (a reused pid is not)."""
    if not pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc here: trust the pid
    return b"warm-worker" in cmdline


def find(home: Path, env: Mapping[str, str] = os.environ) -> WarmRecord | None:
    """The live warm worker for this environment and code, if there is one."""
    if not enabled(env):
        return None
    record = _read(record_path(home, fingerprint(env)))
    if record is None or not is_warm_worker(record.pid):
        return None
    return record


def write_record(home: Path, fp: str, record: WarmRecord) -> None:
    path = record_path(home, fp)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_whole(path, record.model_dump_json())


def _write_whole(path: Path, text: str) -> None:
    """Readers see the old file or the new one, never half of it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def remove_record(home: Path, fp: str, pid: int) -> None:
    """Remove the record if it is still this process's."""
    path = record_path(home, fp)
    record = _read(path)
    if record is not None and record.pid == pid:
        path.unlink(missing_ok=True)


def spawn(home: Path) -> None:
    """Start a warm worker for this environment in the background, unless one runs or the
    warm worker is off. It inherits this environment; its output goes to a log beside its
    record."""
    if not enabled() or find(home) is not None or starting(home) is not None:
        return
    fp = fingerprint()
    log = log_path(home, fp)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(  # noqa: S603 — our own interpreter and module
            [sys.executable, "-m", "durable_agent", "warm-worker"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _write_whole(starting_path(home, fp), str(proc.pid))


def restarting(home: Path, fp: str, pid: int) -> None:
    """Warm worker `pid` is about to replace itself (exec, same pid): it is starting again, so
    that a CLI meanwhile waits for it instead of spawning another."""
    _write_whole(starting_path(home, fp), str(pid))


def started(home: Path, fp: str) -> None:
    """The warm worker polls (its record is written): it is no longer starting."""
    starting_path(home, fp).unlink(missing_ok=True)


def stop_all(home: Path) -> int:
    """Stop every warm worker of this state dir; how many were running."""
    stopped = 0
    for path in sorted(_dir(home).glob("*.starting")):
        pid = _starting_pid(path)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            stopped += 1
        path.unlink(missing_ok=True)
    for path in sorted(_dir(home).glob("*.json")):
        record = _read(path)
        if record is not None and is_warm_worker(record.pid):
            os.kill(record.pid, signal.SIGTERM)
            stopped += 1
        path.unlink(missing_ok=True)
    return stopped


def describe(home: Path) -> list[str]:
    """One line per live warm worker (for `server`)."""
    lines = []
    for path in sorted(_dir(home).glob("*.json")):
        record = _read(path)
        if record is not None and is_warm_worker(record.pid):
            lines.append(f"warm worker pid {record.pid} on {record.task_queue}")
    return lines
