"""Stop hooks in Claude Code's format, run by the real activity against the replay server."""

import json

from durable_agent.engine.loop import MAX_STOP_HOOK_BLOCKS
from durable_agent.engine.state import Terminal, Transition
from durable_agent.replay import ReplayServer, text_turn
from tests.helpers import run_session

UNTIL_ACTIVE = (
    'python3 -c "import json, sys; d = json.load(sys.stdin); '
    "sys.exit(0) if d['stop_hook_active'] else (print('run the tests first', file=sys.stderr), sys.exit(2))\""
)


def stop_hooks(tmp_path, monkeypatch, *commands):
    settings = tmp_path / "settings.json"
    hooks = [{"type": "command", "command": c} for c in commands]
    settings.write_text(json.dumps({"hooks": {"Stop": [{"hooks": hooks}]}}))
    monkeypatch.setenv("DURABLE_AGENT_SETTINGS", str(settings))


async def run(ts_env, store, workspace, task_queue, turns):
    with ReplayServer(turns) as server:
        _, status = await run_session(
            ts_env.client, server, store, workspace, "finish it", task_queue
        )
    assert status.last_result is not None
    return server, status.last_result


async def test_a_blocking_stop_hook_sends_claude_back_to_work(
    ts_env, store, workspace, task_queue, tmp_path, monkeypatch
):
    stop_hooks(tmp_path, monkeypatch, UNTIL_ACTIVE)
    server, result = await run(
        ts_env, store, workspace, task_queue, [text_turn("done"), text_turn("tests pass, done")]
    )
    assert result.terminal == Terminal.COMPLETED and result.final_text == "tests pass, done"
    assert result.transitions == [Transition.STOP_HOOK_BLOCKING]
    feedback = server.requests[1]["messages"][-1]["content"][-1]["text"]
    assert feedback == "Stop hook feedback:\nrun the tests first"
    assert server.requests[1]["messages"][-2]["content"][0]["text"] == "done"


async def test_a_json_block_decision_gives_its_reason(
    ts_env, store, workspace, task_queue, tmp_path, monkeypatch
):
    hook = (
        'python3 -c "import json, sys; d = json.load(sys.stdin); '
        "print('{}' if d['stop_hook_active'] else json.dumps({'decision': 'block', 'reason': 'add a changelog entry'}))\""
    )
    stop_hooks(tmp_path, monkeypatch, hook)
    server, result = await run(
        ts_env, store, workspace, task_queue, [text_turn("done"), text_turn("added")]
    )
    assert result.terminal == Terminal.COMPLETED and len(server.requests) == 2
    assert "add a changelog entry" in server.requests[1]["messages"][-1]["content"][-1]["text"]


async def test_continue_false_ends_stop_hook_prevented(
    ts_env, store, workspace, task_queue, tmp_path, monkeypatch
):
    stop_hooks(tmp_path, monkeypatch, 'echo \'{"continue": false, "stopReason": "quota reached"}\'')
    server, result = await run(ts_env, store, workspace, task_queue, [text_turn("done")])
    assert result.terminal == Terminal.STOP_HOOK_PREVENTED and result.message == "quota reached"
    assert len(server.requests) == 1


async def test_a_hook_that_always_blocks_cannot_loop_forever(
    ts_env, store, workspace, task_queue, tmp_path, monkeypatch
):
    stop_hooks(tmp_path, monkeypatch, "echo never >&2; exit 2")
    turns = [text_turn(f"done {i}") for i in range(MAX_STOP_HOOK_BLOCKS + 1)]
    server, result = await run(ts_env, store, workspace, task_queue, turns)
    assert result.terminal == Terminal.STOP_HOOK_PREVENTED and "blocked 5 times" in result.message
    assert len(server.requests) == MAX_STOP_HOOK_BLOCKS + 1
    assert result.transitions == [Transition.STOP_HOOK_BLOCKING] * MAX_STOP_HOOK_BLOCKS


async def test_without_hooks_nothing_changes(ts_env, store, workspace, task_queue):
    server, result = await run(ts_env, store, workspace, task_queue, [text_turn("done")])
    assert (
        result.terminal == Terminal.COMPLETED
        and result.transitions == []
        and len(server.requests) == 1
    )
