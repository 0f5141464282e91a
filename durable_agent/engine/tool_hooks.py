"""What hooks change in the loop (pure): the PreToolUse gate over the permission decision, the
feedback PostToolUse hooks send Claude, and what UserPromptSubmit does to a prompt.

`engine.hooks` reads the handlers' output into one `HookEventResult` per event; this module
decides what that result means for the call or prompt at hand. The workflow runs the hooks
(an activity each) and applies these functions, so a replay never re-runs a hook: its result
is in the history."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from durable_agent.engine.context import estimate_text_tokens
from durable_agent.engine.hooks import HookEventResult, sdk_hooks
from durable_agent.engine.permissions import Behavior, Decision
from durable_agent.engine.state import State, Terminal

PRE_TOOL_USE = "PreToolUse"
POST_TOOL_USE = "PostToolUse"
POST_TOOL_USE_FAILURE = "PostToolUseFailure"
USER_PROMPT_SUBMIT = "UserPromptSubmit"
TOOL_EVENTS = (PRE_TOOL_USE, POST_TOOL_USE, POST_TOOL_USE_FAILURE)
"""The events a tool call has hooks for (the model-call step runs no hooked tool itself)."""


def result_field(event: str) -> str:
    """Where a PostToolUse(Failure) hook's input carries the tool's result."""
    return "error" if event == POST_TOOL_USE_FAILURE else "tool_response"


def tool_hook_settings(hooks: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The part of a settings `hooks` value that tool calls need (None: no tool hooks)."""
    if not isinstance(hooks, Mapping):
        return None
    picked = {event: hooks[event] for event in TOOL_EVENTS if hooks.get(event)}
    return picked or None


def with_sdk_hooks(
    hooks: Mapping[str, Any] | None, registered: Mapping[str, Any]
) -> dict[str, Any]:
    """A settings `hooks` value with the SDK's registered callbacks added (after the files')."""
    merged: dict[str, Any] = {k: list(v) for k, v in (hooks or {}).items() if isinstance(v, list)}
    for event, groups in sdk_hooks(registered).items():
        merged[event] = [*merged.get(event, []), *groups]
    return merged


def pre_tool_gate(rules: Decision | None, hook: HookEventResult) -> Decision | None:
    """The permission decision once the PreToolUse hooks have spoken; `rules` is what the
    permission rules and mode decided on the input that will run (None: nothing checked).

    A block (exit 2, `permissionDecision: deny`) denies, with the hooks' reason for Claude.
    `ask` asks (headless: denied), unless a rule denies. `allow` skips the ask of the mode
    (no rule matched), not a deny rule nor an explicit ask rule: the settings a team wrote
    still hold when a hook approves (the safer reading of "allow bypasses the permission
    prompt"). No decision: the rules decide."""
    if hook.blocked or hook.permission_decision == "deny":
        reason = hook.reason or hook.permission_reason or "no reason given"
        return Decision(behavior=Behavior.DENY, reason=f"Blocked by a PreToolUse hook: {reason}")
    if rules is not None and rules.behavior == Behavior.DENY:
        return rules
    if hook.permission_decision == "ask":
        why = hook.permission_reason or "no reason given"
        return Decision(behavior=Behavior.ASK, reason=f"A PreToolUse hook asks for approval: {why}")
    if hook.permission_decision == "allow":
        if rules is None or rules.behavior == Behavior.ALLOW or rules.rule is None:
            why = f": {hook.permission_reason}" if hook.permission_reason else ""
            return Decision(behavior=Behavior.ALLOW, reason=f"allowed by a PreToolUse hook{why}")
    return rules


def tool_feedback(event: str, tool_name: str, hook: HookEventResult) -> list[str]:
    """What a tool's hooks tell Claude beside its result: a PostToolUse block's reason (the
    tool already ran) and every `additionalContext`."""
    said = []
    if hook.blocked and event != PRE_TOOL_USE:
        said.append(f"{event} hook feedback on {tool_name}: {hook.reason or 'blocked'}")
    said.extend(f"{event} hook context for {tool_name}: {text}" for text in hook.additional_context)
    return said


def user_notes(hook: HookEventResult) -> list[str]:
    """What the user is shown of a hook event: `systemMessage` warnings and non-blocking
    errors (other exits, timeouts, unusable output)."""
    return [*hook.system_messages, *hook.notes]


def feedback_text(lines: list[str]) -> str | None:
    """Hook feedback as the text that follows the tool results in the next user message."""
    return "\n\n".join(lines) if lines else None


def prompt_with_context(prompt: str, context: list[str]) -> str:
    """The prompt Claude sees after UserPromptSubmit hooks added context (stdout on exit 0,
    `additionalContext`)."""
    if not context:
        return prompt
    added = "\n\n".join(context)
    return f"{prompt}\n\n<user-prompt-submit-hook>\n{added}\n</user-prompt-submit-hook>"


def with_prompt_context(state: State, prompt: str, context: list[str], base_tokens: int) -> State:
    """The pending prompt with what SessionStart / UserPromptSubmit hooks added to it;
    `base_tokens`: the context before the prompt."""
    assert state.pending is not None
    text = prompt_with_context(prompt, context)
    return state.model_copy(
        update={
            "pending": state.pending.model_copy(update={"prompt": text}),
            "context_tokens": base_tokens + estimate_text_tokens(text),
        }
    )


def after_prompt_hooks(
    state: State,
    hook: HookEventResult | None,
    prompt: str,
    context: list[str],
    base_tokens: int,
) -> State:
    """What the UserPromptSubmit hooks' result does to the prompt: a block (or `continue:
    false`) erases it and ends the query `hook_stopped`, the reason shown to the user only;
    the context they add joins SessionStart's (`context`). No result (the hooks could not run),
    or no prompt left: unchanged."""
    if hook is None or state.pending is None:
        return state
    if hook.blocked or hook.prevent_continuation:
        why = hook.reason if hook.blocked else hook.stop_reason
        message = f"the prompt was blocked by a UserPromptSubmit hook: {why or 'no reason given'}"
        erased = state.model_copy(update={"pending": None, "context_tokens": base_tokens})
        return erased.ended(Terminal.HOOK_STOPPED, message)
    if hook.additional_context:
        return with_prompt_context(state, prompt, [*context, *hook.additional_context], base_tokens)
    return state
