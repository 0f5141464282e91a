"""Token accounting, thresholds and the request-view transforms that keep context bounded.

Every function is pure. The transforms run, in this order, when a request is built:
tool-result budget → snip → microcompact → collapse; autocompact is an activity.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from durable_agent.engine.messages import Usage

DEFAULT_CONTEXT_WINDOW = 200_000
LARGE_CONTEXT_WINDOW = 1_000_000
SUMMARY_RESERVE_TOKENS = 20_000
AUTOCOMPACT_BUFFER_TOKENS = 13_000
WARNING_BUFFER_TOKENS = 20_000
BLOCKING_BUFFER_TOKENS = 3_000
MAX_CONSECUTIVE_AUTOCOMPACT_FAILURES = 3
IMAGE_TOKENS = 2_000
CLEARED_MARKER = "[Old tool result content cleared]"
COMPACTABLE_TOOLS = frozenset(
    {"Read", "Write", "Edit", "Bash", "Grep", "Glob", "WebSearch", "WebFetch"}
)
"""Whose old results microcompact clears (the reference's list); a todo list's answer, a
loaded skill's instructions (they still apply) stay."""
PREVIEW_CHARS = 2_000


def estimate_text_tokens(text: str) -> int:
    """A fast local estimate: 4 bytes a token."""
    return (len(text.encode("utf-8")) + 3) // 4


def estimate_block_tokens(block: dict[str, Any]) -> int:
    kind = block.get("type")
    if kind == "image":
        return IMAGE_TOKENS
    if kind == "text":
        return estimate_text_tokens(block.get("text", ""))
    if kind == "tool_result":
        content = block.get("content", "")
        if isinstance(content, str):
            return estimate_text_tokens(content)
        return sum(estimate_block_tokens(b) for b in content)
    if kind == "tool_use":
        return estimate_text_tokens(json.dumps(block.get("input", {})))
    if kind == "thinking":
        return estimate_text_tokens(block.get("thinking", ""))
    return estimate_text_tokens(json.dumps(block))


def estimate_messages_tokens(messages: list[dict[str, Any]]) -> int:
    return sum(estimate_block_tokens(b) for m in messages for b in m["content"])


def usage_context_tokens(usage: Usage) -> int:
    """The context size a response reports: everything sent plus what it wrote."""
    return (
        usage.input_tokens
        + usage.cache_creation_input_tokens
        + usage.cache_read_input_tokens
        + usage.output_tokens
    )


def context_window_for(model: str, configured: int | None) -> int:
    """The configured window, else 1M for a `[1m]` model id, else 200k."""
    if configured is not None:
        return configured
    return LARGE_CONTEXT_WINDOW if model.lower().endswith("[1m]") else DEFAULT_CONTEXT_WINDOW


class Thresholds(BaseModel):
    window: int
    effective: int
    """The window less the room kept for writing a summary."""
    autocompact: int
    warning: int
    blocking: int

    @classmethod
    def for_window(cls, window: int) -> Thresholds:
        effective = window - SUMMARY_RESERVE_TOKENS
        return cls(
            window=window,
            effective=effective,
            autocompact=effective - AUTOCOMPACT_BUFFER_TOKENS,
            warning=effective - WARNING_BUFFER_TOKENS,
            blocking=effective - BLOCKING_BUFFER_TOKENS,
        )


# --- request-view transforms: messages in, new messages out ------------------------------


def _tool_results(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in message["content"] if b.get("type") == "tool_result"]


def _replace_result(message: dict[str, Any], tool_use_id: str, content: str) -> dict[str, Any]:
    blocks = [
        {**b, "content": content}
        if b.get("type") == "tool_result" and b.get("tool_use_id") == tool_use_id
        else b
        for b in message["content"]
    ]
    return {**message, "content": blocks}


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content", "")
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content if b.get("type") == "text")


def overflow_preview(block: dict[str, Any], path: str) -> str:
    text = _result_text(block)
    tokens = estimate_block_tokens(block)
    return (
        f"{text[:PREVIEW_CHARS]}\n\n[This result is too large for the context ({tokens:,} tokens). "
        f"It was saved whole to {path}; use Read with offset/limit to see the rest.]"
    )


def apply_tool_result_budget(
    messages: list[dict[str, Any]],
    per_result: int,
    per_message: int,
    overflow_path: Callable[[str], str],
) -> tuple[list[dict[str, Any]], list[str]]:
    """Results over `per_result` tokens, then the largest while a message is over `per_message`,
    become a preview plus the path of the whole result. Returns the ids replaced."""
    replaced: list[str] = []
    out = []
    for message in messages:
        results = sorted(_tool_results(message), key=estimate_block_tokens, reverse=True)
        total = sum(estimate_block_tokens(b) for b in results)
        for block in results:
            size = estimate_block_tokens(block)
            if size <= per_result and total <= per_message:
                continue
            if size <= PREVIEW_CHARS // 4:
                continue  # too small for a preview to save anything
            tool_use_id = block["tool_use_id"]
            preview = overflow_preview(block, overflow_path(tool_use_id))
            message = _replace_result(message, tool_use_id, preview)
            total -= size - estimate_text_tokens(preview)
            replaced.append(tool_use_id)
        out.append(message)
    return out, replaced


