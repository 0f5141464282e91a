"""Running `python worker.py` as an operator would: its settings from the environment, a health
endpoint, Prometheus metrics and a drain on SIGTERM.

Settings (each `DURABLE_AGENT_…`; a bad value stops the worker with one line and a hint):
TASK_QUEUE (`durable-agent`), MAX_CONCURRENT_ACTIVITIES (50), MAX_CONCURRENT_WORKFLOW_TASKS,
MAX_CACHED_WORKFLOWS (the SDK's 1000), WORKFLOW_POLLERS and ACTIVITY_POLLERS (the SDK's defaults, 5),
HEALTH_ADDRESS (`host:port`: GET /healthz answers while the process lives, /readyz while it
polls, is not draining and reaches Temporal), METRICS_ADDRESS (`host:port`: the SDK's Prometheus
endpoint, /metrics), DRAIN_SECONDS (600: on SIGTERM the worker stops polling and lets running
activities — a long tool, a model call — finish for this long, then cancels the rest, which
Temporal retries on another worker; a second SIGTERM stops at once), DEPLOYMENT and BUILD_ID
(Worker Versioning: the Worker Deployment's name and this build's id; the build id defaults to
the hash of the code), MODEL_TASK_QUEUE (also serve the fleet's model queue: sessions started
on the shared queue with the same variable set make their model calls there),
MODEL_CALLS_PER_SECOND (the most model calls started per second on that queue, across the
fleet, shared between tenants by their fairness keys), MAX_CONCURRENT_MODEL_CALLS (here) and
MCP_IDLE_SECONDS (1800: a session's MCP server connection no call has used for this long is
closed, a stdio server ended, and opened again by the session's next call; 0 keeps it until
the session ends), IDLE_CHECK_SECONDS (5: a worker that used under 2 % of a core over this long
is idle; an idle spell after work gives memory back), RECYCLE_ABOVE (1.1) and RECYCLE_MIN_MB
(16): when the worker falls idle with nothing running (no activity, no tool process) and its
RSS is more than RECYCLE_ABOVE times, and RECYCLE_MIN_MB over, the lowest it had idle after
work, it replaces itself with a fresh process (same command, same pid: a drain with nothing
to wait for, then exec). Python's allocator keeps the arenas a few surviving objects pin after
a burst of sessions (bench/README.md, "Sessions per worker"); only a new process gives them
back. Its sessions lose nothing: their next tasks replay them. 0 never recycles.
WORKSPACE_SWEEP_SECONDS (600; with a shared store): at start and this often the worker drops
the copies of travelling workspaces it holds for sessions that have ended (a session's end
drops them only on the host it has then; a former host keeps its copy). 0 never sweeps.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pydantic import BaseModel, Field, ValidationError

PREFIX = "DURABLE_AGENT_"


class SettingsError(Exception):
    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


IDLE_CHECK_SECONDS = 5.0
IDLE_CPU_SHARE = 0.02
"""A worker that used under 2 % of a core over the last check is idle."""

RECYCLE_ABOVE = 1.1
RECYCLE_MIN_MB = 16.0

WORKSPACE_SWEEP_SECONDS = 600.0

MCP_IDLE_SECONDS = 1800.0
"""A worker closes a session's MCP connection unused for this long (the next call reopens it):
`python worker.py` reads DURABLE_AGENT_MCP_IDLE_SECONDS (0: until the session ends), the worker
a CLI runs for itself keeps this default."""


class WorkerSettings(BaseModel):
    """How a worker process runs; `from_env` reads DURABLE_AGENT_<FIELD>."""

    task_queue: str = Field("durable-agent", min_length=1)
    max_concurrent_activities: int = Field(50, ge=1)
    max_concurrent_workflow_tasks: int | None = Field(None, ge=2)
    max_cached_workflows: int | None = Field(None, ge=0)
    """None: the SDK's default (1000)."""
    workflow_pollers: int | None = Field(None, ge=2)
    activity_pollers: int | None = Field(None, ge=1)
    health_address: str | None = None
    metrics_address: str | None = None
    drain_seconds: float = Field(600.0, ge=0)
    deployment: str | None = None
    build_id: str | None = None
    model_task_queue: str | None = None
    model_calls_per_second: float | None = Field(None, gt=0)
    max_concurrent_model_calls: int | None = Field(None, ge=1)
    mcp_idle_seconds: float = Field(MCP_IDLE_SECONDS, ge=0)
    """A session's MCP connection unused this long is closed (its next call reopens it)."""
    idle_check_seconds: float = Field(IDLE_CHECK_SECONDS, gt=0)
    recycle_above: float = Field(RECYCLE_ABOVE, ge=0)
    """Idle RSS over this many times the lowest idle-after-work RSS: a fresh process (0: never)."""
    recycle_min_mb: float = Field(RECYCLE_MIN_MB, ge=0)
    workspace_sweep_seconds: float = Field(WORKSPACE_SWEEP_SECONDS, ge=0)
    """How often the copies of ended sessions' workspaces are looked for and dropped (0: never)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> WorkerSettings:
        values = {
            name: env[PREFIX + name.upper()]
            for name in cls.model_fields
            if env.get(PREFIX + name.upper(), "").strip()
        }
        try:
            settings = cls.model_validate(values)
        except ValidationError as exc:
            error = exc.errors()[0]
            name = PREFIX + str(error["loc"][0]).upper()
            raise SettingsError(
                f"{name}={values.get(str(error['loc'][0]))!r}: {error['msg']}",
                f"fix or unset {name} (see `python worker.py --help`)",
            ) from None
        if settings.model_task_queue is None:
            for name in ("model_calls_per_second", "max_concurrent_model_calls"):
                if getattr(settings, name) is not None:
                    raise SettingsError(
                        f"{PREFIX}{name.upper()} is set but {PREFIX}MODEL_TASK_QUEUE is not",
                        f"set {PREFIX}MODEL_TASK_QUEUE (the fleet's model queue), or unset "
                        f"{PREFIX}{name.upper()}",
                    )
        for name in ("health_address", "metrics_address"):
            address = getattr(settings, name)
            if address is not None:
                try:
                    host_port(address)
                except ValueError as exc:
                    raise SettingsError(
                        f"{PREFIX}{name.upper()}={address!r}: {exc}",
                        "give host:port, e.g. 0.0.0.0:8080 (or :8080)",
                    ) from None
        return settings


def host_port(address: str) -> tuple[str, int]:
    """`host:port`, `:port` or `port` → (host, port); the host defaults to 0.0.0.0."""
    host, _, port = address.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError("not host:port")
    return (host.strip("[]") or "0.0.0.0", int(port))  # noqa: S104 — an operator's choice


class Health:
    """The worker's state as its health endpoint tells it."""

    def __init__(self, reachable: Callable[[], Awaitable[bool]] | None = None) -> None:
        self.polling = False
        self.draining = False
        self._reachable = reachable

    async def ready(self) -> tuple[bool, dict[str, Any]]:
        state: dict[str, Any] = {"polling": self.polling, "draining": self.draining}
        ok = self.polling and not self.draining
        if ok and self._reachable is not None:
            try:
                state["temporal"] = await asyncio.wait_for(self._reachable(), 3.0)
            except (TimeoutError, RuntimeError, OSError):
                state["temporal"] = False
            ok = bool(state["temporal"])
        return ok, state

    async def serve(self, address: str) -> asyncio.Server:
        host, port = host_port(address)
        return await asyncio.start_server(self._answer, host, port)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 5.0)
            while (await asyncio.wait_for(reader.readline(), 5.0)) not in (b"\r\n", b"\n", b""):
                pass  # headers
            parts = line.decode("latin-1").split()
            path = parts[1].split("?")[0] if len(parts) > 1 else ""
            if path == "/healthz":
                status, body = 200, {"status": "alive", "draining": self.draining}
            elif path == "/readyz":
                ok, state = await self.ready()
                status, body = (200 if ok else 503), {"status": "ready" if ok else "not ready"}
                body.update(state)
            else:
                status, body = 404, {"status": "not found", "paths": ["/healthz", "/readyz"]}
            data = json.dumps(body).encode()
            reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}[status]
            writer.write(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
                + data
            )
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()


