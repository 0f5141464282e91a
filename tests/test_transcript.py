import json

import pytest

from activities.transcript import (
    TranscriptDamaged,
    TranscriptError,
    append_pending,
    chain_with_pending,
    request_view,
    user_message,
)
from durable_agent.engine.messages import (
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    TranscriptEntry,
)
from durable_agent.engine.request import ModelRequest, request_messages
from durable_agent.engine.state import PendingUser, ToolResultRef


def msg(role, text):
    return Message(role=role, content=[TextBlock(text=text)])


def test_append_is_idempotent_by_uuid(store):
    store.append("s", "u1", None, msg("user", "hi"))
    store.append("s", "u1", None, msg("user", "something else"))
    lines = store.transcript_path("s").read_text().splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert {"uuid", "parentUuid", "type", "message", "timestamp", "sessionId"} <= set(entry)


def test_chain_follows_parent_links_from_the_head(store):
    store.append("s", "u1", None, msg("user", "1"))
    store.append("s", "a1", "u1", msg("assistant", "2"))
    store.append("s", "u2", "a1", msg("user", "3"))
    store.append("s", "x", "u1", msg("assistant", "branch"))
    assert [e.uuid for e in store.chain("s", "u2")] == ["u1", "a1", "u2"]
    assert [e.uuid for e in store.chain("s", "x")] == ["u1", "x"]
    assert store.chain("s", None) == []
    with pytest.raises(TranscriptError):
        store.chain("s", "missing")


def test_pending_user_takes_stored_and_inline_results_in_order(store):
    store.put_tool_result("s", ToolResultBlock(tool_use_id="t1", content="stored"))
    pending = PendingUser(
        uuid="u",
        parent_uuid=None,
        results=[
            ToolResultRef(
                tool_use_id="t2",
                inline=ToolResultBlock(tool_use_id="t2", content="inline", is_error=True),
            ),
            ToolResultRef(tool_use_id="t1"),
            ToolResultRef(tool_use_id="t3"),
        ],
    )
    message = user_message(store, "s", pending)
    assert [b.tool_use_id for b in message.content] == ["t2", "t1", "t3"]  # type: ignore[union-attr]
    assert message.content[1].content == "stored"  # type: ignore[union-attr]
    assert message.content[2].is_error  # type: ignore[union-attr]  # lost result → error, never a gap
    append_pending(store, "s", pending)
    append_pending(store, "s", pending)
    assert len(store.entries("s")) == 1


def test_a_result_is_kept_once_in_the_transcript_when_its_entry_takes_it(any_store):
    """Issue 26: a stored result's record goes once the user entry holding it is stored; the
    entry keeps it (a retried append too), and late readers find it there."""
    store = any_store
    for tool_use_id in ("t1", "t2"):
        store.put_tool_result(
            "s", ToolResultBlock(tool_use_id=tool_use_id, content=tool_use_id * 9), "r1"
        )
    store.put_tool_result("s", ToolResultBlock(tool_use_id="t1", content="another run"), "r2")
    pending = PendingUser(
        uuid="u", parent_uuid=None,
        results=[ToolResultRef(tool_use_id="t1", run_id="r1"), ToolResultRef(tool_use_id="t2", run_id="r1")],
    )  # fmt: skip
    append_pending(store, "s", pending)
    assert store.get_tool_result("s", "t1", "r1") is None
    assert store.get_tool_result("s", "t2", "r1") is None
    assert store.get_tool_result("s", "t1", "r2").content == "another run"  # not taken: kept
    found = store.tool_result("s", "t2", "r1")
    assert found is not None and found.content == "t2" * 9
    # a retried append (its first completion lost) returns the entry with the real results
    again = append_pending(store, "s", pending)
    assert [b.content for b in again.message.content] == ["t1" * 9, "t2" * 9]  # type: ignore[union-attr]
    assert store.tool_result("s", "t9") is None
    if not store.shared:  # the embedded store's files
        results = store.transcript_path("s").with_suffix(".results")
        assert [p.name for p in results.iterdir()] == ["t1.r2.json"]


def test_tool_use_lookup(store):
    store.append(
        "s",
        "a",
        None,
        Message(
            role="assistant", content=[ToolUseBlock(id="t", name="Read", input={"file_path": "x"})]
        ),
    )
    assert store.tool_use("s", "a", "t").input == {"file_path": "x"}
    with pytest.raises(TranscriptError):
        store.tool_use("s", "a", "nope")


def test_entries_are_read_on_from_where_the_last_read_stopped(store):
    store.append("s", "u1", None, msg("user", "1"))
    assert list(store.entries("s")) == ["u1"]
    path = store.transcript_path("s")
    line = path.read_text().splitlines()[0].replace('"u1"', '"u2"', 1)
    with open(path, "a") as f:  # another process appends, the last line not yet complete
        f.write(line[:20])
    assert list(store.entries("s")) == ["u1"]
    with open(path, "a") as f:
        f.write(line[20:] + "\n")
    assert list(store.entries("s")) == ["u1", "u2"]
    other = type(store)(store.root)  # a fresh reader sees the same
    assert list(other.entries("s")) == ["u1", "u2"]


