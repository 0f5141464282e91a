"""Glob: files matching a pattern, newest first."""

from __future__ import annotations

import stat

from activities.tools.base import ToolError, ToolOutput, Workspace, no_nul
from activities.transcript import off_loop
from durable_agent.engine.tools import GlobInput

MAX_FILES = 100


async def run_glob(args: GlobInput, ws: Workspace) -> ToolOutput:
    return await off_loop(_glob, args, ws)


def _glob(args: GlobInput, ws: Workspace) -> ToolOutput:
    no_nul(args.pattern, "pattern")
    base = ws.resolve(args.path) if args.path else ws.root
    if not base.is_dir():
        raise ToolError(f"{args.path} is not a directory")
    if args.pattern.startswith("/") or ".." in args.pattern.split("/"):
        raise ToolError("pattern must be relative and stay inside the workspace")
    found = []
    for path in base.glob(args.pattern):
        # Confined like Read: listed only when its real location is a regular file inside
        # the workspace. A link out, a dangling link, or a file gone since the directory
        # was listed is skipped, not fatal; one stat of the real path answers all three.
        real = ws.real_inside(path)
        if real is None:
            continue
        try:
            info = real.stat()
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            found.append((info.st_mtime, path))
    if not found:
        return ToolOutput("No files found")
    found.sort(key=lambda item: (-item[0], str(item[1])))
    lines = [ws.display(p) for _, p in found[:MAX_FILES]]
    if len(found) > MAX_FILES:
        lines.append(f"[{len(found) - MAX_FILES} more files not shown; use a narrower pattern]")
    return ToolOutput("\n".join(lines))
