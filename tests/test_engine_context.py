"""Thresholds, the breaker, the once-per-turn rule and the request-view transforms. Pure."""

import pytest

from durable_agent.engine.context import (
    CLEARED_MARKER,
    IMAGE_TOKENS,
    Thresholds,
    apply_tool_result_budget,
    context_window_for,
    drop_oldest,
    estimate_block_tokens,
    microcompact,
    plan_collapse,
    snip,
    strip_images,
    task_budget_after_compaction,
    usage_context_tokens,
)
from durable_agent.engine.contracts import WithheldError
from durable_agent.engine.errors import ErrorKind
from durable_agent.engine.loop import (
    PreCall,
    Recovery,
    after_compaction,
    before_model_call,
    compaction_failed,
    model_request,
    on_withheld,
)
from durable_agent.engine.messages import Usage
from durable_agent.engine.state import QueryConfig, State, Transition

CFG = QueryConfig()  # 200k window
TH = Thresholds.for_window(200_000)


def test_thresholds_follow_the_reference_constants():
    assert TH.effective == 180_000
    assert TH.autocompact == 200_000 - 20_000 - 13_000 == 167_000
    assert TH.warning == 160_000 and TH.blocking == 177_000
    assert context_window_for("claude-sonnet-4-5", None) == 200_000
    assert context_window_for("claude-sonnet-4-5[1m]", None) == 1_000_000
    assert context_window_for("x", 500_000) == 500_000


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        (159_999, PreCall.PROCEED),
        (160_000, PreCall.WARN),
        (166_999, PreCall.WARN),
        (167_000, PreCall.AUTOCOMPACT),
        (167_001, PreCall.AUTOCOMPACT),
    ],
)
def test_autocompact_threshold_boundaries(tokens, expected):
    assert before_model_call(State(context_tokens=tokens), CFG) == expected


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [(176_999, PreCall.WARN), (177_000, PreCall.BLOCK), (177_001, PreCall.BLOCK)],
)
def test_blocking_limit_boundaries_when_autocompact_is_off(tokens, expected):
    assert (
        before_model_call(State(context_tokens=tokens), QueryConfig(autocompact=False)) == expected
    )


def test_the_warning_is_shown_once():
    assert (
        before_model_call(State(context_tokens=165_000, warned_context=True), CFG)
        == PreCall.PROCEED
    )


def test_three_consecutive_failures_trip_the_breaker():
    state = State(context_tokens=170_000)
    for _ in range(2):
        state = compaction_failed(state, reactive=False)
        assert before_model_call(state, CFG) == PreCall.AUTOCOMPACT
    state = compaction_failed(state, reactive=False)
    assert state.compaction.consecutive_failures == 3
    assert before_model_call(state, CFG) == PreCall.WARN  # no more compaction attempts
    assert (
        before_model_call(state.model_copy(update={"context_tokens": 178_000}), CFG)
        == PreCall.BLOCK
    )


def test_compaction_resets_tracking_and_charges_the_task_budget():
    state = compaction_failed(State(context_tokens=170_000, collapsed_ids=("a",)), reactive=False)
    cfg = QueryConfig(task_budget=300_000)
    first = model_request(state, cfg).task_budget
    assert first is not None and (first.total, first.remaining) == (300_000, None)
    after = after_compaction(state, cfg, "sum", 170_000, 3_000, "turn-1", reactive=False)
    assert after.head_uuid == "sum" and after.context_tokens == 3_000 and after.compactions == 1
    assert after.compaction.compacted and after.compaction.turn_id == "turn-1"
    assert after.compaction.turn_counter == 0 and after.compaction.consecutive_failures == 0
    assert after.collapsed_ids == () and after.transition is None
    assert model_request(after, cfg).task_budget.remaining == 130_000  # type: ignore[union-attr]
    again = after_compaction(after, cfg, "s2", 200_000, 1, "t2", reactive=True)
    assert again.task_budget_remaining == 0  # never below 0
    assert (
        again.transition == Transition.REACTIVE_COMPACT_RETRY
        and again.has_attempted_reactive_compact
    )
    assert again.compaction.turn_counter == 0
    assert again.next(Transition.NEXT_TURN).compaction.turn_counter == 1


def test_task_budget_arithmetic():
    assert task_budget_after_compaction(100, None, 30) == 70
    assert task_budget_after_compaction(100, 20, 30) == 0


PTL = WithheldError(
    kind=ErrorKind.PROMPT_TOO_LONG, message="prompt is too long: 9 tokens > 8 maximum"
)
MEDIA = WithheldError(kind=ErrorKind.MEDIA, message="image exceeds 5 MB maximum")


def test_recovery_order_is_drain_then_reactive_compact_then_fail():
    state = State()
    assert on_withheld(state, PTL, CFG) == Recovery.DRAIN
    state = state.next(Transition.COLLAPSE_DRAIN_RETRY, collapse_drained=True)
    assert on_withheld(state, PTL, CFG) == Recovery.REACTIVE_COMPACT
    state = state.next(Transition.REACTIVE_COMPACT_RETRY, has_attempted_reactive_compact=True)
    assert on_withheld(state, PTL, CFG) == Recovery.FAIL


def test_the_reactive_compact_flag_survives_a_stop_hook_continue_but_not_a_new_turn():
    attempted = State(has_attempted_reactive_compact=True, collapse_drained=True)
    hooked = attempted.next(Transition.STOP_HOOK_BLOCKING)
    assert hooked.has_attempted_reactive_compact and on_withheld(hooked, PTL, CFG) == Recovery.FAIL
    fresh = attempted.next(Transition.NEXT_TURN)
    assert (
        not fresh.has_attempted_reactive_compact and on_withheld(fresh, PTL, CFG) == Recovery.DRAIN
    )


