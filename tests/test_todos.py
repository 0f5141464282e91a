"""TodoWrite (issue 24 item 3): the list is session state the workflow keeps from the call's
input; `status` shows it, and a prompt's progress shows each new list."""

from __future__ import annotations

import json
import subprocess

import pytest

from activities.tools.registry import execute_tool
from durable_agent.engine.todos import todo_text
from durable_agent.engine.tools import TodoItem
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from tests.test_claude_cli import env_for, workspace

LIST = [
    {"content": "Run the tests", "status": "completed", "activeForm": "Running the tests"},
    {"content": "Fix the bug", "status": "in_progress", "activeForm": "Fixing the bug"},
    {"content": "Write the note", "status": "pending", "activeForm": "Writing the note"},
]


@pytest.mark.parametrize(
    ("todos", "problem"),
    [
        ([{"content": "x", "status": "done", "activeForm": "x"}], "todos.0.status"),
        ([{"content": "", "status": "pending", "activeForm": "x"}], "todos.0.content"),
        ([{"content": "x", "status": "pending"}], "todos.0.activeForm"),
        ([{"content": "x", "status": "pending", "activeForm": "x", "id": 1}], "todos.0.id"),
        ("not a list", "todos"),
    ],
)
async def test_a_bad_list_is_refused_naming_the_field(tmp_path, todos, problem):
    out = await execute_tool("TodoWrite", {"todos": todos}, str(tmp_path))
    assert out.is_error and "InputValidationError" in out.content and problem in out.content


async def test_a_good_list_is_answered_and_two_in_progress_are_pointed_out(tmp_path):
    out = await execute_tool("TodoWrite", {"todos": LIST}, str(tmp_path))
    assert not out.is_error and "todo list is updated" in out.content
    two = [dict(LIST[1]), dict(LIST[1], content="Other")]
    out = await execute_tool("TodoWrite", {"todos": two}, str(tmp_path))
    assert not out.is_error and "more than one task is in_progress" in out.content
    assert (await execute_tool("TodoWrite", {"todos": []}, str(tmp_path))).is_error is False


def test_the_list_as_people_read_it():
    text = todo_text([TodoItem.model_validate(t) for t in LIST])
    assert text.splitlines() == [
        "todos: 1/3 done",
        "  [x] Run the tests",
        "  [~] Fixing the bug",
        "  [ ] Write the note",
    ]
    assert todo_text([]) == "todos: (empty)"


def test_the_session_keeps_the_list_and_status_shows_it(dev_env, tmp_path):
    turns = [
        tool_turn([("t1", "TodoWrite", {"todos": LIST})]),
        text_turn("planned"),
        tool_turn([("t2", "TodoWrite", {"todos": [dict(t, status="completed") for t in LIST]})]),
        text_turn("all done"),
    ]
    with ReplayServer(turns) as server:
        env = env_for(dev_env, tmp_path, server)
        ws = workspace(tmp_path)

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            proc = subprocess.run(
                ["durable-agent", *args], cwd=ws, env=env, capture_output=True, text=True,
                timeout=120, stdin=subprocess.DEVNULL,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
            return proc

        first = json.loads(run("-p", "plan it", "--output-format", "json").stdout)
        sid = first["session_id"]
        status = json.loads(run("status", sid, "--output-format", "json").stdout)
        assert status["todos"] == LIST
        assert "[~] Fixing the bug" in run("status", sid).stdout
        run("-p", "finish it", "--resume", sid, "--output-format", "json")
        status = json.loads(run("status", sid, "--output-format", "json").stdout)
    assert [t["status"] for t in status["todos"]] == ["completed"] * 3
    # The tool's result went back to the model like any other.
    result = server.requests[1]["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and "todo list is updated" in json.dumps(result)
