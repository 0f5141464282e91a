"""`run_tool`: reads the tool_use from the store, runs it, stores the tool_result."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio import activity

from activities.heartbeat import heartbeating
from activities.tools.base import ToolError, ToolOutput, Workspace
from activities.tools.bash import run_bash
from activities.tools.edit import run_edit
from activities.tools.glob import run_glob
from activities.tools.grep import run_grep
from activities.tools.read import run_read
from activities.tools.write import run_write
from activities.transcript import TranscriptError, TranscriptStore
from durable_agent import telemetry
from durable_agent.engine.contracts import RunToolInput, RunToolOutput
from durable_agent.engine.messages import ToolResultBlock, ToolUseBlock
from durable_agent.engine.tools import TOOL_SPECS

ToolImpl = Callable[[Any, Workspace], Awaitable[ToolOutput]]

TOOL_IMPLS: dict[str, ToolImpl] = {
    "Read": run_read,
    "Write": run_write,
    "Edit": run_edit,
    "Bash": run_bash,
    "Grep": run_grep,
    "Glob": run_glob,
}
PREVIEW_CHARS = 120


def _validation_message(name: str, exc: ValidationError) -> str:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'input'}: {err['msg']}" for err in exc.errors()
    )
    return f"InputValidationError: {name} input is invalid: {problems}"


async def execute_tool(
    name: str, raw_input: dict[str, Any], workspace: str, read_roots: tuple[Path, ...] = ()
) -> ToolOutput:
    """Run one tool; every failure becomes an error output, never an exception."""
    spec = TOOL_SPECS.get(name)
    impl = TOOL_IMPLS.get(name)
    if spec is None or impl is None:
        return ToolOutput(f"No such tool available: {name}", is_error=True)
    try:
        args = spec.parse(raw_input)
    except ValidationError as exc:
        return ToolOutput(_validation_message(name, exc), is_error=True)
    try:
        return await impl(args, Workspace.open(workspace, read_roots))
    except ToolError as exc:
        return ToolOutput(str(exc), is_error=True)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a tool bug must not fail the workflow
        return ToolOutput(f"{name} failed: {type(exc).__name__}: {exc}", is_error=True)


def preview(name: str, text: str) -> str:
    """One line for the UI: the last line of a command's output, else the first; line count."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip().strip("-=")]
    if not lines:
        return "(no output)"
    line = lines[0]
    if name == "Bash":
        line = lines[-1]
        if line.startswith("Exit code") and len(lines) > 1:
            line = f"{lines[-2]} [{line.lower()}]"
    if len(line) > PREVIEW_CHARS:
        line = line[: PREVIEW_CHARS - 1] + "…"
    return f"{line} (+{len(lines) - 1} lines)" if len(lines) > 1 else line


class ToolActivities:
    """Tool activities; receives the store it writes results to."""

    def __init__(self, store: TranscriptStore) -> None:
        self.store = store

    async def _execute(self, req: RunToolInput, block: ToolUseBlock) -> ToolOutput:
        async with heartbeating():
            overflow = (self.store.overflow_dir(req.session_id),)
            return await execute_tool(block.name, block.input, req.workspace, overflow)

    @activity.defn(name="run_tool")
    async def run_tool(self, req: RunToolInput) -> RunToolOutput:
        try:
            block = self.store.tool_use(req.session_id, req.assistant_uuid, req.tool_use_id)
        except TranscriptError as exc:
            output = ToolOutput(f"tool call could not be loaded: {exc}", is_error=True)
        else:
            span_name = f"execute_tool {block.name}"
            with telemetry.tracer().start_as_current_span(span_name) as span:
                span.set_attributes(
                    {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": block.name,
                     "gen_ai.tool.call.id": block.id}
                )  # fmt: skip
                output = await self._execute(req, block)
                span.set_attribute("durable_agent.tool.is_error", output.is_error)
        result = ToolResultBlock(
            tool_use_id=req.tool_use_id, content=output.content, is_error=output.is_error
        )
        self.store.put_tool_result(req.session_id, result, req.run_id)
        return RunToolOutput(
            tool_use_id=req.tool_use_id,
            is_error=output.is_error,
            preview=preview(req.name, output.content),
            content_chars=len(output.content),
        )
