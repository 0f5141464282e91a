"""Worker Versioning (issue 26): a worker of a new build and one of the old, on the same task
queue under one Worker Deployment, each serve their own prompts side by side — the old prompt
is pinned to the build that started it, the new session's prompt runs the new code — and no
history sees a non-determinism error."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from activities.transcript import TranscriptStore
from durable_agent.names import Workflows
from durable_agent.operating import WorkerSettings, promote_first_version
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from durable_agent.wiring import VERSIONED_WORKFLOWS, build_worker
from tests.helpers import replay_client_factory, start_session
from tests.workflows_v2 import QueryWorkflowV2
from workflows.query import QueryWorkflow


async def wait_until(predicate, seconds: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def prompt_of(client: Client, session: str) -> WorkflowHandle:
    """The session's first prompt workflow (its id is `SESSION-q1`-like: found by listing)."""
    query = f"WorkflowType = '{Workflows.QUERY}' AND ParentWorkflowId = '{session}'"
    for _ in range(100):
        async for found in client.list_workflows(query):
            return client.get_workflow_handle(found.id, run_id=found.run_id)
        await asyncio.sleep(0.1)
    raise AssertionError(f"no prompt workflow of {session}")


async def build_of(handle: WorkflowHandle) -> str:
    described = await handle.describe()
    info = described.raw_description.workflow_execution_info.versioning_info
    return info.deployment_version.build_id


async def failed_tasks(handle: WorkflowHandle) -> list[str]:
    history = await handle.fetch_history()
    return [
        str(event.workflow_task_failed_event_attributes.failure.message)
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]


async def timers(handle: WorkflowHandle) -> int:
    history = await handle.fetch_history()
    return sum(e.event_type == EventType.EVENT_TYPE_TIMER_STARTED for e in history.events)


async def test_old_and_new_builds_serve_their_own_sessions_side_by_side(
    dev_env, tmp_path: Path
) -> None:
    client = dev_env.client
    queue = f"versioned-{uuid.uuid4().hex[:8]}"
    deployment = f"durable-agent-{uuid.uuid4().hex[:8]}"
    gate = tmp_path / "gate"
    hold = f"python3 -c \"import os, time\nwhile not os.path.exists('{gate}'): time.sleep(0.05)\""
    turns = [
        tool_turn([("b1", "Bash", {"command": hold})]),  # session A's prompt, held in its tool
        text_turn("B on the new build"),  # session B's prompt
        text_turn("A on the old build"),  # A's prompt after the tool
    ]
    store = TranscriptStore(tmp_path / "transcripts")
    ws_a, ws_b = tmp_path / "a", tmp_path / "b"
    ws_a.mkdir()
    ws_b.mkdir()

    def settings(build: str) -> WorkerSettings:
        return WorkerSettings(task_queue=queue, deployment=deployment, build_id=build)

    new_workflows = [QueryWorkflowV2 if w is QueryWorkflow else w for w in VERSIONED_WORKFLOWS]
    with ReplayServer(turns) as server:
        factory = replay_client_factory(server)
        old = build_worker(client, queue, store, factory, settings=settings("v1"))
        async with old:
            said: list[str] = []
            assert await promote_first_version(client, deployment, "v1", said.append, 30)
            _, session_a = await start_session(client, ws_a, queue, "A", config={})
            prompt_a = await prompt_of(client, session_a.id)
            await wait_until(lambda: len(server.requests) >= 1)  # A's tool runs on v1
            new = build_worker(
                client, queue, store, factory, settings=settings("v2"), workflows=new_workflows
            )
            async with new:
                # v1 is current: the new build does not promote itself; the operator does
                assert not await promote_first_version(client, deployment, "v2", said.append, 5)
                await set_current(client, deployment, "v2")
                _, session_b = await start_session(client, ws_b, queue, "B", config={})
                status_b = await asyncio.wait_for(session_b.result(), 60)
                gate.write_text("open")
                status_a = await asyncio.wait_for(session_a.result(), 60)
    assert status_a.last_result is not None and status_b.last_result is not None
    assert status_a.last_result.final_text == "A on the old build"
    assert status_b.last_result.final_text == "B on the new build"
    prompt_b = await prompt_of(client, session_b.id)
    assert await build_of(prompt_a) == "v1"  # pinned to the build that started it
    assert await build_of(prompt_b) == "v2"
    assert await timers(prompt_a) == 0 and await timers(prompt_b) >= 1  # each ran its own code
    assert await build_of(session_b) == "v2"
    assert await build_of(session_a) == "v2"  # the session itself moved to the new build
    for handle in (session_a, session_b, prompt_a, prompt_b):
        assert await failed_tasks(handle) == [], handle.id
    assert said == [f"build 'v1' is now the current version of {deployment!r}"]


async def set_current(client: Client, deployment: str, build_id: str) -> None:
    """What `temporal worker deployment set-current-version` does."""
    from temporalio.api.workflowservice.v1 import SetWorkerDeploymentCurrentVersionRequest

    for _ in range(50):  # until the server has seen the new build's pollers
        try:
            await client.workflow_service.set_worker_deployment_current_version(
                SetWorkerDeploymentCurrentVersionRequest(
                    namespace=client.namespace,
                    deployment_name=deployment,
                    build_id=build_id,
                    identity="test",
                )
            )
            return
        except Exception:  # noqa: BLE001 — not registered yet
            await asyncio.sleep(0.2)
    raise AssertionError(f"could not make {build_id} current")
