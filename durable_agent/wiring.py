"""`python worker.py`: connects to Temporal, registers the workflows and activities, runs.

The single place where things are wired; tests and the CLI call `build_worker` too.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.runtime import (
    LoggingConfig,
    OpenTelemetryConfig,
    PrometheusConfig,
    Runtime,
    TelemetryConfig,
    TelemetryFilter,
)
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
    PollerBehaviorSimpleMaximum,
    UnsandboxedWorkflowRunner,
    Worker,
    WorkerDeploymentConfig,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.agents import AgentActivities
from activities.compaction import CompactionActivities
from activities.heartbeat import HEARTBEAT_INTERVAL_SECONDS
from activities.hooks import HookActivities
from activities.mcp import McpActivities
from activities.model import ClientFactory, ModelActivities, default_client
from activities.schedules import ScheduleActivities
from activities.summaries import SummaryActivities
from activities.tools import ToolActivities
from activities.tools.environment import mcp_run_tag, protect_worker_process
from activities.transcript import StoreActivities, TranscriptStore
from activities.turns import TurnActivities
from activities.workspace import WorkspaceActivities, WorkspaceHosts, host_queue_of, sweep
from durable_agent import telemetry, temporal_config
from durable_agent.mcp.connections import McpConnections
from durable_agent.operating import (
    HOST_QUEUE_ENV,
    Health,
    Recycler,
    WorkerSettings,
    child_processes,
    host_port,
    inherited,
    inherited_settled_rss,
    promote_first_version,
    release_memory_when_idle,
    run_until_signalled,
)
from durable_agent.paths import state_home
from durable_agent.payloads import data_converter
from durable_agent.store import open_store
from durable_agent.warm import code_build_id
from workflows.query import QueryWorkflow
from workflows.schedules import ScheduledPromptWorkflow
from workflows.session import AutoUpgradingSessionWorkflow, SessionWorkflow

DEFAULT_TASK_QUEUE = "durable-agent"
WORKFLOWS = [SessionWorkflow, QueryWorkflow, ScheduledPromptWorkflow]
VERSIONED_WORKFLOWS = [AutoUpgradingSessionWorkflow, QueryWorkflow, ScheduledPromptWorkflow]
"""Under Worker Versioning: sessions move to the current build, prompts stay pinned."""


def build_worker(
    client: Client,
    task_queue: str = DEFAULT_TASK_QUEUE,
    store: TranscriptStore | None = None,
    client_factory: ClientFactory = default_client,
    max_concurrent_activities: int = 50,
    model: ModelActivities | None = None,
    settings: WorkerSettings | None = None,
    workflows: list[type] | None = None,
    host_queue: str | None = None,
) -> Worker | Workers:
    """The worker of `task_queue`; with a shared store (PostgresStore), also the worker of its
    own host queue (`host_queue`, else a new one), where the tools and hooks of the travelling
    workspaces it hosts run. `settings` (a worker process's, from its environment) override the
    concurrency given."""
    # A CLI's or a test's worker stops at once when its `async with` ends (what runs then is
    # cancelled and retried elsewhere): only `python worker.py` drains (its settings say so).
    settings = settings or WorkerSettings(
        max_concurrent_activities=max_concurrent_activities, drain_seconds=0
    )
    # Before any tool or hook runs: none of them may read this process's credentials.
    protect_worker_process()
    store = store or open_store()
    model = model or ModelActivities(store, client_factory, temporal=client)
    compaction = CompactionActivities(model)
    hosts = None
    if store.shared:
        hosts = WorkspaceHosts(store, host_queue or host_queue_of(task_queue))
    # WebFetch asks the model's client; the cron tools make Temporal client calls.
    # the MCP servers' connections of the sessions served here
    mcp = McpConnections(
        idle_seconds=settings.mcp_idle_seconds,
        tag=mcp_run_tag,
        session_open=lambda session_id: session_open(client, session_id),
    )
    tools = ToolActivities(store, hosts, model.client, temporal=client, mcp=mcp)
    servers = McpActivities(mcp)
    stores = StoreActivities(store)
    hooks = HookActivities(store.local_transcript, store.hook_records, store.get_tool_result, hosts)
    place: list[Callable[..., Any]] = [
        tools.run_tool,
        tools.end_session_processes,
        tools.end_tool_processes,
        hooks.run_stop_hooks,
        hooks.run_hooks,
        TurnActivities(store, hosts).between_turns,
        servers.connect_mcp_servers,
        servers.refresh_mcp_tools,
        servers.close_mcp_session,
    ]
    claim: list[Callable[..., Any]] = [WorkspaceActivities(hosts).claim_host] if hosts else []
    main = _worker(
        client,
        task_queue,
        [
            model.call_model,
            compaction.autocompact,
            compaction.plan_collapse,
            stores.append_entry,
            stores.transcript_location,
            SummaryActivities(store, model.client).summarize_tools,
            ScheduleActivities(client).delete_schedules,
            AgentActivities(store).agent_report,
            *place,
            *claim,
        ],
        settings,
        workflows=workflows or (VERSIONED_WORKFLOWS if settings.deployment else WORKFLOWS),
    )
    group = [main]
    if settings.model_task_queue:  # the fleet's rate-limited model calls (fairness.py)
        group.append(_model_worker(client, model, settings))
    if hosts is not None:
        checkpoint = WorkspaceActivities(hosts).checkpoint_workspace
        group.append(_worker(client, hosts.host_queue, [*place, checkpoint], settings))
    if len(group) == 1:
        return main
    return Workers(group, hosts, settings.workspace_sweep_seconds)


def _model_worker(client: Client, model: ModelActivities, settings: WorkerSettings) -> Worker:
    """The worker of the fleet's model queue: only model calls, at most
    model_calls_per_second across every worker of the queue (the server enforces it, shared
    out by the sessions' fairness keys) and max_concurrent_model_calls here."""
    assert settings.model_task_queue is not None
    limits = settings.model_copy(
        update={
            "max_concurrent_activities": settings.max_concurrent_model_calls
            or settings.max_concurrent_activities
        }
    )
    return _worker(
        client,
        settings.model_task_queue,
        [model.call_model],
        limits,
        max_task_queue_activities_per_second=settings.model_calls_per_second,
    )


class Workers:
    """A process's workers run together: the shared queue's, and the fleet's model queue's and
    this process's host queue's when it has them. The first is the main one. While they run,
    a host drops the workspace copies of ended sessions every `sweep_seconds` (`sweeping`)."""

    def __init__(
        self, group: list[Worker], hosts: WorkspaceHosts | None = None, sweep_seconds: float = 0
    ) -> None:
        self.group = group
        self.hosts = hosts
        self.sweep_seconds = sweep_seconds

    @property
    def client(self) -> Client:
        return self.group[0].client

    @client.setter
    def client(self, client: Client) -> None:  # the CLI's server-following moves them all
        for worker in self.group:
            worker.client = client

    async def __aenter__(self) -> Workers:
        entered: list[Worker] = []
        try:
            for worker in self.group:
                await worker.__aenter__()
                entered.append(worker)
        except BaseException:
            for worker in reversed(entered):
                await worker.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        failure: BaseException | None = None
        for worker in reversed(self.group):  # each one shut down, whatever another raised
            try:
                await worker.__aexit__(*exc)
            except BaseException as err:  # noqa: BLE001 — raised below, after the rest
                failure = failure or err
        if failure is not None:
            raise failure

    async def shutdown(self) -> None:
        """Every worker of the group drains at once (each lets its running activities finish
        within its graceful shutdown timeout): SIGTERM's drain (run_until_signalled)."""
        await asyncio.gather(*(worker.shutdown() for worker in self.group))

    async def run(self) -> None:
        sweeper = None
        if self.hosts is not None and self.sweep_seconds > 0:
            sweeper = asyncio.ensure_future(sweeping(self.hosts, self.client, self.sweep_seconds))
        try:
            await asyncio.gather(*(worker.run() for worker in self.group))
        finally:
            if sweeper is not None:
                sweeper.cancel()


async def session_open(client: Client, session_id: str) -> bool | None:
    """Whether the session's workflow (its id is the session's) runs: None when Temporal does
    not know it (never started under that id, or past the namespace's retention). Raises the
    RPCError of a server that does not answer."""
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.service import RPCError, RPCStatusCode

    try:
        described = await client.get_workflow_handle(session_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    return described.status == WorkflowExecutionStatus.RUNNING


async def sweeping(hosts: WorkspaceHosts, client: Client, interval: float) -> None:
    """`sweep` at once (copies of sessions that ended while this worker was down), then every
    `interval` seconds."""
    while True:
        try:
            dropped = await sweep(hosts, lambda sid: session_open(client, sid))
        except Exception as exc:  # noqa: BLE001 — a sweep is housekeeping: it tries again
            print(f"workspace sweep failed: {exc!r}", flush=True)
        else:
            if dropped:
                print(f"dropped {dropped} workspace copies of ended sessions", flush=True)
        await asyncio.sleep(interval)

    async def shutdown(self) -> None:
        await asyncio.gather(*(worker.shutdown() for worker in self.group))


WORKFLOW_HELPERS = (
    "workflows.activity_options",
    "workflows.agents",
    "workflows.approvals",
    "workflows.compaction",
    "workflows.failures",
    "workflows.hook_runs",
    "workflows.hosting",
    "workflows.loop_context",
    "workflows.streaming_tools",
)
"""The workflow modules that define no workflow: passed through the sandbox, imported once per
process rather than once per workflow started (with the rest of the sandbox's set-up, a
quarter of a busy worker's CPU, bench/sessions_per_worker.py). They hold no mutable module
state; the workflows' determinism stays checked by replaying the committed histories (whose
Replayer keeps the full sandbox) and, under DURABLE_AGENT_SANDBOX=strict (the test suite), by
the sandbox around the workflow modules themselves (see WORKFLOW_MODULES)."""

WORKFLOW_MODULES = ("workflows.query", "workflows.schedules", "workflows.session")
"""The modules that define the workflows. The sandbox imports each afresh for every workflow
it starts (a session, each prompt's child, each wake-up): a fifth of a busy worker's CPU
(bench/sessions_per_worker.py, 200 sessions: 50 -> 40 ms a turn). Under
`DURABLE_AGENT_SANDBOX=passthrough` a worker passes them through too, as it does the helpers:
they hold no mutable module state. A worker runs no sandbox by default (`workflow_runner`);
`DURABLE_AGENT_SANDBOX=strict` keeps them in the sandbox, which then stops a workflow that calls
something non-deterministic (a clock, a file), and the test suite runs that way
(tests/conftest.py), as does the replay of the committed histories."""


def workflow_runner() -> WorkflowRunner:
    """The runner of a worker's workflows, by DURABLE_AGENT_SANDBOX: unset or `off`, none
    (Temporal's UnsandboxedWorkflowRunner); `passthrough`, Temporal's sandbox with every
    workflows/ module passed through; `strict` (or any other value), the sandbox around the
    workflow modules. With the workflow modules passed through, the sandbox no longer checked
    the workflows' own calls (their modules use the real `datetime`, `os`, ...), only its
    restricted builtins, yet it ran code inside itself for every payload of every activation
    (`get_serialization_context`) and around each activation: 25-30 % of a busy worker's CPU
    (bench/sessions_per_worker.py, 200 sessions: 38-40 -> 26-30 ms a turn). Determinism is
    checked where it can be checked whole: the test suite runs strict and the committed
    histories replay under the full sandbox (tests/test_replay_histories.py)."""
    mode = os.environ.get("DURABLE_AGENT_SANDBOX", "").strip().lower()
    if mode in ("", "off"):
        return UnsandboxedWorkflowRunner()
    passed: tuple[str, ...] = WORKFLOW_HELPERS
    if mode == "passthrough":
        passed += WORKFLOW_MODULES
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*passed)
    )


class ActivitiesInFlight(Interceptor):
    """Counts this process's activity executions in flight (a worker recycles only at 0)."""

    def __init__(self) -> None:
        self.count = 0

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Counted(next, self)


class _Counted(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, counter: ActivitiesInFlight) -> None:
        super().__init__(next)
        self.counter = counter

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        self.counter.count += 1
        try:
            return await super().execute_activity(input)
        finally:
            self.counter.count -= 1


IN_FLIGHT = ActivitiesInFlight()


def _worker(
    client: Client,
    task_queue: str,
    activities: list[Callable[..., Any]],
    settings: WorkerSettings,
    workflows: list[type] | None = None,
    max_task_queue_activities_per_second: float | None = None,
) -> Worker:
    polling: dict[str, Any] = {}
    if settings.workflow_pollers:
        polling["workflow_task_poller_behavior"] = PollerBehaviorSimpleMaximum(
            settings.workflow_pollers
        )
    if settings.activity_pollers:
        polling["activity_task_poller_behavior"] = PollerBehaviorSimpleMaximum(
            settings.activity_pollers
        )
    if settings.deployment:
        version = WorkerDeploymentVersion(settings.deployment, settings.build_id or code_build_id())
        polling["deployment_config"] = WorkerDeploymentConfig(
            version=version,
            use_worker_versioning=True,
            default_versioning_behavior=VersioningBehavior.PINNED,
        )
    else:
        polling["build_id"] = settings.build_id or code_build_id()
    if settings.max_cached_workflows is not None:
        polling["max_cached_workflows"] = settings.max_cached_workflows
    return Worker(
        client,
        task_queue=task_queue,
        workflows=workflows or [],
        workflow_runner=workflow_runner(),
        activities=activities,
        max_concurrent_activities=settings.max_concurrent_activities,
        max_concurrent_workflow_tasks=settings.max_concurrent_workflow_tasks,
        graceful_shutdown_timeout=timedelta(seconds=settings.drain_seconds),
        max_task_queue_activities_per_second=max_task_queue_activities_per_second,
        interceptors=[IN_FLIGHT],
        **polling,
        # A killed worker's sessions move to another worker after this, not the default 10 s.
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=2),
        # Heartbeats reach the server within a second, and with them an interrupt's cancel
        # reaches the activity (the default waits up to 80 % of the heartbeat timeout).
        max_heartbeat_throttle_interval=timedelta(seconds=HEARTBEAT_INTERVAL_SECONDS),
        default_heartbeat_throttle_interval=timedelta(seconds=HEARTBEAT_INTERVAL_SECONDS),
    )


