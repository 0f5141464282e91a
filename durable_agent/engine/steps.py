"""One decision per step: what the query loop does next, decided from its State alone.

The workflow runs the step `decide` returns and records its outcome in the State (the
phase says which); nothing else decides. Pure, unit-tested without Temporal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from durable_agent.engine.errors import FALLBACK_TRIGGERED
from durable_agent.engine.loop import (
    PreCall,
    Recovery,
    after_fallback,
    before_model_call,
    drain_target,
    on_withheld,
    thresholds,
    token_budget_continuation,
    withheld_terminal,
)
from durable_agent.engine.pricing import cost_usd
from durable_agent.engine.state import Phase, QueryConfig, State, Terminal, Transition

INTERRUPTED = "interrupted by user"


@dataclass(frozen=True)
class Facts:
    """What the workflow knows besides the State."""

    new_uuid: Callable[[], str]
    """Called only when a decision needs a new entry id (deterministic in a workflow)."""
    interrupted: bool = False
    continue_as_new_suggested: bool = False
    token_budget: int | None = None


@dataclass(frozen=True, kw_only=True)
class _Step:
    state: State
    """The state the step starts from."""
    notes: tuple[str, ...] = ()
    """Shown to the user before the step runs."""


@dataclass(frozen=True, kw_only=True)
class ContinueAsNew(_Step):
    pass


@dataclass(frozen=True, kw_only=True)
class Compact(_Step):
    reactive: bool


@dataclass(frozen=True, kw_only=True)
class CallModel(_Step):
    pass


@dataclass(frozen=True, kw_only=True)
class DrainResults(_Step):
    """Clear the largest stale tool results from the view (collapse_drain_retry)."""

    target_tokens: int


@dataclass(frozen=True, kw_only=True)
class RunTools(_Step):
    pass


@dataclass(frozen=True, kw_only=True)
class StopHooks(_Step):
    pass


@dataclass(frozen=True, kw_only=True)
class Finish(_Step):
    terminal: Terminal
    message: str = ""
    final_text: str = ""


Step = ContinueAsNew | Compact | CallModel | DrainResults | RunTools | StopHooks | Finish

_ABORTED = {
    Phase.TURN: Terminal.ABORTED_STREAMING,
    Phase.CALL: Terminal.ABORTED_STREAMING,
    Phase.RECOVER: Terminal.ABORTED_STREAMING,
    Phase.TOOLS_DONE: Terminal.ABORTED_TOOLS,
}
"""Where an interrupt ends the prompt. Elsewhere the step under way finishes first: the tools
of an answer get their (interrupted) results, a finished answer its Stop hooks."""


def decide(state: State, cfg: QueryConfig, facts: Facts) -> Step:
    notes: tuple[str, ...] = ()
    while True:
        if state.notice:
            notes, state = (*notes, state.notice), state.model_copy(update={"notice": ""})
        step = _decide(state, cfg, facts)
        if isinstance(step, State):  # a continue decided in pure code: decide again
            state = step
            continue
        return step if not notes else _with_notes(step, notes)


def _with_notes(step: Step, notes: tuple[str, ...]) -> Step:
    return replace(step, notes=(*notes, *step.notes))


def _decide(state: State, cfg: QueryConfig, facts: Facts) -> Step | State:
    phase = state.phase
    if facts.interrupted and phase in _ABORTED:
        return Finish(state=state, terminal=_ABORTED[phase], message=INTERRUPTED)
    match phase:
        case Phase.TURN:
            if state.run_iterations >= cfg.iterations_per_run or facts.continue_as_new_suggested:
                return ContinueAsNew(state=state.model_copy(update={"run_iterations": 0}))
            return _before_call(
                state.model_copy(update={"run_iterations": state.run_iterations + 1}), cfg
            )
        case Phase.CALL:
            return CallModel(state=state)
        case Phase.RECOVER:
            return _recover(state, cfg)
        case Phase.FAILED:
            return _after_failure(state, cfg)
        case Phase.TOOLS:
            return RunTools(state=state)
        case Phase.TOOLS_DONE | Phase.NEXT_TURN:
            if cfg.max_turns is not None and state.turn_count + 1 > cfg.max_turns:
                message = f"reached the maximum of {cfg.max_turns} turns"
                return Finish(state=state, terminal=Terminal.MAX_TURNS, message=message)
            spent = cost_usd(state.usage_by_model)
            if cfg.max_budget_usd is not None and spent >= cfg.max_budget_usd:
                message = f"spent ${spent:.4f} of the ${cfg.max_budget_usd:g} budget"
                return Finish(state=state, terminal=Terminal.MAX_BUDGET, message=message)
            return state.next(Transition.NEXT_TURN, turn_count=state.turn_count + 1)
        case Phase.STOPPING:
            return StopHooks(state=state) if cfg.stop_hooks else state.at(Phase.HOOKS_PASSED)
        case Phase.HOOKS_PASSED:
            if facts.token_budget is not None:
                nudged = token_budget_continuation(state, facts.token_budget, facts.new_uuid())
                if nudged is not None:
                    return nudged
            return state.ended(Terminal.COMPLETED)
        case Phase.ENDED:
            ending = state.ending
            assert ending is not None
            text = state.answer.text if state.answer else ""
            return Finish(
                state=state, terminal=ending.terminal, message=ending.message, final_text=text
            )


def _before_call(state: State, cfg: QueryConfig) -> Step:
    """Warn near the limit, autocompact over the threshold, or stop at the blocking limit
    when autocompact is off."""
    action = before_model_call(state, cfg)
    if action == PreCall.BLOCK:
        message = (
            f"the context ({state.context_tokens:,} tokens) reached the blocking limit and "
            "autocompact is off"
        )
        return Finish(state=state, terminal=Terminal.BLOCKING_LIMIT, message=message)
    if action == PreCall.AUTOCOMPACT:
        return Compact(state=state, reactive=False)
    if action == PreCall.WARN:
        window = thresholds(state, cfg).window
        note = f"context is {state.context_tokens:,} of {window:,} tokens"
        return CallModel(state=state.at(Phase.CALL, warned_context=True), notes=(note,))
    return CallModel(state=state.at(Phase.CALL))


def _recover(state: State, cfg: QueryConfig) -> Step | State:
    """prompt too long → drain stale results, then reactive compact; media → drop images.
    Each at most once per turn; then the error is the answer."""
    withheld = state.withheld
    assert withheld is not None
    match on_withheld(state, withheld, cfg):
        case Recovery.DRAIN:
            return DrainResults(state=state, target_tokens=drain_target(state, withheld, cfg))
        case Recovery.REACTIVE_COMPACT:
            return Compact(state=state, reactive=True)
        case Recovery.STRIP_IMAGES:
            return state.next(
                Transition.REACTIVE_COMPACT_RETRY,
                strip_images=True,
                notice="the request's images were too large; retrying without them",
            )
        case Recovery.FAIL:
            return Finish(
                state=state, terminal=withheld_terminal(withheld), message=withheld.message
            )


def _after_failure(state: State, cfg: QueryConfig) -> Step | State:
    """The main model stays overloaded: the same request to the fallback model, once."""
    ending = state.ending
    assert ending is not None
    fallback = cfg.call.fallback_model
    if ending.error_type == FALLBACK_TRIGGERED and fallback and not state.model:
        return after_fallback(state, fallback).model_copy(
            update={"notice": f"{cfg.model} stays overloaded; switching to {fallback}"}
        )
    return Finish(state=state, terminal=Terminal.MODEL_ERROR, message=ending.message)


NOTHING_TO_COMPACT = "there was nothing to compact"
NOT_COMPACTED = "the conversation was not compacted (the summary failed)"


def before_manual_compact(state: State) -> State | None:
    """`/compact` with no conversation (the prompts before it were all blocked) ends at once;
    None: summarise."""
    if state.head_uuid is None:
        return state.ended(Terminal.COMPLETED, NOTHING_TO_COMPACT)
    return None


def after_manual_compact(state: State, compacted: bool, interrupted: bool) -> State:
    """`/compact` ends after its summary (no model turn follows): completed, aborted by the
    user's interrupt, or a model error when the summary failed."""
    if compacted:
        return state.ended(Terminal.COMPLETED)
    if interrupted:
        return state.ended(Terminal.ABORTED_STREAMING, INTERRUPTED)
    return state.ended(Terminal.MODEL_ERROR, NOT_COMPACTED)
