"""Jupyter notebooks (nbformat 4) as plain JSON: loading, finding a cell, showing the cells to
the model (Read) and writing the notebook back in the layout it had.

No nbformat dependency: a notebook is a JSON object with a `cells` list, and a tool must keep
whatever else the file holds (metadata, unknown keys, key order) exactly as it was.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from activities.tools.base import ToolError, truncate

MAX_NOTEBOOK_BYTES = 64 << 20
"""A bigger notebook is not parsed (Read shows its raw lines instead; NotebookEdit refuses)."""
MAX_SHOWN_CHARS = 100_000
"""What Read shows of a notebook's cells at most (its head and tail)."""
MAX_OUTPUT_CHARS = 2_000
"""What Read shows of one cell output at most."""
LISTED_IDS = 10
"""Cell ids named when a cell_id is not found."""
_INDEX_ID = re.compile(r"cell-(\d+)")


@dataclass
class Notebook:
    """A parsed notebook and what its file looked like, to write it back alike."""

    data: dict[str, Any]
    cells: list[dict[str, Any]]
    indent: int | str | None
    ascii_only: bool
    final_newline: bool

    @property
    def has_ids(self) -> bool:
        """Whether cells carry ids (nbformat 4.5 and later)."""
        minor = self.data.get("nbformat_minor")
        return isinstance(minor, int) and minor >= 5

    def dump(self) -> bytes:
        """The notebook as JSON in the file's own layout (nbformat writes indent 1, non-ASCII
        as is, a final newline); keys stay in the order they were read."""
        text = json.dumps(self.data, indent=self.indent, ensure_ascii=self.ascii_only)
        return (text + "\n" if self.final_newline else text).encode("utf-8")


def load_notebook(data: bytes, shown: str) -> Notebook:
    """The notebook in `data`, or a ToolError saying why it is not one."""
    try:
        text = data.decode("utf-8")
        parsed = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ToolError(
            f"{shown} is not a valid notebook: its JSON does not parse ({exc}); "
            "look at it with Read and offset/limit"
        ) from exc
    cells = parsed.get("cells") if isinstance(parsed, dict) else None
    if not isinstance(parsed, dict) or not isinstance(cells, list):
        raise ToolError(f"{shown} is not a Jupyter notebook: it has no list of cells")
    if parsed.get("nbformat") != 4:
        raise ToolError(
            f"{shown} is nbformat {parsed.get('nbformat')}, not 4; convert it first "
            "(jupyter nbconvert --to notebook)"
        )
    if not all(isinstance(c, dict) for c in cells):
        raise ToolError(f"{shown} is not a valid notebook: one of its cells is not an object")
    return Notebook(
        data=parsed,
        cells=cells,
        indent=_indent(text),
        ascii_only=text.isascii() and "\\u" in text,
        final_newline=text.endswith("\n"),
    )


def _indent(text: str) -> int | str | None:
    """The indent the file was written with: that of its second line (None: one line)."""
    lines = text.lstrip().split("\n", 2)
    if len(lines) < 2:
        return None
    second = lines[1]
    lead = second[: len(second) - len(second.lstrip(" \t"))]
    return len(lead) if set(lead) <= {" "} else lead


def cell_label(cell: dict[str, Any], index: int) -> str:
    """How the model names a cell: its id, or cell-N (its index) when it has none."""
    cid = cell.get("id")
    return cid if isinstance(cid, str) and cid else f"cell-{index}"


def find_cell(nb: Notebook, cell_id: str, shown: str) -> int:
    """The index of the cell `cell_id` names (its id, else cell-N as an index); a ToolError
    naming the ids there are when none does."""
    for index, cell in enumerate(nb.cells):
        if cell.get("id") == cell_id:
            return index
    match = _INDEX_ID.fullmatch(cell_id)
    if match is not None and int(match[1]) < len(nb.cells):
        return int(match[1])
    if not nb.cells:
        raise ToolError(f"Cell {cell_id!r} not found: {shown} has no cells; insert one first")
    labels = [cell_label(c, i) for i, c in enumerate(nb.cells)]
    listed = ", ".join(labels[:LISTED_IDS])
    more = f" and {len(labels) - LISTED_IDS} more" if len(labels) > LISTED_IDS else ""
    raise ToolError(
        f"Cell {cell_id!r} not found in {shown}; its cells are {listed}{more} (Read shows them)"
    )


def source_text(value: Any) -> str:
    """A multiline field as one string (nbformat stores it as a string or a list of lines)."""
    if isinstance(value, list):
        return "".join(v for v in value if isinstance(v, str))
    return value if isinstance(value, str) else ""


def source_value(text: str, like: Any) -> str | list[str]:
    """`text` stored as `like` is (a string stays a string; otherwise lines, as nbformat
    writes them)."""
    return text if isinstance(like, str) else text.splitlines(keepends=True)


def render_cells(nb: Notebook, shown: str) -> str:
    """The cells as Read shows them: `<cell id="…" type="…">source</cell>`, each followed by
    its text outputs, so the model learns the ids NotebookEdit takes."""
    if not nb.cells:
        return f"(notebook {shown} has no cells)"
    parts = []
    for index, cell in enumerate(nb.cells):
        kind = cell.get("cell_type", "code")
        source = source_text(cell.get("source"))
        parts.append(f'<cell id="{cell_label(cell, index)}" type="{kind}">{source}</cell>')
        parts += [f"<output>{text}</output>" for text in _outputs(cell)]
    return truncate("\n".join(parts), MAX_SHOWN_CHARS)


def _outputs(cell: dict[str, Any]) -> list[str]:
    shown = []
    outputs = cell.get("outputs")
    for out in outputs if isinstance(outputs, list) else []:
        if not isinstance(out, dict):
            continue
        kind = out.get("output_type")
        data = out.get("data")
        data = data if isinstance(data, dict) else {}
        if kind == "stream":
            text = source_text(out.get("text"))
        elif kind == "error":
            text = f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"
        elif "text/plain" in data:
            text = source_text(data["text/plain"])
        elif data:
            text = f"[{', '.join(sorted(data))} output not shown]"
        else:
            continue
        if len(text) > MAX_OUTPUT_CHARS:
            text = text[:MAX_OUTPUT_CHARS] + f"… [{len(text) - MAX_OUTPUT_CHARS} more characters]"
        shown.append(text.rstrip("\n"))
    return shown
