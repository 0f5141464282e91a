"""Activities keep the worker's event loop free: a slow disk (or a slow `apiKeyHelper`) stalls
only the activity waiting for it, never the heartbeats and other activities of the worker.

Every store write goes through `activities.transcript._write_all`; here it sleeps first, as a
slow or busy disk would. An asyncio ticker runs beside the real activity: on the loop a blocking
write shows up as a gap of at least SLOW seconds between its ticks."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

import activities.transcript as transcript_module
from activities.compaction import CompactionActivities
from activities.credentials import Credentials
from activities.hooks import HookActivities
from activities.model import ModelActivities
from activities.tools.registry import ToolActivities
from activities.transcript import StoreActivities, TranscriptStore, off_loop
from durable_agent.engine.contracts import (
    AppendEntryInput,
    CallModelInput,
    CompactInput,
    PlanCollapseInput,
    RunToolInput,
    StopHooksInput,
)
from durable_agent.engine.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from durable_agent.engine.request import ModelRequest
from durable_agent.engine.state import ModelCallConfig, PendingUser, ToolResultRef
from durable_agent.replay import ErrorReply, ReplayServer, Turn, text_turn
from tests.helpers import replay_client_factory

SLOW = 0.5
"""How long each store write (or the key helper) takes."""
RESPONSIVE = 0.3
"""The largest gap between ticks that still counts as a free loop (a blocked one shows >= SLOW;
the margin is for a loaded machine)."""
REQUEST = ModelRequest(model="m", max_tokens=100, prompt_caching=False)


@pytest.fixture
def slow_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every store write (transcript append, result, ledger and early tool_use files) sleeps
    SLOW seconds before it writes."""
    write = transcript_module._write_all

    def slow(fd: int, data: bytes) -> None:
        time.sleep(SLOW)
        write(fd, data)

    monkeypatch.setattr(transcript_module, "_write_all", slow)


@pytest.fixture
def replay() -> Iterator[ReplayServer]:
    with ReplayServer([text_turn("hello back")]) as server:
        yield server


async def largest_gap(work: Awaitable[Any]) -> tuple[Any, float]:
    """`work`'s result, and the largest gap between the ticks of a 10 ms ticker meanwhile."""
    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)
    try:
        result = await work
    finally:
        done.set()
        await ticker
    return result, max(gaps)


def call_input(tmp_path: Path, session_id: str = "s", turn: int = 1) -> CallModelInput:
    """The model step of `turn` (u<turn> then a<turn>, after a<turn - 1>)."""
    parent = None if turn == 1 else f"a{turn - 1}"
    return CallModelInput(
        session_id=session_id,
        parent_uuid=parent,
        assistant_uuid=f"a{turn}",
        config=ModelCallConfig(),
        workspace=str(tmp_path),
        request=REQUEST,
        new_user=PendingUser(uuid=f"u{turn}", parent_uuid=parent, prompt="hello"),
    )


async def test_call_model_stores_both_entries_without_blocking_the_loop(
    store: TranscriptStore, replay: ReplayServer, tmp_path: Path, slow_writes: None
) -> None:
    acts = ModelActivities(store, replay_client_factory(replay))
    run = ActivityEnvironment().run(acts.call_model, call_input(tmp_path))
    out, gap = await largest_gap(run)
    assert gap < RESPONSIVE, f"the event loop stalled for {gap:.2f}s"
    # Both appends (the prompt, then the answer) are done, in order, when the activity returns.
    assert out.text == "hello back"
    assert [e.uuid for e in store.chain("s", "a1")] == ["u1", "a1"]


def key_helper_settings(tmp_path: Path) -> Path:
    settings = tmp_path / "helper-settings.json"
    settings.write_text(json.dumps({"apiKeyHelper": f"sleep {SLOW}; echo helper-key"}))
    return settings


async def test_a_slow_api_key_helper_does_not_block_the_loop(
    store: TranscriptStore, replay: ReplayServer, tmp_path: Path
) -> None:
    keys: list[str | None] = []
    factory = replay_client_factory(replay)

    def recording(opts: Any) -> Any:
        keys.append(opts.api_key)
        return factory(opts)

    credentials = Credentials(key_helper_settings(tmp_path))
    acts = ModelActivities(store, recording, credentials=credentials)
    run = ActivityEnvironment().run(acts.call_model, call_input(tmp_path))
    out, gap = await largest_gap(run)
    assert gap < RESPONSIVE, f"the event loop stalled for {gap:.2f}s"
    assert out.text == "hello back" and keys == ["helper-key"]


