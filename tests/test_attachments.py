"""What the loop tells the model between turns (issue 24 item 4): a folder's CLAUDE.md below
the workspace the first time a file under it is read, once; a note for a file the agent read
or wrote that changed outside it before the next prompt. Checked in the request bodies the
fake Messages API receives, through the drop-in CLI."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from activities.turns import look
from durable_agent.engine.contracts import BetweenTurnsInput
from durable_agent.engine.state import MAX_SEEN_FILES, SeenFiles
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from tests.test_claude_cli import env_for


def _req(ws: Path, seen: SeenFiles, **kw: Any) -> BetweenTurnsInput:
    return BetweenTurnsInput(session_id="s", workspace=str(ws), seen=seen, **kw)


def test_a_nested_claude_md_comes_with_the_first_read_below_it_and_only_then(tmp_path):
    ws = tmp_path / "ws"
    (ws / "sub" / "deep").mkdir(parents=True)
    (ws / "CLAUDE.md").write_text("root rule (loaded at start)")
    (ws / "sub" / "CLAUDE.md").write_text("sub rule @more.md")
    (ws / "sub" / "more.md").write_text("imported sub rule")
    (ws / "sub" / "deep" / "x.py").write_text("x = 1\n")
    (ws / "top.py").write_text("t = 1\n")
    home = tmp_path / "home"
    top = look(
        _req(ws, SeenFiles(), nested_memory=True),
        str(ws),
        [("Read", {"file_path": "top.py"})],
        home,
    )
    assert top.context == [] and list(top.seen.stamps) == [str(ws / "top.py")]
    read = ("Read", {"file_path": str(ws / "sub" / "deep" / "x.py")})
    first = look(_req(ws, top.seen, nested_memory=True), str(ws), [read], home)
    (text,) = first.context
    assert f"{ws}/sub/CLAUDE.md" in text and "sub rule" in text and "imported sub rule" in text
    assert "root rule" not in text
    again = look(_req(ws, first.seen, nested_memory=True), str(ws), [read], home)
    assert again.context == []  # never twice
    assert look(_req(ws, SeenFiles(), nested_memory=False), str(ws), [read], home).context == []
    # A write is watched, but only a read brings the folder's memory.
    wrote = look(
        _req(ws, SeenFiles(), nested_memory=True),
        str(ws),
        [("Write", {"file_path": "sub/n.py"})],
        home,
    )
    assert wrote.context == []


def test_a_file_changed_outside_the_agent_is_noted_once_with_its_text(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    f = ws / "notes.txt"
    f.write_text("one\n")
    gone = ws / "gone.txt"
    gone.write_text("bye\n")
    home = tmp_path / "home"
    uses = [("Read", {"file_path": "notes.txt"}), ("Edit", {"file_path": str(gone)})]
    seen = look(_req(ws, SeenFiles()), str(ws), uses, home).seen
    assert look(_req(ws, seen, check_changes=True), str(ws), [], home).context == []
    f.write_text("one\ntwo, written by the user\n")
    os.utime(f, ns=(1, 1))  # a change that kept the size would still move the mtime
    gone.unlink()
    out = look(_req(ws, seen, check_changes=True), str(ws), [], home)
    changed, deleted = out.context
    assert f"{ws}/notes.txt was changed outside this session" in changed
    assert "two, written by the user" in changed
    assert f"{ws}/gone.txt" in deleted and "no longer exists" in deleted
    assert look(_req(ws, out.seen, check_changes=True), str(ws), [], home).context == []


def test_a_file_touched_or_copied_again_unchanged_is_not_noted(tmp_path):
    """Stamps are by content: a copy of the workspace made again on another host (other mtimes)
    or a `touch` is no change to tell the model about."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("a = 1\n")
    seen = look(_req(ws, SeenFiles()), str(ws), [("Read", {"file_path": "a.py"})], tmp_path).seen
    os.utime(ws / "a.py", ns=(5, 5))
    copy = tmp_path / "host-copy"
    copy.mkdir()
    (copy / "a.py").write_text("a = 1\n")
    assert look(_req(ws, seen, check_changes=True), str(ws), [], tmp_path).context == []
    assert look(_req(ws, seen, check_changes=True), str(copy), [], tmp_path).context == []


