"""Edit: exact string replacement."""

from __future__ import annotations

from activities.tools.base import ToolError, ToolOutput, Workspace
from activities.transcript import off_loop
from durable_agent.engine.tools import EditInput


async def run_edit(args: EditInput, ws: Workspace) -> ToolOutput:
    return await off_loop(_edit, args, ws)


def _edit(args: EditInput, ws: Workspace) -> ToolOutput:
    path = ws.resolve(args.file_path)
    if args.old_string == args.new_string:
        raise ToolError("old_string and new_string are the same; nothing to change")
    if not path.exists():
        if args.old_string == "":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(args.new_string, encoding="utf-8")
            return ToolOutput(f"File created successfully at: {ws.display(path)}")
        raise ToolError(f"File does not exist: {ws.display(path)}")
    if path.is_dir():
        raise ToolError(f"{ws.display(path)} is a directory")
    text = path.read_text(encoding="utf-8")
    if args.old_string == "":
        raise ToolError("old_string is empty but the file exists; use Write to replace it")
    count = text.count(args.old_string)
    if count == 0:
        raise ToolError(f"old_string was not found in {ws.display(path)}")
    if count > 1 and not args.replace_all:
        raise ToolError(
            f"old_string occurs {count} times in {ws.display(path)}; give more context to make "
            "it unique, or set replace_all to true"
        )
    updated = text.replace(args.old_string, args.new_string)
    path.write_text(updated, encoding="utf-8")
    done = f"{count} occurrences" if args.replace_all else "1 occurrence"
    return ToolOutput(f"The file {ws.display(path)} has been updated ({done} replaced).")
