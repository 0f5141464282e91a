"""`agent_report`: a finished sub-agent's last answer, read from its own transcript, stored as
the parent's result of the Agent call (workflows/agents.py). Only the report crosses over:
the parent's conversation never holds the sub-agent's messages."""

from __future__ import annotations

from temporalio import activity

from activities.tools.registry import describe, kept_inline
from activities.transcript import StoreError, TranscriptStore, off_loop
from durable_agent.engine.contracts import AgentReportInput
from durable_agent.engine.messages import TextBlock, ToolResultBlock
from durable_agent.engine.state import RunToolOutput, Terminal
from durable_agent.names import Activities


def last_answer(store: TranscriptStore, session_id: str, head_uuid: str | None) -> str:
    """The text of the last assistant entry at or before `head_uuid`."""
    if head_uuid is None:
        return ""
    for entry in reversed(store.chain(session_id, head_uuid)):
        if entry.type == "assistant" and entry.message is not None:
            texts = [b.text for b in entry.message.content if isinstance(b, TextBlock)]
            if any(t.strip() for t in texts):
                return "\n\n".join(t for t in texts if t.strip())
    return ""


def report_text(req: AgentReportInput, answer: str) -> tuple[str, bool]:
    if req.terminal == Terminal.COMPLETED:
        return answer or f"The agent {req.agent} finished without a report.", False
    said = f"The agent {req.agent} did not finish ({req.terminal.value}"
    said += f": {req.message})." if req.message else ")."
    return (f"{said} Its last answer:\n\n{answer}" if answer else said), True


class AgentActivities:
    def __init__(self, store: TranscriptStore) -> None:
        self.store = store

    @activity.defn(name=Activities.AGENT_REPORT)
    async def agent_report(self, req: AgentReportInput) -> RunToolOutput:
        answer = await off_loop(last_answer, self.store, req.agent_session_id, req.head_uuid)
        text, is_error = report_text(req, answer)
        result = ToolResultBlock(tool_use_id=req.tool_use_id, content=text, is_error=is_error)
        if req.notify:
            return describe("Agent", kept_inline(result, ValueError("too long")), inline=True)
        try:
            await off_loop(self.store.put_tool_result, req.session_id, result, req.run_id)
        except (StoreError, OSError) as exc:  # the report must reach the parent regardless
            return describe("Agent", kept_inline(result, exc), inline=True, run_id=req.run_id)
        return describe("Agent", result, inline=False, run_id=req.run_id)
