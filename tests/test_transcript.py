import json

import pytest

from activities.transcript import TranscriptError, append_pending, user_message
from durable_agent.engine.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
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
