"""The activities the workflows call, by name, with their timeouts and retry policies."""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from durable_agent.engine.contracts import (
        AgentReportInput,
        AppendEntryInput,
        AppendEntryOutput,
        BetweenTurnsInput,
        BetweenTurnsOutput,
        CallModelInput,
        CallModelOutput,
        CompactInput,
        CompactOutput,
        EndProcessesInput,
        EndProcessesOutput,
        EndToolProcessesInput,
        PlanCollapseInput,
        PlanCollapseOutput,
        RunToolInput,
        RunToolOutput,
        StopHooksInput,
        StopHooksOutput,
        SummaryInput,
        SummaryOutput,
    )
    from durable_agent.engine.errors import (
        MAX_DELAY_SECONDS,
        NON_RETRYABLE_ERROR_TYPES,
        UNATTENDED_MAX_DELAY_SECONDS,
    )
    from durable_agent.engine.hooks import HookEventInput, HookEventResult
    from durable_agent.engine.state import ModelCallConfig, QueryConfig
    from durable_agent.mcp.contracts import (
        CloseMcpInput,
        CloseMcpOutput,
        ConnectMcpInput,
        McpServersOutput,
        RefreshMcpToolsInput,
    )
    from durable_agent.names import Activities

WAIT_FOR_CANCELLATION_PATCH = "interrupt-waits-for-cancellation-v1"


def _on_interrupt() -> ActivityCancellationType:
    """An interrupted activity is waited for until it has stopped (it learns of the cancel from
    its next heartbeat): nothing it does, an answer or summary stored, a tool's output, lands
    after its prompt ended. Histories from before wait for nothing."""
    if workflow.patched(WAIT_FOR_CANCELLATION_PATCH):
        return ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
    return ActivityCancellationType.TRY_CANCEL


HOST_START_TIMEOUT = timedelta(seconds=15)
"""A workspace host that does not start a task of its queue within this is taken as lost (its
worker died, or its machine): the session moves to another worker (workflows/hosting.py)."""


def _start_timeout(host_queue: str | None) -> timedelta | None:
    return HOST_START_TIMEOUT if host_queue is not None else None


READ_ONLY_TOOL_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)
SIDE_EFFECT_TOOL_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=4)
"""A later attempt of a tool with side effects never re-runs it: it returns the recorded result,
or says the call was interrupted and may have partly run (run_tool's started/finished records)."""
STORE_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=20)
STORE_TIMEOUT = timedelta(seconds=10)
"""Store steps take milliseconds: a worker killed inside one is noticed by this timeout."""
END_TOOL_PROCESSES_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500), maximum_attempts=3
)
"""Ending an interrupted tool's processes is a best effort the interrupt waits for: a host that
cannot do it in three tries has lost them anyway (its worker died, and they with its session's
process group), and the interrupted turn must not wait minutes for it."""


def model_retry_policy(cfg: ModelCallConfig) -> RetryPolicy:
    """The classifier decides each retry; this policy is the backstop (and the unattended cap)."""
    cap = UNATTENDED_MAX_DELAY_SECONDS if cfg.unattended else MAX_DELAY_SECONDS
    return RetryPolicy(
        initial_interval=timedelta(milliseconds=500),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=cap),
        maximum_attempts=0 if cfg.unattended else cfg.max_retries + 1,
        non_retryable_error_types=list(NON_RETRYABLE_ERROR_TYPES),
    )


def call_model(req: CallModelInput, cfg: QueryConfig, summary: str) -> Awaitable[CallModelOutput]:
    opts = cfg.activity
    return workflow.execute_activity(
        Activities.CALL_MODEL,
        req,
        task_queue=opts.model_task_queue,  # None (the session's queue) in every older history
        cancellation_type=_on_interrupt(),
        result_type=CallModelOutput,
        start_to_close_timeout=timedelta(seconds=opts.model_call_timeout_seconds),
        schedule_to_close_timeout=timedelta(seconds=opts.unattended_max_seconds)
        if req.config.unattended
        else None,
        heartbeat_timeout=timedelta(seconds=opts.model_heartbeat_seconds),
        retry_policy=model_retry_policy(req.config),
        summary=summary,
    )


