"""Request building and the loop's decisions after a model response. Pure."""

from durable_agent.engine.contracts import CallModelOutput, ToolCall, WithheldError
from durable_agent.engine.errors import ErrorKind
from durable_agent.engine.loop import after_fallback, after_model_response, model_request
from durable_agent.engine.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    TranscriptEntry,
    Usage,
)
from durable_agent.engine.request import ModelRequest, build_request
from durable_agent.engine.state import (
    OUTPUT_RECOVERY_MESSAGE,
    PendingUser,
    Phase,
    QueryConfig,
    State,
    Terminal,
    Transition,
)

CFG = QueryConfig()


def build(*args, **kwargs):
    return build_request(*args, **kwargs)[0]


def out(stop="end_turn", tools=(), withheld=None, model="m", tokens=10):
    return CallModelOutput(
        assistant_uuid="a",
        stop_reason=stop,
        usage=Usage(input_tokens=tokens),
        model=model,
        tool_calls=[
            ToolCall(id=t, name="Read", concurrency_safe=True, read_only=True, summary=t)
            for t in tools
        ],
        withheld=withheld,
    )


BEFORE = State(head_uuid="h", pending=PendingUser(uuid="p", parent_uuid="h", prompt="x"))


def test_end_turn_goes_to_the_stop_hooks_and_usage_is_kept_per_model():
    after = after_model_response(BEFORE, out(), CFG, "n")
    assert (after.phase, after.head_uuid, after.pending) == (Phase.STOPPING, "a", None)
    again = after_model_response(after, out(model="fallback", tokens=5), CFG, "n")
    assert again.usage.input_tokens == 15
    assert {k: v.input_tokens for k, v in again.usage_by_model.items()} == {
        "m": 10,
        "fallback": 5,
    }


def test_tool_use_runs_tools():
    after = after_model_response(BEFORE, out("tool_use", tools=["t"]), CFG, "n")
    assert after.phase == Phase.TOOLS and after.head_uuid == "a"
    assert after.answer is not None and [c.id for c in after.answer.tool_calls] == ["t"]


def test_max_tokens_escalates_once_then_recovers_three_times_then_errors():
    after = after_model_response(BEFORE, out("max_tokens"), CFG, "n1")
    assert after.transition == Transition.MAX_OUTPUT_TOKENS_ESCALATE
    assert after.max_tokens_override == 64_000 and after.phase == Phase.TURN
    assert (after.head_uuid, after.pending) == ("h", BEFORE.pending)  # same request again
    state = after
    for n in range(1, 4):
        state = after_model_response(state, out("max_tokens"), CFG, f"r{n}")
        assert state.transition == Transition.MAX_OUTPUT_TOKENS_RECOVERY
        assert state.phase == Phase.TURN
        assert state.pending == PendingUser(
            uuid=f"r{n}", parent_uuid="a", prompt=OUTPUT_RECOVERY_MESSAGE
        )
        assert state.output_recoveries == n
    last = after_model_response(state, out("max_tokens"), CFG, "x")
    assert last.phase == Phase.ENDED and last.ending is not None
    assert last.ending.terminal == Terminal.MODEL_ERROR
    assert "output token limit" in last.ending.message
    assert (
        list(last.transitions)
        == [Transition.MAX_OUTPUT_TOKENS_ESCALATE] + [Transition.MAX_OUTPUT_TOKENS_RECOVERY] * 3
    )


def test_a_new_turn_gets_its_own_output_limit_recoveries():
    state = BEFORE
    for n in range(4):  # the escalation, then the three recovery messages of turn 1
        state = after_model_response(state, out("max_tokens"), CFG, f"r{n}")
    assert state.output_recoveries == 3 and state.max_tokens_override == 64_000
    tools = after_model_response(state, out("tool_use", tools=["t"]), CFG, "n")
    turn2 = tools.next(Transition.NEXT_TURN, turn_count=2)
    assert turn2.output_recoveries == 0 and turn2.max_tokens_override is None
    again = after_model_response(turn2, out("max_tokens"), CFG, "n2")
    assert again.transition == Transition.MAX_OUTPUT_TOKENS_ESCALATE
    recovered = after_model_response(again, out("max_tokens"), CFG, "n3")
    assert recovered.phase == Phase.TURN and recovered.output_recoveries == 1


