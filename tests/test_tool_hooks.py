"""engine.tool_hooks: what a PreToolUse verdict does to the permission decision, and what
UserPromptSubmit hooks do to a prompt (pure)."""

from __future__ import annotations

import pytest

from durable_agent.engine.context import estimate_text_tokens
from durable_agent.engine.hooks import HookEventResult
from durable_agent.engine.permissions import Behavior, Decision
from durable_agent.engine.state import PendingUser, Phase, State, Terminal
from durable_agent.engine.tool_hooks import (
    after_prompt_hooks,
    pre_tool_gate,
    prompt_with_context,
    tool_feedback,
    tool_hook_settings,
    with_prompt_context,
)

ALLOWED = Decision(behavior=Behavior.ALLOW, rule="Bash", reason="allowed by Bash")
DENY_RULE = Decision(behavior=Behavior.DENY, rule="Bash(rm:*)", reason="denied by Bash(rm:*)")
ASK_RULE = Decision(behavior=Behavior.ASK, rule="Bash(git push:*)", reason="ask rule")
MODE_ASKS = Decision(behavior=Behavior.ASK, reason="default mode asks before Bash")


def verdict(decision=None, **fields) -> HookEventResult:
    return HookEventResult(event="PreToolUse", ran=1, permission_decision=decision, **fields)


@pytest.mark.parametrize("rules", [None, ALLOWED, MODE_ASKS, ASK_RULE, DENY_RULE])
def test_a_block_or_deny_always_denies_with_the_hooks_reason(rules):
    for hook in (verdict(blocked=True, reason="use rg"), verdict("deny", reason="use rg")):
        gated = pre_tool_gate(rules, hook)
        assert gated is not None and gated.behavior == Behavior.DENY
        assert "use rg" in gated.reason and "PreToolUse hook" in gated.reason


def test_allow_skips_the_modes_ask_but_not_a_rule():
    for rules in (MODE_ASKS, None):
        gated = pre_tool_gate(rules, verdict("allow"))
        assert gated is not None and gated.behavior == Behavior.ALLOW
    assert pre_tool_gate(ASK_RULE, verdict("allow")) == ASK_RULE  # the team's ask rule holds
    assert pre_tool_gate(DENY_RULE, verdict("allow")) == DENY_RULE


def test_ask_asks_unless_a_rule_denies_and_no_verdict_leaves_the_rules():
    asked = pre_tool_gate(ALLOWED, verdict("ask", permission_reason="touches prod"))
    assert asked is not None and asked.behavior == Behavior.ASK and "touches prod" in asked.reason
    assert pre_tool_gate(DENY_RULE, verdict("ask")) == DENY_RULE
    for rules in (None, ALLOWED, MODE_ASKS, DENY_RULE):
        assert pre_tool_gate(rules, verdict()) == rules


def test_feedback_context_and_settings_subset():
    post = HookEventResult(
        event="PostToolUse", blocked=True, reason="lint", additional_context=["c"]
    )
    said = tool_feedback("PostToolUse", "Bash", post)
    assert said == [
        "PostToolUse hook feedback on Bash: lint",
        "PostToolUse hook context for Bash: c",
    ]
    pre = HookEventResult(event="PreToolUse", blocked=True, reason="no")  # its reason is the result
    assert tool_feedback("PreToolUse", "Bash", pre) == []
    assert prompt_with_context("fix it", []) == "fix it"
    assert "branch main" in prompt_with_context("fix it", ["branch main"])
    hooks = {"Stop": [{}], "PreToolUse": [{"hooks": []}], "PostToolUse": []}
    assert tool_hook_settings(hooks) == {"PreToolUse": [{"hooks": []}]}
    assert tool_hook_settings({"Stop": [{}]}) is None and tool_hook_settings(None) is None


def prompted(prompt: str = "fix it") -> State:
    return State(
        head_uuid="h",
        pending=PendingUser(uuid="u1", parent_uuid="h", prompt=prompt),
        context_tokens=100 + estimate_text_tokens(prompt),
    )


def test_prompt_hook_context_joins_the_prompt_and_counts_from_the_context_before_it():
    state = with_prompt_context(prompted(), "fix it", ["branch main"], 100)
    assert state.pending is not None
    assert state.pending.prompt == prompt_with_context("fix it", ["branch main"])
    assert state.context_tokens == 100 + estimate_text_tokens(state.pending.prompt)


def test_a_user_prompt_submit_block_or_stop_erases_the_prompt_and_ends_hook_stopped():
    for hook, why in (
        (
            HookEventResult(event="UserPromptSubmit", blocked=True, reason="no secrets"),
            "no secrets",
        ),
        (
            HookEventResult(event="UserPromptSubmit", prevent_continuation=True, stop_reason="s"),
            ": s",
        ),
        (HookEventResult(event="UserPromptSubmit", blocked=True), "no reason given"),
    ):
        ended = after_prompt_hooks(prompted(), hook, "fix it", ["ctx"], 100)
        assert ended.pending is None and ended.context_tokens == 100
        assert ended.phase == Phase.ENDED and ended.ending is not None
        assert ended.ending.terminal == Terminal.HOOK_STOPPED
        assert "blocked by a UserPromptSubmit hook" in ended.ending.message
        assert why in ended.ending.message


def test_user_prompt_submit_context_follows_session_starts_and_no_result_changes_nothing():
    hook = HookEventResult(event="UserPromptSubmit", additional_context=["b"])
    state = after_prompt_hooks(prompted(), hook, "fix it", ["a"], 100)
    assert state.pending is not None
    assert state.pending.prompt == prompt_with_context("fix it", ["a", "b"])
    before = prompted()
    assert after_prompt_hooks(before, None, "fix it", ["a"], 100) is before
    assert after_prompt_hooks(before, HookEventResult(), "fix it", [], 100) is before
    erased = before.model_copy(update={"pending": None})
    blocked = HookEventResult(event="UserPromptSubmit", blocked=True)
    assert after_prompt_hooks(erased, blocked, "fix it", [], 100) is erased
