"""Model calls against the replay server with scripted faults: real HTTP, the real client, the
real call_model activity and Temporal's retries (time-skipping: backoff costs no wall time)."""

import json
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.service import RPCError, RPCStatusCode

from activities.transcript import StoreError, TranscriptStore
from durable_agent.engine.state import OUTPUT_RECOVERY_MESSAGE, Terminal, Transition
from durable_agent.replay import ErrorReply, Fault, ReplayServer, Turn, text_turn, tool_turn
from durable_agent.replay.cassette import message
from tests.helpers import run_session
from workflows.session import query_workflow_id


def err(status, etype="api_error", message="scripted", **headers):
    return Turn(error=ErrorReply(status=status, type=etype, message=message, headers=headers))


OVERLOADED = err(529, "overloaded_error", "Overloaded")


async def run(ts_env, store, workspace, task_queue, turns, **config):
    with ReplayServer(turns) as server:
        sid, status = await run_session(
            ts_env.client, server, store, workspace, "go", task_queue, **config
        )
    assert server.violations == []
    assert status.last_result is not None, status
    return server, status.last_result, sid


async def test_529_twice_then_success(ts_env, store, workspace, task_queue):
    server, result, _ = await run(
        ts_env, store, workspace, task_queue, [OVERLOADED, OVERLOADED, text_turn("ok")]
    )
    assert len(server.requests) == 3 and result.terminal == Terminal.COMPLETED
    assert result.retries == {"Overloaded": 2}


async def test_529_four_times_without_fallback_is_a_model_error(
    ts_env, store, workspace, task_queue
):
    server, result, _ = await run(ts_env, store, workspace, task_queue, [OVERLOADED] * 4)
    assert len(server.requests) == 4 and result.terminal == Terminal.MODEL_ERROR
    assert "still overloaded after 3 retries" in result.message


async def test_529_four_times_with_fallback_switches_model(ts_env, store, workspace, task_queue):
    turns = [OVERLOADED] * 4 + [text_turn("from the fallback")]
    server, result, _ = await run(
        ts_env, store, workspace, task_queue, turns, fallback_model="claude-fallback"
    )
    assert len(server.requests) == 5 and result.terminal == Terminal.COMPLETED
    assert [r["model"] for r in server.requests] == ["claude-sonnet-4-5"] * 4 + ["claude-fallback"]
    assert result.fallback_used and result.model == "claude-fallback"
    assert set(result.usage_by_model) == {"claude-fallback"}
    assert server.requests[4]["messages"] == server.requests[0]["messages"]


def thinking_tool_turn(signature: str, tool_id: str) -> Turn:
    content: list[dict[str, Any]] = [
        {"type": "thinking", "thinking": f"plan of {signature}", "signature": signature},
        {"type": "tool_use", "id": tool_id, "name": "Bash", "input": {"command": "echo hi"}},
    ]
    return Turn(response=message(content, "tool_use"))


def thinking_signatures(body) -> list[str]:
    return [
        b["signature"]
        for m in body["messages"]
        if m["role"] == "assistant"
        for b in m["content"]
        if b["type"] == "thinking"
    ]


async def test_after_a_fallback_only_the_earlier_models_thinking_is_dropped(
    ts_env, store, workspace, task_queue
):
    turns = [
        thinking_tool_turn("main-sig", "t1"),
        *[OVERLOADED] * 4,
        thinking_tool_turn("fallback-sig", "t2"),
        text_turn("done"),
    ]
    server, result, _ = await run(
        ts_env, store, workspace, task_queue, turns,
        fallback_model="claude-fallback", thinking_budget=2048,
    )  # fmt: skip
    assert result.terminal == Terminal.COMPLETED and result.fallback_used
    assert thinking_signatures(server.requests[1]) == ["main-sig"]  # same model: passed back
    assert thinking_signatures(server.requests[5]) == []  # the other model's signature: dropped
    # The fallback model's own thinking goes back exactly through its tool trajectory.
    assert thinking_signatures(server.requests[6]) == ["fallback-sig"]


async def test_429_honours_retry_after(ts_env, store, workspace, task_queue):
    turns = [err(429, "rate_limit_error", "slow down", **{"retry-after": "2"}), text_turn("ok")]
    server, result, sid = await run(ts_env, store, workspace, task_queue, turns)
    assert len(server.requests) == 2 and result.terminal == Terminal.COMPLETED
    history = await ts_env.client.get_workflow_handle(query_workflow_id(sid, 1)).fetch_history()
    # the model call is the first activity: from its scheduling to its (second) attempt's start
    scheduled = next(
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    )
    started = next(
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.scheduled_event_id == scheduled.event_id
    )
    waited = started.event_time.ToDatetime() - scheduled.event_time.ToDatetime()
    assert 2 <= waited.total_seconds() < 3  # the second attempt started after the server's 2 s


