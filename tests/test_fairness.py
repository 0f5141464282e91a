"""A fleet that shares fairly (issue 26): one tenant's 50-session burst on a worker whose model
queue takes a few calls at a time leaves another tenant's single session within 2x its unloaded
latency; `status` says a session of the burst waits for its share. The sessions start as the CLI
starts them (durable_agent.cli.sessions.fleet_start), on the test dev server, which has
matching.enableFairness on (durable_agent.devserver.DYNAMIC_CONFIG)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from durable_agent import fairness
from durable_agent.cli import pending
from durable_agent.cli.args import parser
from durable_agent.cli.sessions import fleet_start, session_memo
from durable_agent.engine.contracts import SessionInput, SessionStatus
from durable_agent.engine.state import QueryConfig
from durable_agent.names import Workflows
from durable_agent.operating import SettingsError, WorkerSettings
from durable_agent.replay import ReplayServer
from durable_agent.replay.cassette import Turn, text_turn
from durable_agent.wiring import build_worker
from tests.helpers import replay_client_factory

MODEL_SECONDS = 3.0
"""How long each model call takes (the fake API pauses before its first event)."""
MODEL_SLOTS = 8
"""Model calls the worker runs at once: a burst of 50 backs its model queue up for six waves
of calls, so that B, served at the second wave, leaves most of the burst behind it."""
BURST = 50


def _slow_answer(body: dict[str, Any], index: int) -> Turn:
    """B's calls take MODEL_SECONDS; the burst's 1.5-4.5 s, so that its calls end at staggered
    times and a slot frees every fraction of a second, as real API calls do (were they all
    alike, the waves would end together and B's wait for a slot would be a whole call)."""
    prompt = json.dumps(body["messages"][0]["content"])
    seconds = MODEL_SECONDS if "tenant-b" in prompt else 1.5 + (index % 7) * 0.5
    return text_turn("done").model_copy(update={"pause_before": {0: seconds}})


async def _start(
    client: Client, task_queue: str, workspace: Path, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> WorkflowHandle[Any, SessionStatus]:
    """A one-prompt session of `tenant` on the shared queue, started as the CLI starts one."""
    monkeypatch.setenv(fairness.TENANT_ENV, tenant)
    session_id = f"fair-{tenant}-{uuid.uuid4().hex[:10]}"
    config, options = fleet_start(QueryConfig(workspace=str(workspace)), task_queue)
    return await client.start_workflow(
        Workflows.SESSION,
        SessionInput(
            session_id=session_id,
            config=config,
            initial_prompt=f"go ({tenant})",
            close_when_idle=True,
        ),
        id=session_id,
        task_queue=task_queue,
        memo=session_memo(task_queue, config, "run"),
        result_type=SessionStatus,
        **options,
    )


async def _latency(
    client: Client, task_queue: str, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[float, WorkflowHandle[Any, SessionStatus]]:
    began = time.monotonic()
    handle = await _start(client, task_queue, workspace, "tenant-b", monkeypatch)
    status = await asyncio.wait_for(handle.result(), 60)
    assert status.last_result is not None
    assert status.last_result.terminal == "completed", status.last_result
    return time.monotonic() - began, handle


async def _at_its_model_call(client: Client, session: WorkflowHandle[Any, SessionStatus]) -> bool:
    """The session's prompt waits for (or runs) its model call, or is over."""
    try:
        desc = await client.get_workflow_handle(f"{session.id}-q1").describe()
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        return False  # not started yet
    if desc.close_time is not None:
        return True
    pending_calls = desc.raw_description.pending_activities
    return any(a.activity_type.name == "call_model" for a in pending_calls)


async def test_a_burst_of_one_tenant_leaves_another_within_twice_its_latency(
    dev_env, store, workspace, monkeypatch
):
    client = dev_env.client
    task_queue = f"fair-{uuid.uuid4().hex[:8]}"
    model_queue = f"{task_queue}-model"
    monkeypatch.setenv("DURABLE_AGENT_TASK_QUEUE", task_queue)
    monkeypatch.setenv(fairness.MODEL_QUEUE_ENV, model_queue)
    settings = WorkerSettings(
        task_queue=task_queue, model_task_queue=model_queue, max_concurrent_model_calls=MODEL_SLOTS
    )
    with ReplayServer(_slow_answer) as api:
        factory = replay_client_factory(api)
        async with build_worker(client, task_queue, store, factory, settings=settings):
            unloaded = []
            for _ in range(2):
                seconds, alone = await _latency(client, task_queue, workspace, monkeypatch)
                unloaded.append(seconds)
            # The model calls ran on the model queue, with the tenant's fairness key.
            query = await client.get_workflow_handle(f"{alone.id}-q1").fetch_history()
            scheduled = [
                e.activity_task_scheduled_event_attributes
                for e in query.events
                if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                and e.activity_task_scheduled_event_attributes.activity_type.name == "call_model"
            ]
            assert [s.task_queue.name for s in scheduled] == [model_queue]
            desc = await alone.describe()
            assert desc.raw_description.workflow_execution_info.priority.fairness_key == "tenant-b"

            burst = [
                await _start(client, task_queue, workspace, "tenant-a", monkeypatch)
                for _ in range(BURST)
            ]
            # Until the model queue is backed up: every slot busy, the rest waiting, and every
            # session of the burst has reached its model call (its workflow tasks done). B
            # started before that would also measure how fast one worker starts 50 sessions on
            # a machine shared with other tests (7.7 s against 7.2 allowed in a CI run), which
            # is not what this test is about.
            deadline = time.monotonic() + 60
            while len(api.requests) < MODEL_SLOTS + len(unloaded) or not all(
                await asyncio.gather(*(_at_its_model_call(client, h) for h in burst))
            ):
                assert time.monotonic() < deadline, "the burst's model calls did not start"
                await asyncio.sleep(0.2)
            loaded, b = await _latency(client, task_queue, workspace, monkeypatch)
            waiting_line = ""
            for handle in reversed(burst):  # the last started wait longest
                if (await handle.describe()).close_time is None:
                    lines = await pending.session_waiting_lines(client, handle.id)
                    waiting_line = next((x for x in lines if "its share" in x), "")
                    if waiting_line:
                        break
            for handle in burst:
                await asyncio.wait_for(handle.result(), 120)
            # The burst's sessions that closed after B did (server times, both).
            b_closed = (await b.describe()).close_time
            assert b_closed is not None
            closed = [(await handle.describe()).close_time for handle in burst]
            unfinished = sum(1 for t in closed if t is not None and t > b_closed)

    best = min(unloaded)
    print(f"tenant B alone {best:.2f}s, beside tenant A's burst {loaded:.2f}s; A left {unfinished}")
    assert loaded <= 2 * best, f"tenant B took {loaded:.2f}s beside the burst, {best:.2f}s alone"
    # First come, first served, B would have waited for every call of the burst before it:
    # B's call would start after all of theirs, so at most the last wave (the other
    # MODEL_SLOTS - 1 calls) could still run when B closed. Twice that leaves a margin for
    # the burst sessions that end while B starts (24-39 of the 50 were still running in runs).
    assert unfinished >= 2 * MODEL_SLOTS, f"only {unfinished} of the burst were still running"
    assert "tenant 'tenant-a'" in waiting_line and repr(model_queue) in waiting_line, waiting_line


def test_tenant_and_weight_are_checked(monkeypatch):
    assert fairness.tenant(env={}) is None
    assert fairness.tenant(env={fairness.TENANT_ENV: " acme "}) == "acme"
    assert fairness.tenant("given", env={fairness.TENANT_ENV: "acme"}) == "given"
    with pytest.raises(fairness.FairnessError, match="longer than 64 bytes"):
        fairness.tenant("x" * 65, env={})
    assert fairness.priority(None, env={}) is None
    found = fairness.priority("acme", env={fairness.WEIGHT_ENV: "2.5"})
    assert found is not None and (found.fairness_key, found.fairness_weight) == ("acme", 2.5)
    for bad in ("heavy", "0", "-1", "5000"):
        with pytest.raises(fairness.FairnessError, match="is not a weight") as caught:
            fairness.weight(env={fairness.WEIGHT_ENV: bad})
        assert caught.value.hint and "0.001 to 1000" in caught.value.hint


def test_the_model_queue_is_only_for_sessions_on_the_shared_queue():
    env = {fairness.MODEL_QUEUE_ENV: "fleet-model"}
    assert fairness.model_queue("durable-agent", "durable-agent", env) == "fleet-model"
    # A session a CLI serves in its own worker keeps its model calls there.
    assert fairness.model_queue("durable-agent-session-x", "durable-agent", env) is None
    assert fairness.model_queue("durable-agent", "durable-agent", {}) is None


def test_worker_model_settings_need_the_model_queue():
    settings = WorkerSettings.from_env(
        {
            "DURABLE_AGENT_MODEL_TASK_QUEUE": "fleet-model",
            "DURABLE_AGENT_MODEL_CALLS_PER_SECOND": "20",
            "DURABLE_AGENT_MAX_CONCURRENT_MODEL_CALLS": "8",
        }
    )
    assert (settings.model_calls_per_second, settings.max_concurrent_model_calls) == (20.0, 8)
    with pytest.raises(SettingsError, match="MODEL_TASK_QUEUE is not") as caught:
        WorkerSettings.from_env({"DURABLE_AGENT_MODEL_CALLS_PER_SECOND": "20"})
    assert "DURABLE_AGENT_MODEL_TASK_QUEUE" in caught.value.hint
    with pytest.raises(SettingsError, match="MODEL_CALLS_PER_SECOND"):
        WorkerSettings.from_env(
            {"DURABLE_AGENT_MODEL_TASK_QUEUE": "q", "DURABLE_AGENT_MODEL_CALLS_PER_SECOND": "0"}
        )


def test_run_and_chat_take_a_tenant():
    for command in (["run", "hi"], ["chat"]):
        args = parser().parse_args([*command, "--tenant", "acme"])
        assert args.tenant == "acme"
