"""StreamingToolExecutor on the time-skipping server: fake activities under the production
names; the fake model activity signals tool_use blocks like the real one."""

import asyncio
import os
import uuid
from pathlib import Path

from temporalio.exceptions import ApplicationError

from durable_agent.engine.contracts import QueryInput
from durable_agent.engine.state import EagerTools, ProgressEvent, QueryConfig, Terminal
from tests.fakes import BLOCK, Fakes, Stream, completed_activities, reply, tools
from workflows.query import QueryWorkflow
from workflows.streaming_tools import INTERRUPTED_TOOL, NOT_RUN_TOOL, SIBLING_FAILED

HISTORIES = Path(__file__).parent / "histories"


async def run_query(env, fakes, task_queue, name, interrupt_when=None, events=None, **cfg):
    """Run a QueryWorkflow; with RECORD_HISTORIES=1 its history is saved for the replay test."""
    inp = QueryInput(session_id="s", prompt="go", parent_uuid=None, config=QueryConfig(**cfg))
    async with fakes.worker(env.client, task_queue):
        handle = await env.client.start_workflow(
            QueryWorkflow.run, inp, id=f"{name}-{uuid.uuid4()}", task_queue=task_queue
        )
        if interrupt_when is not None:
            await interrupt_when(handle)
            await handle.signal(QueryWorkflow.interrupt)
        result = await handle.result()
        if events is not None:
            events.extend(await handle.query(QueryWorkflow.progress, 0))
    if os.environ.get("RECORD_HISTORIES"):
        history = await handle.fetch_history()
        (HISTORIES / f"{name}.json").write_text(history.to_json())
    return result


def waiting(event):
    async def wait(_handle):
        await asyncio.wait_for(event.wait(), 10)

    return wait


def refs(fakes, call=1):
    pending = fakes.model_calls[call].new_user
    assert pending is not None
    return pending.results


async def test_a_safe_tool_starts_while_the_model_streams(ts_env, task_queue):
    stream = Stream(tools(("r1", "Read")), tail=0.6, text="looking")
    fakes = Fakes(script=[stream, reply("done")], tool_delays={"r1": 0.1})
    events: list[ProgressEvent] = []
    result = await run_query(ts_env, fakes, task_queue, "early_safe_progress", events=events)
    assert result.terminal == Terminal.COMPLETED
    model_start, model_end = fakes.model_spans[0]
    tool_start, tool_end = fakes.tool_spans["r1"]
    assert model_start < tool_start and tool_end < model_end  # ran entirely inside the stream
    ref = refs(fakes)[0]
    assert ref.tool_use_id == "r1" and ref.inline is None and ref.run_id == fakes.runs[0][1]
    kinds = [(str(e.kind), e.text) for e in events]
    # phase 1: the result was collected while the stream ran, before the message was complete
    assert kinds.index(("tool_result", "Read: r1 → ran Read")) < kinds.index(("text", "looking"))


async def test_an_unsafe_tool_waits_for_the_end_of_the_stream_under_safe(ts_env, task_queue):
    calls = tools(("r1", "Read"), ("b1", "Bash"), ("r2", "Read"))
    fakes = Fakes(script=[Stream(calls, tail=0.5), reply("done")])
    result = await run_query(ts_env, fakes, task_queue, "unsafe_waits")
    assert result.terminal == Terminal.COMPLETED
    _, model_end = fakes.model_spans[0]
    assert fakes.tool_spans["r1"][0] < model_end
    assert fakes.tool_spans["b1"][0] >= model_end
    assert fakes.tool_spans["r2"][0] >= fakes.tool_spans["b1"][1]  # never overtakes the Bash


