"""What the file tools open: only regular files, without blocking; only the lines asked for;
clear errors for a NUL byte in a path and for a file that is not UTF-8."""

import asyncio
import os
import socket
import time
from pathlib import Path

import pytest

from activities.tools import execute_tool
from activities.tools.read import MAX_READ_CHARS


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("alpha\nbeta\n")
    return root


async def run(name, ws, **inp):
    # Bounded: the bug this guards against is a worker thread blocked in the kernel for good.
    return await asyncio.wait_for(execute_tool(name, inp, str(ws)), 10)


SPECIAL_CALLS = [
    ("Read", {}),
    ("Write", {"content": "x"}),
    ("Edit", {"old_string": "a", "new_string": "b"}),
    ("Grep", {"pattern": "x"}),
]


@pytest.mark.parametrize(("tool", "extra"), SPECIAL_CALLS)
@pytest.mark.parametrize("name", ["fifo", "link-to-fifo"])
async def test_a_fifo_or_a_link_to_one_is_refused_at_once(ws, tool, extra, name):
    os.mkfifo(ws / "fifo")
    os.symlink("fifo", ws / "link-to-fifo")
    key = "path" if tool == "Grep" else "file_path"
    out = await run(tool, ws, **{key: name}, **extra)
    if name == "link-to-fifo" and tool in ("Write", "Edit"):  # no write through a link at all
        assert out.is_error and "it is a symbolic link to" in out.content, out.content
        return
    assert out.is_error and "a FIFO (named pipe), not a regular file" in out.content, out.content


@pytest.mark.parametrize(("tool", "extra"), SPECIAL_CALLS)
async def test_a_socket_is_refused(ws, tool, extra, monkeypatch):
    monkeypatch.chdir(ws)  # a socket's path must be short
    with socket.socket(socket.AF_UNIX) as server:
        server.bind("sock")
        key = "path" if tool == "Grep" else "file_path"
        out = await run(tool, ws, **{key: "sock"}, **extra)
    assert out.is_error and "a socket, not a regular file" in out.content, out.content


async def test_searches_pass_over_a_fifo(ws):
    os.mkfifo(ws / "fifo")
    assert (await run("Glob", ws, pattern="*")).content == "a.txt"
    assert (await run("Grep", ws, pattern="a")).content == "a.txt"


async def test_read_reads_only_the_lines_asked_for(ws):
    # 1 GiB, sparse: a Read that loaded the whole file would take seconds and the memory.
    (ws / "huge.txt").write_bytes(b"hello\n" * 3000)
    os.truncate(ws / "huge.txt", 1 << 30)
    began = time.monotonic()
    out = await run("Read", ws, file_path="huge.txt", offset=2, limit=2)
    assert time.monotonic() - began < 3
    assert out.content == (
        "     2\thello\n     3\thello\n\n[more lines follow: use offset/limit to read them]"
    )


async def test_read_counts_what_is_left_and_stops_at_its_budget(ws):
    (ws / "crlf.txt").write_bytes(b"one\r\ntwo\r\nthree")
    out = await run("Read", ws, file_path="crlf.txt", limit=1)
    assert out.content == "     1\tone\n\n[2 more lines: use offset/limit to read them]"
    out = await run("Read", ws, file_path="crlf.txt", offset=3)
    assert out.content == "     3\tthree"
    past = await run("Read", ws, file_path="crlf.txt", offset=4)
    assert past.is_error and "past the end of the file (3 lines)" in past.content
    (ws / "wide.txt").write_text(("x" * 1500 + "\n") * 100)
    out = await run("Read", ws, file_path="wide.txt")
    assert len(out.content) < MAX_READ_CHARS + 200 and "    66\t" in out.content  # 66 + 34 = 100
    assert out.content.endswith("34 more lines from line 67: use offset/limit to read them]")


async def test_a_long_line_is_cut_without_reading_it_all(ws):
    (ws / "long.txt").write_text("é" * 50_000 + "\nnext\n")
    out = await run("Read", ws, file_path="long.txt")
    first, second = out.content.split("\n")
    assert first == "     1\t" + "é" * 2000 + "… [line truncated]"
    assert second == "     2\tnext"


