"""The fake Messages API, exercised with the real anthropic client over real HTTP."""

import json

import anthropic
import pytest

from durable_agent.replay import ErrorReply, Expect, ReplayServer, Turn, text_turn, tool_turn
from durable_agent.replay.cassette import load_cassette, save_turn
from durable_agent.replay.record import RecordingProxy


def client(url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(api_key="k", base_url=url, max_retries=0)


async def stream(url: str, messages: list, **extra) -> anthropic.types.Message:
    async with client(url).messages.stream(
        model="m", max_tokens=100, messages=messages, **extra
    ) as s:
        kinds = [event.type async for event in s]
        final = await s.get_final_message()
    assert "content_block_delta" in kinds and kinds[-1] == "message_stop"
    return final


HELLO = [{"role": "user", "content": "hi"}]


async def test_text_and_tool_use_stream_as_real_sse():
    turns = [
        tool_turn([("t1", "Read", {"file_path": "a b.py", "limit": 5})], "reading"),
        text_turn("bye"),
    ]
    with ReplayServer(turns) as server:
        first = await stream(server.base_url, HELLO)
        assert first.stop_reason == "tool_use" and first.model == "m"
        assert first.content[0].type == "text" and first.content[0].text == "reading"
        tool = first.content[1]
        assert tool.type == "tool_use" and tool.input == {"file_path": "a b.py", "limit": 5}
        follow = [
            *HELLO,
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}],
            },
        ]
        second = await stream(server.base_url, follow)
        assert second.content[0].text == "bye"  # type: ignore[union-attr]
    assert server.violations == [] and len(server.requests) == 2


async def test_unanswered_tool_use_is_rejected_like_the_real_api():
    turns = [tool_turn([("t1", "Read", {"file_path": "a"})]), text_turn("never")]
    with ReplayServer(turns) as server:
        first = await stream(server.base_url, HELLO)
        bad = [
            *HELLO,
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": "I ignore your tool call"},
        ]
        with pytest.raises(anthropic.BadRequestError) as err:
            await stream(server.base_url, bad)
    assert "do not answer tool_use ids ['t1']" in str(err.value)
    assert len(server.violations) == 1


@pytest.mark.parametrize(
    ("status", "etype", "exc"),
    [
        (529, "overloaded_error", anthropic.InternalServerError),
        (429, "rate_limit_error", anthropic.RateLimitError),
        (401, "authentication_error", anthropic.AuthenticationError),
    ],
)
async def test_scripted_errors_reach_the_client(status, etype, exc):
    turns = [
        Turn(
            error=ErrorReply(
                status=status, type=etype, message="scripted", headers={"retry-after": "2"}
            )
        )
    ]
    with ReplayServer(turns) as server:
        with pytest.raises(exc) as err:
            await stream(server.base_url, HELLO)
    assert err.value.status_code == status
    assert err.value.response.headers["retry-after"] == "2"


async def test_expectations_and_exhaustion_are_violations():
    turns = [Turn(response=text_turn("x").response, expect=Expect(last_user_contains=["needle"]))]
    with ReplayServer(turns) as server:
        with pytest.raises(anthropic.BadRequestError):
            await stream(server.base_url, HELLO)
        with pytest.raises(anthropic.BadRequestError):
            await stream(server.base_url, HELLO)
    assert "needle" in server.violations[0] and "only 1 turns" in server.violations[1]


async def test_record_mode_writes_a_cassette_that_replays(tmp_path):
    cassette = tmp_path / "rec.jsonl"
    upstream_turns = [
        tool_turn([("t9", "Grep", {"pattern": "x", "-i": True})], "hm"),
        Turn(error=ErrorReply(status=529, type="overloaded_error", message="busy")),
    ]
    with (
        ReplayServer(upstream_turns, strict=False) as upstream,
        RecordingProxy(cassette, upstream.base_url) as proxy,
    ):
        recorded = await stream(proxy.base_url, HELLO)
        with pytest.raises(anthropic.InternalServerError):
            await stream(proxy.base_url, HELLO)
    assert recorded.content[1].input == {"pattern": "x", "-i": True}  # type: ignore[union-attr]
    turns = load_cassette(cassette)
    assert len(turns) == 2 and turns[1].error is not None and turns[1].error.status == 529
    with ReplayServer(turns[:1]) as again:
        replayed = await stream(again.base_url, HELLO)
    assert [b.model_dump() for b in replayed.content] == [b.model_dump() for b in recorded.content]


def test_cassette_errors_name_the_line(tmp_path):
    path = tmp_path / "c.jsonl"
    save_turn(path, text_turn("ok"))
    with open(path, "a") as f:
        f.write(json.dumps({"response": 5}) + "\n")
    with pytest.raises(ValueError, match="c.jsonl:2"):
        load_cassette(path)