def snip(messages: list[dict[str, Any]], keep_turns: int) -> list[dict[str, Any]]:
    """Drop the oldest assistant/user turn pairs after the protected first message."""
    if len(messages) < 3:
        return messages
    turns = (len(messages) - 1) // 2
    drop = turns - keep_turns
    if drop <= 0:
        return messages
    head = messages[0]
    marker = {
        "type": "text",
        "text": f"[History snip: {drop} older turn(s) were removed from this view to save context.]",
    }
    return [{**head, "content": [*head["content"], marker]}, *messages[1 + 2 * drop :]]


def tool_names(messages: list[dict[str, Any]]) -> dict[str, str]:
    return {
        b["id"]: b["name"]
        for m in messages
        if m["role"] == "assistant"
        for b in m["content"]
        if b.get("type") == "tool_use"
    }


def microcompact(messages: list[dict[str, Any]], keep_recent: int) -> list[dict[str, Any]]:
    """Results of compactable tools older than the newest `keep_recent` become a marker."""
    names = tool_names(messages)
    ids = [
        b["tool_use_id"]
        for m in messages
        for b in _tool_results(m)
        if names.get(b["tool_use_id"]) in COMPACTABLE_TOOLS
    ]
    old = set(ids[: max(0, len(ids) - keep_recent)])
    return collapse(messages, old)


def collapse(messages: list[dict[str, Any]], ids: set[str] | list[str]) -> list[dict[str, Any]]:
    """Clear the named tool results (the request view only; the store keeps them)."""
    wanted = set(ids)
    if not wanted:
        return messages
    out = []
    for message in messages:
        for block in _tool_results(message):
            if block["tool_use_id"] in wanted and block.get("content") != CLEARED_MARKER:
                message = _replace_result(message, block["tool_use_id"], CLEARED_MARKER)
        out.append(message)
    return out


def strip_images(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Replace every image (top level or inside tool results) with a short note."""
    note: dict[str, Any] = {
        "type": "text",
        "text": "[image removed: the request's images were too large]",
    }

    def clean(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for b in blocks:
            if b.get("type") == "image":
                out.append(note)
            elif b.get("type") == "tool_result" and isinstance(b.get("content"), list):
                out.append({**b, "content": clean(b["content"])})
            else:
                out.append(b)
        return out

    return [{**m, "content": clean(m["content"])} for m in messages]


def plan_collapse(
    messages: list[dict[str, Any]], target_tokens: int, already: list[str]
) -> list[str]:
    """Tool results to clear, largest stale ones first, until the estimate is under target.
    Results in the last message are not stale and stay."""
    view = collapse(messages, already)
    total = estimate_messages_tokens(view)
    candidates = sorted(
        (b for m in view[:-1] for b in _tool_results(m) if b.get("content") != CLEARED_MARKER),
        key=estimate_block_tokens,
        reverse=True,
    )
    chosen: list[str] = []
    for block in candidates:
        if total <= target_tokens:
            break
        total -= estimate_block_tokens(block) - estimate_text_tokens(CLEARED_MARKER)
        chosen.append(block["tool_use_id"])
    return chosen


class TaskBudget(BaseModel):
    """`output_config.task_budget`: the total from the first request; `remaining` only once a
    compaction hid part of the conversation from the API (analysis §15)."""

    total: int
    remaining: int | None = None


def task_budget_after_compaction(total: int, remaining: int | None, pre_compact_tokens: int) -> int:
    """The API cannot see what a summary replaced, so the client counts it: never below 0."""
    return max(0, (total if remaining is None else remaining) - pre_compact_tokens)


def drop_oldest(messages: list[dict[str, Any]], fraction: float = 1 / 3) -> list[dict[str, Any]]:
    """For a summary request that is itself too long: drop the oldest part of the conversation,
    restarting at a user message that answers no tool call. Returns [] when nothing can go."""
    if len(messages) <= 1:
        return []
    start = max(1, int(len(messages) * fraction))
    while start < len(messages):
        first = messages[start]
        if first["role"] == "user" and not _tool_results(first):
            break
        start += 1
    if start >= len(messages):
        # No clean user turn left: keep the last message alone, tool results cleared to text.
        last = messages[-1]
        text = "\n\n".join(
            _result_text(b) if b.get("type") == "tool_result" else b.get("text", "")
            for b in last["content"]
        )
        return [
            {
                "role": "user",
                "content": [{"type": "text", "text": text or "(earlier context dropped)"}],
            }
        ]
    return messages[start:]
