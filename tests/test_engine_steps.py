"""The engine's one decision per step (durable_agent.engine.steps.decide). Pure."""

from __future__ import annotations

import itertools

import pytest

from durable_agent.engine.errors import FALLBACK_TRIGGERED, ErrorKind
from durable_agent.engine.messages import Usage
from durable_agent.engine.state import (
    Answer,
    Ending,
    PendingUser,
    Phase,
    QueryConfig,
    State,
    Terminal,
    ToolCall,
    Transition,
    WithheldError,
)
from durable_agent.engine.steps import (
    CallModel,
    Compact,
    ContinueAsNew,
    DrainResults,
    Facts,
    Finish,
    RunTools,
    StopHooks,
    after_manual_compact,
    before_manual_compact,
    decide,
)

CFG = QueryConfig()
CALL = ToolCall(id="t1", name="Read", concurrency_safe=True, read_only=True, summary="Read: a")
TOO_LONG = WithheldError(kind=ErrorKind.PROMPT_TOO_LONG, message="prompt is too long")


def facts(**kw):
    ids = (f"u{n}" for n in itertools.count())
    return Facts(new_uuid=lambda: next(ids), **kw)


def at(phase: Phase, **kw) -> State:
    """A state as the step before `phase` leaves it."""
    base = State(**{"head_uuid": "h", **kw})
    extra: dict[str, object] = {}
    if phase in (Phase.TOOLS, Phase.STOPPING, Phase.HOOKS_PASSED, Phase.ENDED):
        extra["answer"] = Answer(tool_calls=[CALL] if phase == Phase.TOOLS else [], text="done")
    if phase == Phase.RECOVER:
        extra["withheld"] = TOO_LONG
    if phase == Phase.ENDED:
        extra["ending"] = Ending(terminal=Terminal.MODEL_ERROR, message="refused")
    if phase == Phase.FAILED:
        extra["ending"] = Ending(terminal=Terminal.MODEL_ERROR, message="boom", error_type="X")
    return base.at(phase, **extra)


@pytest.mark.parametrize("phase", list(Phase))
def test_every_phase_has_one_decision(phase):
    step = decide(at(phase), CFG, facts())
    expected = {
        Phase.TURN: CallModel,
        Phase.CALL: CallModel,
        Phase.RECOVER: DrainResults,
        Phase.FAILED: Finish,
        Phase.TOOLS: RunTools,
        Phase.TOOLS_DONE: CallModel,  # the next turn
        Phase.NEXT_TURN: CallModel,
        Phase.STOPPING: StopHooks,
        Phase.HOOKS_PASSED: Finish,
        Phase.ENDED: Finish,
    }
    assert type(step) is expected[phase]


@pytest.mark.parametrize(
    ("phase", "expected"),
    [
        (Phase.TURN, Terminal.ABORTED_STREAMING),
        (Phase.CALL, Terminal.ABORTED_STREAMING),
        (Phase.RECOVER, Terminal.ABORTED_STREAMING),
        (Phase.TOOLS_DONE, Terminal.ABORTED_TOOLS),
    ],
)
def test_an_interrupt_ends_the_prompt_where_nothing_is_under_way(phase, expected):
    step = decide(at(phase), CFG, facts(interrupted=True))
    assert isinstance(step, Finish) and step.terminal == expected
    assert step.message == "interrupted by user"


def test_an_interrupt_lets_the_tools_answer_and_the_stop_hooks_run():
    """Every tool_use gets a result (the executor marks them interrupted); a finished answer
    is finished."""
    assert isinstance(decide(at(Phase.TOOLS), CFG, facts(interrupted=True)), RunTools)
    assert isinstance(decide(at(Phase.STOPPING), CFG, facts(interrupted=True)), StopHooks)


def test_the_next_turn_starts_below_max_turns_and_the_prompt_ends_at_it():
    cfg = QueryConfig(max_turns=2)
    step = decide(at(Phase.TOOLS_DONE), cfg, facts())
    assert isinstance(step, CallModel)
    assert step.state.turn_count == 2 and step.state.transition == Transition.NEXT_TURN
    last = decide(step.state.at(Phase.TOOLS_DONE), cfg, facts())
    assert isinstance(last, Finish) and last.terminal == Terminal.MAX_TURNS
    assert last.state.turn_count == 2 and "maximum of 2 turns" in last.message
    paused = decide(at(Phase.NEXT_TURN, turn_count=2), cfg, facts())
    assert isinstance(paused, Finish) and paused.terminal == Terminal.MAX_TURNS


def test_the_prompt_stops_before_the_next_call_once_its_budget_is_spent():
    cfg = QueryConfig(max_budget_usd=0.01)
    cheap = {"claude-sonnet-4-5": Usage(input_tokens=1_000, output_tokens=100)}  # $0.0045
    assert isinstance(decide(at(Phase.TOOLS_DONE, usage_by_model=cheap), cfg, facts()), CallModel)
    spent = {**cheap, "claude-opus-4-1": Usage(output_tokens=100)}  # + $0.0075
    step = decide(at(Phase.TOOLS_DONE, usage_by_model=spent), cfg, facts())
    assert isinstance(step, Finish) and step.terminal == Terminal.MAX_BUDGET
    assert "$0.0120 of the $0.01 budget" in step.message
    free = decide(at(Phase.TOOLS_DONE, usage_by_model=spent), QueryConfig(), facts())
    assert isinstance(free, CallModel)  # no budget, no limit