async def run_until_signalled(
    worker: Any,
    health: Health,
    drain_seconds: float,
    say: Callable[[str], None] | None = None,
    recycler: Recycler | None = None,
) -> bool:
    """Run `worker` until SIGTERM (or it fails), then drain: no more polling, running
    activities finish for up to `drain_seconds` (the worker's graceful_shutdown_timeout),
    the rest are cancelled and Temporal retries them elsewhere. A second SIGTERM exits at once.
    True when it stopped for `recycler` instead (the caller replaces the process)."""
    say = say or (lambda line: print(line, flush=True))
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_term() -> None:
        if stop.is_set():
            say("second SIGTERM: stopping now (running activities are retried elsewhere)")
            os._exit(143)
        stop.set()

    before = signal.getsignal(signal.SIGTERM)
    loop.add_signal_handler(signal.SIGTERM, on_term)
    running = asyncio.ensure_future(worker.run())
    health.polling = True
    stopping = asyncio.ensure_future(stop.wait())
    waits = {running, stopping}
    if recycler is not None:
        waits.add(asyncio.ensure_future(recycler.wanted.wait()))
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if running.done():
            running.result()  # a worker that failed: raise its error
            return False
        health.draining = True
        recycling = not stop.is_set()
        if recycling:
            assert recycler is not None
            say(f"recycling: {recycler.reason}; this process is replaced by a fresh one")
        else:
            say(
                f"SIGTERM: draining — no new work is taken; running activities may finish "
                f"within {drain_seconds:g} s, then the rest are cancelled and retried on another "
                "worker"
            )
        await worker.shutdown()
        await running
        if recycling and stop.is_set():
            say("SIGTERM while recycling: exiting instead")
            return False
        say("drained; starting afresh" if recycling else "drained; exiting")
        return recycling
    finally:
        for waiting in waits - {running}:
            waiting.cancel()
        loop.remove_signal_handler(signal.SIGTERM)
        if before is not None:  # the caller's (worker.py: exit at once), not the default
            signal.signal(signal.SIGTERM, before)
        health.polling = False


