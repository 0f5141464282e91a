"""Real processes for fault tests: a dev server that can be killed and restarted on the same
SQLite file, `python worker.py` processes, and checks on what a session left behind."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from durable_agent.devserver import free_port, port_open, server_args, temporal_binary

ROOT = Path(__file__).resolve().parents[2]


class _ExitedAtStart(RuntimeError):
    pass


_CLAIMED: dict[int, int] = {}
"""Ports this process claimed, each with the descriptor of its lock file (held open: the lock
lasts as long as the process)."""
_CLAIM_LOCK = threading.Lock()
_CLAIM_DIR = Path(tempfile.gettempdir()) / f"durable-agent-test-ports-{os.getuid()}"
"""Per user: another user's runs cannot open this user's lock files (nor share their ports'
claims; a clash between users is caught as a server that exits at start)."""


def _claim_port() -> int:
    """A free port no other DevServer of this run was given, in this process or another (the
    xdist workers): a lock file per port, held until the process exits. A port is free to a
    second server while its first is down for a restart, or before the first binds it: two runs
    that share one would each take the other's server for their own (a restart's CLI then waits
    on a server that is not there)."""
    with _CLAIM_LOCK:
        _CLAIM_DIR.mkdir(mode=0o700, exist_ok=True)
        for _ in range(100):
            port = free_port(0)
            if port in _CLAIMED:
                continue
            fd = os.open(_CLAIM_DIR / f"{port}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # another process's server has it (BlockingIOError), or no lock
                os.close(fd)
                continue
            _CLAIMED[port] = fd
            return port
    raise RuntimeError("no unclaimed free port on 127.0.0.1")


class DevServer:
    """A Temporal dev server on its own port and SQLite file; `kill` + `start` is a restart."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self.port = _claim_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._started = False

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> DevServer:
        """Start it (again: on the same port and file). Its first start takes another free port
        when the server exits at once, up to twice: a port found free can be taken by another
        test's process before the server binds it (or one of the ports it opens beside it)."""
        for attempt in range(3):
            try:
                return self._start(timeout)
            except _ExitedAtStart:
                if self._started or attempt == 2:
                    raise
                self.port = _claim_port()
        raise AssertionError("unreachable")

    def _start(self, timeout: float) -> DevServer:
        cmd = [
            str(temporal_binary()), "server", "start-dev", "--db-filename", str(self.db_path),
            "--ip", "127.0.0.1", "--port", str(self.port), "--headless", "--log-level", "error",
            *server_args(),
        ]  # fmt: skip
        log_path = self.db_path.with_suffix(".log")
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not port_open("127.0.0.1", self.port):
            if self.proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-1500:]
                raise _ExitedAtStart(
                    f"dev server exited ({self.proc.returncode}) at start:\n{tail}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"dev server did not start in {timeout:g} s; see {log_path}")
            time.sleep(0.05)
        _wait_healthy(self.address, deadline, self.proc)
        if self.proc.poll() is not None:  # the port answered, but another process holds it
            tail = log_path.read_text(errors="replace")[-1500:]
            raise _ExitedAtStart(f"dev server exited ({self.proc.returncode}) at start:\n{tail}")
        self._started = True
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> DevServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


def _wait_healthy(address: str, deadline: float, proc: subprocess.Popen[bytes]) -> None:
    """The port opens before the frontend serves ("Frontend is not healthy yet"): connect once,
    in a thread of its own (the caller may be inside an event loop), until it answers, the
    server exits (the caller reports that) or the deadline passes (an error naming the last
    failure, rather than a test that goes on against a server that never served)."""
    from temporalio.client import Client

    def probe() -> None:
        asyncio.run(Client.connect(address))

    while True:
        errors: list[BaseException] = []
        thread = threading.Thread(target=_capture, args=(probe, errors))
        thread.start()
        thread.join()
        if not errors or proc.poll() is not None:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"dev server at {address} did not serve in time: {errors[-1]}")
        time.sleep(0.1)


def _capture(fn: Callable[[], None], errors: list[BaseException]) -> None:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 — any failure means "not yet"
        errors.append(exc)


def process_env(
    tmp_path: Path, address: str, base_url: str, task_queue: str, **extra: str
) -> dict[str, str]:
    """The environment of a worker or CLI process under test: nothing from the machine's
    Anthropic/Temporal settings, a private state dir and settings file."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANTHROPIC_", "TEMPORAL_", "DURABLE_AGENT_"))
    }
    env.update(
        TEMPORAL_ADDRESS=address,
        ANTHROPIC_BASE_URL=base_url,
        ANTHROPIC_API_KEY="sk-ant-test-secret",
        DURABLE_AGENT_HOME=str(tmp_path / "home"),
        DURABLE_AGENT_TASK_QUEUE=task_queue,
        DURABLE_AGENT_SETTINGS=str(tmp_path / "settings.json"),
        DURABLE_AGENT_MANAGED_SETTINGS=str(tmp_path / "managed-settings.json"),
        DURABLE_AGENT_TOOL_SUMMARIES="0",  # chat's summaries would take cassette turns
    )
    env.update(extra)
    return env


def descendants(pid: int) -> list[int]:
    """The processes below `pid` (children, theirs, ...) as /proc tells now."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = list(Path(f"/proc/{parent}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def another_machine(hostname: str) -> list[str]:
    """A `WorkerProcess` wrap: the worker runs as on a machine of its own, with its own
    hostname and process table (UTS and PID namespaces), so no process of this machine is
    seen by it, or it by them, by pid. `unshare -f` forks: the worker is its child
    (`WorkerProcess.worker_pids`)."""
    return ["unshare", "-u", "-p", "-f", "--mount-proc",
            "sh", "-c", f'hostname {hostname} && exec "$@"', "sh"]  # fmt: skip


