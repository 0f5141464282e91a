"""What a running prompt waits for, as the server sees it: its pending activities and its next
workflow step. After an outage this is the answer to "why is nothing happening?" — a step whose
completion was lost and waits out its heartbeat timeout, a step no worker has picked up, a step
retrying after an error — so `status` never shows a silent wait."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import (
    EventType,
    PendingActivityState,
    PendingWorkflowTaskState,
    TaskQueueType,
)
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflow.v1 import PendingActivityInfo, PendingWorkflowTaskInfo
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    GetWorkflowExecutionHistoryReverseRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError

from durable_agent import temporal_config
from durable_agent.devserver import full_disk
from durable_agent.paths import state_home

STEP_NAMES = {
    "call_model": "the model call",
    "run_tool": "a tool call",
    "run_hooks": "hooks",
    "run_stop_hooks": "Stop hooks",
    "autocompact": "a compaction",
    "append_entry": "a transcript write",
}
QUIET_WORKFLOW_TASK = timedelta(seconds=10)
"""A workflow step scheduled this long ago and not started has no worker taking it."""


def _seconds(delta: timedelta) -> str:
    seconds = max(delta.total_seconds(), 0.0)
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.0f}m"


def _when(stamp: datetime | None, now: datetime) -> str:
    return "never" if stamp is None else f"{_seconds(now - stamp)} ago"


def _time(info: object, field: str) -> datetime | None:
    if not info.HasField(field):  # type: ignore[attr-defined]
        return None
    return getattr(info, field).ToDatetime(tzinfo=UTC)


def is_progress(line: str) -> bool:
    """A step running with its worker heard from: plain progress, not a wait worth showing."""
    return ": running on " in line and "; last error:" not in line


def describe_activity(
    info: PendingActivityInfo,
    now: datetime,
    summary: str,
    task_queue: str,
    tenant: str = "",
    polled: bool = False,
) -> str:
    """One line: which step, in what state, and what happens next without anyone acting.
    `tenant`: the session's fairness key; `polled`: workers poll the step's queue (so a step of
    a tenant's session that waits is waiting for its share, not for a worker)."""
    task_queue = activity_queue(info, task_queue)
    name = summary or STEP_NAMES.get(info.activity_type.name, info.activity_type.name)
    attempt = f"attempt {info.attempt}" if info.attempt > 1 else "first attempt"
    failure = (
        info.last_failure.message.strip().splitlines()[0][:400] if info.last_failure.message else ""
    )
    if info.paused:
        return f"{name}: paused ({attempt}); unpause it in the Temporal UI or CLI"
    if info.state == PendingActivityState.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED:
        return f"{name}: being cancelled, waiting for it to stop ({attempt})"
    if info.state == PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED:
        retry_at = _time(info, "next_attempt_schedule_time")
        if failure and retry_at is not None and retry_at > now:
            return f"{name}: retrying in {_seconds(retry_at - now)} ({attempt}) after: {failure}"
        scheduled = _time(info, "scheduled_time")
        if tenant and polled and not failure:
            return (
                f"{name}: waiting for its share — tenant {tenant!r}, scheduled "
                f"{_when(scheduled, now)}; the workers of task queue {task_queue!r} are busy "
                "with other sessions"
            )
        line = f"{name}: waiting for a worker to take it (scheduled {_when(scheduled, now)}, {attempt})"
        if failure:
            line += f"; last error: {failure}"
        return line + f" — is a worker running on task queue {task_queue!r}?"
    started = _time(info, "last_started_time")
    # This attempt's start when it has not beaten yet: the server keeps an earlier attempt's
    # last heartbeat time across a retry.
    beats = [t for t in (_time(info, "last_heartbeat_time"), started) if t is not None]
    beat = max(beats) if beats else None
    timeout = info.activity_options.heartbeat_timeout.ToTimedelta()
    worker = info.last_worker_identity or "a worker"
    line = f"{name}: running on {worker} for {_when(started, now).removesuffix(' ago')} ({attempt})"
    if timeout and beat is not None and now - beat > timeout:
        return (
            f"{name}: its worker ({worker}) has not been heard from for {_seconds(now - beat)} "
            f"(its result may have been lost in an outage, or the worker died); Temporal "
            f"retries it when its heartbeat timeout ({_seconds(timeout)}) is noticed, and a "
            "tool with side effects is not run again"
        )
    if failure:
        line += f"; last error: {failure}"
    return line


def describe_workflow_task(
    info: PendingWorkflowTaskInfo, now: datetime, task_queue: str
) -> str | None:
    """A line when the workflow's own next step is overdue; None when it is not."""
    if info.state != PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_SCHEDULED:
        return None
    scheduled = _time(info, "scheduled_time")
    if scheduled is None or now - scheduled < QUIET_WORKFLOW_TASK:
        return None
    return (
        f"the workflow's next step has waited {_seconds(now - scheduled)} for a worker "
        f"— is a worker running on task queue {task_queue!r}?"
    )


async def waiting_lines(client: Client, workflow_id: str) -> list[str]:
    """What a running workflow waits for, a line each; none when it cannot be described."""
    try:
        desc = await client.get_workflow_handle(workflow_id).describe(
            rpc_timeout=timedelta(seconds=10)
        )
    except RPCError:
        return []
    raw = desc.raw_description
    now = datetime.now(UTC)
    summaries = await _summaries(client, workflow_id) if raw.pending_activities else {}
    tenant = raw.workflow_execution_info.priority.fairness_key
    waiting = {
        activity_queue(a, desc.task_queue)
        for a in raw.pending_activities
        if a.state == PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED
    }
    polled = {q for q in waiting if tenant and await _polled(client, q)}
    lines = [
        describe_activity(
            a,
            now,
            summaries.get(a.activity_id, ""),
            desc.task_queue,
            tenant,
            activity_queue(a, desc.task_queue) in polled,
        )
        for a in raw.pending_activities
    ]
    if raw.HasField("pending_workflow_task"):
        line = describe_workflow_task(raw.pending_workflow_task, now, desc.task_queue)
        if line:
            lines.append(line)
    return lines


def activity_queue(info: PendingActivityInfo, task_queue: str) -> str:
    """The queue a pending step is on: its own (the fleet's model queue, a workspace host's),
    else its workflow's."""
    return info.activity_options.task_queue.name or task_queue


async def _polled(client: Client, task_queue: str) -> bool:
    """Whether any worker has polled `task_queue` for activities lately."""
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
    )
    try:
        found = await client.workflow_service.describe_task_queue(
            request, timeout=timedelta(seconds=5)
        )
    except RPCError:
        return False
    return bool(found.pollers)