def quiet_runtime() -> Runtime:
    """For the CLI: the SDK core logs only errors (retries and cancellations are routine)."""
    logging.getLogger("temporalio").setLevel(logging.ERROR)
    quiet = TelemetryFilter(core_level="ERROR", other_level="ERROR")
    return Runtime(telemetry=TelemetryConfig(logging=LoggingConfig(filter=quiet)))


async def connect(address: str | None = None, runtime: Runtime | None = None) -> Client:
    """A client with the pydantic converter (payloads over 256 KiB offloaded to the state dir)
    and the OpenTelemetry plugin when a tracer provider is installed; the Temporal cluster a
    profile or TEMPORAL_* variables name (durable_agent.temporal_config), else `address`."""
    return await Client.connect(
        **temporal_config.connect_kwargs(address),
        data_converter=data_converter(state_home()),
        runtime=runtime,
        plugins=telemetry.plugins(),
    )


async def connect_patiently(address: str, runtime: Runtime | None = None) -> Client:
    """Connect, waiting for a server that is restarting or not up yet (a worker started with
    its server, or during a restart, must not die of it): says so once, retries with backoff
    for DURABLE_AGENT_RECONNECT_SECONDS (900), then raises the last error."""
    limit = float(os.environ.get("DURABLE_AGENT_RECONNECT_SECONDS", "900"))
    loop = asyncio.get_running_loop()
    started, delay = loop.time(), 0.5
    while True:
        try:
            client = await connect(address, runtime)
        except RuntimeError as exc:
            if loop.time() - started > limit:
                raise
            if delay == 0.5:
                reason = str(exc).splitlines()[0][:160]
                print(
                    f"Temporal at {address} is not reachable yet ({reason}); waiting…", flush=True
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
            continue
        if delay > 0.5:
            print(f"connected to Temporal at {address}", flush=True)
        return client


def worker_address() -> str:
    """The cluster TEMPORAL_ADDRESS or a Temporal profile names; else the dev server the CLI
    started for $DURABLE_AGENT_HOME (not started here); else localhost:7233."""
    from durable_agent.devserver import running

    if temporal_config.external():
        return temporal_config.target()
    info = running(state_home())
    if info is not None:
        return info.address
    print(
        f"no dev server is running for {state_home()} (`durable-agent server` starts one); "
        "trying localhost:7233"
    )
    return "localhost:7233"


def worker_runtime(settings: WorkerSettings) -> Runtime | None:
    """The SDK runtime exporting its metrics: a Prometheus endpoint when
    DURABLE_AGENT_METRICS_ADDRESS asks, else OTLP/gRPC to OTEL_EXPORTER_OTLP_ENDPOINT when
    DURABLE_AGENT_OTEL=otlp."""
    metrics: PrometheusConfig | OpenTelemetryConfig
    if settings.metrics_address:
        host, port = host_port(settings.metrics_address)
        metrics = PrometheusConfig(bind_address=f"{host}:{port}")
    elif os.environ.get(telemetry.OTEL_ENV, "").strip().lower() == "otlp":
        endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "http://localhost:4317"
        metrics = OpenTelemetryConfig(url=endpoint)
    else:
        return None
    return Runtime(telemetry=TelemetryConfig(metrics=metrics))


def recycler_for(settings: WorkerSettings, host_queue: str | None = None) -> Recycler | None:
    """What asks for a fresh process once this one idles far above its size (None when
    `recycle_above` is 0): python worker.py's and the warm worker's. Nothing may be in
    flight: no activity, no process a tool started."""
    if settings.recycle_above <= 0:
        return None
    return Recycler(
        settings.recycle_above,
        settings.recycle_min_mb,
        lambda: IN_FLIGHT.count > 0 or child_processes() > 0,
        settled=inherited_settled_rss(),
        host_queue=host_queue,
    )


async def main() -> Recycler | None:
    """`python worker.py`: serves the shared queue, $DURABLE_AGENT_TASK_QUEUE (default
    `durable-agent`), where `run --no-worker` puts its sessions; its settings, health endpoint,
    metrics, drain and recycling: durable_agent.operating. The Recycler that asked for it when
    this process is to be replaced by a fresh one."""
    settings = WorkerSettings.from_env()
    telemetry.setup_from_env()
    # The health endpoint answers from the start: alive while the worker waits for Temporal
    # (up to DURABLE_AGENT_RECONNECT_SECONDS), ready once it polls.
    clients: list[Client] = []

    async def reachable() -> bool:
        return bool(clients) and await clients[0].service_client.check_health()

    health = Health(reachable)
    server = await health.serve(settings.health_address) if settings.health_address else None
    address = worker_address()
    client = await connect_patiently(address, worker_runtime(settings))
    clients.append(client)
    where = address
    if temporal_config.external():  # namespace, TLS, API key: never the key itself
        where = temporal_config.describe(temporal_config.connect_kwargs())
    print(f"worker on task queue {settings.task_queue!r} at {where}", flush=True)
    if server is not None:
        print(f"health on {settings.health_address} (/healthz, /readyz)", flush=True)
    # A recycled worker keeps its host queue: the workspaces it hosts are still here.
    host_queue = inherited(HOST_QUEUE_ENV) or host_queue_of(settings.task_queue)
    worker = build_worker(client, settings.task_queue, settings=settings, host_queue=host_queue)
    promoting = None
    if settings.deployment:
        build_id = settings.build_id or code_build_id()
        print(f"Worker Deployment {settings.deployment!r}, build {build_id!r}", flush=True)
        promoting = asyncio.ensure_future(
            promote_first_version(client, settings.deployment, build_id)
        )
    recycler = recycler_for(settings, host_queue)
    releasing = asyncio.ensure_future(
        release_memory_when_idle(settings.idle_check_seconds, recycler=recycler)
    )
    try:
        if await run_until_signalled(worker, health, settings.drain_seconds, recycler=recycler):
            return recycler
        return None
    finally:
        releasing.cancel()
        if promoting is not None:
            promoting.cancel()
        if server is not None:
            server.close()
