"""Claude Code's memory files, read as its documentation describes them: the user's
`~/.claude/CLAUDE.md`; the project's `CLAUDE.md` and `.claude/CLAUDE.md` in the workspace and
each folder above it up to the repository root; the local `CLAUDE.local.md` beside them. A
line's `@path` imports another file (relative to the importing file, or `~/…`, or absolute),
up to 5 hops deep, each file once, never inside a code span or a fenced block. A folder's
`CLAUDE.md` below the workspace belongs to the first read of a file under it (`nested`).

Pure reading (blocking file I/O, no clock): the caller runs it where the files are. The CLI
reads it when a session starts and it goes in the system prompt (durable_agent/environment.py);
`nested` is not wired into the loop yet (issue 24 item 4's attachments)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

Level = Literal["user", "project", "local"]

MAX_IMPORT_DEPTH = 5
MAX_FILE_CHARS = 40_000
"""A memory file is cut here (a huge one would crowd out the conversation)."""

_IMPORT = re.compile(r"(?<![\w`])@((?:~/|/|\.{1,2}/|[\w.-])[^\s`]*)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_SPAN = re.compile(r"`[^`\n]*`")


class MemoryFile(BaseModel):
    path: str
    level: Level
    content: str
    """The file's text with its imports expanded in place."""


def repository_root(start: Path) -> Path | None:
    """The nearest folder at or above `start` that holds `.git`."""
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return None


def _read(path: Path) -> str | None:
    try:
        if not path.is_file():
            return None
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return text if len(text) <= MAX_FILE_CHARS else text[:MAX_FILE_CHARS] + "\n[… cut]"


def expand_imports(text: str, base: Path, home: Path, seen: set[Path], depth: int = 0) -> str:
    """`text` with each `@path` line import replaced by that file's own expanded text (once
    per file in `seen`; at most MAX_IMPORT_DEPTH hops); imports in code are left as written."""
    out: list[str] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            out.append(line)
            continue
        if fenced or depth >= MAX_IMPORT_DEPTH or "@" not in line:
            out.append(line)
            continue
        outside_spans = _SPAN.sub(lambda m: " " * len(m.group(0)), line)
        imported: list[str] = []
        for match in _IMPORT.finditer(outside_spans):
            target = _resolve(match.group(1), base, home)
            if target is None or target in seen:
                continue
            body = _read(target)
            if body is None:
                continue
            seen.add(target)
            imported.append(expand_imports(body, target.parent, home, seen, depth + 1))
        out.append(line)
        out.extend(imported)
    return "\n".join(out)


def _resolve(raw: str, base: Path, home: Path) -> Path | None:
    raw = raw.rstrip(".,;:)")
    if not raw:
        return None
    if raw.startswith("~/"):
        path = home / raw[2:]
    elif raw.startswith("/"):
        path = Path(raw)
    else:
        path = base / raw
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return None


def _file(path: Path, level: Level, home: Path, seen: set[Path]) -> MemoryFile | None:
    resolved = path.resolve()
    if resolved in seen:
        return None
    body = _read(resolved)
    if body is None:
        return None
    seen.add(resolved)
    content = expand_imports(body, resolved.parent, home, seen)
    return MemoryFile(path=str(path), level=level, content=content)


def load_memory(
    workspace: Path,
    home: Path,
    sources: frozenset[str] = frozenset(("user", "project", "local")),
    user_dir: Path | None = None,
) -> list[MemoryFile]:
    """The memory of a session in `workspace`: user, then project and local from the
    repository root (or the workspace, outside a repository) down to the workspace — the
    nearer a file, the later it comes, so it is read last and weighs most."""
    seen: set[Path] = set()
    found: list[MemoryFile] = []
    user = (user_dir or home / ".claude") / "CLAUDE.md"
    if "user" in sources and (one := _file(user, "user", home, seen)):
        found.append(one)
    root = repository_root(workspace) or workspace
    folders = [workspace, *workspace.parents]
    chain = folders[: folders.index(root) + 1] if root in folders else [workspace]
    for folder in reversed(chain):
        names: list[tuple[Path, Level]] = []
        if "project" in sources:
            names += [
                (folder / "CLAUDE.md", "project"),
                (folder / ".claude" / "CLAUDE.md", "project"),
            ]
        if "local" in sources:
            names.append((folder / "CLAUDE.local.md", "local"))
        for path, level in names:
            if one := _file(path, level, home, seen):
                found.append(one)
    return found


def nested(read: Path, workspace: Path, home: Path, attached: set[str]) -> list[MemoryFile]:
    """The `CLAUDE.md` files of the folders between `workspace` (excluded: loaded at start)
    and the folder of the file just read, not attached before; `attached` is updated."""
    try:
        rel = read.resolve().parent.relative_to(workspace.resolve())
    except ValueError:
        return []
    out: list[MemoryFile] = []
    folder = workspace.resolve()
    for part in rel.parts:
        folder = folder / part
        path = folder / "CLAUDE.md"
        if str(path) in attached:
            continue
        one = _file(path, "project", home, set())
        if one is not None:
            attached.add(str(path))
            out.append(one)
    return out


def memory_text(files: list[MemoryFile]) -> str:
    """The memory as the context the model is given with the first prompt."""
    if not files:
        return ""
    parts = [
        "Instructions from the project's and the user's memory files (CLAUDE.md). They are "
        "part of your instructions: follow them; a later, more specific file overrides an "
        "earlier one."
    ]
    for one in files:
        parts.append(f"Contents of {one.path} ({one.level} memory):\n\n{one.content.strip()}")
    return "\n\n".join(parts)
