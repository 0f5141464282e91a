"""A model step makes its transcript lines durable with one fsync: the new user entry is written
unsynced and the answer's append syncs the file (both lines); a step that stores no answer (a
withheld error) syncs before it returns; a user entry that lets go of result records is synced
before they go."""

from __future__ import annotations

import os

import pytest
from temporalio.testing import ActivityEnvironment

from activities.model import ModelActivities
from activities.transcript import TranscriptStore, append_pending
from durable_agent.engine.contracts import CallModelInput
from durable_agent.engine.messages import Message, TextBlock, ToolResultBlock
from durable_agent.engine.request import ModelRequest
from durable_agent.engine.state import PendingUser, QueryConfig, ToolResultRef
from durable_agent.replay import ErrorReply, ReplayServer, Turn, text_turn
from tests.helpers import replay_client_factory


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every fsync of the test's process, by file descriptor."""
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


def step(tmp_path, assistant_uuid: str = "a1", user_uuid: str = "u1") -> CallModelInput:
    cfg = QueryConfig(workspace=str(tmp_path))
    return CallModelInput(
        session_id="s",
        parent_uuid=None,
        assistant_uuid=assistant_uuid,
        config=cfg.call,
        workspace=cfg.workspace,
        request=ModelRequest(model="m", max_tokens=100, prompt_caching=False),
        new_user=PendingUser(uuid=user_uuid, parent_uuid=None, prompt="hello"),
    )


async def test_a_model_step_syncs_its_two_lines_once(store: TranscriptStore, tmp_path, fsyncs):
    with ReplayServer([text_turn("hi")]) as server:
        acts = ModelActivities(store, replay_client_factory(server))
        await ActivityEnvironment().run(acts.call_model, step(tmp_path))
    assert [e.uuid for e in store.chain("s", "a1")] == ["u1", "a1"]
    assert len(fsyncs) == 1 and not store.needs_sync("s")


async def test_a_withheld_error_syncs_the_user_entry_before_the_step_returns(
    store: TranscriptStore, tmp_path, fsyncs
):
    too_long = ErrorReply(
        status=400, type="invalid_request_error", message="prompt is too long: 9 tokens > 8"
    )
    with ReplayServer([Turn(error=too_long)]) as server:
        acts = ModelActivities(store, replay_client_factory(server))
        out = await ActivityEnvironment().run(acts.call_model, step(tmp_path))
    assert out.withheld is not None
    assert list(store.entries("s")) == ["u1"]
    assert len(fsyncs) == 1 and not store.needs_sync("s")


async def test_a_failed_attempt_leaves_the_entry_for_its_retry_to_sync(
    store: TranscriptStore, tmp_path, fsyncs
):
    busy = ErrorReply(status=529, type="overloaded_error", message="busy")
    with ReplayServer([Turn(error=busy), text_turn("hi")]) as server:
        acts = ModelActivities(store, replay_client_factory(server))
        with pytest.raises(Exception, match="busy"):
            await ActivityEnvironment().run(acts.call_model, step(tmp_path))
        assert store.needs_sync("s") and fsyncs == []  # written, not yet durable: nothing
        await ActivityEnvironment().run(acts.call_model, step(tmp_path))  # depends on it yet
    assert [e.uuid for e in store.chain("s", "a1")] == ["u1", "a1"]
    assert len(fsyncs) == 1 and not store.needs_sync("s")


def test_an_existing_unsynced_entry_is_synced_by_a_synced_append_of_it(
    store: TranscriptStore, fsyncs
):
    msg = Message(role="user", content=[TextBlock(text="x")])
    store.append("s", "u1", None, msg, sync=False)
    assert store.needs_sync("s") and fsyncs == []
    store.append("s", "u1", None, msg)  # a retry that asks for it durably
    assert len(fsyncs) == 1 and not store.needs_sync("s")
    store.sync("s")  # nothing left to sync: no fsync
    assert len(fsyncs) == 1


def test_a_user_entry_that_takes_result_records_is_synced_before_they_go(
    store: TranscriptStore, fsyncs
):
    block = ToolResultBlock(tool_use_id="t1", content="a long result")
    store.put_tool_result("s", block, run_id="r")
    pending = PendingUser(
        uuid="u1", parent_uuid=None, results=[ToolResultRef(tool_use_id="t1", run_id="r")]
    )
    synced_before_taking: list[bool] = []
    take = store.take_tool_results

    def taking(session_id: str, taken: list[tuple[str, str]]) -> None:
        synced_before_taking.append(not store.needs_sync(session_id) and len(fsyncs) >= 1)
        take(session_id, taken)

    store.take_tool_results = taking  # type: ignore[method-assign]
    append_pending(store, "s", pending, defer_sync=True)
    assert synced_before_taking == [True]
    assert store.get_tool_result("s", "t1", "r") is None  # the record went


def test_an_entry_another_process_left_unsynced_is_synced_by_a_synced_append_of_it(
    store: TranscriptStore, fsyncs
):
    """Two workers sharing a state dir: one's failed model step wrote the entry unsynced; the
    other's append_entry step (the workflow storing it after the failure) finds it there."""
    other = TranscriptStore(store.root)
    pending = PendingUser(uuid="u1", parent_uuid=None, prompt="hello")
    append_pending(other, "s", pending, defer_sync=True)
    assert fsyncs == []
    append_pending(store, "s", pending)
    assert len(fsyncs) == 1


async def test_a_withheld_error_syncs_an_entry_another_process_wrote(
    store: TranscriptStore, tmp_path, fsyncs
):
    other = TranscriptStore(store.root)
    append_pending(other, "s", step(tmp_path).new_user, defer_sync=True)  # type: ignore[arg-type]
    too_long = ErrorReply(
        status=400, type="invalid_request_error", message="prompt is too long: 9 tokens > 8"
    )
    with ReplayServer([Turn(error=too_long)]) as server:
        acts = ModelActivities(store, replay_client_factory(server))
        out = await ActivityEnvironment().run(acts.call_model, step(tmp_path))
    assert out.withheld is not None and len(fsyncs) == 1
