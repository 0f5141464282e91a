"""Unreadable answers from the API on a real worker: bounded retries, one line that names what was
sent, and a stalled stream that costs seconds, not the 10-minute activity timeout."""

from __future__ import annotations

import time
import uuid

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from durable_agent.engine.state import QueryResult, Terminal
from durable_agent.replay import ReplayServer, Turn, text_turn, tool_turn
from durable_agent.replay.cassette import Fault
from tests.faults.harness import WorkerProcess, process_env
from tests.helpers import start_session


async def _run(own_server, tmp_path, turns: list[Turn], **config: float) -> tuple[QueryResult, int]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    task_queue = f"api-{uuid.uuid4()}"
    with ReplayServer(turns) as api:
        env = process_env(tmp_path, own_server.address, api.base_url, task_queue)
        with WorkerProcess(env, tmp_path / "worker.log"):
            client = await Client.connect(
                own_server.address, data_converter=pydantic_data_converter
            )
            _, handle = await start_session(
                client, workspace, task_queue, prefix="api", config=config
            )
            status = await handle.result()
    assert status.last_result is not None
    return status.last_result, len(api.requests)


def _broken(fault: Fault) -> Turn:
    return text_turn("never seen").model_copy(update={"fault": fault})


@pytest.mark.parametrize(
    ("fault", "named"),
    [
        (Fault(kind="garbage_event", after_events=4), "malformed SSE event"),
        (Fault(kind="non_json_200"), "non-JSON body (text/html"),
    ],
    ids=["garbage-sse", "html-200"],
)
async def test_an_unreadable_answer_ends_in_one_line_after_three_tries(
    own_server, tmp_path, fault, named
):
    result, requests = await _run(own_server, tmp_path, [_broken(fault)] * 5)
    assert result.terminal == Terminal.MODEL_ERROR
    assert requests == 3
    assert named in result.message and "\n" not in result.message
    assert "Traceback" not in result.message


async def test_a_tool_call_with_invalid_json_is_retried_and_then_runs(own_server, tmp_path):
    bad = tool_turn([("b1", "Bash", {"command": "echo ok"})]).model_copy(
        update={"fault": Fault(kind="bad_tool_json")}
    )
    good = tool_turn([("b1", "Bash", {"command": "echo ok"})])
    result, requests = await _run(own_server, tmp_path, [bad, good, text_turn("done")])
    assert result.terminal == Terminal.COMPLETED and requests == 3


async def test_a_stalled_stream_is_given_up_in_seconds(own_server, tmp_path):
    stalled = _broken(Fault(kind="stall", after_events=3, seconds=300))
    started = time.monotonic()
    result, requests = await _run(
        own_server, tmp_path, [stalled, text_turn("done")], stream_idle_seconds=3
    )
    assert result.terminal == Terminal.COMPLETED and requests == 2
    assert time.monotonic() - started < 30