def test_no_escalation_when_the_cap_is_already_high():
    after = after_model_response(
        BEFORE, out("max_tokens"), QueryConfig(max_output_tokens=64_000), "n"
    )
    assert after.transition == Transition.MAX_OUTPUT_TOKENS_RECOVERY


def test_pause_turn_continues_and_refusal_ends():
    paused = after_model_response(BEFORE, out("pause_turn"), CFG, "n")
    assert paused.phase == Phase.NEXT_TURN and paused.pending is None
    refused = after_model_response(BEFORE, out("refusal"), CFG, "n")
    assert refused.ending is not None and refused.ending.terminal == Terminal.MODEL_ERROR
    assert "refusal" in refused.ending.message


def test_withheld_errors_go_to_recovery():
    w = WithheldError(
        kind=ErrorKind.PROMPT_TOO_LONG,
        message="prompt is too long: 5 tokens > 4 maximum",
        prompt_tokens=5,
        max_tokens=4,
    )
    after = after_model_response(BEFORE, out(stop=None, withheld=w), CFG, "n")
    assert after.phase == Phase.RECOVER and after.withheld == w
    assert after.head_uuid == "h" and after.pending == BEFORE.pending  # same request next


def entry(uuid, parent, role, *blocks):
    return TranscriptEntry(
        uuid=uuid, parentUuid=parent, type=role, message=Message(role=role, content=list(blocks))
    )


CHAIN = [
    entry("1", None, "user", TextBlock(text="hi")),
    entry(
        "2",
        "1",
        "assistant",
        ThinkingBlock(thinking="hmm", signature="sig"),
        ToolUseBlock(id="t", name="Read", input={}),
    ),
    entry("3", "2", "user", TextBlock(text="more")),
    entry(
        "4",
        "3",
        "assistant",
        TextBlock(text="partial"),
        ThinkingBlock(thinking="trailing", signature="s2"),
    ),
]


def test_request_has_caching_on_system_and_last_message():
    req = build(CHAIN[:3], "SYS", ("Read",), ModelRequest(model="m", max_tokens=8000))
    assert req["system"] == [
        {"type": "text", "text": "SYS", "cache_control": {"type": "ephemeral"}}
    ]
    assert req["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert sum("cache_control" in b for m in req["messages"] for b in m["content"]) == 1
    assert [t["name"] for t in req["tools"]] == ["Read"] and "thinking" not in req
    plain = build(CHAIN[:3], "SYS", (), ModelRequest(model="m", max_tokens=1, prompt_caching=False))
    assert "cache_control" not in str(plain)


def test_thinking_blocks_pass_back_exactly_but_never_last():
    req = build(CHAIN, "S", (), ModelRequest(model="m", max_tokens=8000, thinking_budget=4000))
    assert req["thinking"] == {"type": "enabled", "budget_tokens": 4000}
    assert req["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "hmm",
        "signature": "sig",
    }
    assert [b["type"] for b in req["messages"][3]["content"]] == [
        "text"
    ]  # trailing thinking dropped
    assert (
        build(CHAIN, "S", (), ModelRequest(model="m", max_tokens=1000, thinking_budget=4000))[
            "max_tokens"
        ]
        > 4000
    )


def test_thinking_is_stripped_without_thinking_or_before_a_fallback():
    for req in (
        ModelRequest(model="m", max_tokens=10),
        ModelRequest(model="m", max_tokens=10, thinking_budget=2000, strip_thinking_through="4"),
    ):
        built = build(CHAIN, "S", (), req)
        assert "thinking" not in [b["type"] for m in built["messages"] for b in m["content"]]


def test_after_a_fallback_the_fallback_models_thinking_passes_back_exactly():
    state = after_fallback(State(head_uuid="2"), "fallback")
    assert (state.model, state.fallback_head) == ("fallback", "2")
    req = model_request(state, QueryConfig(thinking_budget=2000))
    fallback_turn = entry(
        "5",
        "4",
        "assistant",
        ThinkingBlock(thinking="mine", signature="fb"),
        ToolUseBlock(id="t2", name="Read", input={}),
    )
    built = build([*CHAIN[:3], fallback_turn], "S", (), req)
    thinking = [b for m in built["messages"] for b in m["content"] if b["type"] == "thinking"]
    assert thinking == [{"type": "thinking", "thinking": "mine", "signature": "fb"}]
    behind = build([fallback_turn], "S", (), req)  # the head is behind a compaction boundary
    assert behind["messages"][0]["content"][0]["signature"] == "fb"
