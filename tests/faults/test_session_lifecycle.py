"""A session across a worker restart and to its end: a prompt sent right after the restart is
queued, not refused; nothing a tool started is alive after the session ended."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode

from activities.tools.environment import session_tag_prefix, tagged_processes
from durable_agent.engine.contracts import PromptRequest, SessionInput
from durable_agent.engine.state import QueryConfig, QueryResult, Terminal
from durable_agent.replay import ReplayServer, Turn, text_turn, tool_turn
from durable_agent.replay.cassette import message
from tests.faults.harness import WorkerProcess, process_env, transcript_problems, wait_for
from tests.helpers import start_session
from workflows.query import QueryWorkflow
from workflows.session import SessionWorkflow


async def _result(client: Client, query_id: str) -> QueryResult:
    for _ in range(600):
        try:
            return await client.get_workflow_handle_for(QueryWorkflow.run, query_id).result()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            await asyncio.sleep(0.05)
    raise AssertionError(f"{query_id} never started")


def _slow_text(text: str, seconds: float) -> Turn:
    """A text answer whose stream pauses `seconds` before its second event."""
    return Turn(
        response=message([{"type": "text", "text": text}], stop_reason="end_turn"),
        pause_before={1: seconds},
    )


async def test_a_prompt_sent_right_after_a_worker_restart_is_queued_not_refused(
    own_server, tmp_path
):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    # The first answer is cut off by the kill; its retry gets the second turn.
    turns = [_slow_text("one", 30.0), text_turn("one"), text_turn("two"), text_turn("three")]
    task_queue = f"queue-{uuid.uuid4()}"
    with ReplayServer(turns) as api:
        env = process_env(tmp_path, own_server.address, api.base_url, task_queue)
        worker = WorkerProcess(env, tmp_path / "worker.log").start()
        standby = WorkerProcess(env, tmp_path / "standby.log")
        try:
            client = await Client.connect(
                own_server.address, data_converter=pydantic_data_converter
            )
            sid = f"queue-{uuid.uuid4()}"
            handle = await client.start_workflow(
                SessionWorkflow.run,
                SessionInput(session_id=sid, config=QueryConfig(workspace=str(workspace))),
                id=sid,
                task_queue=task_queue,
            )
            await handle.execute_update(SessionWorkflow.submit_prompt, PromptRequest(prompt="1"))
            await wait_for(lambda: len(api.requests) >= 1, 30, "the first model call")
            await standby.start().polling(client, task_queue)
            worker.kill()
            killed_at = time.monotonic()
            # Like `chat`: the next prompt goes as soon as the previous answer is there.
            first = await _result(client, f"{sid}-q1")
            recovered = time.monotonic() - killed_at
            second_id = await handle.execute_update(
                SessionWorkflow.submit_prompt, PromptRequest(prompt="2")
            )
            # And one more while the second runs: it waits its turn.
            third_id = await handle.execute_update(
                SessionWorkflow.submit_prompt, PromptRequest(prompt="3")
            )
            second = await _result(client, second_id.query_workflow_id)
            third = await _result(client, third_id.query_workflow_id)
            await handle.signal(SessionWorkflow.close)
            status = await handle.result()
        finally:
            worker.stop()
            standby.stop()
    assert recovered < 15, f"a kill during a model call took {recovered:.1f}s to recover"
    assert [first.terminal, second.terminal, third.terminal] == [Terminal.COMPLETED] * 3
    assert (second_id.index, third_id.index) == (2, 3) and status.queries == 3
    prompts = [r["messages"][-1]["content"] for r in api.requests[-2:]]
    assert [p if isinstance(p, str) else p[0]["text"] for p in prompts] == ["2", "3"]
    home = Path(env["DURABLE_AGENT_HOME"])
    assert transcript_problems(next((home / "sessions").glob("*.jsonl"))) == []


def _leftovers(session_id: str) -> list[int]:
    return tagged_processes(session_tag_prefix(session_id), prefix=True)


async def test_nothing_a_tool_or_hook_started_outlives_its_session(own_server, tmp_path):
    workspace = tmp_path / "ws"
    (workspace / ".claude").mkdir(parents=True)
    # A Stop hook that leaves a daemon behind, like the Bash call below.
    daemon = "setsid sleep 1003 >/dev/null 2>&1 < /dev/null &"
    hooks = {"Stop": [{"hooks": [{"type": "command", "command": daemon}]}]}
    (workspace / ".claude" / "settings.json").write_text(json.dumps({"hooks": hooks}))
    command = (
        "sleep 1000 & "
        "nohup sleep 1001 >/dev/null 2>&1 & "
        "setsid sleep 1002 >/dev/null 2>&1 < /dev/null & "
        "echo started"
    )
    turns = [tool_turn([("b1", "Bash", {"command": command})]), text_turn("done")]
    task_queue = f"end-{uuid.uuid4()}"
    with ReplayServer(turns) as api:
        env = process_env(tmp_path, own_server.address, api.base_url, task_queue)
        with WorkerProcess(env, tmp_path / "worker.log"):
            client = await Client.connect(
                own_server.address, data_converter=pydantic_data_converter
            )
            sid, handle = await start_session(
                client, workspace, task_queue, close_when_idle=False, prefix="end"
            )
            first = await _result(client, f"{sid}-q1")
            alive = _leftovers(sid)  # a chat session keeps them while it goes on
            await handle.signal(SessionWorkflow.close)
            await handle.result()
            await wait_for(lambda: _leftovers(sid) == [], 5, "the session's processes to end")
    assert first.terminal == Terminal.COMPLETED
    assert api.requests[1]["messages"][-1]["content"][0]["content"] == "started"
    assert len(alive) == 4, alive  # three from Bash, one from the Stop hook
