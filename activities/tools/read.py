"""Read: a file with line numbers, offset/limit."""

from __future__ import annotations

from activities.tools.base import ToolError, ToolOutput, Workspace, truncate
from activities.transcript import off_loop
from durable_agent.engine.tools import ReadInput

DEFAULT_LIMIT = 2000
MAX_LINE_CHARS = 2000
MAX_READ_CHARS = 100_000


async def run_read(args: ReadInput, ws: Workspace) -> ToolOutput:
    return await off_loop(_read, args, ws)


def _read(args: ReadInput, ws: Workspace) -> ToolOutput:
    path = ws.resolve_readable(args.file_path)
    if not path.exists():
        raise ToolError(f"File does not exist: {ws.display(path)}")
    if path.is_dir():
        raise ToolError(f"{ws.display(path)} is a directory, not a file; use Glob or Bash ls")
    data = path.read_bytes()
    if b"\x00" in data[:8192]:
        raise ToolError(f"{ws.display(path)} is a binary file and cannot be shown as text")
    text = data.decode("utf-8", errors="replace")
    if not text:
        return ToolOutput(f"(file {ws.display(path)} exists but is empty)")
    lines = text.splitlines()
    start = (args.offset or 1) - 1
    if start >= len(lines):
        raise ToolError(f"offset {args.offset} is past the end of the file ({len(lines)} lines)")
    chosen = lines[start : start + (args.limit or DEFAULT_LIMIT)]
    out = []
    for number, line in enumerate(chosen, start=start + 1):
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + "… [line truncated]"
        out.append(f"{number:>6}\t{line}")
    body = "\n".join(out)
    if start + len(chosen) < len(lines):
        body += (
            f"\n\n[{len(lines) - start - len(chosen)} more lines: use offset/limit to read them]"
        )
    return ToolOutput(truncate(body, MAX_READ_CHARS))
