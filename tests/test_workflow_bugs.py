"""A bug in our own workflow code (issue 9, fix 1): the prompt fails, the session records it and
goes on, instead of a workflow task retried forever; a task that keeps failing for another
reason shows in `status`."""

import asyncio

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError

import durable_agent.engine.contracts as contracts
import durable_agent.engine.loop as loop
from durable_agent.engine.contracts import PromptRequest
from durable_agent.engine.state import Terminal
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from durable_agent.wiring import build_worker
from tests.helpers import replay_client_factory, start_session
from tests.test_cli import cli_env, durable_agent
from tests.test_query_workflow import query_result
from workflows.session import SessionWorkflow


def break_loop(monkeypatch, error: BaseException, times: int = 1) -> list[int]:
    """The loop's decision after a model answer raises `error`, the first `times` times (the
    sandbox imports the engine as a passed-through module, so the patch reaches the workflow)."""
    real = loop.after_model_response
    calls: list[int] = []

    def broken(*args, **kwargs):
        calls.append(1)
        if len(calls) <= times:
            raise error
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "after_model_response", broken)
    return calls


async def test_a_bug_in_the_loop_fails_the_prompt_and_the_session_goes_on(
    ts_env, store, workspace, task_queue, monkeypatch
):
    break_loop(monkeypatch, KeyError("no such block"))
    with ReplayServer([text_turn("first"), text_turn("second")]) as server:
        factory = replay_client_factory(server)
        async with build_worker(ts_env.client, task_queue, store, factory):
            sid, handle = await start_session(
                ts_env.client, workspace, task_queue, "one", close_when_idle=False, prefix="bug"
            )
            await asyncio.sleep(0)
            second = await asyncio.wait_for(
                handle.execute_update(SessionWorkflow.submit_prompt, PromptRequest(prompt="two")),
                30,
            )
            result = await asyncio.wait_for(
                query_result(ts_env.client, second.query_workflow_id), 30
            )
            status = await handle.query(SessionWorkflow.status)
            await handle.signal(SessionWorkflow.close)
            await asyncio.wait_for(handle.result(), 30)
    assert result.terminal == Terminal.COMPLETED and result.final_text == "second"
    assert status.queries == 2
    first = ts_env.client.get_workflow_handle(f"{sid}-q1")
    history = await first.fetch_history()
    failed = [
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]
    assert failed == []  # the prompt failed at once; its task was not retried
    closing = history.events[-1]
    assert closing.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED
    assert "no such block" in closing.workflow_execution_failed_event_attributes.failure.message


async def test_a_bug_in_a_tool_task_fails_the_prompt_instead_of_waiting_forever(
    ts_env, store, workspace, task_queue, monkeypatch
):
    """A tool runs in a task of its own: a bug raised there reaches the loop."""

    def broken(*args, **kwargs):
        raise TypeError("the tool step is broken")

    # The sandbox imports the workflow module afresh for each run, taking its names from the
    # passed-through engine modules: the tool task's input model is the broken one.
    monkeypatch.setattr(contracts, "RunToolInput", broken)
    turns = [tool_turn([("toolu_1", "Bash", {"command": "true"})]), text_turn("never")]
    with ReplayServer(turns) as server:
        factory = replay_client_factory(server)
        async with build_worker(ts_env.client, task_queue, store, factory):
            sid, _ = await start_session(
                ts_env.client, workspace, task_queue, "read it", prefix="bug"
            )
            with pytest.raises(WorkflowFailureError) as failed:
                await asyncio.wait_for(query_result(ts_env.client, f"{sid}-q1"), 30)
    assert "the tool step is broken" in str(failed.value.cause)


async def test_status_shows_a_prompt_whose_workflow_task_keeps_failing(
    dev_env, store, workspace, task_queue, tmp_path, monkeypatch
):
    # RuntimeError is not one of the bug types: the task retries (until a fixed worker).
    calls = break_loop(monkeypatch, RuntimeError("the engine is confused"), times=10**6)
    client = dev_env.client
    with ReplayServer([text_turn("never")] * 5) as server:
        factory = replay_client_factory(server)
        async with build_worker(client, task_queue, store, factory):
            sid, handle = await start_session(
                client, workspace, task_queue, "one", close_when_idle=False, prefix="bug"
            )
            for _ in range(200):
                if len(calls) >= 2:
                    break
                await asyncio.sleep(0.1)
            assert len(calls) >= 2, "the failing task was not retried"
            env = cli_env(tmp_path, TEMPORAL_ADDRESS=client.service_client.config.target_host)
            status = await asyncio.to_thread(durable_agent, ["status", sid], env)
            await handle.terminate("test over")
    assert status.returncode == 0, status.stderr
    assert f"{sid}-q1: its workflow task is failing (attempt " in status.stdout, status.stdout
    assert "the engine is confused" in status.stdout