SETTLED_ENV = "_DURABLE_AGENT_SETTLED_RSS"
"""What a recycled worker tells the process that replaces it: the lowest RSS it had idle after
work, in bytes (read and removed from the environment at start)."""


HOST_QUEUE_ENV = "_DURABLE_AGENT_HOST_QUEUE"
"""A recycled worker's host queue, for the process that replaces it: the travelling workspaces
it hosts are still in its home, and their sessions send their tools to that queue."""


def inherited(name: str, env: dict[str, str] | os._Environ[str] = os.environ) -> str | None:
    """What the process this one replaced passed on in `name` (removed from the environment:
    no tool sees it)."""
    return env.pop(name, None) or None


def inherited_settled_rss(env: dict[str, str] | os._Environ[str] = os.environ) -> int | None:
    value = inherited(SETTLED_ENV, env) or ""
    return int(value) if value.isdigit() else None


def replace_process(settled: int | None = None, host_queue: str | None = None) -> None:
    """Run this process's command again in its place (`exec`: same pid, same arguments and
    environment, with `settled` for the new process's Recycler; file descriptors other than
    stdio close, as Python opens them close-on-exec), after flushing what it has to say."""
    from durable_agent import telemetry

    if settled is not None:
        os.environ[SETTLED_ENV] = str(settled)
    if host_queue is not None:
        os.environ[HOST_QUEUE_ENV] = host_queue
    from durable_agent.cli import stand_down_reaper

    stand_down_reaper()  # the fresh process keeps this one's tools (same pid and start time)
    telemetry.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])  # noqa: S606 — ourselves


def rss_bytes() -> int | None:
    """This process's resident set size (Linux /proc), or None."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def child_processes() -> int:
    """How many processes this one is the parent of (a tool's, an MCP server, an orphan a tool
    left that was reparented here), not counting its reaper; 0 where /proc cannot tell."""
    environment = sys.modules.get("activities.tools.environment")
    reaper = environment.reaper_pid() if environment is not None else None
    count = 0
    try:
        for task in os.scandir("/proc/self/task"):
            with open(os.path.join(task.path, "children")) as f:
                count += sum(pid != str(reaper) for pid in f.read().split())
    except OSError:
        return 0
    return count


def should_recycle(rss: int, settled: int, above: float, min_bytes: float) -> bool:
    return above > 0 and rss > settled * above and rss - settled >= min_bytes


class Recycler:
    """Asks for a fresh process when the worker is idle, runs nothing, and holds far more than
    the lowest RSS it had idle after work (`should_recycle`): `check` runs after each idle
    spell's collection; `wanted` is set for run_until_signalled. `running()` says whether any
    work is in flight (activities, tool processes): then it looks again at the next check."""

    def __init__(
        self,
        above: float,
        min_mb: float,
        running: Callable[[], bool],
        say: Callable[[str], None] | None = None,
        settled: int | None = None,
        host_queue: str | None = None,
    ) -> None:
        self.above, self.min_bytes = above, min_mb * 2**20
        self.running = running
        self.say = say or (lambda line: print(line, flush=True))
        self.settled = settled
        """The lowest RSS idle after work: this process's, or the one it replaced
        (SETTLED_ENV), so that a fresh process's first burst is not taken as its idle size."""
        self.host_queue = host_queue
        """The worker's own host queue, passed on to the fresh process (HOST_QUEUE_ENV)."""
        if settled is not None:
            self.say(f"idle size of the process it replaced: {settled / 2**20:.0f} MB RSS")
        self.wanted = asyncio.Event()
        self.reason = ""

    def check(self) -> bool:
        """True once this idle spell is settled (its RSS recorded, or recycling asked for);
        False to look again at the next idle check (work still in flight)."""
        rss = rss_bytes()
        if rss is None or self.wanted.is_set():
            return True
        mb = 2**20
        if self.settled is None:
            self.settled = rss
            limit = max(rss * self.above, rss + self.min_bytes)
            self.say(
                f"idle after work at {rss / mb:.0f} MB RSS; recycles idle above {limit / mb:.0f} MB"
            )
            return True
        if not should_recycle(rss, self.settled, self.above, self.min_bytes):
            self.settled = min(self.settled, rss)
            return True
        if self.running():
            return False
        self.reason = (
            f"idle at {rss / mb:.0f} MB RSS against {self.settled / mb:.0f} MB idle after its "
            f"first work ({rss / self.settled:.2f}x, over {PREFIX}RECYCLE_ABOVE={self.above:g})"
        )
        self.wanted.set()
        return True