async def test_edit_of_a_file_that_is_not_utf8_is_a_clear_error(ws):
    (ws / "latin1.txt").write_bytes("café au lait\n".encode("latin-1"))
    out = await run("Edit", ws, file_path="latin1.txt", old_string="au", new_string="with")
    assert out.is_error
    assert out.content == (
        "latin1.txt is not UTF-8 text (byte 0xe9 at offset 3); "
        "Edit changes UTF-8 text only: use Bash to change this file"
    )
    assert (ws / "latin1.txt").read_bytes() == "café au lait\n".encode("latin-1")


async def test_content_that_is_not_unicode_leaves_the_file_alone(ws):
    out = await run("Write", ws, file_path="a.txt", content="ok \ud800")
    assert out.is_error and "content is not valid Unicode" in out.content
    assert (ws / "a.txt").read_text() == "alpha\nbeta\n"


@pytest.mark.parametrize(
    ("tool", "inp", "field"),
    [
        ("Read", {"file_path": "a\x00.txt"}, "path"),
        ("Write", {"file_path": "a\x00.txt", "content": "x"}, "path"),
        ("Edit", {"file_path": "a\x00.txt", "old_string": "a", "new_string": "b"}, "path"),
        ("Glob", {"pattern": "*", "path": "a\x00.txt"}, "path"),
        ("Glob", {"pattern": "a\x00.txt"}, "pattern"),
        ("Grep", {"pattern": "x", "path": "a\x00.txt"}, "path"),
        ("Grep", {"pattern": "x", "glob": "a\x00.txt"}, "glob"),
    ],
)
async def test_a_nul_byte_in_a_path_is_the_same_clear_error_everywhere(ws, tool, inp, field):
    out = await run(tool, ws, **inp)
    assert out.is_error
    assert out.content == f"{field} 'a\\x00.txt' contains a NUL byte, which no file name can hold"


async def test_a_nul_byte_in_a_grep_pattern_says_how_to_write_it(ws):
    out = await run("Grep", ws, pattern="a\x00b")
    assert out.is_error and "write it as \\x00" in out.content


_WRITER = """
import sys
from pathlib import Path
from activities.tools.files import write_regular
print("ready", flush=True)
sys.stdin.readline()
write_regular(Path(sys.argv[1]), "big.txt", b"n" * int(sys.argv[2]))
print("done", flush=True)
"""


@pytest.mark.parametrize("delay", [0.0, 0.02, 0.05, 0.1, 0.2])
def test_a_writer_killed_mid_write_leaves_the_old_content_or_the_new(ws, delay):
    """Edit and Write replace a file whole or not at all: a worker SIGKILLed while writing
    (here a process writing 24 MB, killed at several points) leaves the old bytes or the new,
    never a file cut short, and no temporary file in the workspace."""
    import subprocess
    import sys

    big = ws / "big.txt"
    old = b"o" * 6_000_000
    big.write_bytes(old)
    size = 24_000_000
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(big), str(size)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=Path(__file__).parent.parent,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline() == b"ready\n"
    proc.stdin.write(b"go\n")
    proc.stdin.flush()
    time.sleep(delay)
    proc.kill()
    proc.wait()
    data = big.read_bytes()
    assert data == old or data == b"n" * size, f"{len(data)} bytes left"
    assert sorted(p.name for p in ws.iterdir()) == ["a.txt", "big.txt"]


async def test_a_written_file_keeps_its_mode_and_a_hard_linked_one_its_links(ws):
    target = ws / "a.txt"
    target.chmod(0o640)
    await run("Edit", ws, file_path=str(target), old_string="alpha", new_string="gamma")
    assert target.read_text() == "gamma\nbeta\n"
    assert target.stat().st_mode & 0o777 == 0o640
    os.link(target, ws / "twin.txt")  # two names, one file: written in place
    inode = target.stat().st_ino
    await run("Write", ws, file_path=str(target), content="delta\n")
    assert (ws / "twin.txt").read_text() == "delta\n" and target.stat().st_ino == inode
    created = await run("Write", ws, file_path=str(ws / "new" / "b.txt"), content="b\n")
    assert "created" in created.content.lower() or (ws / "new" / "b.txt").read_text() == "b\n"
    umask = os.umask(0)
    os.umask(umask)
    assert (ws / "new" / "b.txt").stat().st_mode & 0o777 == 0o666 & ~umask


async def test_replace_all_of_one_occurrence_says_one_occurrence(ws):
    out = await run("Edit", ws, file_path=str(ws / "a.txt"), old_string="beta",
                    new_string="b", replace_all=True)  # fmt: skip
    assert "(1 occurrence replaced)" in out.content