def run_tool(
    req: RunToolInput,
    cfg: QueryConfig,
    summary: str,
    read_only: bool,
    host_queue: str | None = None,
) -> Awaitable[RunToolOutput]:
    """On the shared queue; with `host_queue`, on the worker holding the travelling workspace,
    which must start it within HOST_START_TIMEOUT (workflows/hosting.py)."""
    return workflow.execute_activity(
        Activities.RUN_TOOL,
        req,
        task_queue=host_queue,
        schedule_to_start_timeout=_start_timeout(host_queue),
        cancellation_type=_on_interrupt(),
        result_type=RunToolOutput,
        start_to_close_timeout=timedelta(seconds=cfg.activity.tool_timeout_seconds),
        heartbeat_timeout=timedelta(seconds=cfg.activity.tool_heartbeat_seconds),
        retry_policy=READ_ONLY_TOOL_RETRY if read_only else SIDE_EFFECT_TOOL_RETRY,
        summary=summary,
    )


BETWEEN_TURNS_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)


def between_turns(
    req: BetweenTurnsInput, host_queue: str | None = None
) -> Awaitable[BetweenTurnsOutput]:
    """A quick look at the workspace (stat calls, a few small files): where the tools run."""
    return workflow.execute_activity(
        Activities.BETWEEN_TURNS,
        req,
        task_queue=host_queue,
        schedule_to_start_timeout=_start_timeout(host_queue),
        result_type=BetweenTurnsOutput,
        start_to_close_timeout=timedelta(seconds=60),
        retry_policy=BETWEEN_TURNS_RETRY,
        summary="look at the files between turns",
    )


MCP_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)


def connect_mcp(req: ConnectMcpInput) -> Awaitable[McpServersOutput]:
    """Start or reach the session's MCP servers; a server that cannot be reached is a status."""
    return workflow.execute_activity(
        Activities.CONNECT_MCP_SERVERS,
        req,
        result_type=McpServersOutput,
        start_to_close_timeout=timedelta(minutes=3),
        heartbeat_timeout=timedelta(seconds=30),
        retry_policy=MCP_RETRY,
        summary="connect the MCP servers",
    )


def refresh_mcp(
    req: RefreshMcpToolsInput, host_queue: str | None = None
) -> Awaitable[McpServersOutput]:
    """The changed tool lists, from the worker holding the connections: with a travelling
    workspace, its host (where the session's MCP calls run)."""
    return workflow.execute_activity(
        Activities.REFRESH_MCP_TOOLS,
        req,
        result_type=McpServersOutput,
        task_queue=host_queue,
        schedule_to_start_timeout=_start_timeout(host_queue),
        start_to_close_timeout=timedelta(minutes=3),
        heartbeat_timeout=timedelta(seconds=30),
        retry_policy=MCP_RETRY,
        summary="the MCP servers' changed tool lists",
    )


def close_mcp(req: CloseMcpInput, host_queue: str | None = None) -> Awaitable[CloseMcpOutput]:
    """The session's connections closed where they are: with a travelling workspace, on its
    host (where the session's MCP calls ran)."""
    return workflow.execute_activity(
        Activities.CLOSE_MCP_SESSION,
        req,
        result_type=CloseMcpOutput,
        task_queue=host_queue,
        schedule_to_start_timeout=_start_timeout(host_queue),
        start_to_close_timeout=timedelta(seconds=60),
        retry_policy=MCP_RETRY,
        summary="close the MCP connections",
    )


def agent_report(req: AgentReportInput) -> Awaitable[RunToolOutput]:
    """Reads the sub-agent's last answer from the store, stores it as the parent's result."""
    return workflow.execute_activity(
        Activities.AGENT_REPORT,
        req,
        result_type=RunToolOutput,
        start_to_close_timeout=STORE_TIMEOUT,
        retry_policy=STORE_RETRY,
        summary="the agent's report",
    )


def summarize_tools(req: SummaryInput) -> Awaitable[SummaryOutput]:
    """A small-model call of a few seconds; a failure only costs the summary line."""
    return workflow.execute_activity(
        Activities.SUMMARIZE_TOOLS,
        req,
        result_type=SummaryOutput,
        start_to_close_timeout=timedelta(seconds=60),
        retry_policy=RetryPolicy(maximum_attempts=2),
        summary="sum up the tool batch",
    )


COMPACT_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_attempts=2,
    non_retryable_error_types=list(NON_RETRYABLE_ERROR_TYPES),
)


def autocompact(req: CompactInput, cfg: QueryConfig) -> Awaitable[CompactOutput]:
    """A failed compaction counts towards the circuit breaker; it is retried once at most."""
    return workflow.execute_activity(
        Activities.AUTOCOMPACT,
        req,
        cancellation_type=_on_interrupt(),
        result_type=CompactOutput,
        start_to_close_timeout=timedelta(seconds=cfg.activity.model_call_timeout_seconds),
        heartbeat_timeout=timedelta(seconds=cfg.activity.model_heartbeat_seconds),
        retry_policy=COMPACT_RETRY,
        summary=f"{req.trigger} compact ({req.pre_tokens:,} tokens)",
    )


