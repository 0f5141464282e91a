"""Read: a file with line numbers, offset/limit; only the lines asked for are read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

from activities.tools.base import ToolError, ToolOutput, Workspace
from activities.tools.files import open_regular, read_regular, regular_stat
from activities.tools.notebook import MAX_NOTEBOOK_BYTES, load_notebook, render_cells
from activities.transcript import off_loop
from durable_agent.engine.tools import ReadInput

DEFAULT_LIMIT = 2000
MAX_LINE_CHARS = 2000
MAX_READ_CHARS = 100_000
SNIFF_BYTES = 8192
"""A NUL byte in this much of the head makes a file binary."""
LINE_BYTES = 4 * MAX_LINE_CHARS
"""Enough bytes for MAX_LINE_CHARS characters: the rest of a longer line is skipped unread."""
COUNT_BYTES = 64 << 20
"""How much of the file past the lines shown is scanned to say how many lines are left."""


async def run_read(args: ReadInput, ws: Workspace) -> ToolOutput:
    return await off_loop(_read, args, ws)


def _read(args: ReadInput, ws: Workspace) -> ToolOutput:
    path = ws.resolve_readable(args.file_path)
    shown = ws.display(path)
    info = regular_stat(path, shown)
    if info is None:
        raise ToolError(f"File does not exist: {shown}")
    cells = _notebook_cells(path, shown, info, args)
    if cells is not None:
        return ToolOutput(cells)
    with open_regular(path, shown) as handle:
        head = handle.read(SNIFF_BYTES)
        if b"\x00" in head:
            raise ToolError(f"{shown} is a binary file and cannot be shown as text")
        if not head:
            return ToolOutput(f"(file {shown} exists but is empty)")
        handle.seek(0)
        return ToolOutput(_numbered(handle, args))


def _notebook_cells(path: Path, shown: str, info: os.stat_result, args: ReadInput) -> str | None:
    """A notebook read whole shows its cells with their ids (what NotebookEdit takes); with
    offset/limit, too big, or not parsing as one, it is read as lines like any file."""
    if path.suffix.lower() != ".ipynb" or args.offset or args.limit:
        return None
    if info.st_size > MAX_NOTEBOOK_BYTES:
        return None
    try:
        return render_cells(load_notebook(read_regular(path, shown), shown), shown)
    except ToolError:
        return None


def _numbered(handle: BinaryIO, args: ReadInput) -> str:
    """The lines asked for, numbered, then how many are left; stops short of MAX_READ_CHARS."""
    start = (args.offset or 1) - 1
    limit = args.limit or DEFAULT_LIMIT
    for skipped in range(start):
        if _next_line(handle) is None:
            raise ToolError(f"offset {args.offset} is past the end of the file ({skipped} lines)")
    out: list[str] = []
    size, number, full = 0, start, False
    while len(out) < limit:
        line = _next_line(handle)
        if line is None:
            break
        number += 1
        numbered = f"{number:>6}\t{_shown(*line)}"
        if size + len(numbered) > MAX_READ_CHARS:
            full = True  # that line is read but not shown: counted below
            break
        out.append(numbered)
        size += len(numbered) + 1
    if not out:
        raise ToolError(f"offset {args.offset} is past the end of the file ({start} lines)")
    body = "\n".join(out)
    left = _lines_left(handle)
    if full:
        more = "more lines" if left is None else f"{left + 1} more lines"
        return (
            f"{body}\n\n[output stops at {MAX_READ_CHARS} characters; {more} from line "
            f"{number}: use offset/limit to read them]"
        )
    if left == 0:
        return body
    more = "more lines follow" if left is None else f"{left} more lines"
    return f"{body}\n\n[{more}: use offset/limit to read them]"


def _next_line(handle: BinaryIO) -> tuple[bytes, bool] | None:
    """The next line's first LINE_BYTES bytes and whether it held more; None at the end."""
    raw = handle.readline(LINE_BYTES)
    if not raw:
        return None
    longer = len(raw) == LINE_BYTES and not raw.endswith(b"\n") and _skip_rest(handle)
    return raw, longer


def _skip_rest(handle: BinaryIO) -> bool:
    """Read past the rest of the current line; whether it held more than its line ending."""
    more = False
    while chunk := handle.readline(1 << 20):
        more = more or bool(chunk.rstrip(b"\r\n"))
        if chunk.endswith(b"\n"):
            break
    return more


def _shown(raw: bytes, longer: bool) -> str:
    text = raw.decode("utf-8", errors="replace")
    text = text[:-2] if text.endswith("\r\n") else text.removesuffix("\n")
    if longer or len(text) > MAX_LINE_CHARS:
        text = text[:MAX_LINE_CHARS] + "… [line truncated]"
    return text


def _lines_left(handle: BinaryIO) -> int | None:
    """How many lines follow, or None when more than COUNT_BYTES follow."""
    count, last, scanned = 0, b"\n", 0
    while chunk := handle.read(1 << 20):
        count += chunk.count(b"\n")
        last = chunk[-1:]
        scanned += len(chunk)
        if scanned > COUNT_BYTES:
            return None
    return count + (last != b"\n")
