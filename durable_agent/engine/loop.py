"""What the loop does after a model response: pure decisions, unit-tested without Temporal."""

from __future__ import annotations

from enum import StrEnum

from durable_agent.engine.budget import budget_in_prompt, check_token_budget
from durable_agent.engine.context import (
    MAX_CONSECUTIVE_AUTOCOMPACT_FAILURES,
    TaskBudget,
    Thresholds,
    context_window_for,
    estimate_text_tokens,
    task_budget_after_compaction,
    usage_context_tokens,
)
from durable_agent.engine.contracts import CallModelOutput, WithheldError
from durable_agent.engine.errors import ErrorKind
from durable_agent.engine.messages import Usage
from durable_agent.engine.request import ModelRequest
from durable_agent.engine.state import (
    ESCALATED_MAX_OUTPUT_TOKENS,
    MAX_OUTPUT_TOKENS_RECOVERIES,
    OUTPUT_RECOVERY_MESSAGE,
    Answer,
    CompactTracking,
    PendingUser,
    Phase,
    QueryConfig,
    State,
    Terminal,
    ToolResultRef,
    Transition,
)


def record_usage(state: State, out: CallModelOutput) -> State:
    by_model = dict(state.usage_by_model)
    by_model[out.model] = by_model.get(out.model, Usage()) + out.usage
    return state.model_copy(
        update={
            "usage": state.usage + out.usage,
            "usage_by_model": by_model,
            "api_duration_ms": state.api_duration_ms + out.api_duration_ms,
        }
    )


def after_model_response(
    before: State, out: CallModelOutput, cfg: QueryConfig, new_uuid: str
) -> State:
    """`before` is the state the call was made with; `new_uuid` names a user entry if one is
    needed. The phase says what comes next: recover, tools, the Stop hooks, another turn, a
    continue (`transition`), or the end."""
    state = record_usage(before, out)
    if out.withheld is not None:
        return state.at(Phase.RECOVER, withheld=out.withheld)
    answered = state.model_copy(
        update={
            "head_uuid": out.assistant_uuid,
            "pending": None,
            "context_tokens": usage_context_tokens(out.usage),
            "answer": Answer(
                attempt=out.attempt,
                tool_calls=out.tool_calls,
                text=out.text,
                done=out.tool_results,
            ),
        }
    )
    if out.tool_calls:
        return answered.at(Phase.TOOLS)
    if out.stop_reason == "max_tokens":
        return _output_limit(state, answered, out, cfg, new_uuid)
    if out.stop_reason == "pause_turn":
        # The API paused a long turn: send it back unchanged and let it go on.
        return answered.at(Phase.NEXT_TURN, notice="continuing: the API paused the turn")
    if out.stop_reason == "refusal":
        return answered.ended(
            Terminal.MODEL_ERROR, "Claude declined to continue this request (stop_reason: refusal)"
        )
    return answered.at(Phase.STOPPING)


def _output_limit(
    state: State, answered: State, out: CallModelOutput, cfg: QueryConfig, new_uuid: str
) -> State:
    if state.max_tokens_override is None and cfg.max_output_tokens < ESCALATED_MAX_OUTPUT_TOKENS:
        # Retry the same request with the larger cap; the truncated answer stays an orphan branch.
        return state.next(
            Transition.MAX_OUTPUT_TOKENS_ESCALATE,
            max_tokens_override=ESCALATED_MAX_OUTPUT_TOKENS,
            notice=f"continuing: {Transition.MAX_OUTPUT_TOKENS_ESCALATE.value}",
        )
    if state.output_recoveries < MAX_OUTPUT_TOKENS_RECOVERIES:
        pending = PendingUser(
            uuid=new_uuid, parent_uuid=out.assistant_uuid, prompt=OUTPUT_RECOVERY_MESSAGE
        )
        return answered.next(
            Transition.MAX_OUTPUT_TOKENS_RECOVERY,
            pending=pending,
            output_recoveries=state.output_recoveries + 1,
            notice=f"continuing: {Transition.MAX_OUTPUT_TOKENS_RECOVERY.value}",
        )
    return answered.ended(
        Terminal.MODEL_ERROR,
        f"the output token limit was hit again after {MAX_OUTPUT_TOKENS_RECOVERIES} "
        "recovery attempts; the answer is incomplete",
    )


