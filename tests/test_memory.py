"""Claude Code's memory files as read by durable_agent.engine.memory (not yet in requests)."""

from __future__ import annotations

from pathlib import Path

from durable_agent.engine.memory import (
    MAX_IMPORT_DEPTH,
    load_memory,
    memory_text,
    nested,
)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def repo(tmp_path: Path) -> tuple[Path, Path, Path]:
    home, root = tmp_path / "home", tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    ws = root / "services" / "api"
    ws.mkdir(parents=True)
    return home, root, ws


def test_levels_load_from_the_user_then_the_root_down_to_the_workspace(tmp_path):
    home, root, ws = repo(tmp_path)
    write(home / ".claude" / "CLAUDE.md", "user rules")
    write(root / "CLAUDE.md", "root rules")
    write(root / "services" / ".claude" / "CLAUDE.md", "services rules")
    write(ws / "CLAUDE.md", "api rules")
    write(ws / "CLAUDE.local.md", "my local notes")
    write(tmp_path / "CLAUDE.md", "above the repository: not read")
    files = load_memory(ws, home)
    assert [(f.level, f.content) for f in files] == [
        ("user", "user rules"),
        ("project", "root rules"),
        ("project", "services rules"),
        ("project", "api rules"),
        ("local", "my local notes"),
    ]
    only = load_memory(ws, home, frozenset({"project"}))
    assert [f.content for f in only] == ["root rules", "services rules", "api rules"]
    text = memory_text(files)
    assert text.index("user rules") < text.index("api rules") < text.index("my local notes")


def test_imports_expand_relative_home_and_nested_once_and_not_in_code(tmp_path):
    home, root, ws = repo(tmp_path)
    write(root / "docs" / "style.md", "style: @../docs/naming.md")
    write(root / "docs" / "naming.md", "names are nouns; back to @style.md")
    write(home / "prefs.md", "I like tabs")
    write(
        ws / "CLAUDE.md",
        "see @../../docs/style.md and @~/prefs.md\n"
        "not `@../../docs/naming.md` in a span\n"
        "```\n@../../docs/naming.md in a fence\n```\n"
        "a mail@example.com is no import; @missing.md is skipped",
    )
    (content,) = [f.content for f in load_memory(ws, home)]
    assert content.count("names are nouns") == 1  # the cycle back to style.md stops
    assert "style: @../docs/naming.md" in content and "I like tabs" in content
    assert "@../../docs/naming.md in a fence" in content


def test_imports_stop_after_five_hops(tmp_path):
    home, root, ws = repo(tmp_path)
    for n in range(MAX_IMPORT_DEPTH + 2):
        write(root / f"f{n}.md", f"level {n} @f{n + 1}.md")
    write(ws / "CLAUDE.md", "@../../f0.md")
    (content,) = [f.content for f in load_memory(ws, home)]
    assert f"level {MAX_IMPORT_DEPTH - 1}" in content
    assert f"level {MAX_IMPORT_DEPTH}" not in content


def test_a_subfolders_memory_comes_once_with_the_first_read_below_it(tmp_path):
    home, root, ws = repo(tmp_path)
    write(ws / "CLAUDE.md", "loaded at start")
    write(ws / "pkg" / "CLAUDE.md", "pkg rules")
    write(ws / "pkg" / "deep" / "CLAUDE.md", "deep rules")
    source = write(ws / "pkg" / "deep" / "x.py", "x = 1")
    attached: set[str] = set()
    first = nested(source, ws, home, attached)
    assert [f.content for f in first] == ["pkg rules", "deep rules"]
    assert nested(source, ws, home, attached) == []
    assert nested(write(ws / "top.py", ""), ws, home, attached) == []
    assert nested(tmp_path / "elsewhere.py", ws, home, attached) == []
