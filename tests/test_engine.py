"""Pure engine tests: no Temporal, no network."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from durable_agent.engine.messages import (
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    TranscriptEntry,
    to_api_messages,
)
from durable_agent.engine.state import (
    ActivityOptions,
    ModelCallConfig,
    QueryConfig,
    State,
    Terminal,
    Transition,
)
from durable_agent.engine.tools import (
    TOOL_SPECS,
    ReadInput,
    partition_tool_calls,
    tool_is_concurrency_safe,
)

ENGINE = Path(__file__).resolve().parent.parent / "durable_agent" / "engine"
FORBIDDEN = ("temporalio", "anthropic", "workflows", "activities", "httpx", "httpx2")


def test_engine_imports_nothing_forbidden_statically():
    for path in ENGINE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"


def test_engine_imports_nothing_forbidden_at_runtime():
    code = (
        "import sys, durable_agent.engine.messages, durable_agent.engine.state, "
        "durable_agent.engine.tools, durable_agent.engine.errors, durable_agent.engine.contracts, "
        "durable_agent.engine.request, durable_agent.engine.loop\n"
        f"bad = [m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}]\n"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_transition_and_terminal_names_are_the_public_contract():
    assert {t.value for t in Transition} == {
        "next_turn",
        "stop_hook_blocking",
        "token_budget_continuation",
        "reactive_compact_retry",
        "collapse_drain_retry",
        "max_output_tokens_escalate",
        "max_output_tokens_recovery",
        "background_agent_reports",
    }
    assert {t.value for t in Terminal} == {
        "completed",
        "aborted_streaming",
        "aborted_tools",
        "blocking_limit",
        "prompt_too_long",
        "image_error",
        "model_error",
        "max_turns",
        "max_budget",
        "hook_stopped",
        "stop_hook_prevented",
    }


def test_state_is_frozen_and_next_records_the_transition():
    state = State(turn_count=1)
    with pytest.raises(ValidationError):
        state.turn_count = 2  # type: ignore[misc]
    nxt = state.next(Transition.NEXT_TURN, turn_count=2)
    assert (nxt.turn_count, nxt.transition, nxt.transitions) == (
        2,
        Transition.NEXT_TURN,
        (Transition.NEXT_TURN,),
    )
    assert state.turn_count == 1 and state.transition is None
    again = State.model_validate_json(nxt.model_dump_json())
    assert again == nxt


def test_query_config_is_frozen_with_sane_defaults():
    cfg = QueryConfig()
    assert cfg.tool_concurrency == 10 and cfg.max_turns is None
    with pytest.raises(ValidationError):
        cfg.model = "x"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        QueryConfig(tool_concurrency=0)


OLD_FLAT_CONFIG = {
    # Every field of the flat QueryConfig (before it was split), none at its default.
    "model": "m-1",
    "max_turns": 7,
    "max_output_tokens": 12_345,
    "system_prompt": "extra",
    "workspace": "/w",
    "tools": ["Read", "Bash"],
    "tool_concurrency": 3,
    "query_source": "repl_main_thread",
    "unattended": True,
    "unattended_max_seconds": 3600.0,
    "fallback_model": "m-2",
    "thinking_budget": 2048,
    "prompt_caching": False,
    "max_retries": 4,
    "context_window": 500_000,
    "autocompact": False,
    "tool_result_budget_tokens": 2_000,
    "message_result_budget_tokens": 3_000,
    "snip_keep_turns": 5,
    "microcompact_keep_recent": 2,
    "microcompact_above_tokens": 60_000,
    "token_budget": 500_000,
    "task_budget": 90_000,
    "streaming_tool_execution": False,
    "eager_tools": "all",
    "stop_hooks": False,
    "compact_max_tokens": 8_000,
    "iterations_per_run": 9,
    "model_heartbeat_seconds": 2.5,
    "tool_heartbeat_seconds": 3.5,
    "stream_idle_seconds": 30.0,
    "model_call_timeout_seconds": 120.0,
    "tool_timeout_seconds": 240.0,
}


def _leaves(cfg: QueryConfig) -> dict[str, object]:
    """The new shape flattened: each field once, wherever it lives now."""
    top = cfg.model_dump(mode="json", exclude={"call", "activity"})
    call = cfg.call.model_dump(mode="json")
    activity = cfg.activity.model_dump(mode="json")
    assert not (top.keys() & call.keys()) and not (call.keys() & activity.keys())
    assert not (top.keys() & activity.keys())
    return {**top, **call, **activity}


def test_a_flat_config_from_an_old_history_validates_to_the_same_values():
    assert all(
        QueryConfig().model_dump(mode="json").get(k) != v for k, v in OLD_FLAT_CONFIG.items()
    )
    cfg = QueryConfig.model_validate(OLD_FLAT_CONFIG)
    # no field dropped, each value kept; streaming execution off is eager_tools none; the only
    # fields added since are `permissions`, `tool_hooks`, `sandbox`, `settings`, `approvals`,
    # unset (its tools ran unchecked, unsandboxed, with no tool hooks, nobody asked)
    expected = {k: v for k, v in OLD_FLAT_CONFIG.items() if k != "streaming_tool_execution"}
    added: dict[str, object] = {"permissions": None, "tool_hooks": None, "sandbox": None}
    added.update(settings=None, approvals=False, base_system_prompt=None, stream_events=False)
    added["max_budget_usd"] = None
    added["web_search"] = {"allowed_domains": [], "blocked_domains": [], "max_uses": 8}  # on
    added.update(environment=None, memory="", attachments=None, skills=[])
    added.update(tool_summaries=False, agent_depth=0, agents=[], mcp_servers=[], mcp_tools=[])
    added["model_task_queue"] = None  # the fleet's model queue: none (the session's own)
    assert _leaves(cfg) == {**expected, "eager_tools": "none", **added}
    assert cfg.call.unattended and cfg.call.max_retries == 4 and cfg.call.eager_tools == "none"
    assert QueryConfig(eager_tools="all").call.eager_tools == "all"
    assert QueryConfig(streaming_tool_execution=True, eager_tools="all").call.eager_tools == "all"
    assert ModelCallConfig(streaming_tool_execution=False).eager_tools == "none"
    assert (
        cfg.activity.tool_timeout_seconds == 240.0 and cfg.activity.unattended_max_seconds == 3600
    )
    assert cfg.workspace == "/w" and cfg.microcompact_keep_recent == 2 and not cfg.stop_hooks
    # the new shape round-trips, and a flat keyword still lands in its sub-model
    assert QueryConfig.model_validate_json(cfg.model_dump_json()) == cfg
    assert QueryConfig(**OLD_FLAT_CONFIG) == cfg
    assert QueryConfig(unattended=True).call == ModelCallConfig(unattended=True)
    assert QueryConfig(tool_timeout_seconds=5).activity == ActivityOptions(tool_timeout_seconds=5)
    with pytest.raises(ValidationError, match="both flat and in `call`"):
        QueryConfig(unattended=True, call={"unattended": False})


def call(name, tool_id="t", **inp):
    return ToolUseBlock(id=tool_id, name=name, input=inp)


def test_partition_groups_consecutive_safe_calls():
    calls = [
        call("Read", "a", file_path="x"),
        call("Grep", "b", pattern="p"),
        call("Bash", "c", command="make build"),
        call("Read", "d", file_path="y"),
        call("Glob", "e", pattern="*"),
        call("Edit", "f", file_path="x", old_string="a", new_string="b"),
    ]
    batches = partition_tool_calls(calls)
    assert [(b.concurrency_safe, [x.id for x in b.blocks]) for b in batches] == [
        (True, ["a", "b"]),
        (False, ["c"]),
        (True, ["d", "e"]),
        (False, ["f"]),
    ]


def test_partition_unsafe_calls_each_run_alone():
    calls = [call("Bash", "a", command="x"), call("Bash", "b", command="y")]
    assert [len(b.blocks) for b in partition_tool_calls(calls)] == [1, 1]


def test_invalid_input_unknown_tool_and_raising_check_count_as_unsafe():
    assert not tool_is_concurrency_safe(call("Read", file_path=3, bogus=1))
    assert not tool_is_concurrency_safe(call("NoSuchTool"))

    def boom(_block):
        raise RuntimeError("safety check failed")

    batches = partition_tool_calls(
        [call("Read", "a", file_path="x"), call("Read", "b", file_path="y")], boom
    )
    assert [b.concurrency_safe for b in batches] == [False, False]


def test_tool_schemas_use_claude_code_names():
    grep = TOOL_SPECS["Grep"].json_schema()["properties"]
    assert {
        "pattern",
        "path",
        "glob",
        "type",
        "output_mode",
        "-i",
        "-n",
        "-A",
        "-B",
        "-C",
        "head_limit",
    } <= set(grep)
    assert set(TOOL_SPECS["Edit"].json_schema()["required"]) == {
        "file_path",
        "old_string",
        "new_string",
    }
    parsed = TOOL_SPECS["Grep"].parse({"pattern": "x", "-i": True, "-C": 2})
    assert parsed.case_insensitive and parsed.context == 2  # type: ignore[attr-defined]
    assert TOOL_SPECS["Bash"].summary({"command": "git status\nmore"}) == "Bash: git status"
    assert TOOL_SPECS["Read"].read_only and not TOOL_SPECS["Write"].read_only


def test_api_messages_merge_consecutive_user_entries():
    def entry(uuid, parent, role, *blocks):
        return TranscriptEntry(
            uuid=uuid,
            parentUuid=parent,
            type=role,
            message=Message(role=role, content=list(blocks)),
        )

    chain = [
        entry("1", None, "user", TextBlock(text="hi")),
        entry("2", "1", "assistant", ToolUseBlock(id="t1", name="Read", input={"file_path": "a"})),
        entry("3", "2", "user", ToolResultBlock(tool_use_id="t1", content="x", is_error=True)),
        entry("4", "3", "user", TextBlock(text="next prompt")),
    ]
    msgs = to_api_messages(chain)
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert [b["type"] for b in msgs[2]["content"]] == ["tool_result", "text"]
    assert msgs[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": "x",
        "is_error": True,
    }


def test_transcript_entry_uses_reference_field_names():
    e = TranscriptEntry(
        uuid="u", parentUuid="p", type="user", message=Message(role="user", content=[])
    )
    dumped = e.model_dump(by_alias=True)
    assert dumped["parentUuid"] == "p" and "sessionId" in dumped


def test_tool_schemas_are_generated_once_and_requests_share_one_entry_per_tool():
    """Every request lists every tool: the schema is pydantic's, made once; `json_schema` hands
    out copies (a caller that changes one changes no later request), and a request's `tools`
    entry is one object per tool, encoded once (see test_model_client)."""
    spec = TOOL_SPECS["Read"]
    first = spec.json_schema()
    assert first == ReadInput.model_json_schema(by_alias=True)
    first["properties"].clear()
    assert spec.json_schema()["properties"]
    assert spec.api_tool() is spec.api_tool()
    assert spec.api_tool()["input_schema"] == spec.json_schema()
