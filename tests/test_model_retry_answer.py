"""A model call retried after its answer was stored (the completion lost: the worker or the
Temporal server died between the append and the report) answers with the stored answer.

The API answers each request anew, with new tool_use ids; the transcript holds the first
answer's. Before, the retry streamed again and reported the new answer's ids while the store
kept the old entry ("append once"): the tool was answered with "could not be loaded", never
run, and every later request paired a tool_use with another id's tool_result (a 400 from the
real API). Found by a fault campaign (the dev server killed 30 ms after an answer was served).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from temporalio.testing import ActivityEnvironment

from activities.model import ModelActivities
from activities.transcript import TranscriptStore
from durable_agent.engine.messages import Message
from durable_agent.replay import ReplayServer, Turn, tool_turn
from tests.helpers import replay_client_factory
from tests.test_event_loop import call_input


def new_ids(body: dict[str, Any], index: int) -> Turn:
    """As the real API: each answer's tool_use ids are its own."""
    return tool_turn([(f"toolu_{index}", "Bash", {"command": "true"})])


def attempt(number: int) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=number)
    return env


def stored_ids(store: TranscriptStore, uuid: str) -> list[str]:
    message = store.entries("s")[uuid].message
    assert message is not None
    return [b.id for b in message.tool_uses()]


async def test_a_retry_after_the_answer_was_stored_reports_that_answer_without_a_call(
    tmp_path: Path,
) -> None:
    store = TranscriptStore(tmp_path / "state")
    req = call_input(tmp_path)
    with ReplayServer(new_ids, strict=False) as server:
        first = await attempt(1).run(
            ModelActivities(store, replay_client_factory(server)).call_model, req
        )
        # the next attempt, on a worker that never saw the first (no answer in its memory)
        again = await attempt(2).run(
            ModelActivities(store, replay_client_factory(server)).call_model, req
        )
        assert len(server.requests) == 1  # the API was not asked again
    assert [c.id for c in first.tool_calls] == ["toolu_0"]
    assert [c.id for c in again.tool_calls] == ["toolu_0"] == stored_ids(store, "a1")
    assert (again.stop_reason, again.usage, again.model) == (
        first.stop_reason,
        first.usage,
        first.model,
    )
    assert again.attempt == 2


async def test_an_answer_stored_by_another_attempt_meanwhile_is_the_answer(
    tmp_path: Path,
) -> None:
    """Two attempts at once (the first still streaming when its heartbeat timed out): the one
    that stores first wins, and the other reports that answer, not its own."""
    store = TranscriptStore(tmp_path / "state")
    req = call_input(tmp_path)

    def other_attempt_finishes_first(body: dict[str, Any], index: int) -> Turn:
        other = tool_turn([("toolu_other", "Bash", {"command": "true"})]).response
        assert other is not None
        message = Message.model_validate(
            {"role": "assistant", "content": other["content"], "stop_reason": "tool_use"}
        )
        store.append("s", "a1", "u1", message)
        return new_ids(body, index)

    with ReplayServer(other_attempt_finishes_first, strict=False) as server:
        out = await attempt(2).run(
            ModelActivities(store, replay_client_factory(server)).call_model, req
        )
        assert len(server.requests) == 1
    assert [c.id for c in out.tool_calls] == ["toolu_other"] == stored_ids(store, "a1")