def stored_tool_use(store: TranscriptStore, workspace: Path) -> RunToolInput:
    (workspace / "notes.txt").write_text("one\ntwo\n")
    store.append("s", "u1", None, Message(role="user", content=[TextBlock(text="read it")]))
    block = ToolUseBlock(id="t1", name="Read", input={"file_path": "notes.txt"})
    store.append("s", "a1", "u1", Message(role="assistant", content=[block]))
    return RunToolInput(
        session_id="s", assistant_uuid="a1", tool_use_id="t1", name="Read",
        workspace=str(workspace),
    )  # fmt: skip


async def test_run_tool_stores_its_result_without_blocking_the_loop(
    store: TranscriptStore, workspace: Path, slow_writes: None
) -> None:
    req = stored_tool_use(store, workspace)
    run = ActivityEnvironment().run(ToolActivities(store).run_tool, req)
    out, gap = await largest_gap(run)
    assert gap < RESPONSIVE, f"the event loop stalled for {gap:.2f}s"
    assert not out.is_error and out.inline is None
    result = store.get_tool_result("s", "t1")
    assert result is not None and "two" in result.text()


async def test_append_entry_does_not_block_the_loop(
    store: TranscriptStore, slow_writes: None
) -> None:
    req = AppendEntryInput(
        session_id="s", entry=PendingUser(uuid="u1", parent_uuid=None, prompt="hi")
    )
    run = ActivityEnvironment().run(StoreActivities(store).append_entry, req)
    out, gap = await largest_gap(run)
    assert gap < RESPONSIVE, f"the event loop stalled for {gap:.2f}s"
    assert out.uuid == "u1" and list(store.entries("s")) == ["u1"]


async def test_plan_collapse_stores_the_pending_entry_without_blocking_the_loop(
    store: TranscriptStore, replay: ReplayServer, slow_writes: None
) -> None:
    compaction = CompactionActivities(ModelActivities(store, replay_client_factory(replay)))
    req = PlanCollapseInput(
        session_id="s", parent_uuid=None, request=REQUEST, target_tokens=1_000,
        pending=PendingUser(uuid="u1", parent_uuid=None, prompt="hi"),
    )  # fmt: skip
    run = ActivityEnvironment().run(compaction.plan_collapse, req)
    out, gap = await largest_gap(run)
    assert gap < RESPONSIVE, f"the event loop stalled for {gap:.2f}s"
    assert out.tool_use_ids == [] and list(store.entries("s")) == ["u1"]


async def test_autocompact_stores_the_pending_entry_and_whole_results_without_blocking_the_loop(
    store: TranscriptStore, tmp_path: Path, slow_writes: None
) -> None:
    """The pending user entry, the whole text of a result the summary request cuts short, the
    boundary and the summary: four slow writes, none of them on the loop."""
    store.append("s", "u0", None, Message(role="user", content=[TextBlock(text="run it")]))
    call = ToolUseBlock(id="t1", name="Bash", input={"command": "x"})
    store.append("s", "a0", "u0", Message(role="assistant", content=[call]))
    big = ToolResultBlock(tool_use_id="t1", content="output line\n" * 2_000)
    pending = PendingUser(
        uuid="u1", parent_uuid="a0", results=[ToolResultRef(tool_use_id="t1", inline=big)]
    )
    req = CompactInput(
        session_id="s", parent_uuid="a0", pending=pending,
        config=ModelCallConfig(), workspace=str(tmp_path), microcompact_keep=10,
        request=REQUEST.model_copy(update={"result_budget_tokens": 1_000}),
        boundary_uuid="b", summary_uuid="sum", trigger="auto", pre_tokens=10_000,
    )  # fmt: skip
    with ReplayServer([text_turn("<summary>ran it</summary>")]) as server:
        compaction = CompactionActivities(ModelActivities(store, replay_client_factory(server)))
        run = ActivityEnvironment().run(compaction.autocompact, req)
        out, gap = await largest_gap(run)
    assert gap < RESPONSIVE, f"the event loop stalled for {gap:.2f}s"
    assert out.summary_uuid == "sum"
    assert [e.uuid for e in store.chain("s", "sum")] == ["u0", "a0", "u1", "b", "sum"]
    assert store.overflow_path("s", "t1").read_text() == big.text()


