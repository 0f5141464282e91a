"""Compaction end to end: the replay server, the real client and activities, Temporal."""

import asyncio
import json
import time
import uuid

import pytest
from temporalio.client import WorkflowUpdateFailedError

from durable_agent.cli.watching import query_result
from durable_agent.engine.context import CLEARED_MARKER
from durable_agent.engine.contracts import PromptRequest, SessionInput
from durable_agent.engine.state import QueryConfig, QueryResult, Terminal, Transition
from durable_agent.replay import ErrorReply, ReplayServer, Turn, text_turn, tool_turn
from durable_agent.replay.cassette import message
from durable_agent.wiring import build_worker
from tests.faults.harness import transcript_problems
from tests.helpers import record_histories, replay_client_factory, run_session, start_session
from workflows.session import SessionWorkflow

SUMMARY = "<summary>1. Request and intent: list files. 7. Next step: finish.</summary>"


def is_summary_request(body):
    return "<summary></summary> tags" in json.dumps(body["messages"][-1])


def ptl(tokens=250_000, limit=200_000):
    message = f"prompt is too long: {tokens} tokens > {limit} maximum"
    return Turn(error=ErrorReply(status=400, type="invalid_request_error", message=message))


class Script:
    """Answers summary requests with SUMMARY, everything else from `turns` in order."""

    def __init__(self, turns, summaries=None):
        self.turns = list(turns)
        self.summaries = list(summaries or [])
        self.summary_requests = 0

    def __call__(self, body, index):
        if is_summary_request(body):
            self.summary_requests += 1
            return self.summaries.pop(0) if self.summaries else text_turn(SUMMARY)
        return self.turns.pop(0)


async def run(ts_env, store, workspace, task_queue, script, **config):
    with ReplayServer(script) as server:
        sid, status = await run_session(
            ts_env.client, server, store, workspace, "list the files", task_queue, **config
        )
    assert status.last_result is not None, status
    return server, status.last_result, sid


def pre_compact_settings(tmp_path, monkeypatch, *groups):
    """User settings whose PreCompact hooks are `groups`, each (matcher, command)."""
    settings = tmp_path / "settings.json"
    hooks = [{"matcher": m, "hooks": [{"type": "command", "command": c}]} for m, c in groups]
    settings.write_text(json.dumps({"hooks": {"PreCompact": hooks}}))
    monkeypatch.setenv("DURABLE_AGENT_SETTINGS", str(settings))


def glob(i, **usage):
    return tool_turn([(f"g{i}", "Glob", {"pattern": "*"})], **usage)


async def test_autocompact_at_the_threshold_then_continue_from_the_summary(
    ts_env, store, workspace, task_queue
):
    (workspace / "a.txt").write_text("a")
    script = Script([glob(1), glob(2), glob(3, input_tokens=166_990), text_turn("done")])
    server, result, sid = await run(ts_env, store, workspace, task_queue, script)
    assert result.terminal == Terminal.COMPLETED and result.compactions == 1
    assert script.summary_requests == 1
    summary_at = next(i for i, b in enumerate(server.requests) if is_summary_request(b))
    assert summary_at == 3  # turn 3 crossed 167,000 tokens: 166,990 input + 20 output + the results
    summarised = server.requests[summary_at]["messages"]
    assert [b["tool_use_id"] for b in summarised[-1]["content"] if b["type"] == "tool_result"] == [
        "g3"
    ]
    after = server.requests[summary_at + 1]["messages"]
    assert len(after) == 1 and after[0]["role"] == "user"  # only the post-boundary summary
    assert (
        "list files" in after[0]["content"][0]["text"]
        and "continues from an earlier" in after[0]["content"][0]["text"]
    )
    entries = store.entries(sid)
    assert sum(e.is_compact_boundary for e in entries.values()) == 1
    assert len(store.chain(sid, result.head_uuid)) > len(
        store.chain(sid, result.head_uuid, since_boundary=True)
    )
    assert result.context_tokens < 10_000  # counted after compaction, then grew by one answer


