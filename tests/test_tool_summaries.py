"""Tool-use summaries (issue 24 item 5): after a tool batch a small-model call sums it up in
one line while the next model call runs; the line is shown at the next iteration; a failed
summary is ignored."""

from __future__ import annotations

import json
from typing import Any

from temporalio.api.enums.v1 import EventType

from durable_agent.engine.state import ProgressEvent, Terminal
from durable_agent.names import Queries
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from durable_agent.replay.cassette import ErrorReply, Turn
from durable_agent.wiring import build_worker
from tests.helpers import replay_client_factory, start_session


def is_summary(body: dict[str, Any]) -> bool:
    return "like a git commit subject" in json.dumps(body["messages"])


class Script:
    """Summary requests get `summary`; the loop's requests the turns, in order."""

    def __init__(self, turns: list[Turn], summary: Turn) -> None:
        self.turns, self.summary = list(turns), summary
        self.summaries: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any], index: int) -> Turn:
        if is_summary(body):
            self.summaries.append(body)
            return self.summary
        return self.turns.pop(0)


async def run(dev_env, store, workspace, task_queue, summary: Turn, **config: Any):
    (workspace / "a.txt").write_text("alpha\n")
    slow = text_turn("done")
    slow.event_delay = 0.4  # the next call streams for a few seconds
    script = Script([tool_turn([("r1", "Read", {"file_path": "a.txt"})]), slow], summary)
    client = dev_env.client
    with ReplayServer(script) as server:
        factory = replay_client_factory(server)
        async with build_worker(client, task_queue, store, factory):
            sid, handle = await start_session(
                client, workspace, task_queue, "read a.txt", config=config
            )
            status = await handle.result()
            query = client.get_workflow_handle(f"{sid}-q1")
            progress = await query.query(Queries.PROGRESS, 0, result_type=list[ProgressEvent])
    history = await query.fetch_history()
    return status, [e.text for e in progress], history, script


def activity_times(history) -> list[tuple[str, float, float]]:
    """(activity, scheduled, completed) in seconds, in schedule order."""
    scheduled: dict[int, tuple[str, float]] = {}
    out = []
    for event in history.events:
        when = event.event_time.ToDatetime().timestamp()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            scheduled[event.event_id] = (name, when)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            name, at = scheduled[event.activity_task_completed_event_attributes.scheduled_event_id]
            out.append((name, at, when))
    return sorted(out, key=lambda row: row[1])


async def test_the_summary_runs_beside_the_next_model_call_and_is_shown(
    dev_env, store, workspace, task_queue
):
    status, lines, history, script = await run(
        dev_env, store, workspace, task_queue, text_turn("Read a.txt: one line"),
        tool_summaries=True,
    )  # fmt: skip
    assert status.last_result is not None and status.last_result.terminal == Terminal.COMPLETED
    assert "summary: Read a.txt: one line" in lines
    (body,) = script.summaries
    assert "Read" in json.dumps(body) and "alpha" in json.dumps(body)  # the call and its result
    times = activity_times(history)
    (summary,) = [t for t in times if t[0] == "summarize_tools"]
    calls = [t for t in times if t[0] == "call_model"]
    assert len(calls) == 2
    second = calls[1]
    # Scheduled together after the batch; the summary came back while the call still streamed.
    assert abs(summary[1] - second[1]) < 0.5
    assert second[1] <= summary[2] < second[2]


async def test_a_failed_summary_is_ignored_and_off_by_default(
    dev_env, store, workspace, task_queue
):
    broken = Turn(error=ErrorReply(status=400, type="invalid_request_error", message="nope"))
    status, lines, _, script = await run(
        dev_env, store, workspace, task_queue, broken, tool_summaries=True
    )
    assert status.last_result is not None and status.last_result.terminal == Terminal.COMPLETED
    assert script.summaries and not any(line.startswith("summary:") for line in lines)
    status, lines, history, script = await run(
        dev_env, store, workspace, f"{task_queue}-off", text_turn("x")
    )
    assert status.last_result is not None and not script.summaries
    assert "summarize_tools" not in [t[0] for t in activity_times(history)]
