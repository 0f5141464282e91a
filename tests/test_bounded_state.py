"""What a prompt carries across continue-as-new stays bounded however long it runs, and a
watcher still gets the progress events emitted just before a continue-as-new (time-skipping
server, fake activities under the production names)."""

import os
import uuid
from pathlib import Path

from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter

from durable_agent.engine.bounds import (
    CARRIED_EVENT_CHARS,
    CARRIED_EVENTS,
    DENIAL_VALUE_CHARS,
    MAX_COLLAPSED_IDS,
    MAX_DENIALS,
    add_collapsed,
    add_denials,
    carried_events,
    input_summary,
)
from durable_agent.engine.contracts import CallModelInput, CallModelOutput, QueryInput
from durable_agent.engine.messages import Usage
from durable_agent.engine.permissions import Behavior, Decision
from durable_agent.engine.state import (
    MAX_TRANSITIONS,
    PermissionDenial,
    ProgressEvent,
    ProgressKind,
    QueryConfig,
    State,
    Terminal,
    ToolCall,
    Transition,
)
from tests.fakes import Fakes, reply
from workflows.query import QueryWorkflow

HISTORIES = Path(__file__).parent / "histories"
CONTENT = "x" * 4_000
DENY = Decision(behavior=Behavior.DENY, rule="Write", reason="denied by Write")


def denied_write(req: CallModelInput) -> CallModelOutput:
    """A turn asking for a Write the rules deny, with a large content."""
    call = ToolCall(
        id=f"w-{req.assistant_uuid}",
        name="Write",
        concurrency_safe=False,
        read_only=False,
        summary="Write: big.txt",
        permission=DENY,
        permission_input={"file_path": "big.txt", "content": CONTENT},
    )
    return CallModelOutput(
        assistant_uuid=req.assistant_uuid,
        stop_reason="tool_use",
        usage=Usage(input_tokens=10, output_tokens=5),
        text="writing",
        tool_calls=[call],
    )


def test_transitions_keep_the_newest_and_count_the_rest():
    state = State()
    for _ in range(3):
        state = state.next(Transition.STOP_HOOK_BLOCKING)
    for _ in range(MAX_TRANSITIONS + 7):
        state = state.next(Transition.NEXT_TURN)
    assert len(state.transitions) == MAX_TRANSITIONS
    assert state.dropped_transitions == {Transition.STOP_HOOK_BLOCKING: 3, Transition.NEXT_TURN: 7}
    assert state.transition_count(Transition.STOP_HOOK_BLOCKING) == 3  # the block limit sees them


def test_denials_collapsed_ids_and_events_are_capped():
    big = {"file_path": "a.txt", "content": "y" * 10_000, "n": 3, "edits": [{"old": "z" * 500}]}
    summary = input_summary(big)
    assert summary["file_path"] == "a.txt" and summary["n"] == 3
    assert summary["content"].endswith("… (10,000 characters)")
    assert len(summary["content"]) < DENIAL_VALUE_CHARS + 40 and len(summary["edits"]) < 250
    denial = PermissionDenial(tool_name="Write", tool_use_id="w", tool_input=big)
    state = add_denials(State(), [denial] * (MAX_DENIALS + 5))
    assert len(state.permission_denials) == MAX_DENIALS and state.denials_dropped == 5
    ids = add_collapsed(State(collapsed_ids=("old",)), [f"t{i}" for i in range(MAX_COLLAPSED_IDS)])
    assert len(ids) == MAX_COLLAPSED_IDS and ids[-1] == f"t{MAX_COLLAPSED_IDS - 1}"
    many = [ProgressEvent(index=i, kind=ProgressKind.TEXT, text="t") for i in range(500)]
    assert [e.index for e in carried_events(many)] == list(range(500 - CARRIED_EVENTS, 500))
    huge = [ProgressEvent(index=i, kind=ProgressKind.TEXT, text="t" * 20_000) for i in range(3)]
    kept = carried_events(huge)
    assert [e.index for e in kept] == [2] and len(kept[0].text) <= CARRIED_EVENT_CHARS + 1


