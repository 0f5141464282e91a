"""Cassettes: scripted Messages API turns, and the SSE events a turn streams as."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field


class ErrorReply(BaseModel):
    """An HTTP error the server answers with instead of a message."""

    status: int
    type: str = "api_error"
    message: str = "scripted error"
    headers: dict[str, str] = Field(default_factory=dict)


class Expect(BaseModel):
    """Checks on the request; a mismatch is answered 400 and recorded as a violation."""

    last_user_contains: list[str] = Field(default_factory=list)
    """Substrings that must occur in the JSON of the request's last user message."""
    model: str | None = None


PROXY_PAGE = (
    "<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\n"
    "<body><h1>502 Bad Gateway</h1><p>The upstream server did not answer.</p></body></html>\n"
)


class Fault(BaseModel):
    """Break a streamed response, most kinds after `after_events` SSE events.

    drop: close the connection mid-event (a reset);
    reset: (`after_events` unused) reset the connection before any answer (ECONNRESET);
    truncate: end the stream cleanly but early (no message_stop);
    error_event: send an `error` event (type `error_type`), as the API does when it overloads
    (with `body`, that data line instead);
    garbage_event: send a `content_block_delta` event whose `data:` line is `body` (default: not
    JSON), then end the stream;
    stall: send nothing more for `seconds`, then end the stream (the server notices, and counts
    in `ReplayServer.hangups`, a client that closes the connection meanwhile);
    bad_tool_json: (`after_events` unused) the first tool_use block's input_json_delta pieces
    form invalid JSON (`{"command": "ls", oops}`), the rest of the stream is as scripted;
    unknown_block: (`after_events` unused) one more content block, of type `block_type`, is
    streamed after the scripted ones (content_block_start + content_block_stop);
    non_json_200: (`after_events` unused) the whole answer is HTTP 200 with content type
    `content_type` and body `body` (default: a proxy's HTML error page), streaming or not.
    """

    kind: Literal[
        "drop",
        "reset",
        "truncate",
        "error_event",
        "garbage_event",
        "stall",
        "bad_tool_json",
        "unknown_block",
        "non_json_200",
    ]
    after_events: int = 3
    error_type: str = "overloaded_error"
    body: str | None = None
    """garbage_event, error_event: the data line (default `<html>not json</html>`, an API
    error); non_json_200: the body
    (default PROXY_PAGE)."""
    content_type: str = "text/html; charset=utf-8"
    """non_json_200: the content-type header."""
    block_type: str = "hologram"
    """unknown_block: the block type the client does not know."""
    seconds: float = 3600.0
    """stall: how long to send nothing."""


BAD_TOOL_JSON = '{"command": "ls", oops}'


