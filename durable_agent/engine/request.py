"""The Messages API request for a transcript chain: pure, so every rule is unit-tested."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, Field

from durable_agent.engine.agents import AgentDef, agent_tool_description
from durable_agent.engine.context import (
    TaskBudget,
    apply_tool_result_budget,
    collapse,
    microcompact,
    snip,
    strip_images,
)
from durable_agent.engine.messages import TranscriptEntry, to_api_messages
from durable_agent.engine.skills import SkillInfo, skill_tool_description
from durable_agent.engine.tools import TOOL_SPECS, ToolName
from durable_agent.mcp.contracts import McpTool

THINKING_TYPES = ("thinking", "redacted_thinking")
CACHE_CONTROL = {"type": "ephemeral"}
THINKING_HEADROOM = 1024
"""max_tokens must exceed the thinking budget; this much room is left for the answer at least."""


TASK_BUDGET_BETA = "task-budgets-2026-03-13"


class ModelRequest(BaseModel):
    """What varies between calls of one query (the loop's recoveries change these)."""

    model: str
    max_tokens: int
    thinking_budget: int | None = None
    strip_thinking_through: str | None = None
    """After a fallback: the uuid of the last entry before it. Thinking blocks up to there are
    dropped (another model's signatures cannot be verified); the fallback model's own pass back
    exactly, as its tool trajectory needs (analysis §12.6, rule 3)."""
    prompt_caching: bool = True
    result_budget_tokens: int = 25_000
    message_budget_tokens: int = 50_000
    snip_keep_turns: int | None = None
    microcompact_keep: int | None = None
    """Clear all but the newest N compactable tool results (None: not this call)."""
    collapsed_ids: list[str] = Field(default_factory=list)
    strip_images: bool = False
    task_budget: TaskBudget | None = None


def request_messages(
    chain: list[TranscriptEntry], req: ModelRequest, overflow_path: Callable[[str], str]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The request view of a chain, in the strict order: budget → snip → microcompact →
    collapse. Returns the messages and the ids of results replaced by an overflow preview."""
    if req.strip_thinking_through is not None:
        chain = _without_thinking_through(chain, req.strip_thinking_through)
    messages = to_api_messages(chain)
    messages = [_clean(m, req.thinking_budget is not None) for m in messages]
    messages = [m for m in messages if m["content"]]
    messages, overflowed = apply_tool_result_budget(
        messages, req.result_budget_tokens, req.message_budget_tokens, overflow_path
    )
    if req.snip_keep_turns is not None:
        messages = snip(messages, req.snip_keep_turns)
    if req.microcompact_keep is not None:
        messages = microcompact(messages, req.microcompact_keep)
    messages = collapse(messages, req.collapsed_ids)
    if req.strip_images:
        messages = strip_images(messages)
    return messages, overflowed


def build_request(
    chain: list[TranscriptEntry],
    system: str,
    tools: tuple[str, ...],
    req: ModelRequest,
    overflow_path: Callable[[str], str] = lambda tool_use_id: tool_use_id,
    skills: Sequence[SkillInfo] = (),
    server_tools: Sequence[dict[str, Any]] = (),
    agents: Sequence[AgentDef] = (),
    mcp_tools: Sequence[McpTool] = (),
) -> tuple[dict[str, Any], list[str]]:
    """`server_tools` (web search) are the API's own: they follow ours in `tools`."""
    messages, overflowed = request_messages(chain, req, overflow_path)
    system_block: dict[str, Any] = {"type": "text", "text": system}
    if req.prompt_caching:
        system_block["cache_control"] = CACHE_CONTROL
        _cache_last_block(messages)
    request: dict[str, Any] = {
        "model": req.model,
        "max_tokens": req.max_tokens,
        "system": [system_block],
        "messages": messages,
        "tools": api_tools(tools, skills, agents, mcp_tools) + [dict(t) for t in server_tools],
    }
    if not system:  # `--system-prompt ""`: none at all (the API takes no empty text block)
        del request["system"]
    if req.thinking_budget is not None:
        request["thinking"] = {"type": "enabled", "budget_tokens": req.thinking_budget}
        request["max_tokens"] = max(req.max_tokens, req.thinking_budget + THINKING_HEADROOM)
    if req.task_budget is not None:
        budget = {"type": "tokens", **req.task_budget.model_dump(exclude_none=True)}
        request["extra_headers"] = {"anthropic-beta": TASK_BUDGET_BETA}
        request["extra_body"] = {"output_config": {"task_budget": budget}}
    return request, overflowed


def api_tools(
    tools: tuple[str, ...],
    skills: Sequence[SkillInfo] = (),
    agents: Sequence[AgentDef] = (),
    mcp_tools: Sequence[McpTool] = (),
) -> list[dict[str, Any]]:
    """The request's `tools`: those of `tools` there are, the Skill tool only with skills to
    load (its description lists them), the Agent tool's description listing the agents, then
    the MCP servers' tools as recorded (`mcp__<server>__<tool>`, with the server's schema)."""
    out: list[dict[str, Any]] = []
    for name in tools:
        if name not in TOOL_SPECS or (name == ToolName.SKILL and not skills):
            continue
        tool = TOOL_SPECS[name].api_tool()  # shared: changed only in a copy
        if name == ToolName.SKILL:
            tool = {**tool, "description": skill_tool_description(skills)}
        if name == ToolName.AGENT:
            tool = {**tool, "description": agent_tool_description(agents)}
        out.append(tool)
    for mcp in mcp_tools:
        out.append(
            {"name": mcp.name, "description": mcp.description, "input_schema": mcp.input_schema}
        )
    return out


def _without_thinking_through(chain: list[TranscriptEntry], uuid: str) -> list[TranscriptEntry]:
    """The chain with the thinking blocks of the entries up to and including `uuid` removed
    (none when `uuid` is not in the chain: it is behind a compaction boundary, so everything
    in the chain came after the fallback)."""
    uuids = [e.uuid for e in chain]
    end = uuids.index(uuid) + 1 if uuid in uuids else 0
    return [_strip_thinking(e) for e in chain[:end]] + chain[end:]


def _strip_thinking(entry: TranscriptEntry) -> TranscriptEntry:
    if entry.message is None or entry.type != "assistant":
        return entry
    kept = [b for b in entry.message.content if b.type not in THINKING_TYPES]
    return entry.model_copy(update={"message": entry.message.model_copy(update={"content": kept})})


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
