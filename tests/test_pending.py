"""`status` says what a running prompt waits for (issue 27): the lines built from the server's
view of its pending steps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.activity.v1 import ActivityOptions
from temporalio.api.common.v1 import ActivityType
from temporalio.api.enums.v1 import PendingActivityState, PendingWorkflowTaskState
from temporalio.api.failure.v1 import Failure
from temporalio.api.workflow.v1 import PendingActivityInfo, PendingWorkflowTaskInfo

from durable_agent.cli.pending import describe_activity, describe_workflow_task, is_progress

NOW = datetime(2026, 12, 5, 12, 0, 0, tzinfo=UTC)


def _at(seconds_ago: float) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(NOW - timedelta(seconds=seconds_ago))
    return stamp


def _started(seconds_ago: float, beat_ago: float, heartbeat: int = 5) -> PendingActivityInfo:
    return PendingActivityInfo(
        activity_id="7",
        activity_type=ActivityType(name="run_tool"),
        state=PendingActivityState.PENDING_ACTIVITY_STATE_STARTED,
        attempt=1,
        last_started_time=_at(seconds_ago),
        last_heartbeat_time=_at(beat_ago),
        last_worker_identity="123@host",
        activity_options=ActivityOptions(heartbeat_timeout=Duration(seconds=heartbeat)),
    )


def test_a_step_whose_worker_went_quiet_says_it_waits_out_its_heartbeat_timeout():
    line = describe_activity(_started(40, 30), NOW, "Bash: sleep 8; echo ok", "q")
    assert line.startswith("Bash: sleep 8; echo ok: its worker (123@host)")
    assert "not been heard from for 30s" in line and "heartbeat timeout (5s)" in line
    assert "not run again" in line


def test_a_step_that_heartbeats_is_running():
    line = describe_activity(_started(40, 1), NOW, "", "q")
    assert line == "a tool call: running on 123@host for 40s (first attempt)"
    assert is_progress(line)
    assert not is_progress(describe_activity(_started(40, 30), NOW, "", "q"))


def test_a_step_retrying_after_an_error_says_when_and_why():
    info = PendingActivityInfo(
        activity_type=ActivityType(name="call_model"),
        state=PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED,
        attempt=3,
        next_attempt_schedule_time=_at(-20),
        last_failure=Failure(message="overloaded (529)\nmore"),
    )
    line = describe_activity(info, NOW, "", "q")
    assert line == "the model call: retrying in 20s (attempt 3) after: overloaded (529)"


def test_a_step_no_worker_takes_names_the_task_queue():
    info = PendingActivityInfo(
        activity_type=ActivityType(name="run_tool"),
        state=PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED,
        attempt=1,
        scheduled_time=_at(90),
    )
    line = describe_activity(info, NOW, "Write: a.txt", "durable-agent")
    assert "waiting for a worker to take it (scheduled 90s ago" in line
    assert "task queue 'durable-agent'" in line
    assert not is_progress(line)


def test_an_overdue_workflow_step_is_named_and_a_fresh_one_is_not():
    def task(ago: float) -> PendingWorkflowTaskInfo:
        return PendingWorkflowTaskInfo(
            state=PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_SCHEDULED,
            scheduled_time=_at(ago),
        )

    assert describe_workflow_task(task(2), NOW, "q") is None
    line = describe_workflow_task(task(45), NOW, "q")
    assert line is not None and "waited 45s for a worker" in line
