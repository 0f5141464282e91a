"""Write: create or replace a file."""

from __future__ import annotations

from activities.tools.base import ToolError, ToolOutput, Workspace
from activities.transcript import off_loop
from durable_agent.engine.tools import WriteInput


async def run_write(args: WriteInput, ws: Workspace) -> ToolOutput:
    return await off_loop(_write, args, ws)


def _write(args: WriteInput, ws: Workspace) -> ToolOutput:
    path = ws.resolve(args.file_path)
    if path.is_dir():
        raise ToolError(f"{ws.display(path)} is a directory")
    existed = path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(args.content, encoding="utf-8")
    verb = "updated" if existed else "created"
    return ToolOutput(f"File {verb} successfully at: {ws.display(path)}")
