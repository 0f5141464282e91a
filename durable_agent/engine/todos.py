"""The model's todo list as people read it (`status`, `chat`, the progress of a prompt)."""

from __future__ import annotations

from collections.abc import Sequence

from durable_agent.engine.tools import TodoItem

MARKS = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}


def todo_text(todos: Sequence[TodoItem]) -> str:
    """`todos: 1/3 done` then one line per task (the one in progress as it is being done)."""
    if not todos:
        return "todos: (empty)"
    done = sum(t.status == "completed" for t in todos)
    lines = [f"todos: {done}/{len(todos)} done"]
    for t in todos:
        text = t.activeForm if t.status == "in_progress" else t.content
        lines.append(f"  {MARKS[t.status]} {text}")
    return "\n".join(lines)
