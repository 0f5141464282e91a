"""Paths judged where they lead: a file tool's path is checked against the permission rules
both as written and with every symbolic link followed.

The engine's `check` compares paths as text and does no I/O, so a link the workspace ships
(`notes.txt -> .env`, `notes.md -> .git/hooks/pre-commit`) would be judged by its own name.
Here, in the activities, the path is resolved and `check` runs on both; the stricter answer
decides. Writing through a link is refused outright (as Claude Code does), naming its target.
"""

from __future__ import annotations

import os
from typing import Any

from durable_agent.engine.permissions import (
    EDIT_TOOLS,
    READ_TOOLS,
    Behavior,
    Decision,
    PermissionContext,
    check,
    normalize_path,
)

FILE_TOOLS: dict[str, str] = {**READ_TOOLS, **EDIT_TOOLS}
"""Tools whose input names a path, and the key that holds it."""
_RANK = {Behavior.ALLOW: 0, Behavior.ASK: 1, Behavior.DENY: 2}


def written_path(name: str, raw: dict[str, Any], ctx: PermissionContext) -> str | None:
    """The path the call names as written (`~` and a relative path made absolute, nothing
    else), or None for a tool without one or an input `check` cannot read as a path."""
    key = FILE_TOOLS.get(name)
    if key is None:
        return None
    value = raw.get(key) or raw.get("file_path" if name in EDIT_TOOLS else "path")
    if value is None and name in READ_TOOLS:
        value = ctx.cwd
    if not isinstance(value, str) or not value or "\x00" in value:
        return None
    if value == "~" or value.startswith("~/"):
        value = ctx.home + value[1:]
    return os.path.join(ctx.cwd, value)


def link_target(path: str) -> str | None:
    """Where `path` points when it is itself a symbolic link (its last component), else None."""
    try:
        return os.path.realpath(path) if os.path.islink(path) else None
    except (OSError, ValueError):
        return None


def write_through_link(written: str, shown: str) -> str | None:
    """The refusal for writing through `written`, when it is a symbolic link (the kernel reads
    `link/..` through the link, so the path as written is what is tested)."""
    target = link_target(written)
    if target is None:
        return None
    return (
        f"Refusing to write {shown}: it is a symbolic link to {target}; "
        f"name {target} itself if that file is meant"
    )


def real_context(ctx: PermissionContext) -> PermissionContext:
    """`ctx` with its own folders resolved, so rules anchored at a linked cwd still match the
    resolved paths they are compared with."""

    def real(path: str) -> str:
        return os.path.realpath(path)

    rules = ctx.rules.model_copy(
        update={
            kind: [r.model_copy(update={"root": real(r.root)}) if r.root else r for r in lst]
            for kind, lst in (
                ("allow", ctx.rules.allow),
                ("ask", ctx.rules.ask),
                ("deny", ctx.rules.deny),
            )
        }
    )
    return ctx.model_copy(
        update={
            "cwd": real(ctx.cwd),
            "home": real(ctx.home),
            "additional_directories": [real(d) for d in ctx.additional_directories],
            "rules": rules,
        }
    )


def judged_at(
    name: str,
    raw: dict[str, Any],
    ctx: PermissionContext,
    given: str,
    real: str,
    as_given: Decision,
) -> Decision | None:
    """What the rules say of the call when its path is `real` (where `given` leads), when
    that is stricter than `as_given` (their answer for `given`), or an ask the user should
    see about the real target; None when the resolved path changes nothing."""
    if real == given:
        return None
    key = FILE_TOOLS[name]
    led = check(name, {**raw, key: real}, real_context(ctx))
    stricter = _RANK[led.behavior] > _RANK[as_given.behavior]
    if not stricter and not (led.behavior == as_given.behavior == Behavior.ASK):
        return None
    return led.model_copy(update={"reason": f"{led.reason} (where {given} leads)"})


def resolved_check(name: str, raw: dict[str, Any], ctx: PermissionContext) -> Decision:
    """`check` on the path as given and on where it leads (blocking: resolves links)."""
    decision = check(name, raw, ctx)
    written = written_path(name, raw, ctx)
    if written is None or (decision.behavior == Behavior.DENY and decision.rule is not None):
        return decision
    given = normalize_path(written, ctx)  # as `check` read it
    if name in EDIT_TOOLS and (refusal := write_through_link(written, given)) is not None:
        return Decision(behavior=Behavior.DENY, reason=refusal)  # whatever the mode says
    if decision.behavior == Behavior.DENY:
        return decision
    try:
        real = os.path.realpath(written)  # as the kernel reads it
    except (OSError, ValueError):  # the tool itself says what is wrong with the path
        return decision
    return judged_at(name, raw, ctx, given, real, decision) or decision
