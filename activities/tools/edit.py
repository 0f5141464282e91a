"""Edit: exact string replacement."""

from __future__ import annotations

from activities.tools.base import ToolError, ToolOutput, Workspace
from activities.tools.files import encoded, read_regular, regular_stat, write_regular
from activities.transcript import off_loop
from durable_agent.engine.tools import EditInput


async def run_edit(args: EditInput, ws: Workspace) -> ToolOutput:
    return await off_loop(_edit, args, ws)


def _edit(args: EditInput, ws: Workspace) -> ToolOutput:
    path = ws.resolve_writable(args.file_path)
    shown = ws.display(path)
    if args.old_string == args.new_string:
        raise ToolError("old_string and new_string are the same; nothing to change")
    if regular_stat(path, shown) is None:
        if args.old_string == "":
            write_regular(path, shown, encoded(args.new_string, "new_string"))
            return ToolOutput(f"File created successfully at: {shown}")
        raise ToolError(f"File does not exist: {shown}")
    if args.old_string == "":
        raise ToolError("old_string is empty but the file exists; use Write to replace it")
    text = _text(read_regular(path, shown), shown)
    count = text.count(args.old_string)
    if count == 0:
        raise ToolError(f"old_string was not found in {shown}")
    if count > 1 and not args.replace_all:
        raise ToolError(
            f"old_string occurs {count} times in {shown}; give more context to make "
            "it unique, or set replace_all to true"
        )
    updated = text.replace(args.old_string, args.new_string)
    write_regular(path, shown, encoded(updated, "new_string"))
    done = f"{count} occurrences" if args.replace_all and count != 1 else "1 occurrence"
    return ToolOutput(f"The file {shown} has been updated ({done} replaced).")


def _text(data: bytes, shown: str) -> str:
    """The file as text, line endings made `\\n` as `Path.read_text` did (an edit has always
    written the file back with `\\n`); a ToolError saying where it is not UTF-8."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(
            f"{shown} is not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}); "
            "Edit changes UTF-8 text only: use Bash to change this file"
        ) from exc
    return text.replace("\r\n", "\n").replace("\r", "\n")