def stop_hook(workspace: Path) -> None:
    settings = workspace / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    hook = {"type": "command", "command": "echo ok"}
    settings.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [hook]}]}}))


async def test_the_hook_ledger_is_written_without_blocking_the_loop(
    store: TranscriptStore, workspace: Path, slow_writes: None
) -> None:
    stop_hook(workspace)
    hooks = HookActivities(store.transcript_path, store.hook_ledger)
    req = StopHooksInput(session_id="s", workspace=str(workspace), stop_hook_active=False)
    run = ActivityEnvironment().run(hooks.run_stop_hooks, req)
    out, gap = await largest_gap(run)
    assert gap < RESPONSIVE, f"the event loop stalled for {gap:.2f}s"
    assert out.blocking_errors == [] and not out.prevent_continuation
    assert sorted(p.suffix for p in store.hook_ledger("s").iterdir()) == [".json", ".started"]


async def test_a_cancelled_step_ends_before_the_cancellation_propagates() -> None:
    """Like the synchronous call it replaces, a step run off the loop is never left running
    after its caller is gone: a store write is whole before the activity ends."""
    started, finished = threading.Event(), threading.Event()

    def step() -> None:
        started.set()
        time.sleep(0.3)
        finished.set()

    task = asyncio.create_task(off_loop(step))
    assert await asyncio.to_thread(started.wait, 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert finished.is_set()


def _compact_request(store: TranscriptStore, tmp_path: Path) -> CompactInput:
    store.append("s", "u0", None, Message(role="user", content=[TextBlock(text="run it")]))
    store.append("s", "a0", "u0", Message(role="assistant", content=[TextBlock(text="ran")]))
    return CompactInput(
        session_id="s", parent_uuid="a0", pending=None, config=ModelCallConfig(),
        workspace=str(tmp_path), microcompact_keep=10, request=REQUEST, boundary_uuid="b",
        summary_uuid="sum", trigger="auto", pre_tokens=10_000,
    )  # fmt: skip


async def test_a_failed_summary_leaves_its_track_and_asks_for_new_clients_as_a_model_call_does(
    store: TranscriptStore, tmp_path: Path
) -> None:
    """An overloaded answer is counted for the next attempt (its heartbeat details, as the model
    call's: a fourth in a row falls back or fails); refused credentials drop the clients, and
    the next attempt builds one with the key refreshed."""
    req = _compact_request(store, tmp_path)
    turns = [
        Turn(error=ErrorReply(status=529, type="overloaded_error")),
        Turn(error=ErrorReply(status=401, type="authentication_error")),
        text_turn("<summary>ran it</summary>"),
    ]
    with ReplayServer(turns) as server:
        refreshed: list[bool] = []
        factory = replay_client_factory(server)
        credentials = Credentials()
        key = credentials.api_key

        def api_key(refresh: bool = False) -> str | None:
            refreshed.append(refresh)
            return key(refresh=refresh)

        credentials.api_key = api_key  # type: ignore[method-assign]
        model = ModelActivities(store, factory, credentials=credentials)
        compaction = CompactionActivities(model)
        beats: list[Any] = []
        env = ActivityEnvironment()
        env.on_heartbeat = lambda *details: beats.append(details)
        with pytest.raises(ApplicationError):
            await env.run(compaction.autocompact, req)
        assert beats[-1][0]["consecutive_529"] == 1
        assert refreshed == [False] and model._clients

        env.info = dataclasses.replace(env.info, attempt=2, heartbeat_details=beats[-1])
        with pytest.raises(ApplicationError):
            await env.run(compaction.autocompact, req)
        assert beats[-1][0] == {"consecutive_529": 0, "credential_refreshes": 1, "malformed": 0}
        assert not model._clients  # the key is to be refreshed

        env.info = dataclasses.replace(env.info, attempt=3, heartbeat_details=beats[-1])
        out = await env.run(compaction.autocompact, req)
        assert out.summary_uuid == "sum"
        assert refreshed == [False, True]
