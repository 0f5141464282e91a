"""A session cancelled from outside (`temporal workflow cancel`, the Web UI) lets go of what it
held on the worker, as at its normal end: the processes its tools left running."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)

from activities.tools.environment import session_tag_prefix, tagged_processes
from activities.transcript import TranscriptStore
from durable_agent.engine.contracts import SessionStatus
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from durable_agent.wiring import build_worker
from tests.helpers import replay_client_factory, start_session
from workflows.session import SessionWorkflow


def _leftovers(session_id: str) -> list[int]:
    return tagged_processes(session_tag_prefix(session_id), prefix=True)


async def _until(predicate, seconds: float, what: str) -> None:
    for _ in range(int(seconds / 0.1)):
        if predicate():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def _until_idle(handle: WorkflowHandle[SessionWorkflow, SessionStatus]) -> None:
    """Until the session has taken its prompt's result (a cancel then finds it waiting)."""
    for _ in range(100):
        if (await handle.query(SessionWorkflow.status)).running_query_id is None:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the session did not go idle")


@contextlib.asynccontextmanager
async def _session_with_a_bash(
    client: Client, store: TranscriptStore, workspace: Path, task_queue: str, command: str
) -> AsyncIterator[tuple[ReplayServer, str, WorkflowHandle[SessionWorkflow, SessionStatus]]]:
    """A worker, and a session (kept open) whose prompt runs `command` in Bash then ends."""
    (workspace / ".claude").mkdir()
    (workspace / ".claude" / "settings.json").write_text(
        json.dumps({"permissions": {"allow": ["Bash"]}})
    )
    turns = [tool_turn([("b1", "Bash", {"command": command})]), text_turn("done")]
    with ReplayServer(turns) as api:
        async with build_worker(client, task_queue, store, replay_client_factory(api)):
            sid, handle = await start_session(
                client, workspace, task_queue, close_when_idle=False, prefix="cancel"
            )
            yield api, sid, handle


async def test_a_cancelled_session_ends_what_its_tools_left_running(
    dev_env, store, workspace, task_queue
):
    command = "setsid sleep 1004 >/dev/null 2>&1 < /dev/null & echo started"
    client = dev_env.client
    async with _session_with_a_bash(client, store, workspace, task_queue, command) as session:
        api, sid, handle = session
        await _until(lambda: len(api.requests) == 2, 30, "the prompt's answer")
        await _until(lambda: len(_leftovers(sid)) == 1, 10, "the daemon")
        await client.get_workflow_handle(f"{sid}-q1").result()
        await _until_idle(handle)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        await _until(lambda: _leftovers(sid) == [], 10, "the session's processes to end")
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED


async def test_a_session_cancelled_during_a_prompt_ends_cancelled_and_releases_too(
    dev_env, store, workspace, task_queue
):
    """The cancel reaches the running prompt first (the SDK cancels the child and lets its
    outcome through); the session still ends, cancelled, and ends what the tool left."""
    command = "setsid sleep 1005 >/dev/null 2>&1 < /dev/null & sleep 3; echo started"
    async with _session_with_a_bash(
        dev_env.client, store, workspace, task_queue, command
    ) as session:
        _, sid, handle = session
        await _until(lambda: len(_leftovers(sid)) >= 1, 30, "the Bash to start")
        await handle.cancel()  # while the Bash runs
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 30)
        await _until(lambda: _leftovers(sid) == [], 10, "the session's processes to end")
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