async def test_prompt_too_long_once_recovers_through_reactive_compact(
    ts_env, store, workspace, task_queue
):
    script = Script([glob(1), ptl(), text_turn("done")])
    server, result, _ = await run(ts_env, store, workspace, task_queue, script)
    assert result.terminal == Terminal.COMPLETED
    assert result.transitions == [Transition.NEXT_TURN, Transition.REACTIVE_COMPACT_RETRY]
    assert script.summary_requests == 1 and len(server.requests) == 4
    assert len(server.requests[3]["messages"]) == 1


async def test_prompt_too_long_twice_ends_prompt_too_long(ts_env, store, workspace, task_queue):
    script = Script([glob(1), ptl(), ptl(240_000)])
    server, result, _ = await run(ts_env, store, workspace, task_queue, script)
    assert (
        result.terminal == Terminal.PROMPT_TOO_LONG and "240000 tokens > 200000" in result.message
    )
    assert script.summary_requests == 1 and len(server.requests) == 4


async def test_collapse_drain_clears_the_largest_stale_results_first(
    ts_env, store, workspace, task_queue
):
    (workspace / "big.txt").write_text(("y" * 100 + "\n") * 280)
    (workspace / "small.txt").write_text(("z" * 100 + "\n") * 30)
    script = Script(
        [
            tool_turn(
                [
                    ("r1", "Read", {"file_path": "big.txt"}),
                    ("r2", "Read", {"file_path": "small.txt"}),
                ]
            ),
            glob(2),
            ptl(30_000, 25_000),
            text_turn("done"),
        ]
    )
    server, result, _ = await run(ts_env, store, workspace, task_queue, script)
    assert result.terminal == Terminal.COMPLETED
    assert result.transitions == [
        Transition.NEXT_TURN,
        Transition.NEXT_TURN,
        Transition.COLLAPSE_DRAIN_RETRY,
    ]
    assert script.summary_requests == 0
    retried = server.requests[3]["messages"]
    contents = {
        b["tool_use_id"]: b["content"]
        for m in retried
        for b in m["content"]
        if b["type"] == "tool_result"
    }
    assert contents["r1"] == CLEARED_MARKER and contents["r2"] != CLEARED_MARKER


async def test_oversized_result_becomes_a_preview_the_model_can_read_whole(
    ts_env, store, workspace, task_queue
):
    (workspace / "data.txt").write_text("".join(f"line {i}\n" for i in range(3_000)))

    def reader(body, index):
        if index == 0:
            return tool_turn([("b1", "Bash", {"command": "cat data.txt"})])
        if index == 1:  # the model reads the whole result from the path in the preview
            preview = body["messages"][-1]["content"][0]["content"]
            path = preview.split("saved whole to ")[1].split(";")[0]
            return tool_turn([("r1", "Read", {"file_path": path, "offset": 2990})])
        return text_turn("ok")

    with ReplayServer(reader) as server:
        _, status = await run_session(
            ts_env.client,
            server,
            store,
            workspace,
            "read",
            task_queue,
            tool_result_budget_tokens=1_000,
        )
    assert status.last_result is not None and status.last_result.terminal == Terminal.COMPLETED
    preview = server.requests[1]["messages"][-1]["content"][0]["content"]
    assert (
        preview.startswith("line 0\n")
        and "too large for the context" in preview
        and len(preview) < 3_000
    )
    read_back = server.requests[2]["messages"][-1]["content"][0]
    assert not read_back.get("is_error") and "line 2999" in read_back["content"]


async def test_blocking_limit_when_autocompact_is_off(ts_env, store, workspace, task_queue):
    script = Script([glob(1, input_tokens=178_000), text_turn("never")])
    server, result, _ = await run(ts_env, store, workspace, task_queue, script, autocompact=False)
    assert result.terminal == Terminal.BLOCKING_LIMIT and len(server.requests) == 1


