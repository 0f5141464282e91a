"""The Messages API request for a transcript chain: pure, so every rule is unit-tested."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from durable_agent.engine.messages import TranscriptEntry, to_api_messages
from durable_agent.engine.tools import TOOL_SPECS

THINKING_TYPES = ("thinking", "redacted_thinking")
CACHE_CONTROL = {"type": "ephemeral"}
THINKING_HEADROOM = 1024
"""max_tokens must exceed the thinking budget; this much room is left for the answer at least."""


class ModelRequest(BaseModel):
    """What varies between calls of one query (the loop's recoveries change these)."""

    model: str
    max_tokens: int
    thinking_budget: int | None = None
    strip_thinking: bool = False
    """Drop earlier thinking blocks: after a fallback their signatures cannot be verified."""
    prompt_caching: bool = True


def build_request(
    chain: list[TranscriptEntry], system: str, tools: tuple[str, ...], req: ModelRequest
) -> dict[str, Any]:
    messages = to_api_messages(chain)
    keep_thinking = req.thinking_budget is not None and not req.strip_thinking
    messages = [_clean(m, keep_thinking) for m in messages]
    messages = [m for m in messages if m["content"]]
    system_block: dict[str, Any] = {"type": "text", "text": system}
    if req.prompt_caching:
        system_block["cache_control"] = CACHE_CONTROL
        _cache_last_block(messages)
    request: dict[str, Any] = {
        "model": req.model,
        "max_tokens": req.max_tokens,
        "system": [system_block],
        "messages": messages,
        "tools": [TOOL_SPECS[n].api_tool() for n in tools if n in TOOL_SPECS],
    }
    if req.thinking_budget is not None:
        request["thinking"] = {"type": "enabled", "budget_tokens": req.thinking_budget}
        request["max_tokens"] = max(req.max_tokens, req.thinking_budget + THINKING_HEADROOM)
    return request


def _clean(message: dict[str, Any], keep_thinking: bool) -> dict[str, Any]:
    """Thinking blocks pass back exactly as received, but never without thinking enabled and
    never as an assistant message's last block."""
    if message["role"] != "assistant":
        return message
    blocks = message["content"]
    if not keep_thinking:
        blocks = [b for b in blocks if b.get("type") not in THINKING_TYPES]
    while blocks and blocks[-1].get("type") in THINKING_TYPES:
        blocks = blocks[:-1]
    return {**message, "content": blocks}


def _cache_last_block(messages: list[dict[str, Any]]) -> None:
    if not messages:
        return
    blocks = messages[-1]["content"]
    for i in range(len(blocks) - 1, -1, -1):
        if blocks[i].get("type") not in THINKING_TYPES:
            blocks[i] = {**blocks[i], "cache_control": CACHE_CONTROL}
            return