async def test_x_should_retry_false_is_not_retried(ts_env, store, workspace, task_queue):
    turns = [err(529, "overloaded_error", "no", **{"x-should-retry": "false"}), text_turn("never")]
    server, result, _ = await run(ts_env, store, workspace, task_queue, turns)
    assert len(server.requests) == 1 and result.terminal == Terminal.MODEL_ERROR
    assert "x-should-retry" in result.message


def streamed(fault):
    return Turn(
        response=message([{"type": "text", "text": "a long answer " * 20}], "end_turn"), fault=fault
    )


async def test_error_event_mid_stream_is_retried(ts_env, store, workspace, task_queue):
    turns = [streamed(Fault(kind="error_event", after_events=4)), text_turn("ok")]
    server, result, _ = await run(ts_env, store, workspace, task_queue, turns)
    assert len(server.requests) == 2 and result.terminal == Terminal.COMPLETED
    assert result.retries == {"Overloaded": 1}


async def test_connection_dropped_mid_stream_is_retried(ts_env, store, workspace, task_queue):
    turns = [streamed(Fault(kind="drop", after_events=4)), text_turn("ok")]
    server, result, _ = await run(ts_env, store, workspace, task_queue, turns)
    assert len(server.requests) == 2 and result.terminal == Terminal.COMPLETED
    assert sum(result.retries.values()) == 1


@pytest.mark.parametrize("fault", ["reset", "drop"])
async def test_a_connection_reset_is_recognised_through_the_sdks_wrapping(
    fault, ts_env, store, workspace, task_queue
):
    # The SDK raises APIConnectionError("Connection error.") from httpx's ReadError, itself
    # from ConnectionResetError: a reset (the client is rebuilt without keep-alive), not a
    # generic connection error.
    turns = [streamed(Fault(kind=fault, after_events=4)), text_turn("ok")]
    server, result, _ = await run(ts_env, store, workspace, task_queue, turns)
    assert len(server.requests) == 2 and result.terminal == Terminal.COMPLETED
    assert result.retries == {"ConnectionReset": 1}


async def test_an_unreachable_api_names_its_url_and_the_fix(ts_env, store, workspace, task_queue):
    with ReplayServer([]) as gone:
        pass  # its port now refuses connections
    _, status = await run_session(
        ts_env.client, gone, store, workspace, "go", task_queue, max_retries=2
    )
    result = status.last_result
    assert result is not None and result.terminal == Terminal.MODEL_ERROR
    assert f"(calling {gone.base_url})" in result.message, result.message
    assert "check ANTHROPIC_BASE_URL" in result.message and result.retries == {"ConnectionError": 2}


async def test_truncated_sse_is_retried(ts_env, store, workspace, task_queue):
    turns = [streamed(Fault(kind="truncate", after_events=5)), text_turn("ok")]
    server, result, _ = await run(ts_env, store, workspace, task_queue, turns)
    assert len(server.requests) == 2 and result.terminal == Terminal.COMPLETED
    assert result.final_text == "ok"


async def test_401_then_a_fresh_key(ts_env, store, workspace, task_queue, tmp_path, monkeypatch):
    counter = tmp_path / "count"
    helper = (
        f"n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}; echo key-$n"
    )
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"apiKeyHelper": helper}))
    monkeypatch.setenv("DURABLE_AGENT_SETTINGS", str(settings))
    turns = [err(401, "authentication_error", "invalid x-api-key"), text_turn("ok")]
    server, result, _ = await run(ts_env, store, workspace, task_queue, turns)
    assert len(server.requests) == 2 and result.terminal == Terminal.COMPLETED
    sent = [
        h.get("x-api-key") or h.get("authorization", "").removeprefix("Bearer ")
        for h in server.headers
    ]
    assert sent == ["key-1", "key-2"]


async def test_401_twice_is_a_model_error(ts_env, store, workspace, task_queue):
    turns = [err(401, "authentication_error", "invalid x-api-key")] * 2
    server, result, _ = await run(ts_env, store, workspace, task_queue, turns)
    assert len(server.requests) == 2 and result.terminal == Terminal.MODEL_ERROR


async def test_prompt_too_long_is_never_retried(ts_env, store, workspace, task_queue):
    turns = [
        err(400, "invalid_request_error", "prompt is too long: 212345 tokens > 200000 maximum"),
        err(400, "invalid_request_error", "the summary request is refused too"),
    ]
    server, result, _ = await run(ts_env, store, workspace, task_queue, turns)
    # The request is not sent again: the next one asks for a summary (reactive compact), and
    # when that fails the query ends with the parsed error.
    assert len(server.requests) == 2 and result.terminal == Terminal.PROMPT_TOO_LONG
    assert "<summary>" in json.dumps(server.requests[1]["messages"][-1])
    assert "212345 tokens > 200000" in result.message