async def test_the_breaker_stops_autocompact_after_three_failures(
    ts_env, store, workspace, task_queue
):
    refused = Turn(
        error=ErrorReply(status=400, type="invalid_request_error", message="no summaries today")
    )
    turns = [glob(i, input_tokens=170_000) for i in range(5)] + [text_turn("done")]
    script = Script(turns, summaries=[refused] * 5)
    server, result, _ = await run(ts_env, store, workspace, task_queue, script)
    assert result.terminal == Terminal.COMPLETED and result.compactions == 0
    assert script.summary_requests == 3  # then the breaker stays open for the rest of the query


async def test_task_budget_total_from_the_first_request_remaining_after_a_compaction(
    ts_env, store, workspace, task_queue
):
    script = Script([glob(1, input_tokens=168_000), glob(2), text_turn("done")])
    server, result, _ = await run(ts_env, store, workspace, task_queue, script, task_budget=400_000)
    assert result.compactions == 1
    plain = [b for b in server.requests if not is_summary_request(b)]
    assert plain[0]["output_config"]["task_budget"] == {"type": "tokens", "total": 400_000}
    assert server.headers[0]["anthropic-beta"] == "task-budgets-2026-03-13"
    budget = plain[1]["output_config"]["task_budget"]
    assert budget["type"] == "tokens" and budget["total"] == 400_000
    assert 400_000 - 172_000 < budget["remaining"] < 400_000 - 168_000
    assert server.headers[-1]["anthropic-beta"] == "task-budgets-2026-03-13"


async def test_pre_compact_hooks_run_first(
    ts_env, store, workspace, task_queue, tmp_path, monkeypatch
):
    seen = tmp_path / "precompact.json"
    pre_compact_settings(
        tmp_path, monkeypatch,
        ("auto", f"cat > {seen}"),
        ("manual", "echo never > never.txt"),
        ("*", "echo careful >&2; exit 1"),
    )  # fmt: skip
    ran_before_summary = []

    class Watching(Script):
        def __call__(self, body, index):
            if is_summary_request(body):
                ran_before_summary.append(seen.exists())
            return super().__call__(body, index)

    script = Watching([glob(1, input_tokens=168_000), text_turn("done")])
    server, result, sid = await run(ts_env, store, workspace, task_queue, script)
    assert result.compactions == 1 and ran_before_summary == [True]
    payload = json.loads(seen.read_text())
    assert payload["hook_event_name"] == "PreCompact" and payload["trigger"] == "auto"
    assert payload["session_id"] == sid and payload["transcript_path"].endswith(".jsonl")
    assert payload["cwd"] == str(workspace.resolve())
    assert not (workspace / "never.txt").exists()


def slow_summary(seconds: float = 120.0) -> Turn:
    return Turn(
        response=message([{"type": "text", "text": SUMMARY}], "end_turn"),
        pause_before={1: seconds},
    )


@pytest.mark.parametrize("trigger", ["auto", "reactive"])
async def test_an_interrupt_during_compaction_ends_the_prompt_in_seconds(
    trigger, ts_env, store, workspace, task_queue
):
    (workspace / "a.txt").write_text("a")
    first = glob(1, input_tokens=168_000) if trigger == "auto" else ptl()
    script = Script([first, text_turn("never sent")], summaries=[slow_summary()])
    with ReplayServer(script) as server:
        factory = replay_client_factory(server)
        async with build_worker(ts_env.client, task_queue, store, factory):
            sid, handle = await start_session(
                ts_env.client, workspace, task_queue, "list the files"
            )
            for _ in range(600):
                if script.summary_requests:
                    break
                await asyncio.sleep(0.05)
            assert script.summary_requests == 1, "compaction never started"
            sent = time.monotonic()
            await handle.signal(SessionWorkflow.interrupt)
            status = await asyncio.wait_for(handle.result(), 20)
            took = time.monotonic() - sent
    result = status.last_result
    assert result is not None, status
    assert result.terminal == Terminal.ABORTED_STREAMING and result.compactions == 0
    assert took < 10, f"the interrupt took {took:.1f}s"
    assert transcript_problems(store.transcript_path(sid)) == []


