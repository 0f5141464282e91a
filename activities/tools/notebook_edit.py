"""NotebookEdit: replace, insert or delete one cell of a Jupyter notebook."""

from __future__ import annotations

import secrets
from typing import Any

from activities.tools.base import ToolError, ToolOutput, Workspace
from activities.tools.files import read_regular, regular_stat, replace_regular
from activities.tools.notebook import (
    MAX_NOTEBOOK_BYTES,
    Notebook,
    cell_label,
    find_cell,
    load_notebook,
    source_value,
)
from activities.transcript import off_loop
from durable_agent.engine.tools import NotebookEditInput


async def run_notebook_edit(args: NotebookEditInput, ws: Workspace) -> ToolOutput:
    return await off_loop(_notebook_edit, args, ws)


def _notebook_edit(args: NotebookEditInput, ws: Workspace) -> ToolOutput:
    if not args.notebook_path.lower().endswith(".ipynb"):
        raise ToolError(
            f"{args.notebook_path} is not a Jupyter notebook (.ipynb); use Edit for other files"
        )
    path = ws.resolve_writable(args.notebook_path)
    shown = ws.display(path)
    info = regular_stat(path, shown)
    if info is None:
        raise ToolError(f"Notebook does not exist: {shown}; to create one, Write its JSON")
    if info.st_size > MAX_NOTEBOOK_BYTES:
        raise ToolError(
            f"{shown} is {info.st_size >> 20} MiB, too big to edit here; clear its outputs "
            "first (jupyter nbconvert --clear-output)"
        )
    nb = load_notebook(read_regular(path, shown), shown)
    if args.edit_mode == "insert":
        done = _insert(nb, args, shown)
    elif args.cell_id is None:
        raise ToolError(
            f"cell_id is required to {args.edit_mode} a cell; Read {shown} to see the cell ids"
        )
    elif args.edit_mode == "delete":
        index = find_cell(nb, args.cell_id, shown)
        label = cell_label(nb.cells.pop(index), index)
        done = f"Deleted cell {label} from {shown}"
    else:
        done = _replace(nb, find_cell(nb, args.cell_id, shown), args, shown)
    replace_regular(path, shown, nb.dump())
    return ToolOutput(done)


def _insert(nb: Notebook, args: NotebookEditInput, shown: str) -> str:
    if args.cell_type is None:
        raise ToolError('cell_type is required to insert a cell: "code" or "markdown"')
    at = 0 if args.cell_id is None else find_cell(nb, args.cell_id, shown) + 1
    like = nb.cells[0].get("source") if nb.cells else None
    cell: dict[str, Any] = {"cell_type": args.cell_type}
    if args.cell_type == "code":
        cell["execution_count"] = None
    if nb.has_ids:
        cell["id"] = _fresh_id(nb)
    cell["metadata"] = {}
    if args.cell_type == "code":
        cell["outputs"] = []
    cell["source"] = source_value(args.new_source, like)
    nb.cells.insert(at, cell)
    where = "at the start" if args.cell_id is None else f"after cell {args.cell_id}"
    return f"Inserted {args.cell_type} cell {cell_label(cell, at)} {where} of {shown}"


def _replace(nb: Notebook, index: int, args: NotebookEditInput, shown: str) -> str:
    """Set the cell's source (and type); a code cell's outputs no longer match its source, so
    they and its execution count are cleared. Keys a type may not have go (nbformat's schema:
    outputs only on code cells, attachments not on them)."""
    cell = nb.cells[index]
    was = cell.get("cell_type")
    kind = args.cell_type or was
    had_outputs = bool(cell.get("outputs"))
    sorted_keys = list(cell) == sorted(cell)
    cell["source"] = source_value(args.new_source, cell.get("source"))
    cell["cell_type"] = kind
    if kind == "code":
        cell["outputs"] = []
        cell["execution_count"] = None
        cell.pop("attachments", None)
    else:
        cell.pop("outputs", None)
        cell.pop("execution_count", None)
    if sorted_keys:  # as nbformat writes a cell
        nb.cells[index] = cell = dict(sorted(cell.items()))
    done = f"Updated cell {cell_label(cell, index)} of {shown}"
    if kind != was:
        done += f" (now a {kind} cell)"
    return done + ("; its outputs were cleared" if had_outputs else "")


def _fresh_id(nb: Notebook) -> str:
    """A new cell id: 8 random hex characters no other cell has."""
    taken = {c.get("id") for c in nb.cells}
    while (cid := secrets.token_hex(4)) in taken:
        pass
    return cid
