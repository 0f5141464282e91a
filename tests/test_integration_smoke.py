from durable_agent.engine.state import Terminal
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from tests.helpers import run_session


async def test_read_edit_bash_session(dev_env, store, workspace, task_queue):
    (workspace / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    turns = [
        tool_turn([("t1", "Read", {"file_path": "calc.py"})], "Let me look."),
        tool_turn(
            [("t2", "Edit", {"file_path": "calc.py", "old_string": "a - b", "new_string": "a + b"})]
        ),
        tool_turn([("t3", "Bash", {"command": "python3 -c 'import calc; print(calc.add(2, 3))'"})]),
        text_turn("Fixed: add now returns 5 for 2+3."),
    ]
    with ReplayServer(turns) as server:
        _, status = await run_session(
            dev_env.client, server, store, workspace, "fix add", task_queue
        )
    assert server.violations == []
    assert status.last_result is not None, status
    assert status.last_result.terminal == Terminal.COMPLETED, status
    assert "a + b" in (workspace / "calc.py").read_text()
    last_user = server.requests[-1]["messages"][-1]
    assert last_user["content"][0]["tool_use_id"] == "t3"
    assert "5" in str(last_user["content"][0]["content"])
