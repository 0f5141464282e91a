"""QueryWorkflow and SessionWorkflow on the time-skipping server, with fake activities."""

import asyncio
import uuid

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from durable_agent.engine.contracts import PromptRequest, QueryInput, SessionInput
from durable_agent.engine.state import QueryConfig, QueryResult, Terminal, Transition
from tests.fakes import BLOCK, Fakes, completed_activities, reply, tools
from tests.helpers import record_histories
from workflows.query import QueryWorkflow
from workflows.session import MAX_QUEUED_PROMPTS, SessionWorkflow
from workflows.streaming_tools import INTERRUPTED_TOOL, NOT_RUN_TOOL


def query_input(**cfg):
    return QueryInput(
        session_id="s1", prompt="do it", parent_uuid="root", config=QueryConfig(**cfg)
    )


async def start_query(env, fakes, task_queue, **cfg):
    return await env.client.start_workflow(
        QueryWorkflow.run, query_input(**cfg), id=f"q-{uuid.uuid4()}", task_queue=task_queue
    )


async def test_tools_run_in_batches_and_results_keep_request_order(ts_env, task_queue):
    fakes = Fakes(
        script=[
            reply("looking", tools(("a", "Read"), ("b", "Read"), ("c", "Bash"), ("d", "Grep"))),
            reply("done"),
        ],
        tool_delays={"a": 0.4, "b": 0.05},
    )
    async with fakes.worker(ts_env.client, task_queue):
        result = await (await start_query(ts_env, fakes, task_queue)).result()
    assert result.terminal == Terminal.COMPLETED and result.final_text == "done"
    assert result.turn_count == 2 and result.transitions == [Transition.NEXT_TURN]
    second = fakes.model_calls[1]
    assert second.new_user is not None and second.parent_uuid == fakes.model_calls[0].assistant_uuid
    assert [r.tool_use_id for r in second.new_user.results] == ["a", "b", "c", "d"]
    spans = fakes.tool_spans
    assert spans["b"][1] < spans["a"][1]  # b finished first, yet stays second
    assert spans["a"][0] < spans["b"][1] and spans["b"][0] < spans["a"][1]  # a and b overlapped
    assert spans["c"][0] >= max(spans["a"][1], spans["b"][1])  # Bash waited for the batch
    assert spans["d"][0] >= spans["c"][1]
    assert fakes.model_calls[0].new_user.prompt == "do it"  # type: ignore[union-attr]


async def test_concurrency_limit_is_respected(ts_env, task_queue):
    calls = tools(*[(f"r{i}", "Read") for i in range(6)])
    fakes = Fakes(script=[reply(calls=calls), reply("ok")], tool_delays={c.id: 0.2 for c in calls})
    async with fakes.worker(ts_env.client, task_queue):
        result = await (await start_query(ts_env, fakes, task_queue, tool_concurrency=2)).result()
    assert result.terminal == Terminal.COMPLETED
    assert fakes.max_running == 2


async def test_max_turns_stores_the_last_tool_results(ts_env, task_queue):
    fakes = Fakes(script=[reply(calls=tools(("t", "Read")))])
    async with fakes.worker(ts_env.client, task_queue):
        result = await (await start_query(ts_env, fakes, task_queue, max_turns=2)).result()
    assert result.terminal == Terminal.MAX_TURNS and result.turn_count == 2
    assert len(fakes.model_calls) == 2
    assert len(fakes.appended) == 1 and fakes.appended[0].entry.results[0].tool_use_id == "t"
    assert result.head_uuid == fakes.appended[0].entry.uuid


async def test_non_retryable_model_error_ends_model_error(ts_env, task_queue):
    err = ApplicationError("InvalidRequest: bad request", type="InvalidRequest", non_retryable=True)
    fakes = Fakes(script=[err])
    async with fakes.worker(ts_env.client, task_queue):
        result = await (await start_query(ts_env, fakes, task_queue)).result()
    assert result.terminal == Terminal.MODEL_ERROR and "bad request" in result.message
    assert len(fakes.model_calls) == 1
    assert fakes.appended[0].entry.prompt == "do it"  # the prompt is kept in the transcript