async def _prompt(client, handle, request):
    """Send `request` to the session; the result of the query it starts."""
    accepted = await handle.execute_update(
        SessionWorkflow.submit_prompt, request, id=f"p-{uuid.uuid4()}"
    )
    child = client.get_workflow_handle(accepted.query_workflow_id, result_type=QueryResult)
    return await query_result(child)


async def test_manual_compact_summarises_now_with_the_users_instructions(
    ts_env, store, workspace, task_queue, tmp_path, monkeypatch
):
    seen = tmp_path / "precompact.json"
    pre_compact_settings(
        tmp_path, monkeypatch, ("manual", f"cat > {seen}"), ("auto", "echo never > never.txt")
    )
    script = Script([text_turn("the number is noted"), text_turn("it was 7")])
    with ReplayServer(script) as server:
        factory = replay_client_factory(server)
        async with build_worker(ts_env.client, task_queue, store, factory):
            sid, handle = await start_session(
                ts_env.client, workspace, task_queue, "remember the number 7", close_when_idle=False
            )
            with pytest.raises(WorkflowUpdateFailedError) as empty:
                await _prompt(
                    ts_env.client, handle, PromptRequest(prompt=" ")
                )  # only a compact may be empty
            assert "empty" in str(empty.value.cause)
            compacted = await _prompt(
                ts_env.client, handle, PromptRequest(prompt="keep the number", compact=True)
            )
            after = await _prompt(
                ts_env.client, handle, PromptRequest(prompt="which number was it?")
            )
            await handle.signal(SessionWorkflow.close)
            status = await handle.result()
    await record_histories(ts_env.client, sid, query=2)  # the /compact
    assert compacted.terminal == Terminal.COMPLETED, compacted
    assert compacted.compactions == 1 and compacted.turn_count == 0
    assert script.summary_requests == 1 and len(server.requests) == 3
    ask = json.dumps(server.requests[1]["messages"])
    assert "remember the number 7" in ask and "the number is noted" in ask
    assert "(/compact)" in ask and "instructions for this summary:\\nkeep the number" in ask
    # The next prompt goes on from the summary alone.
    sent = server.requests[2]["messages"]
    assert "summarised at the user's request" in json.dumps(sent[0])
    assert "remember the number 7" not in json.dumps(sent)
    assert "which number was it?" in json.dumps(sent[-1])
    assert after.terminal == Terminal.COMPLETED and status.last_result == after
    payload = json.loads(seen.read_text())
    assert payload["trigger"] == "manual" and payload["custom_instructions"] == "keep the number"
    assert not (workspace / "never.txt").exists()
    boundaries = [e for e in store.entries(sid).values() if e.subtype == "compact_boundary"]
    assert [b.compact_metadata.trigger for b in boundaries] == ["manual"]
    assert transcript_problems(store.transcript_path(sid)) == []


async def test_manual_compact_of_a_session_with_no_conversation_is_refused(
    ts_env, store, workspace, task_queue
):
    with ReplayServer(Script([])) as server:
        factory = replay_client_factory(server)
        async with build_worker(ts_env.client, task_queue, store, factory):
            handle = await ts_env.client.start_workflow(
                SessionWorkflow.run,
                SessionInput(session_id=f"t-{uuid.uuid4()}", config=QueryConfig(
                    workspace=str(workspace))),
                id=f"t-{uuid.uuid4()}",
                task_queue=task_queue,
            )  # fmt: skip
            with pytest.raises(WorkflowUpdateFailedError) as failed:
                await _prompt(ts_env.client, handle, PromptRequest(prompt="", compact=True))
            assert "nothing to compact" in str(failed.value.cause)
            await handle.signal(SessionWorkflow.close)
            await handle.result()
    assert server.requests == []
