"""TodoWrite: the list itself is session state the workflow keeps (`State.todos`, from the
call's input); the tool only answers the model."""

from __future__ import annotations

from activities.tools.base import ToolOutput, Workspace
from durable_agent.engine.tools import TodoWriteInput

TODO_RESULT = (
    "The todo list is updated. Keep it current as you work: one task in_progress at a time, "
    "each marked completed as soon as it is done, then go on with the next."
)


async def run_todo_write(args: TodoWriteInput, ws: Workspace) -> ToolOutput:
    del ws  # it touches no file
    if sum(t.status == "in_progress" for t in args.todos) > 1:
        return ToolOutput(
            TODO_RESULT + " Note: more than one task is in_progress; finish one before "
            "starting the next."
        )
    return ToolOutput(TODO_RESULT)
