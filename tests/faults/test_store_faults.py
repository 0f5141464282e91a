"""A transcript append cut short for real (the worker's file-size limit: writes stop midway, then
fail with EFBIG, as on a full disk): the answer is kept, no second API call, no torn line."""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import signal
import uuid

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError

from durable_agent.engine.contracts import SessionInput
from durable_agent.engine.state import QueryConfig, Terminal
from durable_agent.replay import ReplayServer, text_turn
from tests.faults.harness import WorkerProcess, process_env, transcript_problems, wait_for
from workflows.session import SessionWorkflow

LIMIT = 4096  # room for the prompt's entry, not for the 20 KB answer


def _small_files() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails, not kills
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, resource.RLIM_INFINITY))


async def _failed_attempts(client: Client, workflow_id: str, attempts: int) -> None:
    """Until an activity of `workflow_id` is on its `attempts`-th try (the ones before failed)."""
    handle = client.get_workflow_handle(workflow_id)
    for _ in range(600):
        with contextlib.suppress(RPCError):  # the prompt's workflow may not have started yet
            pending = (await handle.describe()).raw_description.pending_activities
            if max((a.attempt for a in pending), default=0) >= attempts:
                return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no activity of {workflow_id} reached attempt {attempts}")


async def test_a_write_cut_short_keeps_the_answer_and_calls_the_api_once(own_server, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    answer = "a long answer " * 1500
    task_queue = f"store-{uuid.uuid4()}"
    with ReplayServer([text_turn(answer)]) as api:
        env = process_env(tmp_path, own_server.address, api.base_url, task_queue)
        home = tmp_path / "home"
        worker = WorkerProcess(env, tmp_path / "worker.log")
        worker.start(preexec_fn=_small_files)
        try:
            client = await Client.connect(
                own_server.address, data_converter=pydantic_data_converter
            )
            sid = f"store-{uuid.uuid4()}"
            config = QueryConfig(workspace=str(workspace))
            handle = await client.start_workflow(
                SessionWorkflow.run,
                SessionInput(session_id=sid, config=config, initial_prompt="go",
                             close_when_idle=True),
                id=sid, task_queue=task_queue,
            )  # fmt: skip
            await wait_for(lambda: len(api.requests) >= 1, 30, "the model call")
            await _failed_attempts(client, f"{sid}-q1", 3)  # ... to store the answer
            transcript = next((home / "sessions").glob("*.jsonl"))
            lines = transcript.read_bytes().split(b"\n")
            assert lines[-1] == b"" and len(lines) == 2, "only the prompt, whole"
            assert worker.proc is not None
            resource.prlimit(
                worker.proc.pid,
                resource.RLIMIT_FSIZE,
                (resource.RLIM_INFINITY, resource.RLIM_INFINITY),
            )
            status = await asyncio.wait_for(handle.result(), 60)
        finally:
            worker.stop()
    result = status.last_result
    assert result is not None and result.terminal == Terminal.COMPLETED
    assert result.final_text.startswith("a long answer")
    assert len(api.requests) == 1  # the answer was kept, never streamed again
    assert transcript_problems(transcript) == []
    kinds = [json.loads(line)["type"] for line in transcript.read_text().splitlines()]
    assert kinds == ["user", "assistant"]