def tools_done(
    state: State, results: list[ToolResultRef], result_chars: list[int], cfg: QueryConfig,
    new_uuid: str, feedback: str | None = None, hook_stop: str | None = None,
    context: list[str] | None = None, mid_turn: tuple[tuple[str, str], ...] = (),
) -> State:  # fmt: skip
    """Every tool_use has its result: they go to the model in the next user entry (with what
    the tools' hooks said, `feedback`, after them), and the context grows by them (each at most
    its budget). A hook's `continue: false` (`hook_stop`, its stopReason) ends the prompt
    `hook_stopped` once the results are stored. `context`: what the loop adds between turns
    (a nested CLAUDE.md), `mid_turn`: what the user sent meanwhile, each a text block after
    them."""
    cap = cfg.tool_result_budget_tokens
    added = sum(min((c + 3) // 4, cap) for c in result_chars)
    if feedback:
        added += estimate_text_tokens(feedback)
    prompts = [text for _, text in mid_turn]
    added += sum(estimate_text_tokens(text) for text in (*(context or ()), *prompts))
    pending = PendingUser(
        uuid=new_uuid,
        parent_uuid=state.head_uuid,
        results=results,
        prompt=feedback,
        context=list(context or ()),
        prompts=prompts,
        prompt_ids=[prompt_id for prompt_id, _ in mid_turn],
    )
    done = state.at(
        Phase.TOOLS_DONE,
        pending=pending,
        answer=None,
        context_tokens=state.context_tokens + added,
    )
    if hook_stop is not None:
        return done.ended(Terminal.HOOK_STOPPED, hook_stop or "a hook stopped the prompt")
    return done


# --- token budget continuation (analysis §7) ---------------------------------------------


def token_budget(cfg: QueryConfig, prompt: str) -> int | None:
    """`--token-budget`, else one written in the prompt (`+500k`, `use 2M tokens`)."""
    return cfg.token_budget if cfg.token_budget is not None else budget_in_prompt(prompt)


def token_budget_continuation(state: State, budget: int, new_uuid: str) -> State | None:
    """Claude stopped on its own (and the Stop hooks let it): below 90 % of the budget, and
    unless returns diminish, nudge it to go on; None: the prompt is complete."""
    decision = check_token_budget(
        state.budget_tracker, is_subagent=False, budget=budget,
        global_turn_tokens=state.usage.output_tokens,
    )  # fmt: skip
    if decision.nudge is None:
        return None
    pending = PendingUser(uuid=new_uuid, parent_uuid=state.head_uuid, prompt=decision.nudge)
    return state.next(
        Transition.TOKEN_BUDGET_CONTINUATION,
        pending=pending,
        budget_tracker=decision.tracker,
        notice=f"continuing: {budget_status(state, budget)}",
    )


def budget_status(state: State, budget: int) -> str:
    used = state.usage.output_tokens
    return f"token budget {round(used / budget * 100)}% used ({used:,}/{budget:,} tokens)"


# --- context: before each call, and recovery from withheld errors -------------------------


class PreCall(StrEnum):
    PROCEED = "proceed"
    WARN = "warn"
    AUTOCOMPACT = "autocompact"
    BLOCK = "block"


def after_fallback(state: State, fallback_model: str) -> State:
    """The same request again (the pending entry is stored idempotently) to the fallback model,
    for the rest of the query; what came before it loses its thinking blocks."""
    return state.at(Phase.TURN, model=fallback_model, fallback_head=state.head_uuid, ending=None)


def thresholds(state: State, cfg: QueryConfig) -> Thresholds:
    return Thresholds.for_window(context_window_for(state.model or cfg.model, cfg.context_window))


def autocompact_enabled(state: State, cfg: QueryConfig) -> bool:
    """Off by config, or for the rest of the query once the circuit breaker tripped."""
    return cfg.autocompact and (
        state.compaction.consecutive_failures < MAX_CONSECUTIVE_AUTOCOMPACT_FAILURES
    )


def before_model_call(state: State, cfg: QueryConfig) -> PreCall:
    th = thresholds(state, cfg)
    tokens = state.context_tokens
    if autocompact_enabled(state, cfg):
        if tokens >= th.autocompact:
            return PreCall.AUTOCOMPACT
    elif tokens >= th.blocking:
        return PreCall.BLOCK
    if tokens >= th.warning and not state.warned_context:
        return PreCall.WARN
    return PreCall.PROCEED


def model_request(state: State, cfg: QueryConfig) -> ModelRequest:
    """The request options for the next call, from config and what the loop went through."""
    model = state.model or cfg.model
    window = context_window_for(model, cfg.context_window)
    above = (
        cfg.microcompact_above_tokens if cfg.microcompact_above_tokens is not None else window // 2
    )
    task = None
    if cfg.task_budget is not None:
        task = TaskBudget(total=cfg.task_budget, remaining=state.task_budget_remaining)
    return ModelRequest(
        model=model,
        max_tokens=state.max_tokens_override or cfg.max_output_tokens,
        thinking_budget=cfg.thinking_budget,
        strip_thinking_through=state.fallback_head,
        prompt_caching=cfg.prompt_caching,
        result_budget_tokens=cfg.tool_result_budget_tokens,
        message_budget_tokens=cfg.message_result_budget_tokens,
        snip_keep_turns=cfg.snip_keep_turns,
        microcompact_keep=cfg.microcompact_keep_recent
        if state.microcompacting or state.context_tokens >= above
        else None,
        collapsed_ids=list(state.collapsed_ids),
        strip_images=state.strip_images,
        task_budget=task,
    )


def prepare_request(state: State, cfg: QueryConfig) -> tuple[State, ModelRequest]:
    """The request for the next call; once microcompact starts it stays on until a compaction
    (the cleared view is smaller, and must not switch it off again)."""
    request = model_request(state, cfg)
    if request.microcompact_keep is not None and not state.microcompacting:
        state = state.model_copy(update={"microcompacting": True})
    return state, request


class Recovery(StrEnum):
    DRAIN = "drain"
    """Clear the largest stale tool results from the view (collapse_drain_retry)."""
    REACTIVE_COMPACT = "reactive_compact"
    STRIP_IMAGES = "strip_images"
    FAIL = "fail"


def on_withheld(state: State, withheld: WithheldError, cfg: QueryConfig) -> Recovery:
    """Each recovery at most once per turn; then the error is the answer."""
    if withheld.kind == ErrorKind.MEDIA:
        return Recovery.FAIL if state.strip_images else Recovery.STRIP_IMAGES
    if not state.collapse_drained:
        return Recovery.DRAIN
    if not state.has_attempted_reactive_compact:
        return Recovery.REACTIVE_COMPACT
    return Recovery.FAIL


def withheld_terminal(withheld: WithheldError) -> Terminal:
    return Terminal.IMAGE_ERROR if withheld.kind == ErrorKind.MEDIA else Terminal.PROMPT_TOO_LONG


def drain_target(state: State, withheld: WithheldError, cfg: QueryConfig) -> int:
    """Aim under the limit the error named (or the autocompact threshold) with room to answer."""
    limit = withheld.max_tokens or thresholds(state, cfg).effective
    return max(1_000, limit - cfg.max_output_tokens - 13_000)


def after_compaction(
    state: State,
    cfg: QueryConfig,
    summary_uuid: str,
    pre_tokens: int,
    post_tokens: int,
    turn_id: str,
    reactive: bool,
) -> State:
    """Continue from the summary: tracking reset, views reset, the task budget charged."""
    remaining = state.task_budget_remaining
    if cfg.task_budget is not None:
        remaining = task_budget_after_compaction(cfg.task_budget, remaining, pre_tokens)
    update: dict[str, object] = {
        "head_uuid": summary_uuid,
        "pending": None,
        "context_tokens": post_tokens,
        "compaction": CompactTracking(compacted=True, turn_id=turn_id),
        "compactions": state.compactions + 1,
        "collapsed_ids": (),
        "microcompacting": False,
        "task_budget_remaining": remaining,
        "warned_context": False,
    }
    if reactive:
        return state.next(
            Transition.REACTIVE_COMPACT_RETRY, has_attempted_reactive_compact=True, **update
        )
    return state.at(Phase.CALL, **update)


def compaction_failed(state: State, reactive: bool) -> State:
    """Autocompact counts towards its circuit breaker and the call goes ahead; a failed
    reactive compact leaves the withheld error as the answer."""
    if reactive:
        return state.at(Phase.RECOVER, has_attempted_reactive_compact=True)
    failures = state.compaction.consecutive_failures + 1
    compaction = state.compaction.model_copy(update={"consecutive_failures": failures})
    return state.at(Phase.CALL, compaction=compaction)


STOP_HOOK_FEEDBACK = "Stop hook feedback:\n{errors}"
MAX_STOP_HOOK_BLOCKS = 5
"""A Stop hook that never lets the query end would loop forever (and spend tokens)."""


def after_stop_hooks(
    state: State, blocking_errors: list[str], prevent: bool, stop_reason: str, new_uuid: str
) -> State:
    if prevent:
        return state.ended(
            Terminal.STOP_HOOK_PREVENTED, stop_reason or "a Stop hook prevented continuation"
        )
    if (
        blocking_errors
        and state.transition_count(Transition.STOP_HOOK_BLOCKING) >= MAX_STOP_HOOK_BLOCKS
    ):
        message = f"Stop hooks blocked {MAX_STOP_HOOK_BLOCKS} times; stopping: {blocking_errors[0]}"
        return state.ended(Terminal.STOP_HOOK_PREVENTED, message)
    if blocking_errors:
        feedback = STOP_HOOK_FEEDBACK.format(errors="\n".join(blocking_errors))
        pending = PendingUser(uuid=new_uuid, parent_uuid=state.head_uuid, prompt=feedback)
        return state.next(
            Transition.STOP_HOOK_BLOCKING,
            pending=pending,
            stop_hook_active=True,
            notice="a Stop hook blocked: continuing with its feedback",
        )
    return state.at(Phase.HOOKS_PASSED)