async def test_retryable_model_error_is_retried_by_temporal(ts_env, task_queue):
    err = ApplicationError("Overloaded", type="Overloaded")
    fakes = Fakes(script=[err, err, reply("finally")])
    async with fakes.worker(ts_env.client, task_queue):
        result = await (await start_query(ts_env, fakes, task_queue)).result()
    assert result.terminal == Terminal.COMPLETED and len(fakes.model_calls) == 3


async def test_interrupt_while_streaming(ts_env, task_queue):
    fakes = Fakes(script=[BLOCK])
    async with fakes.worker(ts_env.client, task_queue):
        handle = await start_query(ts_env, fakes, task_queue, model_heartbeat_seconds=2)
        await asyncio.wait_for(fakes.started.wait(), 10)
        await handle.signal(QueryWorkflow.interrupt)
        result = await handle.result()
        for _ in range(100):
            if fakes.cancelled:
                break
            await asyncio.sleep(0.05)
    assert result.terminal == Terminal.ABORTED_STREAMING
    assert fakes.cancelled == ["model"]
    assert fakes.appended[0].entry.prompt == "do it"


async def test_interrupt_while_tools_run_gives_every_tool_use_a_result(ts_env, task_queue):
    fakes = Fakes(
        script=[reply(calls=tools(("fast", "Read"), ("slow", "Read"), ("later", "Bash")))],
        blocking_tools={"slow"},
    )
    async with fakes.worker(ts_env.client, task_queue):
        handle = await start_query(ts_env, fakes, task_queue, tool_heartbeat_seconds=2)
        await asyncio.wait_for(fakes.started.wait(), 10)
        await completed_activities(handle, 2)  # the model call and "fast"
        await handle.signal(QueryWorkflow.interrupt)
        result = await handle.result()
    assert result.terminal == Terminal.ABORTED_TOOLS
    results = fakes.appended[0].entry.results
    assert [r.tool_use_id for r in results] == ["fast", "slow", "later"]
    assert results[0].inline is None  # finished: its stored result is used
    assert results[1].inline is not None and results[1].inline.content == INTERRUPTED_TOOL
    assert results[2].inline is not None and results[2].inline.content == NOT_RUN_TOOL
    assert "later" not in fakes.tool_spans


async def test_a_failing_tool_activity_becomes_an_error_result(ts_env, task_queue):
    fakes = Fakes(script=[reply(calls=tools(("x", "Bash"))), reply("ok")], failing_tools={"x"})
    async with fakes.worker(ts_env.client, task_queue):
        result = await (await start_query(ts_env, fakes, task_queue)).result()
    assert result.terminal == Terminal.COMPLETED
    ref = fakes.model_calls[1].new_user.results[0]  # type: ignore[union-attr]
    assert (
        ref.inline is not None and ref.inline.is_error and "disk on fire" in str(ref.inline.content)
    )


async def test_continue_as_new_carries_state(ts_env, task_queue):
    fakes = Fakes(
        script=[reply(calls=tools(("a", "Read"))), reply(calls=tools(("b", "Read"))), reply("end")]
    )
    async with fakes.worker(ts_env.client, task_queue):
        handle = await start_query(ts_env, fakes, task_queue, iterations_per_run=1)
        result = await handle.result()
        first_run = await ts_env.client.get_workflow_handle(
            handle.id, run_id=handle.result_run_id
        ).describe()
    assert result.terminal == Terminal.COMPLETED
    assert result.turn_count == 3 and result.transitions == [Transition.NEXT_TURN] * 2
    assert first_run.status is not None and first_run.status.name == "CONTINUED_AS_NEW"
    assert [c.new_user.results[0].tool_use_id for c in fakes.model_calls[1:]] == ["a", "b"]  # type: ignore[union-attr]
    assert result.usage.input_tokens == 30


