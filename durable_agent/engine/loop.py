"""What the loop does after a model response: pure decisions, unit-tested without Temporal."""

from __future__ import annotations

from pydantic import BaseModel

from durable_agent.engine.contracts import CallModelOutput
from durable_agent.engine.errors import ErrorKind
from durable_agent.engine.messages import Usage
from durable_agent.engine.state import (
    ESCALATED_MAX_OUTPUT_TOKENS,
    MAX_OUTPUT_TOKENS_RECOVERIES,
    OUTPUT_RECOVERY_MESSAGE,
    PendingUser,
    QueryConfig,
    State,
    Terminal,
    Transition,
)


class AfterModel(BaseModel):
    """Exactly one of: run the tools, continue with `state`, or end with `terminal`."""

    state: State
    run_tools: bool = False
    terminal: Terminal | None = None
    message: str = ""


def record_usage(state: State, out: CallModelOutput) -> State:
    by_model = dict(state.usage_by_model)
    by_model[out.model] = by_model.get(out.model, Usage()) + out.usage
    return state.model_copy(update={"usage": state.usage + out.usage, "usage_by_model": by_model})


def after_model_response(
    before: State, out: CallModelOutput, cfg: QueryConfig, new_uuid: str
) -> AfterModel:
    """`before` is the state the call was made with; `new_uuid` names a user entry if one is needed."""
    state = record_usage(before, out)
    if out.withheld is not None:
        terminal = (
            Terminal.PROMPT_TOO_LONG
            if out.withheld.kind == ErrorKind.PROMPT_TOO_LONG
            else Terminal.MODEL_ERROR
        )
        return AfterModel(state=state, terminal=terminal, message=out.withheld.message)
    answered = state.model_copy(update={"head_uuid": out.assistant_uuid, "pending": None})
    if out.tool_calls:
        return AfterModel(state=answered, run_tools=True)
    if out.stop_reason == "max_tokens":
        return _output_limit(state, answered, out, cfg, new_uuid)
    if out.stop_reason == "pause_turn":
        # The API paused a long turn: send it back unchanged and let it go on.
        return AfterModel(
            state=answered.next(Transition.NEXT_TURN, turn_count=answered.turn_count + 1)
        )
    if out.stop_reason == "refusal":
        return AfterModel(
            state=answered,
            terminal=Terminal.MODEL_ERROR,
            message="Claude declined to continue this request (stop_reason: refusal)",
        )
    return AfterModel(state=answered, terminal=Terminal.COMPLETED)


def _output_limit(
    state: State, answered: State, out: CallModelOutput, cfg: QueryConfig, new_uuid: str
) -> AfterModel:
    if state.max_tokens_override is None and cfg.max_output_tokens < ESCALATED_MAX_OUTPUT_TOKENS:
        # Retry the same request with the larger cap; the truncated answer stays an orphan branch.
        return AfterModel(
            state=state.next(
                Transition.MAX_OUTPUT_TOKENS_ESCALATE,
                max_tokens_override=ESCALATED_MAX_OUTPUT_TOKENS,
            )
        )
    if state.output_recoveries < MAX_OUTPUT_TOKENS_RECOVERIES:
        pending = PendingUser(
            uuid=new_uuid, parent_uuid=out.assistant_uuid, prompt=OUTPUT_RECOVERY_MESSAGE
        )
        return AfterModel(
            state=answered.next(
                Transition.MAX_OUTPUT_TOKENS_RECOVERY,
                pending=pending,
                output_recoveries=state.output_recoveries + 1,
            )
        )
    return AfterModel(
        state=answered,
        terminal=Terminal.MODEL_ERROR,
        message=f"the output token limit was hit again after {MAX_OUTPUT_TOKENS_RECOVERIES} "
        "recovery attempts; the answer is incomplete",
    )