def turn_events(turn: Turn, model: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The SSE events of `turn`'s response, with a bad_tool_json / unknown_block fault applied."""
    assert turn.response is not None
    events = sse_events(turn.response, model)
    kind = turn.fault.kind if turn.fault is not None else None
    if kind == "bad_tool_json":
        events = _bad_tool_json(events)
    elif kind == "unknown_block":
        assert turn.fault is not None
        events = _with_block(events, len(turn.response.get("content", [])), turn.fault.block_type)
    yield from events


def _bad_tool_json(
    events: Iterator[tuple[str, dict[str, Any]]],
) -> Iterator[tuple[str, dict[str, Any]]]:
    target: int | None = None
    done = False
    for name, data in events:
        block = data.get("content_block") or {}
        if name == "content_block_start" and block.get("type") == "tool_use" and target is None:
            target = data["index"]
        delta = data.get("delta") or {}
        if target is not None and data.get("index") == target and "partial_json" in delta:
            if not done:
                done = True
                for piece in _chunks(BAD_TOOL_JSON):
                    yield name, _delta(target, {"type": "input_json_delta", "partial_json": piece})
            continue
        yield name, data


def _with_block(
    events: Iterator[tuple[str, dict[str, Any]]], index: int, block_type: str
) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, data in events:
        if name == "message_delta":
            yield "content_block_start", _start(index, {"type": block_type})
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
        yield name, data


class Turn(BaseModel):
    """One request's answer: a `response` (a Messages API message) or an `error`."""

    response: dict[str, Any] | None = None
    error: ErrorReply | None = None
    expect: Expect | None = None
    event_delay: float = 0.0
    """Seconds to wait between SSE events (for slow-stream tests)."""
    pause_before: dict[int, float] = Field(default_factory=dict)
    """Seconds to wait before sending SSE event number N (0-based), to shape a stream in time."""
    fault: Fault | None = None


def load_cassette(path: Path) -> list[Turn]:
    turns = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                turns.append(Turn.model_validate_json(line))
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: not a cassette turn: {exc}") from exc
    return turns


def save_turn(path: Path, turn: Turn) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(turn.model_dump_json(exclude_none=True, exclude_defaults=True) + "\n")


def text_turn(text: str, **usage: int) -> Turn:
    return Turn(response=message([{"type": "text", "text": text}], "end_turn", **usage))


def tool_turn(calls: list[tuple[str, str, dict[str, Any]]], text: str = "", **usage: int) -> Turn:
    """A turn asking for tools: calls are (id, name, input)."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks += [{"type": "tool_use", "id": i, "name": n, "input": inp} for i, n, inp in calls]
    return Turn(response=message(blocks, "tool_use", **usage))


def message(content: list[dict[str, Any]], stop_reason: str, **usage: int) -> dict[str, Any]:
    """A Messages API message; `web_search_requests` in `usage` adds its `server_tool_use`."""
    searches = usage.get("web_search_requests")
    return {
        "id": "msg_replay",
        "type": "message",
        "role": "assistant",
        "model": "replay",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": usage.get("input_tokens", 100),
            "output_tokens": usage.get("output_tokens", 20),
            "cache_creation_input_tokens": usage.get("cache_creation_input_tokens", 0),
            "cache_read_input_tokens": usage.get("cache_read_input_tokens", 0),
            **({"server_tool_use": {"web_search_requests": searches}} if searches else {}),
        },
    }


def _chunks(text: str, parts: int = 3) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


def sse_events(msg: dict[str, Any], model: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The (event, data) pairs a streaming Messages API response sends for `msg`: a tool_use's
    or server_tool_use's input in input_json_delta pieces, a text's citations as citations_delta,
    any other block (web_search_tool_result, …) whole in its content_block_start."""
    usage = dict(msg.get("usage") or {})
    start = {
        **msg,
        "model": msg.get("model") if msg.get("model") not in (None, "replay") else model,
        "content": [],
        "stop_reason": None,
        "usage": {**usage, "output_tokens": 1},
    }
    yield "message_start", {"type": "message_start", "message": start}
    yield "ping", {"type": "ping"}
    for index, block in enumerate(msg.get("content", [])):
        kind = block.get("type")
        if kind == "text":
            yield "content_block_start", _start(index, {"type": "text", "text": ""})
            for citation in block.get("citations") or []:
                yield (
                    "content_block_delta",
                    _delta(index, {"type": "citations_delta", "citation": citation}),
                )
            for piece in _chunks(block.get("text", "")):
                yield "content_block_delta", _delta(index, {"type": "text_delta", "text": piece})
        elif kind in ("tool_use", "server_tool_use"):
            yield "content_block_start", _start(index, {**block, "input": {}})
            for piece in _chunks(json.dumps(block.get("input", {}))):
                yield (
                    "content_block_delta",
                    _delta(index, {"type": "input_json_delta", "partial_json": piece}),
                )
        elif kind == "thinking":
            yield (
                "content_block_start",
                _start(index, {"type": "thinking", "thinking": "", "signature": ""}),
            )
            for piece in _chunks(block.get("thinking", "")):
                yield (
                    "content_block_delta",
                    _delta(index, {"type": "thinking_delta", "thinking": piece}),
                )
            yield (
                "content_block_delta",
                _delta(index, {"type": "signature_delta", "signature": block.get("signature", "")}),
            )
        else:
            yield "content_block_start", _start(index, block)
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    end_usage = {"output_tokens": usage.get("output_tokens", 0)}
    if "server_tool_use" in usage:  # the API's searches are counted at the end too
        end_usage["server_tool_use"] = usage["server_tool_use"]
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {
                "stop_reason": msg.get("stop_reason"),
                "stop_sequence": msg.get("stop_sequence"),
            },
            "usage": end_usage,
        },
    )
    yield "message_stop", {"type": "message_stop"}


def _start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def _delta(index: int, delta: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def timed_tool_turn(
    calls: list[tuple[str, str, dict[str, Any]]], ready_at: list[float], end_at: float
) -> Turn:
    """A tool turn whose tool_use blocks complete at `ready_at` seconds and whose stream ends at
    `end_at` seconds (for streaming-execution tests and benchmarks)."""
    turn = tool_turn(calls)
    assert turn.response is not None
    events = list(sse_events(turn.response, "replay"))
    starts = [i for i, (name, _) in enumerate(events) if name == "content_block_start"]
    end = next(i for i, (name, _) in enumerate(events) if name == "message_delta")
    pauses: dict[int, float] = {}
    clock = 0.0
    for start, when in zip(starts, ready_at, strict=True):
        pauses[start] = max(0.0, when - clock)
        clock = when
    pauses[end] = max(0.0, end_at - clock)
    return turn.model_copy(update={"pause_before": pauses})