async def test_session_runs_prompts_in_sequence_and_validates_updates(ts_env, task_queue):
    fakes = Fakes(script=[BLOCK, reply("second")])
    sid = f"sess-{uuid.uuid4()}"
    async with fakes.worker(ts_env.client, task_queue):
        handle = await ts_env.client.start_workflow(
            SessionWorkflow.run,
            SessionInput(session_id=sid, config=QueryConfig(model_heartbeat_seconds=2)),
            id=sid,
            task_queue=task_queue,
        )
        with pytest.raises(WorkflowUpdateFailedError) as empty:
            await handle.execute_update(SessionWorkflow.submit_prompt, PromptRequest(prompt="   "))
        assert "empty" in str(empty.value.cause)
        with pytest.raises(WorkflowUpdateFailedError) as huge:
            await handle.execute_update(
                SessionWorkflow.submit_prompt, PromptRequest(prompt="x" * 100_001)
            )
        assert "at most 100,000" in str(huge.value.cause)
        accepted = await handle.execute_update(
            SessionWorkflow.submit_prompt, PromptRequest(prompt="one")
        )
        assert accepted.query_workflow_id == f"{sid}-q1"
        await asyncio.wait_for(fakes.started.wait(), 10)
        # A prompt sent while one runs waits for it (it is not refused, nor lost).
        queued = await handle.execute_update(
            SessionWorkflow.submit_prompt, PromptRequest(prompt="two", max_turns=3)
        )
        assert queued.query_workflow_id == f"{sid}-q2"
        status = await handle.query(SessionWorkflow.status)
        assert status.running_query_id == f"{sid}-q1" and status.queued == 1
        assert await handle.query(SessionWorkflow.transcript_path) == f"/fake/{sid}.jsonl"
        await handle.signal(SessionWorkflow.interrupt)
        first = await ts_env.client.get_workflow_handle_for(QueryWorkflow.run, f"{sid}-q1").result()
        assert first.terminal == Terminal.ABORTED_STREAMING
        second = await query_result(ts_env.client, f"{sid}-q2")
        await handle.signal(SessionWorkflow.close)
        final = await handle.result()
        await record_histories(ts_env.client, sid)
        started = (await ts_env.client.get_workflow_handle(f"{sid}-q2").fetch_history()).events[0]
        payloads = started.workflow_execution_started_event_attributes.input.payloads
        (second_input,) = await ts_env.client.data_converter.decode(payloads, [QueryInput])
    assert second.terminal == Terminal.COMPLETED
    assert fakes.model_calls[1].new_user.parent_uuid == first.head_uuid  # type: ignore[union-attr]
    assert second_input.config.max_turns == 3
    assert final.queries == 2 and final.head_uuid == second.head_uuid and final.closed
    assert final.queued == 0 and fakes.ended_sessions == [sid]


async def query_result(client, query_id: str) -> QueryResult:
    """The result of a prompt's workflow, which starts once the prompts before it finished."""
    for _ in range(400):
        try:
            return await client.get_workflow_handle_for(QueryWorkflow.run, query_id).result()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            await asyncio.sleep(0.05)
    raise AssertionError(f"{query_id} never started")


async def test_session_queues_prompts_in_order_across_continue_as_new(ts_env, task_queue):
    fakes = Fakes(script=[BLOCK, reply("b"), reply("c")])
    sid = f"sess-{uuid.uuid4()}"
    async with fakes.worker(ts_env.client, task_queue):
        handle = await ts_env.client.start_workflow(
            SessionWorkflow.run,
            SessionInput(
                session_id=sid, config=QueryConfig(model_heartbeat_seconds=2), queries_per_run=1
            ),
            id=sid,
            task_queue=task_queue,
        )
        ids = []
        for prompt in ["a", "b", "c"]:
            accepted = await handle.execute_update(
                SessionWorkflow.submit_prompt, PromptRequest(prompt=prompt)
            )
            ids.append(accepted.query_workflow_id)
        assert ids == [f"{sid}-q1", f"{sid}-q2", f"{sid}-q3"]
        await asyncio.wait_for(fakes.started.wait(), 10)
        await handle.signal(SessionWorkflow.interrupt)
        third = await query_result(ts_env.client, f"{sid}-q3")
        await handle.signal(SessionWorkflow.close)
        final = await handle.result()
    # One prompt per run: b and c were carried over continue-as-new, and ran in order.
    prompts = [c.new_user.prompt for c in fakes.model_calls]  # type: ignore[union-attr]
    assert prompts == ["a", "b", "c"] and third.terminal == Terminal.COMPLETED
    assert final.queries == 3 and final.head_uuid == third.head_uuid


