"""A worker killed mid-step: the session finishes on a new worker, nothing is lost, and a tool
with side effects is never run twice."""

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from durable_agent.engine.contracts import SessionInput
from durable_agent.engine.state import QueryConfig, Terminal
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from durable_agent.replay.cassette import timed_tool_turn
from workflows.session import SessionWorkflow

ROOT = Path(__file__).resolve().parent.parent


def start_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "worker.py"], cwd=ROOT, env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


async def wait_for(predicate, seconds=30.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("timed out waiting")


async def test_killed_worker_mid_tool_and_mid_stream(dev_env, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    marker = workspace / "runs.txt"
    side_effect = f"python3 -c \"open('{marker}', 'a').write('x'); import time; time.sleep(30)\""
    turns = [
        tool_turn([("b1", "Bash", {"command": side_effect})]),
        # killed mid-stream, after its Glob started early
        timed_tool_turn([("g1", "Glob", {"pattern": "*"})], ready_at=[0.1], end_at=30.0),
        text_turn("done"),  # the same model call again, on the new worker
    ]
    task_queue = f"crash-{uuid.uuid4()}"
    with ReplayServer(turns) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "TEMPORAL_"))}
        env.update(
            TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
            ANTHROPIC_BASE_URL=server.base_url,
            ANTHROPIC_API_KEY="dummy",
            DURABLE_AGENT_HOME=str(tmp_path / "home"),
            DURABLE_AGENT_TASK_QUEUE=task_queue,
            DURABLE_AGENT_SETTINGS=str(tmp_path / "none.json"),
        )
        config = QueryConfig(
            workspace=str(workspace), tool_heartbeat_seconds=2, model_heartbeat_seconds=2
        )
        sid = f"crash-{uuid.uuid4()}"
        handle = await dev_env.client.start_workflow(
            SessionWorkflow.run,
            SessionInput(session_id=sid, config=config, initial_prompt="go", close_when_idle=True),
            id=sid,
            task_queue=task_queue,
        )
        worker = start_worker(env)
        try:
            await wait_for(marker.exists)  # the side-effect tool is running: kill its worker
            worker.send_signal(signal.SIGKILL)
            worker.wait()
            worker = start_worker(env)
            await wait_for(lambda: len(server.requests) >= 2)  # turn 2 is streaming: kill again
            await asyncio.sleep(0.5)
            worker.send_signal(signal.SIGKILL)
            worker.wait()
            worker = start_worker(env)
            status = await handle.result()
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=30)
    result = status.last_result
    assert (
        result is not None and result.terminal == Terminal.COMPLETED and result.final_text == "done"
    )
    assert marker.read_text() == "x"  # ran once: the lost attempt was not re-run
    lost = server.requests[1]["messages"][-1]["content"][0]
    assert lost["tool_use_id"] == "b1" and lost["is_error"] and "not re-run" in lost["content"]
    assert len(server.requests) == 3
    assert server.requests[2]["messages"] == server.requests[1]["messages"]  # the same call again
    assert "g1" not in str(
        server.requests[2]
    )  # the dead stream's tool_use never reached the transcript
