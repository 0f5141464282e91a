"""A worker killed while a side-effecting Bash runs, a server restarted while one runs: the tool
ran once, the model gets its real result or an honest "interrupted", nothing is left running."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from activities.tools.environment import session_tag_prefix, tagged_processes
from durable_agent.engine.contracts import SessionInput
from durable_agent.engine.state import QueryConfig, Terminal
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from tests.faults.harness import WorkerProcess, process_env, transcript_problems, wait_for
from workflows.session import SessionWorkflow


def _leftovers(session_id: str) -> list[int]:
    return tagged_processes(session_tag_prefix(session_id), prefix=True)


async def _connect(own_server) -> Client:
    return await Client.connect(own_server.address, data_converter=pydantic_data_converter)


async def _start(own_server, workspace, task_queue):
    client = await _connect(own_server)
    sid = f"kill-{uuid.uuid4()}"
    config = QueryConfig(workspace=str(workspace))  # default heartbeat timeouts
    handle = await client.start_workflow(
        SessionWorkflow.run,
        SessionInput(session_id=sid, config=config, initial_prompt="go", close_when_idle=True),
        id=sid,
        task_queue=task_queue,
    )
    return sid, handle


async def test_worker_killed_during_env_bash_side_effect_runs_it_once(own_server, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "side.sh").write_text("echo x >> marker\nsleep 30\ntouch late\n")
    turns = [tool_turn([("b1", "Bash", {"command": "env bash side.sh"})]), text_turn("done")]
    task_queue = f"kill-{uuid.uuid4()}"
    with ReplayServer(turns) as api:
        env = process_env(tmp_path, own_server.address, api.base_url, task_queue)
        worker = WorkerProcess(env, tmp_path / "worker.log").start()
        standby = WorkerProcess(env, tmp_path / "standby.log")
        try:
            sid, handle = await _start(own_server, workspace, task_queue)
            await wait_for((workspace / "marker").exists, 30, "the side effect to start")
            await standby.start().polling(await _connect(own_server), task_queue)
            worker.kill()
            assert _leftovers(sid), "the killed worker's tool process should still be running"
            killed_at = time.monotonic()
            status = await handle.result()
            recovered = time.monotonic() - killed_at
        finally:
            worker.stop()
            standby.stop()
    result = status.last_result
    assert result is not None and result.terminal == Terminal.COMPLETED
    assert (workspace / "marker").read_text() == "x\n"  # ran once
    answer = api.requests[1]["messages"][-1]["content"][0]
    assert answer["tool_use_id"] == "b1" and answer["is_error"]
    assert "interrupted" in answer["content"] and "not re-run" in answer["content"]
    # Takeover (issue 9: <= 10 s by default): the retry only answers "interrupted", so this is
    # the heartbeat timeout, the retry's start and one short model call.
    assert recovered < 10, f"took {recovered:.1f}s to recover"
    assert _leftovers(sid) == []  # the lost attempt's processes were ended at takeover
    assert not (workspace / "late").exists()
    home = Path(env["DURABLE_AGENT_HOME"])
    assert transcript_problems(next((home / "sessions").glob("*.jsonl"))) == []


async def test_a_bash_that_finishes_while_the_server_is_down_reports_its_real_result(
    own_server, tmp_path
):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    command = "echo started >> marker; sleep 2; echo real-output"
    turns = [tool_turn([("b1", "Bash", {"command": command})]), text_turn("done")]
    task_queue = f"down-{uuid.uuid4()}"
    with ReplayServer(turns) as api:
        env = process_env(tmp_path, own_server.address, api.base_url, task_queue)
        with WorkerProcess(env, tmp_path / "worker.log"):
            sid, handle = await _start(own_server, workspace, task_queue)
            await wait_for((workspace / "marker").exists, 30, "the tool to start")
            own_server.kill()
            await asyncio.sleep(12)  # the tool finishes and its heartbeat timeout passes
            own_server.start()
            client = await _connect(own_server)
            status = await client.get_workflow_handle_for(SessionWorkflow.run, sid).result()
    del handle
    result = status.last_result
    assert result is not None and result.terminal == Terminal.COMPLETED
    assert (workspace / "marker").read_text() == "started\n"
    answer = api.requests[1]["messages"][-1]["content"][0]
    assert answer["tool_use_id"] == "b1"
    assert answer["content"] == "real-output" and not answer.get("is_error")