def cli_process(
    args: list[str], env: dict[str, str], cwd: Path, stdin: int = subprocess.DEVNULL
) -> subprocess.Popen[str]:
    """`python -m durable_agent ARGS` in `cwd`, its stdout and stderr piped (text)."""
    return subprocess.Popen(
        [sys.executable, "-m", "durable_agent", *args], cwd=cwd, env=env,
        stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


class WorkerProcess:
    """`python worker.py` in its own process; SIGKILL is the fault."""

    def __init__(
        self, env: dict[str, str], log: Path | None = None, wrap: list[str] | None = None
    ) -> None:
        self.env = env
        self.log = log
        self.wrap = wrap or []
        """A command the worker runs under (`unshare -m`: a mount namespace of its own)."""
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, **popen: Any) -> WorkerProcess:
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            [*self.wrap, sys.executable, "worker.py"], cwd=ROOT, env=self.env,
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, **popen,
        )  # fmt: skip
        return self

    def worker_pids(self) -> list[int]:
        """The `python worker.py` processes below a wrapper that forks (`unshare -f`: the worker
        is its child, and outlives it); none when the wrapper execs it (same pid)."""
        assert self.proc is not None
        if not self.wrap:
            return []
        return [p for p in descendants(self.proc.pid) if b"worker.py" in _cmdline(p)]

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            below = self.worker_pids()
            self.proc.send_signal(signal.SIGKILL)
            for pid in below:  # (its tools are not signalled: they are what tests look at)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.proc.wait()

    def kill_reaper(self) -> None:
        """SIGKILL the worker's reaper (durable_agent/reaper.py), so that killing the worker
        then leaves its tools running, as a worker whose reaper could not start would: what a
        takeover on the same machine ends."""
        assert self.proc is not None, "start it first"
        found = [p for p in descendants(self.proc.pid) if b"reaper.py" in _cmdline(p)]
        assert found, "the worker has no reaper: has it started a tool?"
        for pid in found:
            os.kill(pid, signal.SIGKILL)

    def restart(self, **popen: Any) -> WorkerProcess:
        self.kill()
        return self.start(**popen)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            for pid in self.worker_pids() or [self.proc.pid]:  # a wrapper may not pass it on
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    async def outcome(self, waiting: Any, seconds: float = 300) -> Any:
        """Await `waiting` (a handle's result()) while this worker lives: a worker that exits
        (refusing its settings, say) fails the test with its log's last lines at once, not
        after the test's timeout."""
        assert self.proc is not None, "start it first"
        task = asyncio.ensure_future(waiting)
        deadline = time.monotonic() + seconds
        while not task.done():
            if self.proc.poll() is not None and not task.done():
                task.cancel()
                tail = self.log.read_text(errors="replace")[-2000:] if self.log else ""
                raise AssertionError(f"the worker exited ({self.proc.returncode}):\n{tail}")
            if time.monotonic() > deadline:
                task.cancel()
                raise AssertionError(f"no outcome in {seconds:.0f} s")
            await asyncio.wait({task}, timeout=0.5)
        return task.result()

    async def polling(
        self, client: Client, task_queue: str, seconds: float = 75, host: str | None = None
    ) -> None:
        """Until this worker polls both the workflow and the activity queue: a standby worker,
        so that a kill measures the system's recovery (heartbeat timeout, retry), not the
        seconds `python worker.py` takes to import on a busy machine (5-8 s measured). `host`:
        the hostname of a worker run as another machine (its pid is its namespace's)."""
        assert self.proc is not None, "start it first"
        me = f"@{host}" if host else f"{self.proc.pid}@"
        kinds = (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            polling = 0
            for kind in kinds:
                described = await client.workflow_service.describe_task_queue(
                    DescribeTaskQueueRequest(
                        namespace=client.namespace,
                        task_queue=TaskQueue(name=task_queue),
                        task_queue_type=kind,
                    )
                )
                polling += any(
                    (p.identity.endswith(me) if host else p.identity.startswith(me))
                    for p in described.pollers
                )
            if polling == len(kinds):
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"worker {self.proc.pid} did not poll {task_queue} in {seconds:g}s")

    def __enter__(self) -> WorkerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def wait_for(predicate: Callable[[], object], seconds: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {seconds:g}s waiting for {what or predicate}")


def transcript_problems(path: Path) -> list[str]:
    """Every line parses; every tool_use of an assistant entry is answered exactly once, in
    order, by the user entry that follows it in the chain."""
    problems: list[str] = []
    entries: dict[str, dict[str, Any]] = {}
    children: dict[str | None, list[str]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            entry = json.loads(line)
        except ValueError as exc:
            problems.append(f"line {number} does not parse: {exc}: {line[:80]!r}")
            continue
        entries[entry["uuid"]] = entry
        children.setdefault(entry.get("parentUuid"), []).append(entry["uuid"])
    for uuid, entry in entries.items():
        content = (entry.get("message") or {}).get("content") or []
        uses = [b["id"] for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
        if not uses:
            continue
        answers = [entries[c] for c in children.get(uuid, [])]
        if len(answers) != 1:
            problems.append(f"assistant {uuid} has {len(answers)} answers")
            continue
        answer_content = (answers[0].get("message") or {}).get("content") or []
        results = [
            b["tool_use_id"]
            for b in answer_content
            if isinstance(b, dict) and b.get("type") == "tool_result"
        ]
        if results != uses:
            problems.append(f"assistant {uuid}: tool_use {uses} answered by {results}")
    return problems