async def test_eager_all_and_none(ts_env, task_queue):
    for eager, early in ((EagerTools.ALL, True), (EagerTools.NONE, False)):
        fakes = Fakes(script=[Stream(tools(("b1", "Bash")), tail=0.5), reply("done")])
        await run_query(
            ts_env, fakes, f"{task_queue}-{eager}", f"eager_{eager.value}", eager_tools=eager
        )
        assert (fakes.tool_spans["b1"][0] < fakes.model_spans[0][1]) == early


async def test_results_keep_block_order(ts_env, task_queue):
    calls = tools(("slow", "Read"), ("fast", "Grep"), ("mid", "Glob"))
    fakes = Fakes(
        script=[Stream(calls, tail=0.1), reply("done")],
        tool_delays={"slow": 0.6, "fast": 0.05, "mid": 0.3},
    )
    await run_query(ts_env, fakes, task_queue, "ordering")
    assert fakes.tool_spans["fast"][1] < fakes.tool_spans["mid"][1] < fakes.tool_spans["slow"][1]
    assert [r.tool_use_id for r in refs(fakes)] == ["slow", "fast", "mid"]


async def test_a_failed_attempts_tools_are_discarded(ts_env, task_queue):
    overloaded = ApplicationError("Overloaded", type="Overloaded")
    first = Stream(tools(("old", "Read")), tail=0.3, fail=overloaded)
    second = Stream(
        tools(("new", "Read"), ("late", "Glob")),
        signalled=tools(("new", "Read"), ("ghost", "Grep")),
    )
    fakes = Fakes(
        script=[first, second, reply("done")], blocking_tools={"old"}, tool_delays={"ghost": 1.0}
    )
    result = await run_query(
        ts_env, fakes, task_queue, "discard_after_retry", tool_heartbeat_seconds=2
    )
    assert result.terminal == Terminal.COMPLETED
    assert fakes.cancelled == ["old"]  # the old attempt's running tool was cancelled
    final = refs(fakes, call=2)
    assert [r.tool_use_id for r in final] == ["new", "late"]  # ghost: signalled, not in the message
    assert all(r.inline is None and r.run_id for r in final)
    ran = {tool for tool, _ in fakes.runs}
    assert "late" in ran and "old" not in ran  # late was never signalled: it ran after the stream


async def test_an_answer_read_back_from_the_store_keeps_its_early_tools(ts_env, task_queue):
    """Attempt 1 streams a Bash (eager_tools=all: it starts at once), stores the answer, and its
    completion is lost; attempt 2 reads that answer back (same tool_use id, no signals). The
    Bash goes on and is not run again (it ran twice before: stored-answer-tools-v1)."""
    lost = ApplicationError("completion lost", type="Overloaded")
    calls = tools(("b1", "Bash"))
    first = Stream(calls, tail=0.2, fail=lost)
    stored = Stream(calls, signalled=[], tail=0.0)
    fakes = Fakes(script=[first, stored, reply("done")], tool_delays={"b1": 1.0})
    result = await run_query(
        ts_env, fakes, task_queue, "stored_answer_tools", eager_tools=EagerTools.ALL,
        tool_heartbeat_seconds=2,
    )  # fmt: skip
    assert result.terminal == Terminal.COMPLETED
    assert [tool for tool, _ in fakes.runs] == ["b1"] and fakes.cancelled == []
    final = refs(fakes, call=2)
    assert [r.tool_use_id for r in final] == ["b1"] and final[0].run_id


async def test_a_late_signal_of_an_older_attempt_changes_nothing(ts_env, task_queue):
    """Attempt 2 signals its Read, then a late signal of attempt 1 arrives: it must neither
    discard attempt 2's executor (the prompt then waited forever) nor run its own block."""
    overloaded = ApplicationError("Overloaded", type="Overloaded")
    calls = tools(("new", "Read"), ("b1", "Bash"))  # b1 is only in the final message
    second = Stream(calls, signalled=calls[:1], stale=tools(("ghost", "Grep")), tail=0.2)
    fakes = Fakes(script=[overloaded, second, reply("done")])
    result = await asyncio.wait_for(run_query(ts_env, fakes, task_queue, "late_signal"), timeout=15)
    assert result.terminal == Terminal.COMPLETED
    final = refs(fakes, call=2)
    assert [r.tool_use_id for r in final] == ["new", "b1"]
    assert all(r.inline is None and r.run_id for r in final)  # both ran, neither was cut short
    assert sorted(tool for tool, _ in fakes.runs) == ["b1", "new"]  # the late block never ran


