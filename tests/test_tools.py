"""Tools against a real temporary workspace; every bad input becomes an error result."""

import asyncio
import os
import time
from pathlib import Path

import pytest

from activities.tools import execute_tool
from activities.tools.base import MAX_OUTPUT_CHARS
from activities.tools.registry import preview


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("alpha\nbeta\ngamma\n")
    (root / "sub").mkdir()
    (root / "sub" / "b.py").write_text("def f():\n    return 'beta'\n")
    (tmp_path / "secret.txt").write_text("top secret")
    return root


async def run(name, ws, **inp):
    return await execute_tool(name, inp, str(ws))


async def test_read_numbers_lines_with_offset_and_limit(ws):
    out = await run("Read", ws, file_path="a.txt", offset=2, limit=1)
    assert not out.is_error
    assert out.content.startswith("     2\tbeta")
    assert "gamma" not in out.content.split("\n")[0]
    absolute = await run("Read", ws, file_path=str(ws / "a.txt"))
    assert "     1\talpha" in absolute.content


@pytest.mark.parametrize("tool", ["Read", "Write", "Edit"])
async def test_traversal_with_dotdot_is_refused(ws, tool):
    inp = {"file_path": "../secret.txt"}
    if tool == "Write":
        inp["content"] = "x"
    if tool == "Edit":
        inp.update(old_string="top", new_string="no")
    out = await execute_tool(tool, inp, str(ws))
    assert out.is_error and "outside the workspace" in out.content
    assert (ws.parent / "secret.txt").read_text() == "top secret"


async def test_symlink_out_of_the_workspace_is_refused(ws):
    os.symlink(ws.parent / "secret.txt", ws / "link.txt")
    out = await run("Read", ws, file_path="link.txt")
    assert out.is_error and "outside the workspace" in out.content
    out = await run("Grep", ws, pattern="secret", path="link.txt")
    assert out.is_error


async def test_absolute_path_outside_is_refused(ws):
    out = await run("Read", ws, file_path="/etc/passwd")
    assert out.is_error and "outside the workspace" in out.content


async def test_missing_binary_and_directory_reads_are_errors(ws):
    (ws / "bin.dat").write_bytes(b"\x00\x01\x02")
    for path, needle in [
        ("nope.txt", "does not exist"),
        ("bin.dat", "binary"),
        ("sub", "directory"),
    ]:
        out = await run("Read", ws, file_path=path)
        assert out.is_error and needle in out.content, out.content


async def test_invalid_input_and_unknown_tool(ws):
    out = await run("Read", ws, path="a.txt")
    assert out.is_error and "InputValidationError" in out.content and "file_path" in out.content
    out = await run("Read", ws, file_path="a.txt", offset=0)
    assert out.is_error and "offset" in out.content
    out = await run("Frobnicate", ws, x=1)
    assert out.is_error and "No such tool" in out.content


async def test_write_creates_and_edit_replaces(ws):
    out = await run("Write", ws, file_path="new/dir/c.txt", content="one two two")
    assert not out.is_error and (ws / "new/dir/c.txt").read_text() == "one two two"
    dup = await run("Edit", ws, file_path="new/dir/c.txt", old_string="two", new_string="2")
    assert dup.is_error and "2 times" in dup.content
    allx = await run(
        "Edit", ws, file_path="new/dir/c.txt", old_string="two", new_string="2", replace_all=True
    )
    assert not allx.is_error and (ws / "new/dir/c.txt").read_text() == "one 2 2"
    missing = await run("Edit", ws, file_path="new/dir/c.txt", old_string="zzz", new_string="y")
    assert missing.is_error and "not found" in missing.content
    same = await run("Edit", ws, file_path="a.txt", old_string="beta", new_string="beta")
    assert same.is_error
    nofile = await run("Edit", ws, file_path="ghost.txt", old_string="a", new_string="b")
    assert nofile.is_error and "does not exist" in nofile.content


async def test_bash_reports_exit_code_and_runs_in_workspace(ws):
    out = await run("Bash", ws, command="pwd; echo oops >&2; exit 3")
    assert (
        out.is_error
        and str(ws) in out.content
        and "oops" in out.content
        and "Exit code 3" in out.content
    )
    ok = await run("Bash", ws, command="echo hi")
    assert not ok.is_error and ok.content == "hi"


async def test_bash_huge_output_is_truncated_with_a_marker(ws):
    out = await run("Bash", ws, command="python3 -c \"print('x' * 2_000_000)\"")
    assert not out.is_error
    assert "truncated" in out.content and len(out.content) < MAX_OUTPUT_CHARS + 200


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


async def _gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def test_bash_timeout_kills_the_process_group(ws):
    """The background job runs (it writes its pid, then loops) and the timeout kills it with
    the command: it is gone within seconds."""
    started = time.monotonic()
    job = "(echo $BASHPID > bg.pid; while :; do sleep 0.05; done) &"
    ready = "until [ -s bg.pid ]; do sleep 0.01; done;"  # the job runs before the timeout
    out = await run("Bash", ws, command=f"{job} {ready} sleep 30", timeout=1000)
    assert out.is_error and "timed out" in out.content
    assert time.monotonic() - started < 10
    pid = int((ws / "bg.pid").read_text())
    assert await _gone(pid), f"the background job {pid} outlived its Bash"


