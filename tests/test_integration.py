"""Dev server + real activities + the real anthropic client against the replay server."""

import json

from temporalio.api.enums.v1 import EventType
from temporalio.testing import ActivityEnvironment

from activities.model import ModelActivities
from durable_agent.engine.contracts import CallModelInput
from durable_agent.engine.request import ModelRequest
from durable_agent.engine.state import PendingUser, QueryConfig, Terminal
from durable_agent.replay import ErrorReply, Fault, ReplayServer, Turn, text_turn, tool_turn
from tests.helpers import replay_client_factory, run_session
from workflows.session import query_workflow_id


async def test_read_edit_bash_session(dev_env, store, workspace, task_queue):
    (workspace / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    turns = [
        tool_turn(
            [("t1", "Read", {"file_path": "calc.py"}), ("t1b", "Grep", {"pattern": "def"})],
            "Let me look.",
        ),
        tool_turn(
            [("t2", "Edit", {"file_path": "calc.py", "old_string": "a - b", "new_string": "a + b"})]
        ),
        tool_turn([("t3", "Bash", {"command": "python3 -c 'import calc; print(calc.add(2, 3))'"})]),
        text_turn("Fixed: add now returns 5 for 2+3."),
    ]
    with ReplayServer(turns) as server:
        sid, status = await run_session(
            dev_env.client, server, store, workspace, "fix add", task_queue
        )
    assert server.violations == []  # every tool_use was answered, in order, in the next request
    assert status.last_result is not None and status.last_result.terminal == Terminal.COMPLETED
    assert "a + b" in (workspace / "calc.py").read_text()
    last_user = server.requests[-1]["messages"][-1]
    assert (
        last_user["content"][0]["tool_use_id"] == "t3" and "5" in last_user["content"][0]["content"]
    )
    chain = store.chain(sid, status.head_uuid)
    assert [e.type for e in chain] == ["user", "assistant"] * 4
    assert chain[-1].message.text().startswith("Fixed")


async def test_history_grows_linearly_and_payloads_stay_small(
    dev_env, store, workspace, task_queue
):
    """30 turns with 20 KB tool results: the conversation grows to ~600 KB, history does not."""
    (workspace / "big.txt").write_text(("0123456789" * 10 + "\n") * 198)  # ~20 KB
    turns_total = 30

    def script(body, index):
        if index < turns_total - 1:
            return tool_turn([(f"t{index}", "Bash", {"command": "cat big.txt"})])
        return text_turn("all done")

    with ReplayServer(script) as server:
        sid, status = await run_session(dev_env.client, server, store, workspace, "go", task_queue)
    assert status.last_result is not None and status.last_result.terminal == Terminal.COMPLETED
    assert status.last_result.turn_count == turns_total
    assert len(json.dumps(server.requests[-1])) > 500_000  # the conversation really is big

    history = await dev_env.client.get_workflow_handle(query_workflow_id(sid, 1)).fetch_history()
    sizes = [e.ByteSize() for e in history.events]
    assert max(sizes) < 64 * 1024
    cumulative, total, turn_ends = [], 0, []
    model_scheduled = set()
    for event, size in zip(history.events, sizes, strict=True):
        total += size
        cumulative.append(total)
        attrs = event.activity_task_scheduled_event_attributes
        if (
            event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and attrs.activity_type.name == "call_model"
        ):
            model_scheduled.add(event.event_id)
        done = event.activity_task_completed_event_attributes
        if (
            event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
            and done.scheduled_event_id in model_scheduled
        ):
            turn_ends.append(total)
    assert len(turn_ends) == turns_total
    early = (turn_ends[10] - turn_ends[0]) / 10
    late = (turn_ends[29] - turn_ends[19]) / 10
    print(f"history: {total} bytes, per turn early {early:.0f} late {late:.0f}")
    assert late < 1.5 * early, (early, late)  # linear: quadratic growth would be ~5x
    assert total < turns_total * 10_000


async def test_non_retryable_http_error_ends_model_error_after_one_request(
    dev_env, store, workspace, task_queue
):
    turns = [Turn(error=ErrorReply(status=400, type="invalid_request_error", message="bad tools"))]
    with ReplayServer(turns) as server:
        _, status = await run_session(dev_env.client, server, store, workspace, "go", task_queue)
    assert status.last_result is not None and status.last_result.terminal == Terminal.MODEL_ERROR
    assert "bad tools" in status.last_result.message and len(server.requests) == 1


async def test_overload_is_retried_then_succeeds(dev_env, store, workspace, task_queue):
    overloaded = Turn(error=ErrorReply(status=529, type="overloaded_error", message="busy"))
    with ReplayServer([overloaded, text_turn("fine")]) as server:
        _, status = await run_session(dev_env.client, server, store, workspace, "go", task_queue)
    assert status.last_result is not None and status.last_result.terminal == Terminal.COMPLETED
    assert len(server.requests) == 2


async def test_call_model_activity_stores_entries_and_classifies_errors(store, tmp_path):
    turns = [
        tool_turn(
            [("t1", "Bash", {"command": "make"})], "hi", input_tokens=7, cache_read_input_tokens=3
        ),
        Turn(
            error=ErrorReply(
                status=529, type="overloaded_error", message="busy", headers={"retry-after": "3"}
            )
        ),
        Turn(error=ErrorReply(status=401, type="authentication_error", message="bad key")),
    ]
    cfg = QueryConfig(workspace=str(tmp_path))
    with ReplayServer(turns) as server:
        acts = ModelActivities(store, replay_client_factory(server))
        env = ActivityEnvironment()
        req = CallModelInput(
            session_id="s",
            parent_uuid=None,
            assistant_uuid="a1",
            config=cfg.call,
            workspace=cfg.workspace,
            request=ModelRequest(model="m", max_tokens=100, prompt_caching=False),
            new_user=PendingUser(uuid="u1", parent_uuid=None, prompt="hello"),
        )
        out = await env.run(acts.call_model, req)
        errors = []
        for _ in range(2):
            try:
                await env.run(acts.call_model, req.model_copy(update={"assistant_uuid": "a2"}))
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)
    assert out.tool_calls[0].summary == "Bash: make" and not out.tool_calls[0].concurrency_safe
    assert out.usage.input_tokens == 7 and out.usage.cache_read_input_tokens == 3
    assert [e.uuid for e in store.chain("s", "a1")] == ["u1", "a1"]
    sent = server.requests[0]
    assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    assert sent["model"] == "m" and sent["max_tokens"] == 100
    names = {t["name"] for t in sent["tools"]}
    assert names >= {"Read", "Write", "Edit", "Bash", "Grep", "Glob", "web_search"}
    overloaded, auth = errors
    assert overloaded.type == "Overloaded" and not overloaded.non_retryable  # type: ignore[attr-defined]
    assert overloaded.next_retry_delay.total_seconds() == 3  # type: ignore[attr-defined]
    # A first 401 refreshes the credentials and retries; it is not given up on.
    assert auth.type == "AuthenticationError" and not auth.non_retryable  # type: ignore[attr-defined]
    assert len(store.entries("s")) == 2  # failed attempts stored nothing new


