"""The durable approval of a tool call (workflow side): a call the permission rules ask about
waits for a person's answer (the `approve_tool` Update) through worker restarts and CLIs coming
and going, unless an earlier "always" answer of the session already allows it."""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from durable_agent.engine.contracts import ApprovalAnswer, ApprovalRequest, ToolCall
    from durable_agent.engine.permissions import Behavior, Decision, grant_for, granted
    from durable_agent.engine.state import ProgressKind

from workflows.hook_runs import HookRuns
from workflows.loop_context import LoopContext


class Approvals:
    """`pending`: the calls waiting for an answer; `answers`: the answers not yet taken
    (QueryWorkflow's approve_tool Update fills them, its approvals Query reads them)."""

    def __init__(self, ctx: LoopContext, hooks: HookRuns) -> None:
        self._ctx = ctx
        self._hooks = hooks
        self.pending: dict[str, ApprovalRequest] = {}
        self.answers: dict[str, ApprovalAnswer] = {}

    def record(self, answer: ApprovalAnswer) -> str:
        """A person's answer to a waiting tool call; the call goes on at once."""
        self.answers[answer.request_id] = answer
        return f"{answer.behavior}: {self.pending[answer.request_id].summary}"

    def check_waiting(self, answer: ApprovalAnswer) -> None:
        if answer.request_id not in self.pending or answer.request_id in self.answers:
            waiting = ", ".join(self.pending) or "none"
            raise ValueError(
                f"no tool call {answer.request_id!r} waits for approval (waiting: {waiting})"
            )

    def waiting(self) -> list[ApprovalRequest]:
        return [r for r in self.pending.values() if r.request_id not in self.answers]

    async def ask(
        self, call: ToolCall, asks: Decision, tool_input: dict[str, Any] | None
    ) -> Decision:
        """A call the rules ask about: allowed by an earlier "always" answer of the session, or
        (when someone can answer) it waits for the `approve_tool` Update, durably: through
        worker restarts and CLIs coming and going. Headless, the ask stands (and is denied)."""
        loop = self._ctx
        ctx = loop.cfg.call.permissions
        shown = tool_input if tool_input is not None else call.permission_input or {}
        if ctx is not None:
            allowed = granted(call.name, shown, ctx, loop.state.session_grants)
            if allowed is not None:
                return allowed
        if not loop.cfg.approvals:
            return asks
        always = grant_for(call.name, shown, ctx).label() if ctx is not None else call.name
        self.pending[call.id] = ApprovalRequest(
            request_id=call.id,
            tool_name=call.name,
            tool_input=shown,
            summary=call.summary,
            reason=asks.reason,
            always=always,
        )
        loop.emit(ProgressKind.APPROVAL, f"{call.summary} waits for your approval: {asks.reason}")
        await self._hooks.observe(
            "Notification",
            "permission_prompt",
            message=f"Claude needs your permission to use {call.name}",
            notification_type="permission_prompt",
        )
        workflow.set_current_details(f"waiting for approval: {call.summary}")
        try:
            await workflow.wait_condition(lambda: call.id in self.answers)
        finally:
            self.pending.pop(call.id, None)
        answer = self.answers.pop(call.id)
        by = f" ({answer.by})" if answer.by else ""
        if answer.behavior == "deny":
            said = f": {answer.message}" if answer.message else ""
            loop.emit(ProgressKind.STATUS, f"{call.summary}: denied{by}")
            return Decision(behavior=Behavior.DENY, reason=f"The user denied this call{said}")
        if answer.always and ctx is not None:
            grants = (*loop.state.session_grants, grant_for(call.name, shown, ctx))
            loop.state = loop.state.model_copy(update={"session_grants": grants})
        loop.emit(ProgressKind.STATUS, f"{call.summary}: allowed{by}")
        return Decision(behavior=Behavior.ALLOW, reason="allowed by the user")
