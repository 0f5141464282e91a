"""Token budget continuation (analysis §7): when Claude stops on its own (no tool_use) before a
budget of output tokens is spent, the loop nudges it to keep working. Pure."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

COMPLETION_THRESHOLD = 0.9
"""Stop once this share of the budget is spent."""
DIMINISHING_THRESHOLD = 500
"""After this many continuations, two deltas in a row below DIMINISHING_THRESHOLD stop it."""
DIMINISHING_AFTER_CONTINUATIONS = 3
NUDGE = (
    "Token budget: {pct}% used, {used:,}/{budget:,} tokens. Keep working on the task until it "
    "is done, without summarizing or stopping early."
)

_SUFFIX = {"": 1, "k": 1_000, "m": 1_000_000, "b": 1_000_000_000}
_AMOUNT = r"(\d+(?:\.\d+)?)\s*([kmb]?)"
_SHORTHAND_START = re.compile(rf"^\s*\+{_AMOUNT}\b", re.IGNORECASE)
_SHORTHAND_END = re.compile(rf"(?:^|\s)\+{_AMOUNT}\s*[.!]?\s*$", re.IGNORECASE)
_VERBOSE = re.compile(rf"\b(?:use|spend)\s+{_AMOUNT}\s+tokens?\b", re.IGNORECASE)


class BudgetTracker(BaseModel):
    """What the check remembers between two of its runs in one prompt."""

    model_config = ConfigDict(frozen=True)

    continuation_count: int = 0
    last_delta_tokens: int = 0
    last_global_turn_tokens: int = 0


class BudgetDecision(BaseModel):
    """Continue with `nudge` as the next user message, or stop; `tracker` is the next one."""

    tracker: BudgetTracker
    nudge: str | None = None
    diminishing: bool = False

    @property
    def continues(self) -> bool:
        return self.nudge is not None


def parse_amount(raw: str) -> int | None:
    """`500000`, `500k`, `2M`, `1.5m` → tokens; None when it is not an amount."""
    match = re.fullmatch(_AMOUNT, raw.strip(), re.IGNORECASE)
    if match is None:
        return None
    value = int(float(match.group(1)) * _SUFFIX[match.group(2).lower()])
    return value if value > 0 else None


def budget_in_prompt(prompt: str) -> int | None:
    """A budget written the way Claude Code users write it: `+500k` at the start or the end of
    the prompt, or `use 2M tokens` / `spend 500k tokens` anywhere in it."""
    for pattern in (_SHORTHAND_START, _SHORTHAND_END, _VERBOSE):
        match = pattern.search(prompt)
        if match is not None:
            value = int(float(match.group(1)) * _SUFFIX[match.group(2).lower()])
            if value > 0:
                return value
    return None


def check_token_budget(
    tracker: BudgetTracker, is_subagent: bool, budget: int | None, global_turn_tokens: int
) -> BudgetDecision:
    """Continue below 90 % of the budget unless returns diminish (at least 3 continuations
    and the last two deltas both under 500 tokens); sub-agents and no budget: stop."""
    if is_subagent or budget is None or budget <= 0:
        return BudgetDecision(tracker=tracker)
    delta = global_turn_tokens - tracker.last_global_turn_tokens
    diminishing = (
        tracker.continuation_count >= DIMINISHING_AFTER_CONTINUATIONS
        and delta < DIMINISHING_THRESHOLD
        and tracker.last_delta_tokens < DIMINISHING_THRESHOLD
    )
    if not diminishing and global_turn_tokens < budget * COMPLETION_THRESHOLD:
        pct = round(global_turn_tokens / budget * 100)
        return BudgetDecision(
            tracker=BudgetTracker(
                continuation_count=tracker.continuation_count + 1,
                last_delta_tokens=delta,
                last_global_turn_tokens=global_turn_tokens,
            ),
            nudge=NUDGE.format(pct=pct, used=global_turn_tokens, budget=budget),
        )
    return BudgetDecision(tracker=tracker, diminishing=diminishing)