async def test_a_tool_runs_while_the_model_streams(dev_env, store, workspace, task_queue):
    """tool_use complete at 0.5 s, stream end at 2 s, a 1.5 s tool: the turn costs about
    max(stream, tool), not their sum."""
    from durable_agent.replay.cassette import timed_tool_turn

    slow = timed_tool_turn([("s1", "Bash", {"command": "sleep 1.5"})], ready_at=[0.5], end_at=2.0)
    with ReplayServer([slow, text_turn("done")]) as server:
        _, status = await run_session(dev_env.client, server, store, workspace, "go", task_queue)
    assert status.last_result is not None and status.last_result.terminal == Terminal.COMPLETED
    turn = server.request_times[1] - server.request_times[0]
    print(f"turn wall time {turn:.2f}s")
    assert 2.0 <= turn <= 1.25 * max(2.0, 1.5), turn
    answered = server.requests[1]["messages"][-1]["content"][0]
    assert answered["tool_use_id"] == "s1" and not answered.get("is_error")


async def test_an_oversized_payload_is_offloaded_not_stuck(
    dev_env, store, workspace, task_queue, tmp_path
):
    """A 300 KB system prompt travels in the workflow and activity inputs: every payload over
    256 KiB goes to the external payload store, and the history stays small."""
    from temporalio.client import Client

    from durable_agent.payloads import data_converter

    client = await Client.connect(
        dev_env.client.service_client.config.target_host,
        data_converter=data_converter(tmp_path / "home"),
    )
    huge = "Project rules. " * 20_000  # ~300 KB
    with ReplayServer([text_turn("ok")]) as server:
        sid, status = await run_session(
            client, server, store, workspace, "go", task_queue, system_prompt=huge
        )
    assert status.last_result is not None and status.last_result.terminal == Terminal.COMPLETED
    assert huge in server.requests[0]["system"][0]["text"]
    stored = list((tmp_path / "home" / "payloads").rglob("*.bin"))
    assert stored and all(p.stat().st_size > 256 * 1024 for p in stored)
    history = await client.get_workflow_handle(query_workflow_id(sid, 1)).fetch_history()
    assert max(e.ByteSize() for e in history.events) < 64 * 1024


async def test_read_only_tools_run_inside_the_model_call_step(
    dev_env, store, workspace, task_queue
):
    """Read, Grep and Glob run in the call_model activity that streamed them (issue 9: a turn
    that only reads is one activity, no tool_use_ready signal); an Edit beside them is still a
    run_tool activity; a retried attempt runs its reads again and only its own results count."""
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    turns = [
        Turn(
            response=tool_turn(
                [("r1", "Read", {"file_path": "notes.txt"}), ("g1", "Glob", {"pattern": "*.txt"})]
            ).response,
            fault=Fault(kind="drop", after_events=5),  # after the Read block
        ),
        tool_turn(
            [("r1", "Read", {"file_path": "notes.txt"}), ("g1", "Glob", {"pattern": "*.txt"})]
        ),
        tool_turn(
            [("e1", "Edit", {"file_path": "notes.txt", "old_string": "beta", "new_string": "b"})]
        ),
        text_turn("done"),
    ]
    with ReplayServer(turns) as server:
        sid, status = await run_session(
            dev_env.client, server, store, workspace, "look", task_queue
        )
    assert server.violations == []
    assert status.last_result is not None and status.last_result.terminal == Terminal.COMPLETED
    results = {b["tool_use_id"]: b for b in server.requests[2]["messages"][-1]["content"]}
    assert "alpha" in results["r1"]["content"] and "notes.txt" in results["g1"]["content"]
    history = await dev_env.client.get_workflow_handle(query_workflow_id(sid, 1)).fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    ready = [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        and e.workflow_execution_signaled_event_attributes.signal_name == "tool_use_ready"
    ]
    assert scheduled.count("run_tool") == 1  # the Edit only
    assert len(ready) == 1  # the Edit's; the reads sent none
