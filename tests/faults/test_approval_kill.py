"""A worker SIGKILLed while a tool call waits for approval: a new worker takes the session, the
approval is given from a second process (`durable-agent approve`), the tool runs once and the
session completes. The wait is workflow state: nothing of it lived in the dead worker."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from durable_agent.engine.contracts import ApprovalRequest, SessionInput
from durable_agent.engine.permissions import PermissionContext
from durable_agent.engine.state import ModelCallConfig, QueryConfig, Terminal
from durable_agent.names import Queries
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from tests.faults.harness import WorkerProcess, process_env, transcript_problems
from workflows.session import SessionWorkflow

ROOT = Path(__file__).resolve().parents[2]
COMMAND = "echo ran >> marker"


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_agent", *args], env=env, cwd=ROOT,
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip


async def test_worker_killed_while_a_tool_waits_for_approval(own_server, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    task_queue = f"approval-kill-{uuid.uuid4()}"
    turns = [tool_turn([("b1", "Bash", {"command": COMMAND})]), text_turn("done")]
    with ReplayServer(turns) as api:
        env = process_env(tmp_path, own_server.address, api.base_url, task_queue)
        worker = WorkerProcess(env, tmp_path / "worker.log").start()
        spare = WorkerProcess(env, tmp_path / "spare.log")
        try:
            client = await Client.connect(
                own_server.address, data_converter=pydantic_data_converter
            )
            sid = f"approval-kill-{uuid.uuid4()}"
            ctx = PermissionContext(cwd=str(workspace), home=str(tmp_path))  # default mode
            config = QueryConfig(
                workspace=str(workspace), approvals=True, call=ModelCallConfig(permissions=ctx)
            )
            handle = await client.start_workflow(
                SessionWorkflow.run,
                SessionInput(
                    session_id=sid, config=config, initial_prompt="go", close_when_idle=True
                ),
                id=sid,
                task_queue=task_queue,
            )
            prompt = client.get_workflow_handle(f"{sid}-q1")

            async def waiting() -> list[ApprovalRequest]:
                try:
                    found = await prompt.query(Queries.APPROVALS, result_type=list[ApprovalRequest])
                except Exception:  # noqa: BLE001 — not started yet
                    return []
                return found

            for _ in range(600):
                if await waiting():
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("the Bash call never waited for approval")
            await spare.start().polling(client, task_queue)
            worker.kill()
            await asyncio.sleep(1)
            assert not (workspace / "marker").exists()  # nobody has approved it
            # Another process asks; the new worker answers from the replayed workflow.
            bogus = await asyncio.to_thread(cli, env, "approve", sid, "--id", "nope")
            assert bogus.returncode == 2 and "Traceback" not in bogus.stderr, bogus.stderr
            assert "no tool call 'nope' waits for approval" in bogus.stderr
            status = await asyncio.to_thread(cli, env, "status", sid)
            assert status.returncode == 0, status.stderr
            assert "waiting for approval: Bash: echo ran >> marker (request b1)" in status.stdout
            assert f"running: {sid}-q1 for " in status.stdout  # what it does, how long, the prompt
            assert ", tools: 'go'" in status.stdout, status.stdout
            approved = await asyncio.to_thread(cli, env, "approve", sid)
            assert approved.returncode == 0, approved.stderr
            assert "allow: Bash: echo ran >> marker" in approved.stdout
            result = await asyncio.wait_for(handle.result(), 60)
        finally:
            worker.stop()
            spare.stop()
    assert result.last_result is not None and result.last_result.terminal == Terminal.COMPLETED
    assert result.last_result.final_text == "done" and len(api.requests) == 2
    assert (workspace / "marker").read_text() == "ran\n"  # once
    home = Path(env["DURABLE_AGENT_HOME"])
    assert transcript_problems(next((home / "sessions").glob("*.jsonl"))) == []
