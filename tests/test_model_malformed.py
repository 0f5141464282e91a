"""Answers the client cannot read (issue 8): the real client against the replay server, the real
call_model activity and Temporal's retries. Each failure ends in one line naming what the API
sent, after at most 3 requests; a good answer after a bad one recovers."""

import asyncio
import time

import pytest

from durable_agent.engine.errors import (
    GAVE_UP,
    Action,
    ApiFailure,
    ErrorKind,
    RetryContext,
    classify,
)
from durable_agent.engine.state import Terminal
from durable_agent.replay import Fault, ReplayServer, Turn, text_turn, tool_turn
from durable_agent.replay.cassette import BAD_TOOL_JSON, message
from tests.helpers import run_session

BOUND = 3


def test_unreadable_answers_get_three_tries_in_all_whatever_came_between():
    bad = ApiFailure(status=200, message="the API sent …", malformed=True)
    overloaded = ApiFailure(status=529, error_type="overloaded_error")
    first = classify(bad, RetryContext(attempt=1))
    assert (first.kind, first.action, first.track.malformed) == (
        ErrorKind.MALFORMED,
        Action.RETRY,
        1,
    )
    between = classify(overloaded, RetryContext(attempt=2, track=first.track))
    second = classify(bad, RetryContext(attempt=3, track=between.track))
    assert second.action == Action.RETRY and second.delay_seconds is not None
    third = classify(bad, RetryContext(attempt=4, track=second.track))
    assert third.action == Action.FAIL and third.error_type == GAVE_UP and not third.retryable
    assert third.message == "the API sent … (gave up after 3 unreadable answers)"


def streamed(fault: Fault) -> Turn:
    return Turn(
        response=message([{"type": "text", "text": "a long answer " * 20}], "end_turn"), fault=fault
    )


def bash_turn(fault: Fault | None = None) -> Turn:
    turn = tool_turn([("toolu_x", "Bash", {"command": "echo hi"})])
    return turn.model_copy(update={"fault": fault})


async def run(ts_env, store, workspace, task_queue, turns, **config):
    with ReplayServer(turns) as server:
        _, status = await run_session(
            ts_env.client, server, store, workspace, "go", task_queue, **config
        )
    assert server.violations == []
    assert status.last_result is not None, status
    return server, status.last_result


def assert_one_clear_line(text: str) -> None:
    assert "\n" not in text and "Traceback" not in text
    for raw in ("JSONDecodeError", "ValueError", "AssertionError", "ValidationError", "Unable to"):
        assert raw not in text, text


CASES = {
    "garbage_event": (
        lambda: streamed(Fault(kind="garbage_event", after_events=5)),
        [
            "MalformedResponse: the API sent a malformed SSE event after 4 events",
            "data line is not JSON: '<html>not json</html>'",
        ],
    ),
    "bad_tool_json": (
        lambda: bash_turn(Fault(kind="bad_tool_json")),
        [
            "the API sent tool_use toolu_x (Bash) whose input is not valid JSON",
            "key must be a string",
            repr(BAD_TOOL_JSON),
        ],
    ),
    "error_event_not_json": (
        lambda: streamed(Fault(kind="error_event", after_events=5, body="<html>upstream</html>")),
        ["the API sent an `error` event after 4 events that is not an API error", "<html>"],
    ),
    "html_200": (
        lambda: streamed(Fault(kind="non_json_200")),
        [
            "the API answered 200 with a non-JSON body (text/html; charset=utf-8)",
            "'<!DOCTYPE html> <html><head><title>502 Bad Gateway</title>",
        ],
    ),
    "html_200_as_event_stream": (
        lambda: streamed(Fault(kind="non_json_200", content_type="text/event-stream")),
        ["the API answered 200 but sent no SSE events"],
    ),
    "truncated": (
        lambda: streamed(Fault(kind="truncate", after_events=5)),
        ["the API's stream ended after 4 events, without message_stop"],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_an_unreadable_answer_ends_after_three_requests_naming_what_was_sent(
    case, ts_env, store, workspace, task_queue
):
    make, needles = CASES[case]
    server, result = await run(ts_env, store, workspace, task_queue, [make()] * 10)
    assert len(server.requests) == BOUND and result.terminal == Terminal.MODEL_ERROR
    assert_one_clear_line(result.message)
    for needle in needles:
        assert needle in result.message, result.message
    assert result.message.endswith(f"(gave up after {BOUND} unreadable answers)"), result.message
    assert result.retries == {"MalformedResponse": BOUND - 1}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_an_unreadable_answer_then_a_good_one_recovers(
    case, ts_env, store, workspace, task_queue
):
    make, _ = CASES[case]
    server, result = await run(ts_env, store, workspace, task_queue, [make(), text_turn("ok")])
    assert len(server.requests) == 2 and result.terminal == Terminal.COMPLETED
    assert result.final_text == "ok" and result.retries == {"MalformedResponse": 1}


async def test_a_bad_tool_input_retried_then_the_tool_runs(ts_env, store, workspace, task_queue):
    turns = [bash_turn(Fault(kind="bad_tool_json")), bash_turn(), text_turn("done")]
    server, result = await run(ts_env, store, workspace, task_queue, turns)
    assert len(server.requests) == 3 and result.terminal == Terminal.COMPLETED
    answered = server.requests[2]["messages"][-1]["content"][0]
    assert answered["tool_use_id"] == "toolu_x" and "hi" in str(answered["content"])
    assert result.retries == {"MalformedResponse": 1}


async def test_an_unknown_content_block_is_left_out_and_the_answer_kept(
    ts_env, store, workspace, task_queue
):
    turns = [
        bash_turn(Fault(kind="unknown_block", block_type="hologram")),
        text_turn("done").model_copy(update={"fault": Fault(kind="unknown_block")}),
    ]
    server, result = await run(ts_env, store, workspace, task_queue, turns)
    assert len(server.requests) == 2 and result.terminal == Terminal.COMPLETED
    assert result.final_text == "done" and result.retries == {}
    sent_back = server.requests[1]["messages"][1]
    assert [b["type"] for b in sent_back["content"]] == ["tool_use"]


def wait_until(check, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


async def test_a_stalled_stream_is_closed_by_the_client_and_retried(
    ts_env, store, workspace, task_queue
):
    stalled = streamed(Fault(kind="stall", after_events=4, seconds=120))
    with ReplayServer([stalled, text_turn("ok")]) as server:
        _, status = await run_session(
            ts_env.client, server, store, workspace, "go", task_queue, stream_idle_seconds=1.0
        )
        # (a whole stream's connection stays open for the next request: the stalled one's
        # hangup is what shows)
        closed = await asyncio.to_thread(wait_until, lambda: len(server.hangups) >= 1)
    result = status.last_result
    assert result is not None and result.terminal == Terminal.COMPLETED
    assert len(server.requests) == 2 and result.final_text == "ok"
    # The server was still holding the stalled stream open (for 120 s): the client hung up, and
    # did so before it sent the retry, not when the worker's client was discarded at the end.
    assert len(server.hangups) == 1 and closed
    assert server.request_times[0] < server.hangups[0] < server.request_times[1]