def plan_collapse(req: PlanCollapseInput) -> Awaitable[PlanCollapseOutput]:
    return workflow.execute_activity(
        Activities.PLAN_COLLAPSE,
        req,
        result_type=PlanCollapseOutput,
        start_to_close_timeout=STORE_TIMEOUT,
        retry_policy=STORE_RETRY,
    )


HOOK_TIMEOUT = timedelta(minutes=10)


def run_stop_hooks(req: StopHooksInput) -> Awaitable[StopHooksOutput]:
    return workflow.execute_activity(
        Activities.RUN_STOP_HOOKS,
        req,
        cancellation_type=_on_interrupt(),
        result_type=StopHooksOutput,
        start_to_close_timeout=HOOK_TIMEOUT,
        heartbeat_timeout=timedelta(seconds=req.heartbeat_seconds),
        # A retry never re-runs a hook that already started (the activity's hook ledger).
        retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3),
        summary="Stop hooks",
    )


def append_entry(req: AppendEntryInput) -> Awaitable[AppendEntryOutput]:
    return workflow.execute_activity(
        Activities.APPEND_ENTRY,
        req,
        result_type=AppendEntryOutput,
        start_to_close_timeout=STORE_TIMEOUT,
        retry_policy=STORE_RETRY,
    )


def transcript_location(session_id: str, local: bool) -> Awaitable[str]:
    """Where the store keeps the session's transcript (a path, or the shared store's name for
    it); `local`: run by the worker of the workflow task (a marker in history, no task)."""
    if local:
        return workflow.execute_local_activity(
            Activities.TRANSCRIPT_LOCATION,
            session_id,
            result_type=str,
            start_to_close_timeout=STORE_TIMEOUT,
            retry_policy=STORE_RETRY,
        )
    return workflow.execute_activity(
        Activities.TRANSCRIPT_LOCATION,
        session_id,
        result_type=str,
        start_to_close_timeout=STORE_TIMEOUT,
        retry_policy=STORE_RETRY,
    )


def end_session_processes(
    req: EndProcessesInput, host_queue: str | None = None, local: bool = False
) -> Awaitable[EndProcessesOutput]:
    """On the shared queue (`local`: by the worker of the workflow task, any worker of that
    queue as the shared queue's task would be); with `host_queue`, on the host of the
    session's travelling workspace, which also drops its copy."""
    if local:
        return workflow.execute_local_activity(
            Activities.END_SESSION_PROCESSES,
            req,
            result_type=EndProcessesOutput,
            start_to_close_timeout=STORE_TIMEOUT,
            retry_policy=STORE_RETRY,
            summary="end the session's processes",
        )
    return workflow.execute_activity(
        Activities.END_SESSION_PROCESSES,
        req,
        task_queue=host_queue,
        schedule_to_start_timeout=_start_timeout(host_queue),
        result_type=EndProcessesOutput,
        start_to_close_timeout=STORE_TIMEOUT,
        retry_policy=STORE_RETRY,
        summary="end the session's processes",
    )


def end_tool_processes(
    req: EndToolProcessesInput, host_queue: str | None = None
) -> Awaitable[EndProcessesOutput]:
    """Where the tool ran (the shared queue's machine, or the workspace's host)."""
    return workflow.execute_activity(
        Activities.END_TOOL_PROCESSES,
        req,
        task_queue=host_queue,
        schedule_to_start_timeout=_start_timeout(host_queue),
        result_type=EndProcessesOutput,
        start_to_close_timeout=STORE_TIMEOUT,
        retry_policy=END_TOOL_PROCESSES_RETRY,
        summary="end an interrupted tool's processes",
    )


def run_hooks(
    req: HookEventInput, summary: str, host_queue: str | None = None
) -> Awaitable[HookEventResult]:
    """One event's hooks. Handlers run in parallel, so the activity may take as long as the
    slowest handler's own timeout (HOOK_TIMEOUT at least). With `host_queue`, on the worker
    holding the travelling workspace."""
    longest = max((c.timeout for c in req.commands), default=0.0)
    return workflow.execute_activity(
        Activities.RUN_HOOKS,
        req,
        task_queue=host_queue,
        schedule_to_start_timeout=_start_timeout(host_queue),
        cancellation_type=_on_interrupt(),
        result_type=HookEventResult,
        start_to_close_timeout=max(HOOK_TIMEOUT, timedelta(seconds=longest + 60)),
        heartbeat_timeout=timedelta(seconds=req.heartbeat_seconds),
        # A retry never re-runs a hook that already started (the activity's hook ledger).
        retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3),
        summary=summary,
    )