async def test_session_bounds_its_queue(ts_env, task_queue):
    fakes = Fakes(script=[BLOCK])
    sid = f"sess-{uuid.uuid4()}"
    async with fakes.worker(ts_env.client, task_queue):
        handle = await ts_env.client.start_workflow(
            SessionWorkflow.run,
            SessionInput(session_id=sid, config=QueryConfig(model_heartbeat_seconds=2)),
            id=sid,
            task_queue=task_queue,
        )
        await handle.execute_update(SessionWorkflow.submit_prompt, PromptRequest(prompt="a"))
        await asyncio.wait_for(fakes.started.wait(), 10)
        for _ in range(MAX_QUEUED_PROMPTS):
            await handle.execute_update(SessionWorkflow.submit_prompt, PromptRequest(prompt="b"))
        with pytest.raises(WorkflowUpdateFailedError) as full:
            await handle.execute_update(SessionWorkflow.submit_prompt, PromptRequest(prompt="c"))
        assert f"{MAX_QUEUED_PROMPTS} prompts are already waiting" in str(full.value.cause)
        assert (await handle.query(SessionWorkflow.status)).queued == MAX_QUEUED_PROMPTS
        await handle.terminate("test over")


async def test_session_continues_as_new_between_prompts(ts_env, task_queue):
    fakes = Fakes(script=[reply("one"), reply("two"), reply("three")])
    sid = f"sess-{uuid.uuid4()}"
    async with fakes.worker(ts_env.client, task_queue):
        handle = await ts_env.client.start_workflow(
            SessionWorkflow.run,
            SessionInput(session_id=sid, config=QueryConfig(), queries_per_run=1),
            id=sid,
            task_queue=task_queue,
        )
        for index, prompt in enumerate(["a", "b", "c"], start=1):
            accepted = await handle.execute_update(
                SessionWorkflow.submit_prompt, PromptRequest(prompt=prompt)
            )
            assert accepted.query_workflow_id == f"{sid}-q{index}"
            for _ in range(200):  # the prompt's workflow starts after the Update returns
                try:
                    result = await ts_env.client.get_workflow_handle_for(
                        QueryWorkflow.run, accepted.query_workflow_id
                    ).result()
                    break
                except Exception:  # noqa: BLE001 — not started yet
                    await asyncio.sleep(0.05)
            assert result.terminal == Terminal.COMPLETED
        await handle.signal(SessionWorkflow.close)
        final = await handle.result()
    assert final.queries == 3 and final.head_uuid == result.head_uuid
    parents = [c.new_user.parent_uuid for c in fakes.model_calls]  # type: ignore[union-attr]
    assert parents[0] is None and parents[1] is not None and parents[2] is not None
    assert parents[1] != parents[2]  # each prompt continues from the previous answer
    first = ts_env.client.get_workflow_handle(sid, run_id=handle.result_run_id)
    assert (await first.describe()).status.name == "CONTINUED_AS_NEW"


async def test_a_close_sent_while_prompts_wait_holds_across_continue_as_new(ts_env, task_queue):
    """The session's whole state is carried over, its `closed` too: once the waiting prompts
    have run, the session ends (it used to wait for another close after continue-as-new)."""
    fakes = Fakes(script=[BLOCK, reply("b")])
    sid = f"sess-{uuid.uuid4()}"
    async with fakes.worker(ts_env.client, task_queue):
        handle = await ts_env.client.start_workflow(
            SessionWorkflow.run,
            SessionInput(
                session_id=sid, config=QueryConfig(model_heartbeat_seconds=2), queries_per_run=1
            ),
            id=sid,
            task_queue=task_queue,
        )
        for prompt in ["a", "b"]:
            await handle.execute_update(SessionWorkflow.submit_prompt, PromptRequest(prompt=prompt))
        await asyncio.wait_for(fakes.started.wait(), 10)
        await handle.signal(SessionWorkflow.close)
        await handle.signal(SessionWorkflow.interrupt)
        final = await asyncio.wait_for(handle.result(), 30)
    assert final.closed and final.queries == 2 and final.last_result is not None
    assert final.last_result.final_text == "b"