def test_memory_files_are_watched_from_the_first_prompt(tmp_path):
    """An edit of CLAUDE.md during a session is noted before the next prompt (its text in the
    system prompt is the one read when the session started)."""
    from durable_agent.engine.state import Attachments, QueryConfig
    from durable_agent.environment import memory_files, memory_stamps
    from workflows.query import first_seen

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "CLAUDE.md").write_text("RULE one")
    files = memory_files(ws, "project")
    stamps = memory_stamps(ws, files)
    assert list(stamps) == [str(ws / "CLAUDE.md")]
    cfg = QueryConfig(attachments=Attachments(changed_files=True, memory_stamps=stamps))
    seen = first_seen(cfg)
    (ws / "CLAUDE.md").write_text("RULE two")
    (notice,) = look(_req(ws, seen, check_changes=True), str(ws), [], tmp_path).context
    assert "CLAUDE.md was changed outside this session" in notice and "RULE two" in notice
    assert first_seen(QueryConfig()).stamps == {}


def test_the_watch_list_keeps_the_newest_files(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(MAX_SEEN_FILES + 5):
        (ws / f"f{i}").write_text("x")
    uses = [("Read", {"file_path": f"f{i}"}) for i in range(MAX_SEEN_FILES + 5)]
    seen = look(_req(ws, SeenFiles()), str(ws), uses, tmp_path).seen
    assert len(seen.stamps) == MAX_SEEN_FILES and str(ws / "f0") not in seen.stamps
    assert str(ws / f"f{MAX_SEEN_FILES + 4}") in seen.stamps
    # NUL bytes, a FIFO, a folder: nothing to watch, nothing opened.
    os.mkfifo(ws / "pipe")
    odd = [
        ("Read", {"file_path": "a\x00b"}),
        ("Read", {"file_path": "pipe"}),
        ("Read", {"file_path": "."}),
    ]
    assert look(_req(ws, SeenFiles()), str(ws), odd, tmp_path).seen.stamps == {}


def _bodies(server: ReplayServer) -> list[str]:
    return [json.dumps(body["messages"]) for body in server.requests]


def test_requests_carry_nested_memory_after_a_read_and_a_changed_file_notice(dev_env, tmp_path):
    ws = tmp_path / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "pkg" / "CLAUDE.md").write_text("PKG-RULE: use tabs in pkg")
    (ws / "pkg" / "mod.py").write_text("value = 1\n")
    (ws / "CLAUDE.md").write_text("ROOT-RULE first")
    turns = [
        tool_turn([("r1", "Read", {"file_path": str(ws / "pkg" / "mod.py")})]),
        tool_turn([("r2", "Read", {"file_path": str(ws / "pkg" / "mod.py")})]),
        text_turn("read it"),
        text_turn("seen the change"),
        text_turn("nothing new"),
    ]
    with ReplayServer(turns) as server:
        env = env_for(dev_env, tmp_path, server)

        def run(*flags: str) -> dict[str, Any]:
            proc = subprocess.run(
                ["durable-agent", "-p", *flags, "--output-format", "json",
                 "--allowedTools", "Read"], cwd=ws, env=env,
                capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
            return json.loads(proc.stdout)

        first = run("read pkg/mod.py")
        (ws / "pkg" / "mod.py").write_text("value = 2  # CHANGED-BY-USER\n")
        (ws / "CLAUDE.md").write_text("ROOT-RULE second")  # read again by the resuming CLI
        run("and now?", "--resume", first["session_id"])
        run("again?", "--resume", first["session_id"])
    bodies = _bodies(server)
    assert len(bodies) == 5
    assert "PKG-RULE" not in bodies[0]  # nothing read below the workspace yet
    assert bodies[1].count("PKG-RULE") == 1  # after the first read under pkg/, with its result
    last = server.requests[1]["messages"][-1]["content"]
    assert last[0]["type"] == "tool_result" and "PKG-RULE" in last[-1]["text"]
    assert bodies[2].count("PKG-RULE") == 1  # the second read there: not again
    assert "CHANGED-BY-USER" not in bodies[2]
    prompt = server.requests[3]["messages"][-1]["content"]
    assert prompt[0] == {"type": "text", "text": "and now?"}
    notice = prompt[-1]["text"]
    assert "pkg/mod.py was changed outside this session" in notice and "CHANGED-BY-USER" in notice
    assert json.dumps(server.requests[4]["messages"][-1]).count("changed outside") == 0
    # The resuming CLI put the edited CLAUDE.md in the system prompt: not a change to note.
    assert "ROOT-RULE second" in json.dumps(server.requests[3]["system"])
    assert "ROOT-RULE" not in json.dumps(server.requests[3]["messages"])
