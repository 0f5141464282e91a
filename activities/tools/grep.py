"""Grep: ripgrep when installed, else a Python fallback with the same options."""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
import shutil
from pathlib import Path

from activities.tools.base import ToolError, ToolOutput, Workspace, truncate
from durable_agent.engine.tools import GrepInput

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


def _limit(lines: list[str], head_limit: int | None) -> list[str]:
    return lines[:head_limit] if head_limit else lines


async def run_grep(args: GrepInput, ws: Workspace) -> ToolOutput:
    target = ws.resolve(args.path) if args.path else ws.root
    if not target.exists():
        raise ToolError(f"Path does not exist: {args.path}")
    try:
        regex = re.compile(args.pattern, re.IGNORECASE if args.case_insensitive else 0)
    except re.error as exc:
        raise ToolError(f"invalid regular expression {args.pattern!r}: {exc}") from exc
    if args.type and args.type not in TYPE_GLOBS and not shutil.which("rg"):
        raise ToolError(f"unknown file type {args.type!r}; known: {', '.join(sorted(TYPE_GLOBS))}")
    rg = shutil.which("rg")
    lines = await _ripgrep(rg, args, target, ws) if rg else _python_grep(regex, args, target, ws)
    if not lines:
        return ToolOutput("No matches found")
    return ToolOutput(truncate("\n".join(_limit(lines, args.head_limit))))


async def _ripgrep(rg: str, args: GrepInput, target: Path, ws: Workspace) -> list[str]:
    cmd = [rg, "--no-heading", "--color=never", "--hidden", "--glob", "!.git"]
    if args.case_insensitive:
        cmd.append("-i")
    if args.output_mode == "files_with_matches":
        cmd.append("-l")
    elif args.output_mode == "count":
        cmd.append("-c")
    else:
        if args.line_numbers:
            cmd.append("-n")
        for flag, value in (("-A", args.after), ("-B", args.before), ("-C", args.context)):
            if value is not None:
                cmd += [flag, str(value)]
    if args.glob:
        cmd += ["--glob", args.glob]
    if args.type:
        cmd += ["--type", args.type]
    cmd += ["-e", args.pattern, "--", str(target)]
    proc = await asyncio.create_subprocess_exec(
        *cmd, cwd=ws.root, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    if proc.returncode not in (0, 1):
        raise ToolError(f"grep failed: {err.decode(errors='replace').strip()}")
    prefix = str(ws.root) + os.sep
    return [line.replace(prefix, "", 1) for line in out.decode(errors="replace").splitlines()]


def _files(target: Path, args: GrepInput) -> list[Path]:
    if target.is_file():
        return [target]
    globs = TYPE_GLOBS.get(args.type, []) if args.type else []
    out = []
    for dirpath, dirnames, filenames in os.walk(target):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            if args.glob and not fnmatch.fnmatch(name, args.glob):
                continue
            if globs and not any(fnmatch.fnmatch(name, g) for g in globs):
                continue
            out.append(Path(dirpath) / name)
    return out


def _python_grep(regex: re.Pattern[str], args: GrepInput, target: Path, ws: Workspace) -> list[str]:
    before = args.before if args.before is not None else (args.context or 0)
    after = args.after if args.after is not None else (args.context or 0)
    out: list[str] = []
    for path in _files(target, args):
        data = path.read_bytes()
        if b"\x00" in data[:8192]:
            continue
        lines = data.decode("utf-8", errors="replace").splitlines()
        hits = [i for i, line in enumerate(lines) if regex.search(line)]
        if not hits:
            continue
        name = ws.display(path)
        if args.output_mode == "files_with_matches":
            out.append(name)
        elif args.output_mode == "count":
            out.append(f"{name}:{len(hits)}")
        else:
            shown: set[int] = set()
            hit_set = set(hits)
            for i in hits:
                shown.update(range(max(0, i - before), min(len(lines), i + after + 1)))
            for i in sorted(shown):
                sep = ":" if i in hit_set else "-"
                num = f"{i + 1}{sep}" if args.line_numbers else ""
                out.append(f"{name}{sep}{num}{lines[i]}")
    return out
