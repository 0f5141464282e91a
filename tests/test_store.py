"""The store interface on both backends (the embedded files, a real PostgreSQL), and what only
the shared one promises: another machine reads what one wrote, migrations run once, a store
that is down is a StoreError naming it, nothing is lost across a database restart."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import psycopg
import pytest

from activities.transcript import (
    StoreError,
    TranscriptError,
    TranscriptStore,
    chain_with_pending,
    request_view,
)
from durable_agent.engine.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from durable_agent.engine.request import ModelRequest, request_messages
from durable_agent.engine.state import PendingUser
from durable_agent.store import StoreConfigError, open_store, redact, store_url
from durable_agent.store.postgres import MIGRATIONS, PostgresStore, migrate
from tests import postgres


def msg(role: str, text: str) -> Message:
    return Message(role=role, content=[TextBlock(text=text)])


def other_machine(store: TranscriptStore, tmp_path: Path) -> TranscriptStore:
    """The same store as seen from another machine: another home; the same database, if any."""
    if isinstance(store, PostgresStore):
        return PostgresStore(tmp_path / "other-home", store.db.url)
    return TranscriptStore(store.root)


def test_appends_are_idempotent_by_uuid_and_read_in_order(any_store):
    any_store.append("s", "u1", None, msg("user", "hi"))
    any_store.append("s", "a1", "u1", msg("assistant", "hello"))
    again = any_store.append("s", "u1", None, msg("user", "something else"))
    assert again.message == msg("user", "hi")
    assert list(any_store.entries("s")) == ["u1", "a1"]
    assert [e.uuid for e in any_store.chain("s", "a1")] == ["u1", "a1"]
    assert all(e.session_id == "s" and e.timestamp for e in any_store.entries("s").values())
    assert any_store.entries("elsewhere") == {}
    with pytest.raises(TranscriptError, match="not (on this machine|in the store)"):
        any_store.chain("elsewhere", "x")


def test_two_workers_appending_at_once_keep_one_copy_of_each_entry_in_order(any_store, tmp_path):
    second = other_machine(any_store, tmp_path)
    errors: list[BaseException] = []

    def writer(store: TranscriptStore) -> None:
        try:
            parent = None
            for n in range(40):  # both write the same chain, as a retried activity would
                store.append("s", f"e{n}", parent, msg("user", f"entry {n}"))
                parent = f"e{n}"
        except BaseException as exc:  # noqa: BLE001 — reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(s,)) for s in (any_store, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    reader = other_machine(any_store, tmp_path)
    assert list(reader.entries("s")) == [f"e{n}" for n in range(40)]
    assert len(reader.chain("s", "e39")) == 40


def test_results_start_marks_and_early_tool_uses_are_kept_per_session(any_store, tmp_path):
    block = ToolUseBlock(id="t1", name="Bash", input={"command": "ls"})
    any_store.put_early_tool_use("s", "a1", block)
    any_store.put_tool_result("s", ToolResultBlock(tool_use_id="t1", content="first"), "r1")
    any_store.put_tool_result("s", ToolResultBlock(tool_use_id="t1", content="again"), "r1")
    any_store.mark_tool_started("s", "t1", "r1", {"pid": 12})
    elsewhere = other_machine(any_store, tmp_path)
    assert elsewhere.tool_use("s", "a1", "t1") == block
    kept = elsewhere.get_tool_result("s", "t1", "r1")
    assert kept is not None and kept.content == "again"
    assert elsewhere.get_tool_result("s", "t1", "r2") is None
    assert elsewhere.get_tool_result("other", "t1", "r1") is None
    assert elsewhere.tool_started("s", "t1", "r1") == {"pid": 12}
    assert elsewhere.tool_started("s", "t1", "") is None


def test_pending_user_entry_is_stored_once_by_a_retried_step(any_store):
    any_store.append("s", "u1", None, msg("user", "first"))
    any_store.append("s", "a1", "u1", msg("assistant", "answer"))
    pending = PendingUser(uuid="u2", parent_uuid="a1", prompt="next")
    for _ in range(2):
        parent, chain = chain_with_pending(any_store, "s", "a1", pending)
        assert parent == "u2" and [e.uuid for e in chain] == ["u1", "a1", "u2"]
    assert len(any_store.entries("s")) == 3


def test_an_overflowed_result_can_be_read_on_another_machine(any_store, tmp_path):
    big = "line of output\n" * 2_000
    any_store.append("s", "u1", None, msg("user", "run it"))
    call = ToolUseBlock(id="t1", name="Bash", input={"command": "x"})
    any_store.append("s", "a1", "u1", Message(role="assistant", content=[call]))
    result = ToolResultBlock(tool_use_id="t1", content=big)
    any_store.append("s", "u2", "a1", Message(role="user", content=[result]))
    chain = any_store.chain("s", "u2")
    req = ModelRequest(model="m", max_tokens=10, result_budget_tokens=1_000)
    request_view(any_store, "s", chain, lambda paths: request_messages(chain, req, paths))
    assert any_store.overflow_path("s", "t1").read_text() == big

    elsewhere = other_machine(any_store, tmp_path)
    elsewhere.fetch_overflow("s")  # what a tool run does before the Read tool opens it
    assert elsewhere.overflow_path("s", "t1").read_text() == big


def test_stream_events_are_read_on_from_an_offset(any_store, tmp_path):
    reader = other_machine(any_store, tmp_path)
    _, start = reader.stream_since("s", None)
    any_store.append_stream_events("s", ['{"event": 1}\n', '{"event": 2}\n'])
    lines, offset = reader.stream_since("s", start)
    assert [json.loads(line)["event"] for line in lines] == [1, 2]
    any_store.append_stream_events("s", ['{"event": 3}\n'])
    lines, _ = reader.stream_since("s", offset)
    assert [json.loads(line)["event"] for line in lines] == [3]


def test_a_fork_copies_the_chain_under_the_new_session(any_store, tmp_path):
    any_store.append("s", "u1", None, msg("user", "hi"))
    any_store.append("s", "a1", "u1", msg("assistant", "hello"))
    any_store.append("s", "u2", "a1", msg("user", "not in the fork"))
    assert any_store.fork("s", "f", "a1") == 2
    assert [e.uuid for e in other_machine(any_store, tmp_path).chain("f", "a1")] == ["u1", "a1"]


def test_hooks_read_the_transcript_as_a_jsonl_file_here(any_store):
    any_store.append("s", "u1", None, msg("user", "hi"))
    any_store.append("s", "a1", "u1", msg("assistant", "hello"))
    path = any_store.local_transcript("s")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(e["uuid"], e["parentUuid"]) for e in lines] == [("u1", None), ("a1", "u1")]


def test_the_store_url_is_read_from_the_environment_and_a_bad_one_is_one_clear_line():
    assert store_url({}) is None
    assert store_url({"DURABLE_AGENT_STORE": "postgresql://u@h/db"}) == "postgresql://u@h/db"
    with pytest.raises(StoreConfigError) as caught:
        store_url({"DURABLE_AGENT_STORE": "mysql://u:hunter2@h/db"})
    assert "hunter2" not in str(caught.value) and "postgresql://" in str(caught.value)
    assert redact("postgresql://u:hunter2@h:5/db") == "postgresql://u@h:5/db"


def test_migrations_run_once_when_workers_start_together(pg_url):
    errors: list[BaseException] = []

    def start() -> None:
        try:
            with psycopg.connect(pg_url) as conn:
                migrate(conn)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    with psycopg.connect(pg_url) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations")]
    assert versions == [v for v, _ in MIGRATIONS]


def test_a_schema_newer_than_this_build_is_refused(pg_url, tmp_path):
    with psycopg.connect(pg_url) as conn:
        migrate(conn)
        conn.execute("INSERT INTO schema_migrations (version) VALUES (999)")
        conn.commit()
    with pytest.raises(StoreError, match="newer than this build"):
        PostgresStore(tmp_path, pg_url).entries("s")


def test_blobs_are_content_addressed_and_stored_once(pg_url, tmp_path):
    import hashlib

    blobs = PostgresStore(tmp_path, pg_url).blobs()
    data = b"payload" * 100
    digest = hashlib.sha256(data).hexdigest()
    assert blobs.missing([digest, digest]) == {digest}
    blobs.put(digest, data)
    blobs.put(digest, data)
    assert blobs.missing([digest]) == set()
    assert blobs.get(digest) == data
    with pytest.raises(ValueError):
        blobs.put(digest, b"other bytes")
    with pytest.raises(KeyError):
        blobs.get("0" * 64)


def test_a_store_that_is_down_is_a_store_error_naming_it_and_nothing_is_lost(tmp_path, monkeypatch):
    why = postgres.available()
    if why:
        pytest.skip(why)
    with postgres.postgres_server() as server:
        url = server.fresh_database()
        store = PostgresStore(tmp_path / "home", url)
        store.append("s", "u1", None, msg("user", "kept"))
        server.stop()
        monkeypatch.setattr("durable_agent.store.postgres.CONNECT_SECONDS", 2.0)
        with pytest.raises(StoreError) as caught:
            store.append("s", "a1", "u1", msg("assistant", "written after the restart"))
        text = str(caught.value)
        assert f"127.0.0.1:{server.port}" in text and "\n" not in text
        server.start()
        store.append("s", "a1", "u1", msg("assistant", "written after the restart"))
        reader = PostgresStore(tmp_path / "reader", url)
        assert [e.uuid for e in reader.chain("s", "a1")] == ["u1", "a1"]
        store.db.close()
        reader.db.close()


def test_open_store_follows_the_environment(tmp_path, pg_url, monkeypatch):
    monkeypatch.setenv("DURABLE_AGENT_STORE", pg_url)
    assert isinstance(open_store(tmp_path), PostgresStore)
    assert open_store(tmp_path) is open_store(tmp_path)
    monkeypatch.delenv("DURABLE_AGENT_STORE")
    assert not isinstance(open_store(tmp_path), PostgresStore)


def test_a_worker_keeps_a_bounded_cache_and_forgets_an_ended_session(any_store):
    """A worker serves sessions for weeks: what it caches of their transcripts is bounded, and a
    session's (with its sub-agents') goes when the session ends; reading again still works."""
    from activities.transcript import CACHED_TRANSCRIPTS

    def cached() -> set[str]:
        keys = any_store._seen if isinstance(any_store, PostgresStore) else any_store._cache
        return {str(k).rsplit("/", 1)[-1].removesuffix(".jsonl") for k in keys}

    for sid in ("ended", "ended.agent-t1", "other"):
        any_store.append(sid, f"{sid}-u", None, msg("user", "hi"))
        assert list(any_store.entries(sid)) == [f"{sid}-u"]
    any_store.forget("ended")
    assert cached() == {"other"}
    assert list(any_store.entries("ended")) == ["ended-u"]  # read again from the store
    for n in range(CACHED_TRANSCRIPTS + 5):
        any_store.append(f"s{n}", f"u{n}", None, msg("user", "hi"))
        any_store.entries(f"s{n}")
    assert len(cached()) == CACHED_TRANSCRIPTS and "other" not in cached()
    assert list(any_store.entries("other")) == ["other-u"]
