"""Write: create or replace a file."""

from __future__ import annotations

from activities.tools.base import ToolOutput, Workspace
from activities.tools.files import encoded, regular_stat, write_regular
from activities.transcript import off_loop
from durable_agent.engine.tools import WriteInput


async def run_write(args: WriteInput, ws: Workspace) -> ToolOutput:
    return await off_loop(_write, args, ws)


def _write(args: WriteInput, ws: Workspace) -> ToolOutput:
    data = encoded(args.content, "content")  # before the file is touched
    path = ws.resolve_writable(args.file_path)
    shown = ws.display(path)
    existed = regular_stat(path, shown) is not None
    write_regular(path, shown, data)
    verb = "updated" if existed else "created"
    return ToolOutput(f"File {verb} successfully at: {shown}")
