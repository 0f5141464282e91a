"""Grep and Glob are confined like Read: nothing whose real location is outside the
workspace is read or listed, and one bad entry (a dangling link, an unreadable file, a
FIFO) is skipped rather than failing the call. Every Grep test runs on both paths."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from activities.tools import execute_tool
from activities.tools import grep as grep_module
from tests.system_tools import needs, require

SECRET = "TOKEN-outside-the-workspace"
RG = shutil.which("rg")


@pytest.fixture(params=["ripgrep", "python"])
def grep_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which Grep implementation runs: ripgrep (skipped when not installed) or the fallback."""
    if request.param == "ripgrep":
        require("rg")
        monkeypatch.setattr(grep_module, "_rg_path", lambda: RG)
    else:
        monkeypatch.setattr(grep_module, "_rg_path", lambda: None)
    return str(request.param)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file and a directory next to the workspace, both holding the secret."""
    out = tmp_path / "outside"
    (out / "dir").mkdir(parents=True)
    (out / "passwd").write_text(f"root:{SECRET}\n")
    (out / "dir" / "inner.txt").write_text(f"dir {SECRET}\n")
    return out


@pytest.fixture
def ws(tmp_path: Path, outside: Path) -> Path:
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "normal.txt").write_text("a TOKEN inside\nplain\n")
    (root / "sub" / "code.py").write_text("x = 'TOKEN in code'\n")
    os.symlink(outside / "passwd", root / "passwd-link")
    os.symlink(outside / "dir", root / "dir-link")
    return root


async def run(name: str, ws: Path, **inp: object):
    return await execute_tool(name, inp, str(ws))


def assert_nothing_from_outside(text: str, outside: Path) -> None:
    assert SECRET not in text
    for leak in ("passwd", "inner.txt", "dir-link", str(outside)):
        assert leak not in text, text


@pytest.mark.parametrize("mode", ["files_with_matches", "content", "count"])
async def test_a_link_to_a_file_or_directory_outside_is_not_searched(ws, outside, grep_path, mode):
    out = await run("Grep", ws, pattern="TOKEN", output_mode=mode, **{"-n": True})
    assert not out.is_error, out.content
    assert_nothing_from_outside(out.content, outside)
    expected = {
        "files_with_matches": "normal.txt\nsub/code.py",
        "content": "normal.txt:1:a TOKEN inside\nsub/code.py:1:x = 'TOKEN in code'",
        "count": "normal.txt:1\nsub/code.py:1",
    }[mode]
    assert out.content == expected


@pytest.mark.parametrize("path", ["passwd-link", "dir-link", "dir-link/inner.txt"])
async def test_a_link_out_given_explicitly_is_refused(ws, outside, grep_path, path):
    out = await run("Grep", ws, pattern="TOKEN", path=path, output_mode="content")
    assert out.is_error and "outside the workspace" in out.content
    assert SECRET not in out.content


async def test_dangling_links_do_not_fail_the_search(ws, tmp_path, grep_path):
    os.symlink("no-such-file", ws / "dangling-relative.txt")
    os.symlink(tmp_path / "gone" / "nowhere", ws / "sub" / "dangling-absolute.txt")
    out = await run("Grep", ws, pattern="TOKEN", output_mode="content")
    assert not out.is_error, out.content
    assert out.content == "normal.txt:a TOKEN inside\nsub/code.py:x = 'TOKEN in code'"
    named = await run("Grep", ws, pattern="TOKEN", path="dangling-relative.txt")
    assert named.is_error and "does not exist" in named.content


async def test_a_link_inside_the_workspace_is_searched_when_named_like_read_does(ws, grep_path):
    os.symlink("normal.txt", ws / "alias.txt")
    os.symlink("sub", ws / "sub-alias")
    read = await run("Read", ws, file_path="alias.txt")
    assert not read.is_error and "a TOKEN inside" in read.content
    named = await run("Grep", ws, pattern="TOKEN", path="alias.txt", output_mode="content")
    assert named.content == "normal.txt:a TOKEN inside"
    in_dir = await run("Grep", ws, pattern="TOKEN", path="sub-alias")
    assert in_dir.content == "sub/code.py"
    # Walking does not follow links (ripgrep's default), so nothing is listed twice.
    walked = await run("Grep", ws, pattern="TOKEN")
    assert walked.content == "normal.txt\nsub/code.py"


@pytest.mark.timeout(20)
async def test_a_fifo_is_skipped_not_waited_on(ws, grep_path):
    os.mkfifo(ws / "pipe.txt")
    out = await run("Grep", ws, pattern="TOKEN")
    assert out.content == "normal.txt\nsub/code.py"
    named = await run("Grep", ws, pattern="TOKEN", path="pipe.txt")
    assert named.is_error and "not a regular file" in named.content


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode-000 file anyway")
async def test_an_unreadable_file_is_skipped(ws, grep_path):
    locked = ws / "locked.txt"
    locked.write_text("TOKEN locked\n")
    locked.chmod(0)
    try:
        out = await run("Grep", ws, pattern="TOKEN")
    finally:
        locked.chmod(stat.S_IRUSR | stat.S_IWUSR)
    assert not out.is_error and out.content == "normal.txt\nsub/code.py"


async def test_the_fallback_skips_a_file_it_cannot_open(ws, monkeypatch):
    """The same as the mode-000 test, for a root run: opening one file fails."""
    monkeypatch.setattr(grep_module, "_rg_path", lambda: None)
    (ws / "locked.txt").write_text("TOKEN locked\n")
    real_open = os.open

    def refusing_open(path, flags, *args, **kwargs):
        if Path(path).name == "locked.txt":
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(grep_module.os, "open", refusing_open)
    out = await run("Grep", ws, pattern="TOKEN")
    assert not out.is_error and out.content == "normal.txt\nsub/code.py"


async def test_type_and_glob_filters(ws, grep_path):
    by_type = await run("Grep", ws, pattern="TOKEN", type="py")
    assert by_type.content == "sub/code.py"
    by_glob = await run("Grep", ws, pattern="TOKEN", glob="*.txt")
    assert by_glob.content == "normal.txt"
    none = await run("Grep", ws, pattern="TOKEN", type="md")
    assert none.content == "No matches found"


async def test_the_fallback_refuses_an_unknown_type(ws, monkeypatch):
    monkeypatch.setattr(grep_module, "_rg_path", lambda: None)
    out = await run("Grep", ws, pattern="TOKEN", type="klingon")
    assert out.is_error and "unknown file type" in out.content


@needs("rg")
async def test_ripgrep_never_follows_links_even_if_configured_to(ws, outside, monkeypatch):
    calls: list[tuple[str, ...]] = []
    real_exec = grep_module.asyncio.create_subprocess_exec

    async def recording_exec(*cmd, **kwargs):
        calls.append(cmd)
        return await real_exec(*cmd, **kwargs)

    config = outside.parent / "ripgreprc"
    config.write_text("--follow\n")
    monkeypatch.setenv("RIPGREP_CONFIG_PATH", str(config))
    monkeypatch.setattr(grep_module, "_rg_path", lambda: RG)
    monkeypatch.setattr(grep_module.asyncio, "create_subprocess_exec", recording_exec)
    out = await run("Grep", ws, pattern="TOKEN", output_mode="content")
    assert_nothing_from_outside(out.content, outside)
    (cmd,) = calls
    assert cmd[0] == RG and "--no-config" in cmd and "--no-follow" in cmd
    assert "-L" not in cmd and "--follow" not in cmd


@needs("rg")
@pytest.mark.parametrize("mode", ["files_with_matches", "content", "count"])
async def test_output_naming_a_file_outside_is_dropped(ws, outside, tmp_path, monkeypatch, mode):
    """An rg that did follow links (here a wrapper adding --follow) still shows nothing
    from outside: every file rg reports is checked by real location."""
    wrapper = tmp_path / "rg-following"
    wrapper.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do shift; [ "$a" = --no-follow ] || set -- "$@" "$a"; done\n'
        f'exec {RG} --follow "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setattr(grep_module, "_rg_path", lambda: str(wrapper))
    out = await run("Grep", ws, pattern="TOKEN", output_mode=mode)
    assert not out.is_error, out.content
    assert_nothing_from_outside(out.content, outside)
    assert "normal.txt" in out.content and "sub/code.py" in out.content


@needs("rg")
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"output_mode": "count"},
        {"output_mode": "count", "path": "many.txt"},
        {"output_mode": "content", "path": "many.txt"},
        {"output_mode": "content", "-n": True},
        {"output_mode": "content", "-n": True, "-C": 1},
        {"output_mode": "content", "-A": 2},
        {"output_mode": "content", "-B": 1, "-n": True, "-i": True},
        {"output_mode": "content", "-C": 3, "-A": 0, "-n": True},
        {"output_mode": "content", "head_limit": 3},
    ],
)
async def test_both_paths_print_the_same_text(ws, monkeypatch, options):
    (ws / "many.txt").write_text("token 1\nx\ny\nTOKEN 2\nTOKEN 3\nz\nw\nv\nu\nTOKEN 4\r\n")
    (ws / "sub" / "deeper").mkdir()
    (ws / "sub" / "deeper" / "d.md").write_text("q\nTOKEN d\n")
    (ws / "z-last.txt").write_text("TOKEN z\n")
    outputs = []
    for rg in (RG, None):
        monkeypatch.setattr(grep_module, "_rg_path", lambda rg=rg: rg)
        outputs.append((await run("Grep", ws, pattern="TOKEN", **options)).content)
    assert outputs[0] == outputs[1]
    assert outputs[0] != "No matches found"


async def test_glob_lists_only_real_files_inside(ws, outside, tmp_path):
    os.symlink("no-such-file", ws / "dangling.txt")
    os.symlink(tmp_path / "gone" / "nowhere.txt", ws / "sub" / "dangling-absolute.txt")
    os.symlink(outside / "passwd", ws / "sub" / "passwd.txt")
    os.symlink("normal.txt", ws / "alias.txt")
    for pattern in ("*", "**/*", "*/*", "**/*.txt", "dir-link/*"):
        out = await run("Glob", ws, pattern=pattern)
        assert not out.is_error, (pattern, out.content)
        assert_nothing_from_outside(out.content, outside)
        assert "dangling" not in out.content and "nowhere" not in out.content
    everything = await run("Glob", ws, pattern="**/*")
    assert sorted(everything.content.splitlines()) == ["alias.txt", "normal.txt", "sub/code.py"]
    nothing = await run("Glob", ws, pattern="dir-link/*")
    assert nothing.content == "No files found"
    refused = await run("Glob", ws, pattern="*", path="dir-link")
    assert refused.is_error and "outside the workspace" in refused.content
