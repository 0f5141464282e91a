"""One tool call against the rules and the mode: `check`, and `headless`.

`check(tool_name, tool_input, ctx)` answers allow / ask / deny for one tool call, with the rule
(and its source) or the mode that decided, in one line the model and the user can read.
`headless(decision)` turns an ask into a deny for runs where nobody can answer.

Evaluation order is deny, then ask, then allow: the first list with a matching rule decides, and
a more specific rule in a later list does not change that. Plan mode denies every tool that is
not read-only, whatever the ask and allow rules say. What no rule decided is up to the mode:
bypassPermissions allows (writes to protected directories still ask), acceptEdits allows edits
inside the working directories, read-only tools need no approval inside them, and dontAsk turns
every ask into a deny.

Bash commands are evaluated in bash.py, file tools in paths.py; WebFetch, agents, MCP and every
other tool here (`_eval_generic`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel

from durable_agent.engine.permissions.bash import _eval_bash
from durable_agent.engine.permissions.paths import (
    _eval_paths,
    _protected,
    _read_paths,
    normalize_path,
)
from durable_agent.engine.permissions.rules import (
    AGENT_TOOLS,
    EDIT_TOOLS,
    READ_ONLY_TOOLS,
    READ_TOOLS,
    Behavior,
    PermissionContext,
    PermissionMode,
    Rule,
    _Eval,
    _first,
    _rules_for,
)


class Decision(BaseModel):
    behavior: Behavior
    rule: str | None = None
    """The rule text that decided, if a rule did."""
    reason: str
    """One line for the model and the user: which rule (and its source) or which mode decided."""


def _host(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower().rstrip(".")
    except ValueError:
        return ""


def _domain_matches(rule: Rule, host: str, widen: bool) -> bool:
    if rule.specifier is None:
        return True
    domain = rule.specifier.removeprefix("domain:").strip().lower().rstrip(".")
    if domain.startswith("*."):
        return host.endswith(domain[1:])
    # Safer reading: deny/ask rules also cover subdomains; allow rules only the exact host.
    return host == domain or (widen and host.endswith("." + domain))


def _eval_generic(
    tool_name: str, tool_input: dict[str, Any], ctx: PermissionContext, ev: _Eval
) -> None:
    rs = ctx.rules
    if tool_name == "WebFetch":
        host = _host(str(tool_input.get("url", "")))

        def match(r: Rule, widen: bool) -> bool:
            return _domain_matches(r, host, widen) if host else r.specifier is None

    elif tool_name in AGENT_TOOLS:
        agent = str(tool_input.get("subagent_type", ""))

        def match(r: Rule, widen: bool) -> bool:
            return r.specifier is None or r.specifier == agent

    elif tool_name == "Skill":
        skill = str(tool_input.get("skill", "")).strip()

        def match(r: Rule, widen: bool) -> bool:
            return r.specifier is None or _skill_named(r.specifier) == skill

    else:

        def match(r: Rule, widen: bool) -> bool:
            # Safer reading: a specifier this module does not understand makes a deny/ask rule
            # cover the whole tool, and never lets an allow rule allow anything.
            return r.specifier is None or widen

    r = _first(_rules_for(tool_name, rs.deny), lambda r: match(r, True))
    if r is not None:
        ev.deny = (r, "")
    r = _first(_rules_for(tool_name, rs.ask), lambda r: match(r, True))
    if r is not None:
        ev.ask = (r, "")
    r = _first(_rules_for(tool_name, rs.allow), lambda r: match(r, False))
    if r is not None:
        ev.allow = [r]


def _skill_named(specifier: str) -> str:
    """The skill a `Skill(...)` rule names: `Skill(name)`, or `Skill(name *)` / `Skill(name:*)`
    (the name with any arguments; the Skill tool takes none)."""
    for suffix in (":*", " *"):
        if specifier.endswith(suffix):
            return specifier.removesuffix(suffix).strip()
    return specifier.strip()


def _by(rule: Rule) -> str:
    return f"the rule {rule.text}" + (f" ({rule.source})" if rule.source else "")


def _detail(tool_name: str, what: str) -> str:
    if not what:
        return ""
    return f" for `{what}`" if tool_name == "Bash" else f" for {what}"


def check(tool_name: str, tool_input: dict[str, Any], ctx: PermissionContext) -> Decision:
    """Allow, ask or deny one tool call (see the module docstring for the order)."""
    ev = _Eval()
    if tool_name == "Bash":
        _eval_bash(str(tool_input.get("command", "")), ctx, ev)
    elif tool_name in READ_TOOLS:
        _eval_paths(tool_name, _read_paths(tool_name, tool_input, ctx), ctx, ev)
    elif tool_name in EDIT_TOOLS:
        raw = tool_input.get(EDIT_TOOLS[tool_name]) or tool_input.get("file_path") or ""
        path = normalize_path(str(raw), ctx) if raw else ""
        if path:
            _eval_paths(tool_name, [path], ctx, ev)
            if (
                ctx.mode == PermissionMode.ACCEPT_EDITS
                and ev.outside is None
                and not _protected(path, ctx)
            ):
                ev.mode_allows = "acceptEdits mode allows edits inside the working directories"
        else:
            _eval_generic(tool_name, tool_input, ctx, ev)
    else:
        _eval_generic(tool_name, tool_input, ctx, ev)

    mode = ctx.mode
    if ev.deny is not None:
        rule, what = ev.deny
        return Decision(
            behavior=Behavior.DENY,
            rule=rule.text,
            reason=f"Permission to use {tool_name} denied by {_by(rule)}"
            + _detail(tool_name, what),
        )
    read_only = tool_name in READ_ONLY_TOOLS
    if mode == PermissionMode.PLAN and not read_only:
        # Safer reading: plan mode runs only read-only tools, even when an allow rule matches.
        return Decision(
            behavior=Behavior.DENY,
            reason=f"Plan mode is on: {tool_name} is not allowed; only read-only tools "
            "(Read, Grep, Glob) can run until the plan is approved",
        )
    if ev.ask is not None:
        rule, what = ev.ask
        # Docs: an ask rule prompts whatever the mode; Safer reading: bypassPermissions too.
        return _ask(
            ctx,
            f"Permission to use {tool_name} requires approval by {_by(rule)}"
            + _detail(tool_name, what),
            rule.text,
        )
    if ev.unsure is not None:
        return _ask(ctx, f"Permission to use {tool_name} requires approval: {ev.unsure}")
    if ev.allow:
        texts = list(dict.fromkeys(r.text for r in ev.allow))
        first = next(r for r in ev.allow if r.text == texts[0])
        by = _by(first) if len(texts) == 1 else "the rules " + ", ".join(texts)
        return Decision(
            behavior=Behavior.ALLOW,
            rule=", ".join(texts),
            reason=f"Permission to use {tool_name} allowed by {by}",
        )
    if mode == PermissionMode.BYPASS:
        if tool_name in EDIT_TOOLS and ev.not_allowed and _protected(ev.not_allowed, ctx):
            return _ask(
                ctx,
                f"Permission to use {tool_name} requires approval: {ev.not_allowed} is in a "
                "protected directory (.git, .claude, .vscode, .idea), even in bypassPermissions mode",
            )
        return Decision(
            behavior=Behavior.ALLOW, reason=f"{tool_name} allowed in bypassPermissions mode"
        )
    if ev.mode_allows is not None:
        return Decision(behavior=Behavior.ALLOW, reason=f"{tool_name} allowed: {ev.mode_allows}")
    if read_only:
        if ev.outside is not None:
            return _ask(
                ctx,
                f"Permission to use {tool_name} requires approval: {ev.outside} is outside the "
                "working directories",
            )
        return Decision(
            behavior=Behavior.ALLOW,
            reason=f"{tool_name} is read-only: allowed without approval",
        )
    what = ev.not_allowed or ""
    if tool_name == "Bash" and what:
        msg = f"Permission to use Bash requires approval: no allow rule matches `{what}`"
    elif ev.outside is not None:
        msg = (
            f"Permission to use {tool_name} requires approval: {ev.outside} is outside the "
            "working directories"
        )
    elif (
        tool_name in EDIT_TOOLS
        and what
        and _protected(what, ctx)
        and (mode == PermissionMode.ACCEPT_EDITS)
    ):
        msg = (
            f"Permission to use {tool_name} requires approval: {what} is in a protected "
            "directory (.git, .claude, .vscode, .idea)"
        )
    else:
        msg = f"Permission to use {tool_name} requires approval" + _detail(tool_name, what)
    return _ask(ctx, msg)


def _ask(ctx: PermissionContext, reason: str, rule: str | None = None) -> Decision:
    if ctx.mode == PermissionMode.DONT_ASK:
        return Decision(
            behavior=Behavior.DENY,
            rule=rule,
            reason=reason.replace("requires approval", "denied in dontAsk mode (it would ask)", 1),
        )
    return Decision(behavior=Behavior.ASK, rule=rule, reason=reason)


def headless(decision: Decision) -> Decision:
    """In a run nobody can answer, an ask is a deny; the reason says why."""
    if decision.behavior != Behavior.ASK:
        return decision
    return Decision(
        behavior=Behavior.DENY,
        rule=decision.rule,
        reason=f"{decision.reason}; denied because no one can approve it in this "
        "non-interactive run",
    )
