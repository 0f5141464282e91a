"""Session grants: what an "always for this session" answer allows from then on.

`grant_for` turns the answer to one call into a narrow grant (a rule, or that exact call);
`granted` allows a later call that asks when a grant covers it. A deny rule is never overridden.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from durable_agent.engine.permissions.evaluate import Decision, check
from durable_agent.engine.permissions.paths import normalize_path
from durable_agent.engine.permissions.rules import (
    EDIT_TOOLS,
    Behavior,
    PermissionContext,
    parse_rule,
)


class SessionGrant(BaseModel):
    """What an "always for this session" answer allows from then on: a rule (this file for the
    edit tools, `Edit(//abs/path)`), or this exact call (same tool, same input) when no narrow
    rule would allow it again (a Bash command with a redirection, say)."""

    rule: str | None = None
    tool_name: str = ""
    tool_input: dict[str, Any] | None = None

    def label(self) -> str:
        if self.rule is not None:
            return self.rule
        shown = self.tool_input or {}
        detail = shown.get("command") if self.tool_name == "Bash" else None
        return f"{self.tool_name}: {detail if isinstance(detail, str) else shown} (this exact call)"


def grant_for(tool_name: str, tool_input: dict[str, Any], ctx: PermissionContext) -> SessionGrant:
    """The grant of an "always" answer to this call: narrow on purpose (Safer reading: one
    answer never allows a whole tool or command family)."""
    rule = None
    if tool_name in EDIT_TOOLS:
        raw = tool_input.get(EDIT_TOOLS[tool_name]) or tool_input.get("file_path")
        if isinstance(raw, str) and raw and not set(raw) & set("()*?[]"):
            rule = f"Edit(/{normalize_path(raw, ctx)})"
    elif tool_name == "Bash":
        command = str(tool_input.get("command", "")).strip()
        if command and not set(command) & set("()*"):
            rule = f"Bash({command})"
    if rule is not None and granted(tool_name, tool_input, ctx, [SessionGrant(rule=rule)]):
        return SessionGrant(rule=rule)
    return SessionGrant(tool_name=tool_name, tool_input=tool_input)


def granted(
    tool_name: str,
    tool_input: dict[str, Any],
    ctx: PermissionContext,
    grants: Iterable[SessionGrant],
) -> Decision | None:
    """Allow, when one of the session's grants covers this call; None otherwise. Consulted
    only for a call that asks: a deny rule is never overridden."""
    grants = list(grants)
    for grant in grants:
        if grant.rule is None and grant.tool_name == tool_name and grant.tool_input == tool_input:
            return Decision(
                behavior=Behavior.ALLOW, reason="allowed for this session (your answer)"
            )
    rules = [parse_rule(g.rule, source="session") for g in grants if g.rule is not None]
    if not rules:
        return None
    widened = ctx.rules.model_copy(update={"allow": [*ctx.rules.allow, *rules]})
    decision = check(tool_name, tool_input, ctx.model_copy(update={"rules": widened}))
    return decision if decision.behavior == Behavior.ALLOW else None