def test_the_fallback_model_takes_over_once():
    cfg = QueryConfig(model="main", fallback_model="spare")
    overloaded = at(Phase.TURN).failed("overloaded", FALLBACK_TRIGGERED)
    step = decide(overloaded, cfg, facts())
    assert isinstance(step, CallModel) and step.state.model == "spare"
    assert step.state.fallback_head == "h" and step.notes == (
        "main stays overloaded; switching to spare",
    )
    again = decide(step.state.failed("overloaded", FALLBACK_TRIGGERED), cfg, facts())
    assert isinstance(again, Finish) and again.terminal == Terminal.MODEL_ERROR
    without = decide(overloaded, QueryConfig(), facts())
    assert isinstance(without, Finish) and without.message == "overloaded"
    other = decide(at(Phase.TURN).failed("bad request", "BadRequest"), cfg, facts())
    assert isinstance(other, Finish) and other.terminal == Terminal.MODEL_ERROR


def test_continue_as_new_after_the_iterations_of_a_run_or_when_suggested():
    cfg = QueryConfig(iterations_per_run=3)
    step = decide(at(Phase.TURN, run_iterations=3), cfg, facts())
    assert isinstance(step, ContinueAsNew) and step.state.run_iterations == 0
    suggested = decide(at(Phase.TURN), cfg, facts(continue_as_new_suggested=True))
    assert isinstance(suggested, ContinueAsNew)
    counted = decide(at(Phase.TURN, run_iterations=1), cfg, facts())
    assert isinstance(counted, CallModel) and counted.state.run_iterations == 2


def test_prompt_too_long_drains_then_compacts_then_is_the_answer():
    step = decide(at(Phase.RECOVER), CFG, facts())
    assert isinstance(step, DrainResults) and step.target_tokens > 0
    drained = step.state.model_copy(update={"collapse_drained": True})
    compact = decide(drained, CFG, facts())
    assert isinstance(compact, Compact) and compact.reactive
    failed = drained.model_copy(update={"has_attempted_reactive_compact": True})
    end = decide(failed, CFG, facts())
    assert isinstance(end, Finish) and end.terminal == Terminal.PROMPT_TOO_LONG


def test_images_too_large_are_dropped_once():
    media = WithheldError(kind=ErrorKind.MEDIA, message="image too large")
    step = decide(State().at(Phase.RECOVER, withheld=media), CFG, facts())
    assert isinstance(step, CallModel) and step.state.strip_images
    assert step.state.transition == Transition.REACTIVE_COMPACT_RETRY and step.notes
    again = decide(step.state.at(Phase.RECOVER, withheld=media), CFG, facts())
    assert isinstance(again, Finish) and again.terminal == Terminal.IMAGE_ERROR


def test_context_checks_before_a_call():
    near = decide(at(Phase.TURN, context_tokens=162_000), CFG, facts())
    assert isinstance(near, CallModel) and near.state.warned_context and near.notes
    over = decide(at(Phase.TURN, context_tokens=168_000), CFG, facts())
    assert isinstance(over, Compact) and not over.reactive
    off = QueryConfig(autocompact=False)
    blocked = decide(at(Phase.TURN, context_tokens=178_000), off, facts())
    assert isinstance(blocked, Finish) and blocked.terminal == Terminal.BLOCKING_LIMIT


def test_stop_hooks_off_go_straight_to_the_end_with_the_answer_text():
    step = decide(at(Phase.STOPPING), QueryConfig(stop_hooks=False), facts())
    assert isinstance(step, Finish) and step.terminal == Terminal.COMPLETED
    assert step.final_text == "done"


def test_a_token_budget_sends_claude_back_with_a_nudge():
    spent = at(Phase.HOOKS_PASSED, usage=Usage(output_tokens=1_000))
    step = decide(spent, CFG, facts(token_budget=10_000))
    assert isinstance(step, CallModel)
    assert step.state.transition == Transition.TOKEN_BUDGET_CONTINUATION
    assert isinstance(step.state.pending, PendingUser) and step.state.pending.uuid == "u0"
    assert "10% used" in (step.state.pending.prompt or "") and step.notes == (
        "continuing: token budget 10% used (1,000/10,000 tokens)",
    )
    done = decide(spent, CFG, facts(token_budget=1_000))
    assert isinstance(done, Finish) and done.terminal == Terminal.COMPLETED


def test_a_notice_is_shown_once():
    noted = at(Phase.CALL).model_copy(update={"notice": "continuing: x"})
    step = decide(noted, CFG, facts())
    assert step.notes == ("continuing: x",) and step.state.notice == ""


def test_manual_compact_ends_completed_aborted_or_failed_and_at_once_with_no_conversation():
    state = State(head_uuid="h")
    assert before_manual_compact(state) is None
    empty = before_manual_compact(State())
    assert empty is not None and empty.ending == Ending(
        terminal=Terminal.COMPLETED, message="there was nothing to compact"
    )
    for compacted, interrupted, terminal in (
        (True, True, Terminal.COMPLETED),
        (False, True, Terminal.ABORTED_STREAMING),
        (False, False, Terminal.MODEL_ERROR),
    ):
        ended = after_manual_compact(state, compacted, interrupted)
        assert ended.phase == Phase.ENDED and ended.ending is not None
        assert ended.ending.terminal == terminal
    assert after_manual_compact(state, True, False).ending == Ending(terminal=Terminal.COMPLETED)