async def test_bash_cancellation_kills_the_command(ws):
    marker = ws / "pid.txt"
    task = asyncio.ensure_future(run("Bash", ws, command=f"echo $$ > {marker}; sleep 30"))
    for _ in range(50):
        if marker.exists() and marker.read_text().strip():
            break
        await asyncio.sleep(0.05)
    pid = int(marker.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _gone(pid), f"the cancelled command {pid} still runs"


async def test_read_of_a_huge_file_is_bounded(ws):
    (ws / "big.txt").write_text(("y" * 5000 + "\n") * 3000)
    out = await run("Read", ws, file_path="big.txt")
    assert not out.is_error and "line truncated" in out.content and len(out.content) < 110_000


async def test_grep_modes(ws):
    files = await run("Grep", ws, pattern="beta")
    assert sorted(files.content.splitlines()) == ["a.txt", "sub/b.py"]
    content = await run(
        "Grep", ws, pattern="BETA", **{"-i": True, "-n": True}, output_mode="content", glob="*.py"
    )
    assert content.content == "sub/b.py:2:    return 'beta'"
    count = await run("Grep", ws, pattern="a", output_mode="count", path="a.txt")
    assert count.content.endswith("3")
    none = await run("Grep", ws, pattern="zzz")
    assert not none.is_error and none.content == "No matches found"
    bad = await run("Grep", ws, pattern="(")
    assert bad.is_error


async def test_glob_lists_files_inside_only(ws):
    out = await run("Glob", ws, pattern="**/*.py")
    assert out.content == "sub/b.py"
    out = await run("Glob", ws, pattern="../*")
    assert out.is_error
    out = await run("Glob", ws, pattern="*.none")
    assert out.content == "No files found"


def test_preview_shows_the_telling_line():
    assert (
        preview("Bash", "a\nb\n\nFAILED (x)\n\nExit code 1")
        == "FAILED (x) [exit code 1] (+3 lines)"
    )
    assert preview("Read", "     1\tline one\n     2\ttwo") == "1\tline one (+1 lines)"
    assert preview("Write", "") == "(no output)"


@pytest.mark.parametrize(
    ("tool", "bad"),
    [
        ("Read", {"file_path": "a.txt", "limit": "many"}),
        ("Write", {"file_path": "a.txt"}),
        ("Edit", {"file_path": "a.txt", "old_string": "alpha"}),
        ("Bash", {"command": "ls", "timeout": 10_000_000}),
        ("Grep", {"pattern": "x", "output_mode": "everything"}),
        ("Glob", {"pattern": "*", "extra": True}),
    ],
)
async def test_every_tool_turns_invalid_input_into_an_error_result(ws, tool, bad):
    out = await execute_tool(tool, bad, str(ws))
    assert out.is_error and out.content.startswith(f"InputValidationError: {tool} input is invalid")


@pytest.mark.parametrize(
    ("tool", "inp"),
    [
        ("Grep", {"pattern": "x", "path": "missing-dir"}),
        ("Glob", {"pattern": "*", "path": "missing-dir"}),
        ("Grep", {"pattern": "x", "path": "../"}),
        ("Glob", {"pattern": "*", "path": "/"}),
    ],
)
async def test_search_tools_refuse_missing_and_outside_paths(ws, tool, inp):
    out = await execute_tool(tool, inp, str(ws))
    assert out.is_error


async def test_grep_huge_output_is_truncated(ws):
    (ws / "many.txt").write_text("match me\n" * 20_000)
    out = await run("Grep", ws, pattern="match", output_mode="content")
    assert (
        not out.is_error
        and "truncated" in out.content
        and len(out.content) < MAX_OUTPUT_CHARS + 200
    )
    head = await run("Grep", ws, pattern="match", output_mode="content", head_limit=3)
    assert head.content.count("\n") == 2


async def test_a_missing_workspace_is_an_error_result(tmp_path):
    out = await execute_tool("Read", {"file_path": "a"}, str(tmp_path / "gone"))
    assert out.is_error and "not a directory" in out.content


async def test_read_may_open_the_extra_read_roots_only(ws, tmp_path):
    overflow = tmp_path / "overflow"
    overflow.mkdir()
    (overflow / "t1.txt").write_text("whole result")
    out = await execute_tool("Read", {"file_path": str(overflow / "t1.txt")}, str(ws), (overflow,))
    assert not out.is_error and "whole result" in out.content
    denied = await execute_tool(
        "Write", {"file_path": str(overflow / "t1.txt"), "content": "x"}, str(ws), (overflow,)
    )
    assert denied.is_error and (overflow / "t1.txt").read_text() == "whole result"
    relative = await execute_tool("Read", {"file_path": "../overflow/t1.txt"}, str(ws), (overflow,))
    assert relative.is_error