async def test_a_failed_bash_cancels_its_running_siblings(ts_env, task_queue):
    calls = tools(("b1", "Bash"), ("r1", "Read"), safe={"b1"})
    fakes = Fakes(
        script=[Stream(calls, tail=0.2), reply("done")],
        blocking_tools={"r1"},
        error_tools={"b1"},
        tool_delays={"b1": 0.3},
    )
    result = await run_query(ts_env, fakes, task_queue, "sibling_abort", tool_heartbeat_seconds=2)
    assert result.terminal == Terminal.COMPLETED  # the turn goes on
    b1, r1 = refs(fakes)
    assert b1.inline is None  # its own error result is the stored one
    assert r1.inline is not None and r1.inline.content == SIBLING_FAILED.format(summary="Bash: b1")
    assert fakes.cancelled == ["r1"]


async def test_interrupt_while_streaming_cancels_early_tools(ts_env, task_queue):
    fakes = Fakes(script=[Stream(tools(("r1", "Read")), tail=float("inf"))], blocking_tools={"r1"})
    result = await run_query(
        ts_env, fakes, task_queue, "interrupt_streaming", interrupt_when=waiting(fakes.tool_started),
        model_heartbeat_seconds=2, tool_heartbeat_seconds=2,
    )  # fmt: skip
    assert result.terminal == Terminal.ABORTED_STREAMING
    for _ in range(100):
        if len(fakes.cancelled) == 2:
            break
        await asyncio.sleep(0.05)
    assert sorted(fakes.cancelled) == ["model", "r1"]
    assert fakes.appended[0].entry.results == []  # no tool_use was stored: nothing to answer


async def test_interrupt_while_tools_run(ts_env, task_queue):
    calls = tools(("r1", "Read"), ("b1", "Bash"))
    fakes = Fakes(script=[Stream(calls, tail=0.1)], blocking_tools={"r1"})

    async def when_the_stream_ended(handle):
        await asyncio.wait_for(fakes.tool_started.wait(), 10)
        await completed_activities(handle, 1)  # the model call is over: phase 2

    result = await run_query(
        ts_env, fakes, task_queue, "interrupt_tools", interrupt_when=when_the_stream_ended,
        tool_heartbeat_seconds=2,
    )  # fmt: skip
    assert result.terminal == Terminal.ABORTED_TOOLS
    r1, b1 = fakes.appended[0].entry.results
    assert r1.inline is not None and r1.inline.content == INTERRUPTED_TOOL
    assert b1.inline is not None and b1.inline.content == NOT_RUN_TOOL
    assert fakes.ended_tools == ["r1"]  # the interrupted tool's processes, not the unrun one's


async def test_streaming_off_runs_tools_after_the_stream(ts_env, task_queue):
    fakes = Fakes(script=[Stream(tools(("r1", "Read")), tail=0.4), reply("done")])
    await run_query(ts_env, fakes, task_queue, "streaming_off", streaming_tool_execution=False)
    assert fakes.tool_spans["r1"][0] >= fakes.model_spans[0][1]


async def test_session_with_blocking_model_for_replay(ts_env, task_queue):
    fakes = Fakes(script=[BLOCK])
    result = await run_query(
        ts_env, fakes, task_queue, "interrupt_model_only", interrupt_when=waiting(fakes.started),
        model_heartbeat_seconds=2,
    )  # fmt: skip
    assert result.terminal == Terminal.ABORTED_STREAMING
