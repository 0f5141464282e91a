"""Grep: ripgrep when installed, else a Python fallback with the same options and output.

Both paths are confined like Read: a path given explicitly is refused when its real
location is outside the workspace (`Workspace.resolve`), and while walking a directory
neither follows symlinks, to files or to directories (ripgrep's default; the fallback
skips them the same way), so a link inside the workspace is searched only when named
explicitly, just as Read opens it. Every file either path would report is checked
again by real location, and one unreadable or vanished file is skipped, never fatal.
Both paths hand their findings to one renderer, so the text is the same either way.
"""

from __future__ import annotations

import asyncio
import base64
import fnmatch
import json
import os
import re
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from activities.tools.base import ToolError, ToolOutput, Workspace, no_nul, truncate
from activities.tools.files import kind
from activities.transcript import off_loop
from durable_agent.engine.tools import GrepInput
from durable_agent.secrets import without_private

TYPE_GLOBS = {
    "py": ["*.py", "*.pyi"],
    "js": ["*.js", "*.mjs", "*.cjs"],
    "ts": ["*.ts", "*.tsx"],
    "md": ["*.md"],
    "json": ["*.json"],
    "rust": ["*.rs"],
    "rs": ["*.rs"],
    "go": ["*.go"],
    "java": ["*.java"],
    "c": ["*.c", "*.h"],
    "cpp": ["*.cpp", "*.cc", "*.hpp", "*.h"],
    "sh": ["*.sh"],
    "toml": ["*.toml"],
    "yaml": ["*.yaml", "*.yml"],
    "txt": ["*.txt"],
    "html": ["*.html", "*.htm"],
    "css": ["*.css"],
}
SKIP_DIRS = {".git", "node_modules", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache"}


def _rg_path() -> str | None:
    """Where ripgrep is, or None for the Python fallback; tests replace this seam."""
    return shutil.which("rg")


@dataclass
class _Found:
    """One file's matches: enough to render any output mode."""

    name: str
    count: int = 0
    lines: list[tuple[int, str, bool]] = field(default_factory=list)
    """(1-based line number, text, is a match rather than context), in file order."""


def _limit(lines: list[str], head_limit: int | None) -> list[str]:
    return lines[:head_limit] if head_limit else lines


async def run_grep(args: GrepInput, ws: Workspace) -> ToolOutput:
    target, regex, rg = await off_loop(_checked, args, ws)
    before = args.before if args.before is not None else (args.context or 0)
    after = args.after if args.after is not None else (args.context or 0)
    if rg:
        found = await _ripgrep(rg, args, before, after, target, ws)
    else:
        found = await off_loop(_python_grep, regex, args, before, after, target, ws)
    lines = _render(found, args.output_mode, args.line_numbers, context=before > 0 or after > 0)
    if not lines:
        return ToolOutput("No matches found")
    return ToolOutput(truncate("\n".join(_limit(lines, args.head_limit))))


def _checked(args: GrepInput, ws: Workspace) -> tuple[Path, re.Pattern[str], str | None]:
    """The path to search, the compiled pattern and ripgrep's path (None: the fallback), or
    the ToolError that says what is wrong with the input (blocking: stats the path)."""
    if args.glob:
        no_nul(args.glob, "glob")
    if "\x00" in args.pattern:  # no process argument can hold one; the regex can say \x00
        raise ToolError("pattern contains a NUL byte; write it as \\x00 in the expression")
    target = ws.resolve(args.path) if args.path else ws.root
    try:
        mode = target.stat().st_mode  # never blocks, even on a FIFO
    except OSError as exc:
        raise ToolError(f"Path does not exist: {args.path}") from exc
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise ToolError(f"{args.path} is {kind(mode)}, not a regular file or a directory")
    try:
        regex = re.compile(args.pattern, re.IGNORECASE if args.case_insensitive else 0)
    except re.error as exc:
        raise ToolError(f"invalid regular expression {args.pattern!r}: {exc}") from exc
    rg = _rg_path()
    if args.type and args.type not in TYPE_GLOBS and not rg:
        raise ToolError(f"unknown file type {args.type!r}; known: {', '.join(sorted(TYPE_GLOBS))}")
    return target, regex, rg


def _render(found: list[_Found], mode: str, line_numbers: bool, context: bool) -> list[str]:
    """ripgrep's own text: `name:N:line` for a match, `name-N-line` for context, `--`
    between groups when context is shown; files in path order on both paths."""
    found = sorted(found, key=lambda f: Path(f.name).parts)
    if mode == "files_with_matches":
        return [f.name for f in found]
    if mode == "count":
        return [f"{f.name}:{f.count}" for f in found]
    out: list[str] = []
    for f in found:
        previous: int | None = None
        for number, text, is_match in f.lines:
            if context and out and (previous is None or number != previous + 1):
                out.append("--")
            previous = number
            sep = ":" if is_match else "-"
            num = f"{number}{sep}" if line_numbers else ""
            out.append(f"{f.name}{sep}{num}{text}")
    return out


async def _ripgrep(
    rg: str, args: GrepInput, before: int, after: int, target: Path, ws: Workspace
) -> list[_Found]:
    # --no-config: no RIPGREP_CONFIG_PATH can add --follow; --no-follow says it outright.
    # --no-messages: an unreadable file is skipped; what stderr still gets is fatal.
    cmd = [rg, "--no-config", "--no-follow", "--no-messages", "--color=never"]
    cmd += ["--hidden", "--glob", "!.git"]
    if args.case_insensitive:
        cmd.append("-i")
    if args.output_mode == "files_with_matches":
        cmd += ["--files-with-matches", "--null"]
    elif args.output_mode == "count":
        cmd += ["--count", "--with-filename", "--null"]
    else:
        cmd += ["--json", "-B", str(before), "-A", str(after)]
    if args.glob:
        cmd += ["--glob", args.glob]
    if args.type:
        cmd += ["--type", args.type]
    cmd += ["-e", args.pattern, "--", str(target)]
    proc = await asyncio.create_subprocess_exec(
        *cmd, cwd=ws.root, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=without_private(os.environ),  # ripgrep needs none of the worker's credentials
    )  # fmt: skip
    out, err = await proc.communicate()
    # Exit 2 with a silent stderr means only some files could not be read.
    if proc.returncode not in (0, 1) and (err.strip() or proc.returncode != 2):
        raise ToolError(f"grep failed: {err.decode(errors='replace').strip()}")
    return await off_loop(_rg_findings, out, args, ws)


def _rg_findings(out: bytes, args: GrepInput, ws: Workspace) -> list[_Found]:
    """ripgrep's output as findings, each file checked by real location (blocking)."""
    found: dict[str, _Found] = {}
    inside: dict[str, bool] = {}

    def entry(path: str) -> _Found | None:
        """The file's record, or None when its real location is outside (never expected:
        ripgrep is not following links, but nothing outside may reach the output)."""
        if path not in inside:
            inside[path] = ws.real_inside(path) is not None
        if not inside[path]:
            return None
        return found.setdefault(path, _Found(ws.display(Path(path))))

    if args.output_mode == "files_with_matches":
        for raw in out.split(b"\0"):
            if raw:
                entry(os.fsdecode(raw))
    elif args.output_mode == "count":
        # path NUL count NL path NUL count NL ...: a path may hold a newline, not a NUL.
        parts = out.split(b"\0")
        path = parts[0]
        for rest in parts[1:]:
            count, _, following = rest.partition(b"\n")
            record = entry(os.fsdecode(path))
            if record is not None:
                record.count = int(count)
            path = following
    else:
        for raw in out.splitlines():
            message = json.loads(raw)
            if message.get("type") not in ("match", "context"):
                continue
            data = message["data"]
            record = entry(os.fsdecode(_json_bytes(data["path"])))
            if record is None:
                continue
            text = _json_bytes(data["lines"]).decode("utf-8", errors="replace")
            text = text[:-2] if text.endswith("\r\n") else text.removesuffix("\n")
            is_match = message["type"] == "match"
            record.lines.append((int(data.get("line_number") or 0), text, is_match))
    return list(found.values())


def _json_bytes(value: dict[str, str]) -> bytes:
    """ripgrep's JSON holds text as {"text": ...}, or {"bytes": base64} when not UTF-8."""
    if "text" in value:
        return os.fsencode(value["text"])
    return base64.b64decode(value["bytes"])


def _files(target: Path, args: GrepInput) -> list[Path]:
    """The files to search: `target` itself, or every regular file under it without
    following a symlink (like ripgrep: a link to a file or a directory is not walked)."""
    if target.is_file():
        return [target]
    globs = TYPE_GLOBS.get(args.type, []) if args.type else []
    out = []
    for dirpath, dirnames, filenames in os.walk(target):
        # os.walk lists a linked directory in dirnames but does not descend into it.
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            if args.glob and not fnmatch.fnmatch(name, args.glob):
                continue
            if globs and not any(fnmatch.fnmatch(name, g) for g in globs):
                continue
            path = Path(dirpath) / name
            if not path.is_symlink():
                out.append(path)
    return out


def _read_inside(path: Path, ws: Workspace) -> bytes | None:
    """The file's bytes when its real location is a regular file inside the workspace;
    None when it is outside, dangling, unreadable, not a regular file, or gone."""
    real = ws.real_inside(path)
    if real is None:
        return None
    try:
        # The real path has no link left to follow; O_NOFOLLOW refuses one swapped in
        # since, O_NONBLOCK keeps a FIFO from blocking the open.
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            return handle.read()
        except OSError:
            return None


def _python_grep(
    regex: re.Pattern[str], args: GrepInput, before: int, after: int, target: Path, ws: Workspace
) -> list[_Found]:
    found: list[_Found] = []
    for path in _files(target, args):
        data = _read_inside(path, ws)
        if data is None or b"\x00" in data[:8192]:
            continue
        lines = data.decode("utf-8", errors="replace").splitlines()
        hits = [i for i, line in enumerate(lines) if regex.search(line)]
        if not hits:
            continue
        shown: set[int] = set()
        for i in hits:
            shown.update(range(max(0, i - before), min(len(lines), i + after + 1)))
        hit_set = set(hits)
        record = _Found(ws.display(path), count=len(hits))
        record.lines = [(i + 1, lines[i], i in hit_set) for i in sorted(shown)]
        found.append(record)
    return found