def _malloc_trim() -> Callable[[], object] | None:
    try:
        import ctypes

        trim = ctypes.CDLL(None).malloc_trim  # glibc
    except (OSError, AttributeError):
        return None
    return lambda: trim(0)


async def release_memory_when_idle(
    interval: float = IDLE_CHECK_SECONDS,
    share: float = IDLE_CPU_SHARE,
    recycler: Recycler | None = None,
) -> None:
    """Once the worker falls idle after work (its sessions ended), give back what they used:
    the source lines of logged tracebacks dropped (`linecache`: 1.5 MB after 200 sessions
    with retries), a full collection frees their cycles (ended workflows' sandboxes are module
    graphs), then glibc's malloc_trim returns the freed heap to the system. Without it RSS stays
    at its high-water mark: 1.9× the idle size after 200 sessions (bench/sessions_per_worker.py).
    Nothing runs while the worker is busy, and once per idle spell; then `recycler` looks at
    what is left (at each check of the spell until it has decided)."""
    import gc
    import linecache

    trim = _malloc_trim()
    worked = deciding = False
    last = time.process_time()
    while True:
        await asyncio.sleep(interval)
        now = time.process_time()
        busy = (now - last) / interval > share
        last = now
        if busy:
            worked, deciding = True, False
        elif worked:
            worked = False
            linecache.clearcache()  # the source lines of tracebacks logged meanwhile
            gc.collect()
            if trim is not None:
                trim()
            last = time.process_time()  # its own CPU is not work
            deciding = recycler is not None
        if deciding and recycler is not None:
            deciding = not recycler.check()


async def promote_first_version(
    client: Any,
    deployment: str,
    build_id: str,
    say: Callable[[str], None] | None = None,
    seconds: float = 60.0,
) -> bool:
    """Make this build the deployment's current version if it has none (its first rollout: a
    versioned worker is sent no task until some version is current). Later builds are promoted
    by the operator (`temporal worker deployment set-current-version`, infra/README.md).
    Waits up to `seconds` for the server to see this worker's pollers; True if it promoted."""
    from temporalio.api.workflowservice.v1 import (
        DescribeWorkerDeploymentRequest,
        SetWorkerDeploymentCurrentVersionRequest,
    )
    from temporalio.service import RPCError

    say = say or (lambda line: print(line, flush=True))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        try:
            described = await client.workflow_service.describe_worker_deployment(
                DescribeWorkerDeploymentRequest(
                    namespace=client.namespace, deployment_name=deployment
                )
            )
        except RPCError:  # not known until a poller of it has been seen
            described = None
        if described is not None:
            info = described.worker_deployment_info
            current = info.routing_config.current_deployment_version
            if current.build_id:  # some version is current: the operator's to change
                return False
            if any(v.deployment_version.build_id == build_id for v in info.version_summaries):
                try:
                    await client.workflow_service.set_worker_deployment_current_version(
                        SetWorkerDeploymentCurrentVersionRequest(
                            namespace=client.namespace,
                            deployment_name=deployment,
                            build_id=build_id,
                            conflict_token=described.conflict_token,
                            identity=f"durable-agent worker {os.getpid()}",
                        )
                    )
                except RPCError:  # another worker promoted meanwhile: look again
                    pass
                else:
                    say(f"build {build_id!r} is now the current version of {deployment!r}")
                    return True
        if loop.time() > deadline:
            say(f"could not make build {build_id!r} current in {deployment!r}; see infra/README.md")
            return False
        await asyncio.sleep(0.2)


HELP = __doc__ or ""


def print_help() -> None:
    print(sys.modules["__main__"].__doc__ or "", HELP, sep="\n")