async def test_500s_are_retried(ts_env, store, workspace, task_queue):
    server, result, _ = await run(
        ts_env, store, workspace, task_queue, [err(500)] * 3 + [text_turn("ok")]
    )
    assert len(server.requests) == 4 and result.terminal == Terminal.COMPLETED
    assert result.retries == {"ServerError": 3}


async def test_500s_give_up_after_ten_retries(ts_env, store, workspace, task_queue):
    server, result, _ = await run(ts_env, store, workspace, task_queue, [err(500)] * 12)
    assert len(server.requests) == 11 and result.terminal == Terminal.MODEL_ERROR
    assert "gave up after 10 retries" in result.message


def truncated(text):
    return Turn(response=message([{"type": "text", "text": text}], "max_tokens"))


async def test_max_tokens_escalation_then_three_recoveries_then_error(
    ts_env, store, workspace, task_queue
):
    turns = [truncated(f"part {i}") for i in range(5)]
    server, result, _ = await run(ts_env, store, workspace, task_queue, turns)
    assert len(server.requests) == 5 and result.terminal == Terminal.MODEL_ERROR
    assert (
        result.transitions
        == [Transition.MAX_OUTPUT_TOKENS_ESCALATE] + [Transition.MAX_OUTPUT_TOKENS_RECOVERY] * 3
    )
    assert [r["max_tokens"] for r in server.requests] == [8000] + [64000] * 4
    assert (
        server.requests[1]["messages"] == server.requests[0]["messages"]
    )  # escalation: same request
    recovery = server.requests[2]["messages"]
    assert recovery[-2]["content"][0]["text"] == "part 1"
    assert recovery[-1]["content"][0]["text"] == OUTPUT_RECOVERY_MESSAGE


async def test_max_tokens_recovery_that_finishes(ts_env, store, workspace, task_queue):
    turns = [truncated("a"), truncated("b"), text_turn("c")]
    server, result, _ = await run(ts_env, store, workspace, task_queue, turns)
    assert len(server.requests) == 3 and result.terminal == Terminal.COMPLETED
    assert result.transitions == [
        Transition.MAX_OUTPUT_TOKENS_ESCALATE,
        Transition.MAX_OUTPUT_TOKENS_RECOVERY,
    ]


async def test_pause_turn_is_sent_back_unchanged(ts_env, store, workspace, task_queue):
    paused = Turn(response=message([{"type": "text", "text": "working on it"}], "pause_turn"))
    server, result, _ = await run(ts_env, store, workspace, task_queue, [paused, text_turn("done")])
    assert len(server.requests) == 2 and result.terminal == Terminal.COMPLETED
    last = server.requests[1]["messages"][-1]
    assert last["role"] == "assistant" and last["content"][0]["text"] == "working on it"


async def test_refusal_ends_with_a_clear_message(ts_env, store, workspace, task_queue):
    refused = Turn(
        response=message([{"type": "text", "text": "I can't help with that."}], "refusal")
    )
    server, result, _ = await run(ts_env, store, workspace, task_queue, [refused])
    assert len(server.requests) == 1 and result.terminal == Terminal.MODEL_ERROR
    assert "refusal" in result.message


def overload_then(failures: int):
    def script(body, index):
        return OVERLOADED if index < failures else text_turn("back")

    return script


async def elapsed_hours(ts_env, sid):
    history = await ts_env.client.get_workflow_handle(query_workflow_id(sid, 1)).fetch_history()
    times = [e.event_time.ToDatetime() for e in history.events]
    return (times[-1] - times[0]).total_seconds() / 3600


async def test_unattended_rides_out_a_five_hour_overload(ts_env, store, workspace, task_queue):
    # Backoff 0.5 s doubling to the 5-minute cap: 70 failed attempts span ~5.1 hours.
    with ReplayServer(overload_then(70)) as server:
        sid, status = await run_session(
            ts_env.client, server, store, workspace, "go", task_queue, jitter=0.0, unattended=True
        )
    result = status.last_result
    assert result is not None and result.terminal == Terminal.COMPLETED
    assert len(server.requests) == 71 and result.retries == {"Overloaded": 70}
    assert 5 <= await elapsed_hours(ts_env, sid) < 6


async def test_unattended_gives_up_after_six_hours(ts_env, store, workspace, task_queue):
    # A 7-hour overload (~95 attempts): the 6-hour schedule_to_close ends it first.
    with ReplayServer(overload_then(95)) as server:
        sid, status = await run_session(
            ts_env.client, server, store, workspace, "go", task_queue, jitter=0.0, unattended=True
        )
    result = status.last_result
    assert result is not None and result.terminal == Terminal.MODEL_ERROR
    assert "gave up after 6 h of retries" in result.message and "Overloaded" in result.message
    assert 75 <= len(server.requests) < 95
    assert 5.9 <= await elapsed_hours(ts_env, sid) <= 6.1