def _cut_short_writes(monkeypatch, failures):
    """os.write writes half of the data, then the next call fails (a full disk), `failures`
    times; after that writes go through."""
    import errno
    import os

    import activities.transcript as transcript

    real_write = os.write
    state = {"left": failures, "cut": False}

    def write(fd, data):
        if state["left"] <= 0:
            return real_write(fd, data)
        if not state["cut"]:
            state["cut"] = True
            return real_write(fd, bytes(data[: len(data) // 2]))
        state["left"] -= 1
        state["cut"] = False
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(transcript.os, "write", write)
    return state


def test_an_append_cut_short_leaves_no_fragment_and_raises_store_error(store, monkeypatch):
    from activities.transcript import StoreError

    store.append("s", "u1", None, msg("user", "before"))
    size = store.transcript_path("s").stat().st_size
    _cut_short_writes(monkeypatch, failures=2)
    for _ in range(2):
        with pytest.raises(StoreError, match="No space left"):
            store.append("s", "a1", "u1", msg("assistant", "x" * 5000))
        assert store.transcript_path("s").stat().st_size == size
    store.append("s", "a1", "u1", msg("assistant", "x" * 5000))
    lines = store.transcript_path("s").read_text().splitlines()
    assert [json.loads(line)["uuid"] for line in lines] == ["u1", "a1"]
    assert [e.uuid for e in store.chain("s", "a1")] == ["u1", "a1"]


def test_a_torn_last_line_from_a_crash_is_cut_before_the_next_append_and_kept_aside(store):
    store.append("s", "u1", None, msg("user", "before"))
    path = store.transcript_path("s")
    with open(path, "a") as f:  # a writer killed midway through a line
        f.write('{"uuid": "a1", "parentUuid": "u1", "type": "assis')
    assert list(store.entries("s")) == ["u1"]  # readers stop at the last newline
    store.append("s", "a1", "u1", msg("assistant", "whole"))
    lines = path.read_text().splitlines()
    assert [json.loads(line)["uuid"] for line in lines] == ["u1", "a1"]
    assert store.chain("s", "a1")[-1].message.content[0].text == "whole"
    [torn] = store.torn_files("s")
    assert torn.read_text() == '{"uuid": "a1", "parentUuid": "u1", "type": "assis'


def test_a_transcript_cut_short_names_the_damage_and_where_the_cut_bytes_are(store):
    store.append("s", "u1", None, msg("user", "before"))
    store.append("s", "a1", "u1", msg("assistant", "answer"))
    path = store.transcript_path("s")
    whole = path.read_bytes()
    with open(path, "r+b") as f:  # a tool cuts 40 bytes off the end
        f.truncate(len(whole) - 40)
    store.append("s", "u2", "a1", msg("user", "next"))  # the torn entry is cut and kept
    with pytest.raises(TranscriptDamaged) as caught:
        store.chain("s", "u2")
    [torn] = store.torn_files("s")
    assert whole.endswith(torn.read_bytes() + whole[-40:])
    assert str(caught.value) == (
        f"the session's transcript {path} is damaged: entry a1 is missing "
        f"(the bytes cut off its end are kept in {torn})"
    )


def test_a_transcript_that_is_not_here_is_not_called_damaged(store):
    with pytest.raises(TranscriptError) as caught:
        store.chain("elsewhere", "a1")
    assert not isinstance(caught.value, TranscriptDamaged)


def test_a_result_file_is_written_whole_or_not_at_all(store, monkeypatch):
    from activities.transcript import StoreError

    _cut_short_writes(monkeypatch, failures=1)
    with pytest.raises(StoreError):
        store.put_tool_result("s", ToolResultBlock(tool_use_id="t1", content="y" * 4000))
    assert store.get_tool_result("s", "t1") is None
    assert not list(store._results_dir("s").glob("*.tmp"))
    store.put_tool_result("s", ToolResultBlock(tool_use_id="t1", content="y" * 4000))
    assert store.get_tool_result("s", "t1").content == "y" * 4000


def test_chain_with_pending_stores_the_pending_entry_once_and_reads_since_the_boundary(store):
    store.append("s", "u1", None, msg("user", "first"))
    store.append("s", "a1", "u1", msg("assistant", "old"))
    boundary = TranscriptEntry(uuid="b", parentUuid="a1", type="system", subtype="compact_boundary")
    store.append_entry("s", boundary)
    store.append("s", "sum", "b", msg("user", "summary"), isCompactSummary=True)
    store.append("s", "a2", "sum", msg("assistant", "new"))
    pending = PendingUser(uuid="u2", parent_uuid="a2", prompt="next")

    for _ in range(2):  # a retried activity stores nothing twice and reads the same chain
        parent, chain = chain_with_pending(store, "s", "a2", pending)
        assert parent == "u2"
        assert [e.uuid for e in chain] == ["sum", "a2", "u2"]
        assert chain[-1].message == msg("user", "next")
    assert len(store.transcript_path("s").read_text().splitlines()) == 6

    parent, chain = chain_with_pending(store, "s", "a2", None)
    assert (parent, [e.uuid for e in chain]) == ("a2", ["sum", "a2"])
    assert chain_with_pending(store, "s", None, None) == (None, [])


def test_request_view_keeps_the_whole_text_of_each_result_it_cut_short(store):
    big = "line of output\n" * 2_000
    store.append("s", "u1", None, msg("user", "run them"))
    calls = [ToolUseBlock(id=f"t{i}", name="Bash", input={"command": "x"}) for i in (1, 2)]
    store.append("s", "a1", "u1", Message(role="assistant", content=calls))
    results = [
        ToolResultBlock(tool_use_id="t1", content=big),
        ToolResultBlock(tool_use_id="t2", content="small"),
    ]
    store.append("s", "u2", "a1", Message(role="user", content=results))
    chain = store.chain("s", "u2")
    req = ModelRequest(model="m", max_tokens=10, result_budget_tokens=1_000)

    messages = request_view(store, "s", chain, lambda paths: request_messages(chain, req, paths))

    full = store.overflow_path("s", "t1")
    assert full.read_text() == big
    assert not store.overflow_path("s", "t2").exists()
    shown = json.dumps(messages[-1])
    assert str(full) in shown and big not in shown and "small" in shown
