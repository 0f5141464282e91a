"""Token budget continuation (analysis §7, issue 9): the pure check, the budget written in a
prompt, and the loop through the real client and the replay server."""

import pytest

from durable_agent.cli import build_config, parser
from durable_agent.engine.budget import (
    BudgetTracker,
    budget_in_prompt,
    check_token_budget,
    parse_amount,
)
from durable_agent.engine.state import Terminal, Transition
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from tests.helpers import run_session


def test_no_budget_a_non_positive_one_or_a_subagent_stops():
    for budget, sub in ((None, False), (0, False), (-5, False), (1000, True)):
        decision = check_token_budget(BudgetTracker(), sub, budget, 10)
        assert not decision.continues and decision.tracker == BudgetTracker()


def test_below_ninety_percent_continues_with_a_nudge_then_stops_at_ninety():
    first = check_token_budget(BudgetTracker(), False, 10_000, 2_500)
    assert first.nudge is not None and "25% used, 2,500/10,000 tokens" in first.nudge
    assert first.tracker == BudgetTracker(
        continuation_count=1, last_delta_tokens=2_500, last_global_turn_tokens=2_500
    )
    assert check_token_budget(first.tracker, False, 10_000, 8_999).continues
    done = check_token_budget(first.tracker, False, 10_000, 9_000)
    assert not done.continues and not done.diminishing


def test_diminishing_returns_stop_after_three_continuations_and_two_small_deltas():
    tracker = BudgetTracker()
    used = 0
    for delta in (3_000, 400, 300):  # three continuations, the last two deltas small
        used += delta
        decision = check_token_budget(tracker, False, 100_000, used)
        assert decision.continues
        tracker = decision.tracker
    assert tracker.continuation_count == 3
    stopped = check_token_budget(tracker, False, 100_000, used + 200)
    assert not stopped.continues and stopped.diminishing
    # One large delta in between keeps it going.
    assert check_token_budget(tracker, False, 100_000, used + 5_000).continues
    # Fewer than three continuations: small deltas do not stop it.
    two = BudgetTracker(continuation_count=2, last_delta_tokens=10, last_global_turn_tokens=20)
    assert check_token_budget(two, False, 100_000, 30).continues


@pytest.mark.parametrize(
    ("prompt", "budget"),
    [
        ("+500k refactor the parser", 500_000),
        ("refactor the parser +2M", 2_000_000),
        ("refactor the parser. +1.5m.", 1_500_000),
        ("please use 2M tokens on this", 2_000_000),
        ("Spend 300k tokens making it fast", 300_000),
        ("+20000 go", 20_000),
        ("fix c++ code", None),
        ("add 1+500k to x", None),
        ("use the tokens module", None),
        ("+0k nothing", None),
    ],
)
def test_a_budget_is_read_from_the_prompt_as_claude_code_users_write_it(prompt, budget):
    assert budget_in_prompt(prompt) == budget


def test_token_budget_flag_takes_amounts_and_refuses_others(tmp_path, capsys):
    assert parse_amount("500k") == 500_000 and parse_amount("2M") == 2_000_000
    args = parser().parse_args(["run", "go", "--token-budget", "250k"])
    assert build_config(args, tmp_path).token_budget == 250_000
    with pytest.raises(SystemExit):
        parser().parse_args(["run", "go", "--token-budget", "lots"])
    assert "'lots' is not a token amount" in capsys.readouterr().err


async def run(ts_env, store, workspace, task_queue, prompt, turns, **config):
    with ReplayServer(turns) as server:
        _, status = await run_session(
            ts_env.client, server, store, workspace, prompt, task_queue, **config
        )
    assert server.violations == []
    assert status.last_result is not None, status
    return server, status.last_result


def last_user_text(body) -> str:
    content = body["messages"][-1]["content"]
    return content if isinstance(content, str) else " ".join(b.get("text", "") for b in content)


async def test_a_budget_in_the_prompt_keeps_claude_working_until_ninety_percent(
    ts_env, store, workspace, task_queue
):
    turns = [
        text_turn("part one", output_tokens=300),
        text_turn("part two", output_tokens=400),
        text_turn("all of it", output_tokens=300),
        text_turn("never asked"),
    ]
    server, result = await run(ts_env, store, workspace, task_queue, "+1k write it", turns)
    assert result.terminal == Terminal.COMPLETED and len(server.requests) == 3
    assert result.transitions == [Transition.TOKEN_BUDGET_CONTINUATION] * 2
    assert "Token budget: 30% used, 300/1,000 tokens" in last_user_text(server.requests[1])
    assert "Token budget: 70% used, 700/1,000 tokens" in last_user_text(server.requests[2])
    assert result.final_text == "all of it"


async def test_the_budget_is_checked_only_when_claude_stops_without_tools(
    ts_env, store, workspace, task_queue
):
    (workspace / "a.txt").write_text("a")
    turns = [
        tool_turn([("g1", "Glob", {"pattern": "*"})], output_tokens=100),
        text_turn("done", output_tokens=50),
        text_turn("done, really", output_tokens=900),
    ]
    server, result = await run(
        ts_env, store, workspace, task_queue, "list", turns, token_budget=1_000
    )
    assert result.terminal == Terminal.COMPLETED and len(server.requests) == 3
    assert result.transitions == [Transition.NEXT_TURN, Transition.TOKEN_BUDGET_CONTINUATION]
    assert "15% used, 150/1,000 tokens" in last_user_text(server.requests[2])


async def test_without_a_budget_nothing_changes(ts_env, store, workspace, task_queue):
    server, result = await run(
        ts_env, store, workspace, task_queue, "hi", [text_turn("hello", output_tokens=5)]
    )
    assert result.terminal == Terminal.COMPLETED and len(server.requests) == 1
    assert result.transitions == []