def with_disk(line: str) -> str:
    """`line`, naming the state dir's disk when it is full (the embedded server's case)."""
    if not temporal_config.external() and (disk := full_disk(state_home(), line)):
        return f"{line} — {disk}"
    return line


async def stalled_lines(client: Client, workflow_id: str) -> list[str]:
    """Only the waits that are not plain progress (a step whose worker went quiet, a retry, a
    step no worker takes): what a watching CLI shows when nothing has happened for a while."""
    lines = await waiting_lines(client, workflow_id)
    return [with_disk(line) for line in lines if not is_progress(line)]


async def session_waiting_lines(client: Client, session_id: str) -> list[str]:
    """What a session's running prompts wait for, found on the server alone (no worker needs to
    answer a query): the session's own steps, then each running child's."""
    try:
        desc = await client.get_workflow_handle(session_id).describe(
            rpc_timeout=timedelta(seconds=10)
        )
    except RPCError:
        return []
    lines = await waiting_lines(client, session_id)
    for child in desc.raw_description.pending_children:
        lines.append(f"running: {child.workflow_id}")
        lines += await waiting_lines(client, child.workflow_id)
    return lines


async def _summaries(client: Client, workflow_id: str) -> dict[str, str]:
    """Activity id → its summary ("Bash: sleep 8"), from the newest page of its history."""
    try:
        reverse = await client.workflow_service.get_workflow_execution_history_reverse(
            GetWorkflowExecutionHistoryReverseRequest(
                namespace=client.namespace,
                execution=WorkflowExecution(workflow_id=workflow_id),
                maximum_page_size=200,
            ),
            timeout=timedelta(seconds=10),
        )
    except RPCError:
        return {}
    found: dict[str, str] = {}
    for event in reverse.history.events:
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        attrs = event.activity_task_scheduled_event_attributes
        payload = event.user_metadata.summary
        if payload.data:
            try:
                found.setdefault(attrs.activity_id, str(json.loads(payload.data)))
            except ValueError:
                found.setdefault(attrs.activity_id, payload.data.decode(errors="replace"))
    return found