def test_media_errors_strip_images_once():
    assert on_withheld(State(), MEDIA, CFG) == Recovery.STRIP_IMAGES
    assert on_withheld(State(strip_images=True), MEDIA, CFG) == Recovery.FAIL


def test_microcompact_only_above_its_trigger():
    assert model_request(State(context_tokens=99_999), CFG).microcompact_keep is None
    assert model_request(State(context_tokens=100_000), CFG).microcompact_keep == 10
    assert model_request(State(), QueryConfig(microcompact_above_tokens=0)).microcompact_keep == 10


def user(*blocks):
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks):
    return {"role": "assistant", "content": list(blocks)}


def use(tool_id, name="Read"):
    return {"type": "tool_use", "id": tool_id, "name": name, "input": {}}


def result(tool_id, text):
    return {"type": "tool_result", "tool_use_id": tool_id, "content": text}


def text(t):
    return {"type": "text", "text": t}


def conversation(n, size=40, name="Read"):
    msgs = [user(text("start"))]
    for i in range(n):
        msgs += [assistant(use(f"t{i}", name)), user(result(f"t{i}", f"r{i}:" + "x" * size))]
    return msgs


def test_microcompact_keeps_the_newest_n_compactable_results():
    msgs = conversation(5)
    out = microcompact(msgs, keep_recent=2)
    contents = [m["content"][0]["content"] for m in out[2::2]]
    assert contents[:3] == [CLEARED_MARKER] * 3
    assert contents[3].startswith("r3:") and contents[4].startswith("r4:")
    assert msgs[2]["content"][0]["content"].startswith("r0:")  # the input is not modified
    assert microcompact(conversation(3, name="TodoWrite"), 0) == conversation(3, name="TodoWrite")
    assert microcompact(msgs, 5) == msgs


def test_tool_result_budget_replaces_large_results_with_a_preview_and_path():
    msgs = [
        user(text("go")),
        assistant(use("big"), use("small")),
        user(result("big", "B" * 200_000), result("small", "s")),
    ]
    out, replaced = apply_tool_result_budget(msgs, 25_000, 50_000, lambda i: f"/results/{i}.txt")
    assert replaced == ["big"]
    content = out[2]["content"][0]["content"]
    assert (
        content.startswith("B" * 100)
        and "/results/big.txt" in content
        and "50,000 tokens" in content
    )
    assert out[2]["content"][1]["content"] == "s"


def test_the_per_message_budget_replaces_the_largest_first():
    msgs = [
        user(text("go")),
        assistant(use("a"), use("b"), use("c")),
        user(result("a", "A" * 80_000), result("b", "B" * 120_000), result("c", "C" * 40_000)),
    ]
    out, replaced = apply_tool_result_budget(msgs, 25_000, 50_000, lambda i: i)
    assert replaced == ["b"]  # 60k tokens → 30k + preview: under 50k
    out, replaced = apply_tool_result_budget(msgs, 25_000, 20_000, lambda i: i)
    assert replaced == ["b", "a"]


def test_snip_keeps_the_head_and_the_newest_turns():
    msgs = conversation(6)
    out = snip(msgs, keep_turns=2)
    assert (
        out[0]["content"][0] == text("start") and "4 older turn(s)" in out[0]["content"][1]["text"]
    )
    assert out[1:] == msgs[-4:]
    assert snip(msgs, 6) == msgs


def test_plan_collapse_clears_the_largest_stale_results_first():
    msgs = [
        user(text("go")),
        assistant(use("a"), use("b")),
        user(result("a", "A" * 4_000), result("b", "B" * 40_000)),
        assistant(use("c")),
        user(result("c", "C" * 80_000)),
    ]
    assert plan_collapse(msgs, target_tokens=25_000, already=[]) == [
        "b"
    ]  # c is in the last message
    assert plan_collapse(msgs, target_tokens=20_000, already=[]) == ["b", "a"]
    assert plan_collapse(msgs, target_tokens=10**6, already=[]) == []


def test_images_count_2000_tokens_and_can_be_stripped():
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "A" * 10**6},
    }
    assert estimate_block_tokens(image) == IMAGE_TOKENS
    msgs = [
        user(text("see"), image),
        assistant(use("t")),
        user({"type": "tool_result", "tool_use_id": "t", "content": [image]}),
    ]
    out = strip_images(msgs)
    assert "image" not in str([b.get("type") for m in out for b in m["content"]])
    assert out[2]["content"][0]["content"][0]["type"] == "text"


def test_usage_context_is_every_input_and_output_token():
    assert (
        usage_context_tokens(
            Usage(
                input_tokens=1,
                cache_creation_input_tokens=2,
                cache_read_input_tokens=3,
                output_tokens=4,
            )
        )
        == 10
    )


def test_drop_oldest_restarts_at_a_clean_user_turn():
    msgs = [
        user(text("a")),
        assistant(text("b")),
        user(text("c")),
        assistant(use("t")),
        user(result("t", "r")),
        assistant(text("d")),
        user(text("e")),
    ]
    out = drop_oldest(msgs)
    assert out[0] == user(text("c"))
    assert drop_oldest([user(text("only"))]) == []


def test_microcompact_stays_on_until_a_compaction():
    from durable_agent.engine.loop import prepare_request

    state, request = prepare_request(State(context_tokens=120_000), CFG)
    assert request.microcompact_keep == 10 and state.microcompacting
    shrunk = state.model_copy(update={"context_tokens": 40_000})  # the cleared view is smaller
    assert prepare_request(shrunk, CFG)[1].microcompact_keep == 10
    after = after_compaction(shrunk, CFG, "s", 40_000, 2_000, "t", reactive=False)
    assert not after.microcompacting and prepare_request(after, CFG)[1].microcompact_keep is None