async def test_thinking_blocks_pass_back_exactly_through_a_tool_trajectory(
    ts_env, store, workspace, task_queue
):
    thinking = {"type": "thinking", "thinking": "I should list the files.", "signature": "sig-abc"}
    first = Turn(
        response=message(
            [thinking, {"type": "tool_use", "id": "g1", "name": "Glob", "input": {"pattern": "*"}}],
            "tool_use",
        )
    )
    server, result, _ = await run(
        ts_env, store, workspace, task_queue, [first, text_turn("none")], thinking_budget=2048
    )
    assert result.terminal == Terminal.COMPLETED and len(server.requests) == 2
    assert server.requests[0]["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert server.requests[0]["max_tokens"] > 2048
    sent_back = server.requests[1]["messages"][1]["content"]
    assert sent_back[0] == thinking and sent_back[1]["id"] == "g1"


async def test_a_stalled_stream_is_cut_after_the_idle_time_and_retried(
    ts_env, store, workspace, task_queue
):
    stalled = Turn(
        response=message([{"type": "text", "text": "slow " * 20}], "end_turn"),
        pause_before={3: 6.0},
    )
    server, result, _ = await run(
        ts_env, store, workspace, task_queue, [stalled, text_turn("ok")], stream_idle_seconds=1.0
    )
    assert len(server.requests) == 2 and result.terminal == Terminal.COMPLETED
    assert result.final_text == "ok"


class _FullDiskStore(TranscriptStore):
    """Assistant entries cannot be written `failures` times (a full disk), then they can."""

    def __init__(self, root, failures):
        super().__init__(root)
        self.failures = failures

    def append(self, session_id, uuid, parent_uuid, message, **extra):
        if message.role == "assistant" and self.failures > 0:
            self.failures -= 1
            raise StoreError("could not append: No space left on device")
        return super().append(session_id, uuid, parent_uuid, message, **extra)


async def test_a_store_error_keeps_the_answer_and_never_calls_the_api_again(
    ts_env, store, workspace, task_queue
):
    flaky = _FullDiskStore(store.root, failures=3)
    server, result, sid = await run(ts_env, flaky, workspace, task_queue, [text_turn("ok")])
    assert len(server.requests) == 1
    assert result.terminal == Terminal.COMPLETED and result.final_text == "ok"
    assert [e.type for e in store.entries(sid).values()] == ["user", "assistant"]


async def test_a_store_that_stays_broken_ends_naming_the_store(
    ts_env, store, workspace, task_queue
):
    flaky = _FullDiskStore(store.root, failures=1000)
    server, result, _ = await run(ts_env, flaky, workspace, task_queue, [text_turn("ok")])
    assert len(server.requests) == 1
    assert "transcript could not be written" in result.message
    assert "No space left on device" in result.message


class _SignalsFail:
    """A Temporal client whose signals fail as in a server outage; the rest is the real one's."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.failed = 0

    def get_workflow_handle(self, *args: Any, **kwargs: Any) -> Any:
        handle = self.client.get_workflow_handle(*args, **kwargs)
        outer = self

        class Handle:
            async def signal(self, *_: Any, **__: Any) -> None:
                outer.failed += 1
                raise RPCError("tcp connect error", RPCStatusCode.UNAVAILABLE, b"")

            def __getattr__(self, name: str) -> Any:
                return getattr(handle, name)

        return Handle()


async def test_an_early_tool_signal_lost_in_an_outage_does_not_call_the_model_again(
    ts_env, store, workspace, task_queue
):
    """The signal that starts a tool while the model still streams (eager tools) is refused,
    the server being down: the tool starts once the answer is complete. A fault campaign saw
    the model step fail on it, and the model called again for the same answer."""
    from activities.model import ModelActivities
    from durable_agent.wiring import build_worker
    from tests.helpers import replay_client_factory, start_session

    turns = [tool_turn([("b1", "Bash", {"command": "echo hi"})]), text_turn("done")]
    with ReplayServer(turns) as server:
        factory = replay_client_factory(server)
        temporal = _SignalsFail(ts_env.client)
        model = ModelActivities(store, factory, temporal=temporal)  # type: ignore[arg-type]
        async with build_worker(ts_env.client, task_queue, store, factory, model=model):
            _, handle = await start_session(
                ts_env.client, workspace, task_queue, config={"eager_tools": "all"}
            )
            status = await handle.result()
    assert temporal.failed == 1  # the one early signal, refused
    assert status.last_result is not None and status.last_result.terminal == Terminal.COMPLETED
    assert len(server.requests) == 2  # the tool's answer, then the text: none made twice
    answer = server.requests[1]["messages"][-1]["content"][0]
    assert answer["tool_use_id"] == "b1" and answer["content"] == "hi"