async def run_chain(client: Client, handle: WorkflowHandle) -> list[WorkflowHistory]:
    """The history of each run of the prompt, first to last."""
    runs, run_id = [], handle.result_run_id
    while run_id:
        history = await client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        runs.append(history)
        last = history.events[-1]
        moved = last.workflow_execution_continued_as_new_event_attributes
        ended = last.HasField("workflow_execution_continued_as_new_event_attributes")
        run_id = moved.new_execution_run_id if ended else None
    return runs


def carried(history: WorkflowHistory) -> tuple[int, QueryInput]:
    """The continue-as-new input a run ended with: its size in bytes, and itself."""
    moved = history.events[-1].workflow_execution_continued_as_new_event_attributes
    payload = moved.input.payloads[0]
    inp = pydantic_data_converter.payload_converter.from_payload(payload, QueryInput)
    return len(payload.data), inp


async def start(env, fakes, task_queue, turns: int, per_run: int) -> WorkflowHandle:
    fakes.script = [denied_write] * turns + [reply("done")]
    config = QueryConfig(iterations_per_run=per_run)
    inp = QueryInput(session_id="s", prompt="go", parent_uuid=None, config=config)
    return await env.client.start_workflow(
        QueryWorkflow.run, inp, id=f"bounded-{uuid.uuid4()}", task_queue=task_queue
    )


async def test_a_300_turn_prompt_with_denials_carries_a_flat_state(ts_env, task_queue):
    fakes = Fakes()
    async with fakes.worker(ts_env.client, task_queue):
        handle = await start(ts_env, fakes, task_queue, turns=300, per_run=20)
        result = await handle.result()
        served = await handle.query(QueryWorkflow.progress, 0)
        runs = await run_chain(ts_env.client, handle)
    assert result.terminal == Terminal.COMPLETED and result.turn_count == 301
    sizes = [carried(run)[0] for run in runs[:-1]]
    assert len(sizes) == 15
    late = sizes[6:]  # from turn 140 on every cap is reached: the payload must not grow
    assert max(late) - min(late) < 2_000, sizes
    assert max(sizes) < 100_000, sizes

    state = carried(runs[-2])[1].state
    assert isinstance(state, State)
    assert len(state.transitions) == MAX_TRANSITIONS
    assert state.transition_count(Transition.NEXT_TURN) == 300
    assert len(state.permission_denials) == MAX_DENIALS and state.denials_dropped == 200
    kept = state.permission_denials[-1].tool_input
    assert kept == input_summary({"file_path": "big.txt", "content": CONTENT})
    assert len(kept["content"]) < DENIAL_VALUE_CHARS + 40
    assert result.transitions_dropped == 300 - MAX_TRANSITIONS
    assert len(result.permission_denials) == MAX_DENIALS and result.denials_dropped == 200

    # The last run serves the events the run before emitted just before continuing as new.
    first_own = state.event_count
    indices = [e.index for e in served]
    assert indices == list(range(indices[0], indices[-1] + 1))
    assert indices[0] < first_own - 1 and first_own - 1 in indices


async def test_a_denial_across_continue_as_new_for_replay(ts_env, task_queue):
    """A short prompt on the bounded path; its second run's history is committed."""
    fakes = Fakes()
    events: list[ProgressEvent] = []
    async with fakes.worker(ts_env.client, task_queue):
        handle = await start(ts_env, fakes, task_queue, turns=2, per_run=1)
        result = await handle.result()
        events.extend(await handle.query(QueryWorkflow.progress, 0))
        runs = await run_chain(ts_env.client, handle)
    assert result.terminal == Terminal.COMPLETED and len(runs) == 3
    _, inp = carried(runs[1])
    assert [d.tool_input["content"] for d in inp.state.permission_denials] == [  # type: ignore[union-attr]
        input_summary({"content": CONTENT})["content"]
    ] * 2
    assert inp.events and inp.events[-1].index == inp.state.event_count - 1  # type: ignore[union-attr]
    assert events[0].index < inp.state.event_count  # type: ignore[union-attr]
    if os.environ.get("RECORD_HISTORIES"):
        (HISTORIES / "bounded_state_across_continue_as_new.json").write_text(runs[1].to_json())
