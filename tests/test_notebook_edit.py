"""NotebookEdit against real notebooks in a temporary workspace, the notebook view of Read, and
the permission rules on NotebookEdit (an `Edit(...)` rule covers it)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from activities.tools import execute_tool
from activities.tools.base import ToolOutput
from durable_agent.engine.permissions import (
    Behavior,
    PermissionContext,
    PermissionMode,
    PermissionRules,
    check,
    grant_for,
    parse_rule,
)
from durable_agent.engine.tools import TOOL_SPECS


def code(cid: str | None, source: list[str], outputs: list[Any] | None = None) -> dict[str, Any]:
    cell = {
        "cell_type": "code",
        "execution_count": 3,
        "metadata": {"tags": ["keep"]},
        "outputs": outputs or [],
        "source": source,
    }
    if cid is not None:
        cell["id"] = cid
    return cell


def markdown(cid: str | None, source: list[str]) -> dict[str, Any]:
    cell: dict[str, Any] = {"cell_type": "markdown", "metadata": {}, "source": source}
    if cid is not None:
        cell["id"] = cid
    return cell


STREAM = {"name": "stdout", "output_type": "stream", "text": ["hello\n"]}
RESULT = {
    "data": {"text/plain": ["42"]},
    "execution_count": 3,
    "metadata": {},
    "output_type": "execute_result",
}
IMAGE = {"data": {"image/png": "iVBORw0K"}, "metadata": {}, "output_type": "display_data"}


def notebook(cells: list[dict[str, Any]], minor: int = 5) -> dict[str, Any]:
    return {
        "cells": cells,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
        "nbformat": 4,
        "nbformat_minor": minor,
    }


def as_nbformat_writes(nb: dict[str, Any]) -> str:
    """What nbformat itself writes (indent 1, sorted keys, non-ASCII kept, final newline)."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    cells = [
        markdown("intro", ["# Título\n", "An analysis"]),
        code("load", ["import math\n", "print('hello')"], [STREAM]),
        code("calc", ["6 * 7"], [RESULT, IMAGE]),
    ]
    (root / "nb.ipynb").write_text(as_nbformat_writes(notebook(cells)))
    old = [code(None, ["x = 1"]), markdown(None, ["notes"])]
    (root / "old.ipynb").write_text(as_nbformat_writes(notebook(old, minor=4)))
    (tmp_path / "outside.ipynb").write_text(as_nbformat_writes(notebook(cells)))
    return root


async def edit(ws: Path, **inp: Any) -> ToolOutput:
    inp.setdefault("new_source", "")
    return await execute_tool("NotebookEdit", inp, str(ws))


def cells_of(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text())["cells"]


# --------------------------------------------------------------------------- replace


async def test_replace_sets_the_source_and_clears_outputs(ws: Path) -> None:
    path = ws / "nb.ipynb"
    before = json.loads(path.read_text())
    out = await edit(ws, notebook_path=str(path), cell_id="calc", new_source="x = 6\nx * 7\n")
    assert not out.is_error, out.content
    assert out.content == "Updated cell calc of nb.ipynb; its outputs were cleared"
    expected = json.loads(json.dumps(before))
    expected["cells"][2].update(source=["x = 6\n", "x * 7\n"], outputs=[], execution_count=None)
    assert path.read_text() == as_nbformat_writes(expected)  # every other byte as it was


async def test_replace_is_the_default_mode_and_keeps_metadata(ws: Path) -> None:
    out = await edit(ws, notebook_path="nb.ipynb", cell_id="load", new_source="print(1)")
    assert out.content.startswith("Updated cell load"), out.content
    cell = cells_of(ws / "nb.ipynb")[1]
    assert cell["source"] == ["print(1)"] and cell["metadata"] == {"tags": ["keep"]}
    assert cell["id"] == "load" and cell["outputs"] == [] and cell["execution_count"] is None


async def test_replace_can_change_the_cell_type(ws: Path) -> None:
    path = ws / "nb.ipynb"
    out = await edit(
        ws, notebook_path=str(path), cell_id="load", new_source="Prose", cell_type="markdown"
    )
    assert "(now a markdown cell)" in out.content, out.content
    cell = cells_of(path)[1]
    assert cell == {
        "cell_type": "markdown",
        "id": "load",
        "metadata": {"tags": ["keep"]},
        "source": ["Prose"],
    }
    assert list(cell) == sorted(cell)  # keys in the order nbformat writes them
    out = await edit(
        ws, notebook_path=str(path), cell_id="intro", new_source="1 + 1", cell_type="code"
    )
    assert "(now a code cell)" in out.content and "outputs" not in out.content, out.content
    cell = cells_of(path)[0]
    assert cell["cell_type"] == "code" and cell["outputs"] == [] and cell["execution_count"] is None


async def test_replace_keeps_a_string_source_a_string(ws: Path) -> None:
    nb = notebook(
        [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": "a",
                "metadata": {},
                "outputs": [],
                "source": "old",
            }
        ]
    )
    (ws / "s.ipynb").write_text(as_nbformat_writes(nb))
    await edit(ws, notebook_path="s.ipynb", cell_id="a", new_source="new\nlines")
    assert cells_of(ws / "s.ipynb")[0]["source"] == "new\nlines"


async def test_cell_n_names_a_cell_of_a_notebook_without_ids(ws: Path) -> None:
    out = await edit(ws, notebook_path="old.ipynb", cell_id="cell-1", new_source="more notes")
    assert out.content == "Updated cell cell-1 of old.ipynb", out.content
    cells = cells_of(ws / "old.ipynb")
    assert cells[1]["source"] == ["more notes"] and "id" not in cells[1]
    assert cells[0]["source"] == ["x = 1"]


# --------------------------------------------------------------------------- insert


async def test_insert_after_a_cell_gets_a_fresh_id(ws: Path) -> None:
    path = ws / "nb.ipynb"
    out = await edit(
        ws,
        notebook_path=str(path),
        edit_mode="insert",
        cell_id="load",
        cell_type="code",
        new_source="a = 1\nb = 2",
    )
    assert not out.is_error, out.content
    cells = cells_of(path)
    new = cells[2]
    assert re.fullmatch(r"[0-9a-f]{8}", new["id"]) and new["id"] not in {"intro", "load", "calc"}
    assert out.content == f"Inserted code cell {new['id']} after cell load of nb.ipynb"
    assert new == {
        "cell_type": "code",
        "execution_count": None,
        "id": new["id"],
        "metadata": {},
        "outputs": [],
        "source": ["a = 1\n", "b = 2"],
    }
    assert list(new) == sorted(new)
    assert [c.get("id") for c in cells] == ["intro", "load", new["id"], "calc"]
    assert path.read_text().startswith('{\n "cells": [\n  {\n')  # still indent 1


async def test_insert_without_cell_id_goes_first(ws: Path) -> None:
    out = await edit(
        ws,
        notebook_path="nb.ipynb",
        edit_mode="insert",
        cell_type="markdown",
        new_source="# Summary",
    )
    assert out.content.endswith("at the start of nb.ipynb"), out.content
    first = cells_of(ws / "nb.ipynb")[0]
    assert first["cell_type"] == "markdown" and first["source"] == ["# Summary"]
    assert "outputs" not in first and "execution_count" not in first


async def test_insert_into_a_notebook_without_ids_adds_none(ws: Path) -> None:
    out = await edit(
        ws,
        notebook_path="old.ipynb",
        edit_mode="insert",
        cell_id="cell-0",
        cell_type="code",
        new_source="y = 2",
    )
    assert out.content == "Inserted code cell cell-1 after cell cell-0 of old.ipynb", out.content
    cells = cells_of(ws / "old.ipynb")
    assert [c["source"] for c in cells] == [["x = 1"], ["y = 2"], ["notes"]]
    assert all("id" not in c for c in cells)


async def test_insert_needs_a_cell_type(ws: Path) -> None:
    before = (ws / "nb.ipynb").read_bytes()
    out = await edit(ws, notebook_path="nb.ipynb", edit_mode="insert", new_source="x")
    assert out.is_error and "cell_type is required to insert" in out.content
    assert (ws / "nb.ipynb").read_bytes() == before


# --------------------------------------------------------------------------- delete


async def test_delete_by_id_and_by_index(ws: Path) -> None:
    out = await edit(ws, notebook_path="nb.ipynb", edit_mode="delete", cell_id="load")
    assert out.content == "Deleted cell load from nb.ipynb", out.content
    assert [c["id"] for c in cells_of(ws / "nb.ipynb")] == ["intro", "calc"]
    out = await edit(ws, notebook_path="old.ipynb", edit_mode="delete", cell_id="cell-0")
    assert out.content == "Deleted cell cell-0 from old.ipynb", out.content
    assert [c["source"] for c in cells_of(ws / "old.ipynb")] == [["notes"]]


@pytest.mark.parametrize("mode", ["replace", "delete"])
async def test_replace_and_delete_need_a_cell_id(ws: Path, mode: str) -> None:
    out = await edit(ws, notebook_path="nb.ipynb", edit_mode=mode, new_source="x")
    assert out.is_error and f"cell_id is required to {mode} a cell" in out.content


# --------------------------------------------------------------------------- the file


async def test_the_file_layout_is_kept(ws: Path) -> None:
    """Indent 2, no final newline, keys unsorted: written back alike."""
    nb: dict[str, Any] = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [{"id": "a", "cell_type": "markdown", "source": "x", "metadata": {}}],
    }
    (ws / "two.ipynb").write_text(json.dumps(nb, indent=2))
    await edit(ws, notebook_path="two.ipynb", cell_id="a", new_source="ünïcode")
    nb["cells"][0]["source"] = "ünïcode"
    assert (ws / "two.ipynb").read_text() == json.dumps(nb, indent=2, ensure_ascii=False)


async def test_an_escaped_ascii_file_stays_ascii(ws: Path) -> None:
    nb = notebook([markdown("a", ["caf\u00e9"])])
    (ws / "esc.ipynb").write_text(json.dumps(nb, indent=1) + "\n")  # é as \u00e9
    await edit(ws, notebook_path="esc.ipynb", cell_id="a", new_source="na\u00efve")
    text = (ws / "esc.ipynb").read_text()
    assert text.isascii() and "na\\u00efve" in text


async def test_the_write_is_atomic_and_keeps_the_mode(ws: Path) -> None:
    path = ws / "nb.ipynb"
    path.chmod(0o640)
    inode = path.stat().st_ino
    out = await edit(ws, notebook_path="nb.ipynb", cell_id="calc", new_source="1")
    assert not out.is_error, out.content
    assert path.stat().st_ino != inode  # a new file renamed over the old one
    assert path.stat().st_mode & 0o777 == 0o640
    assert sorted(os.listdir(ws)) == ["nb.ipynb", "old.ipynb"]  # no temporary file left


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "content, words",
    [
        ("{not json", "is not a valid notebook: its JSON does not parse"),
        ('{"cells": "nope", "nbformat": 4}', "is not a Jupyter notebook: it has no list of cells"),
        ("[1, 2]", "is not a Jupyter notebook"),
        ('{"cells": [], "nbformat": 3}', "is nbformat 3, not 4"),
        ('{"cells": [1], "nbformat": 4}', "one of its cells is not an object"),
    ],
)
async def test_what_is_not_a_notebook_is_refused(ws: Path, content: str, words: str) -> None:
    (ws / "bad.ipynb").write_text(content)
    out = await edit(ws, notebook_path="bad.ipynb", cell_id="x", new_source="y")
    assert out.is_error and words in out.content, out.content
    assert len(out.content.splitlines()) == 1
    assert (ws / "bad.ipynb").read_text() == content


async def test_a_missing_cell_names_the_cells_there_are(ws: Path) -> None:
    before = (ws / "nb.ipynb").read_bytes()
    out = await edit(ws, notebook_path="nb.ipynb", cell_id="nope", new_source="x")
    assert out.is_error
    assert out.content == (
        "Cell 'nope' not found in nb.ipynb; its cells are intro, load, calc (Read shows them)"
    )
    assert (ws / "nb.ipynb").read_bytes() == before
    many = notebook([markdown(f"c{i}", []) for i in range(13)])
    (ws / "many.ipynb").write_text(as_nbformat_writes(many))
    out = await edit(ws, notebook_path="many.ipynb", cell_id="cell-99", new_source="x")
    assert "c0, c1, c2, c3, c4, c5, c6, c7, c8, c9 and 3 more" in out.content, out.content
    (ws / "empty.ipynb").write_text(as_nbformat_writes(notebook([])))
    out = await edit(ws, notebook_path="empty.ipynb", edit_mode="delete", cell_id="x")
    assert out.is_error and "has no cells" in out.content


async def test_other_files_and_missing_notebooks_are_refused(ws: Path) -> None:
    (ws / "a.py").write_text("x = 1\n")
    out = await edit(ws, notebook_path=str(ws / "a.py"), cell_id="x")
    assert out.is_error and "not a Jupyter notebook (.ipynb); use Edit" in out.content
    assert (ws / "a.py").read_text() == "x = 1\n"
    out = await edit(ws, notebook_path="gone.ipynb", cell_id="x")
    assert out.is_error and out.content.startswith("Notebook does not exist: gone.ipynb")
    assert not (ws / "gone.ipynb").exists()
    (ws / "dir.ipynb").mkdir()
    out = await edit(ws, notebook_path="dir.ipynb", cell_id="x")
    assert out.is_error and "is a directory" in out.content


@pytest.mark.parametrize(
    "inp, field",
    [
        ({"edit_mode": "append"}, "edit_mode"),
        ({"cell_type": "raw"}, "cell_type"),
        ({"cell_ids": "x"}, "cell_ids"),
    ],
)
async def test_invalid_input_is_a_validation_error(
    ws: Path, inp: dict[str, Any], field: str
) -> None:
    out = await edit(ws, notebook_path="nb.ipynb", cell_id="calc", **inp)
    assert out.is_error and "InputValidationError" in out.content and field in out.content
    out = await execute_tool("NotebookEdit", {"notebook_path": "nb.ipynb"}, str(ws))
    assert out.is_error and "new_source" in out.content


async def test_a_notebook_outside_the_workspace_is_refused(ws: Path) -> None:
    outside = ws.parent / "outside.ipynb"
    before = outside.read_bytes()
    for given in ("../outside.ipynb", str(outside)):
        out = await edit(ws, notebook_path=given, cell_id="calc", new_source="x")
        assert out.is_error and "outside the workspace" in out.content, out.content
    assert outside.read_bytes() == before


async def test_a_symbolic_link_is_refused(ws: Path) -> None:
    os.symlink(ws / "nb.ipynb", ws / "link.ipynb")
    before = (ws / "nb.ipynb").read_bytes()
    out = await edit(ws, notebook_path="link.ipynb", cell_id="calc", new_source="x")
    assert out.is_error and "symbolic link" in out.content, out.content
    assert (ws / "nb.ipynb").read_bytes() == before
    os.symlink(ws.parent / "outside.ipynb", ws / "out.ipynb")
    out = await edit(ws, notebook_path="out.ipynb", cell_id="calc", new_source="x")
    assert out.is_error and "outside the workspace" in out.content, out.content


# --------------------------------------------------------------------------- Read


async def test_read_shows_the_cells_with_their_ids_and_outputs(ws: Path) -> None:
    out = await execute_tool("Read", {"file_path": "nb.ipynb"}, str(ws))
    assert not out.is_error, out.content
    assert out.content == (
        '<cell id="intro" type="markdown"># Título\nAn analysis</cell>\n'
        '<cell id="load" type="code">import math\nprint(\'hello\')</cell>\n'
        "<output>hello</output>\n"
        '<cell id="calc" type="code">6 * 7</cell>\n'
        "<output>42</output>\n"
        "<output>[image/png output not shown]</output>"
    )
    old = await execute_tool("Read", {"file_path": "old.ipynb"}, str(ws))
    assert old.content.startswith('<cell id="cell-0" type="code">x = 1</cell>'), old.content


async def test_read_with_offset_or_of_a_broken_notebook_shows_lines(ws: Path) -> None:
    out = await execute_tool("Read", {"file_path": "nb.ipynb", "limit": 2}, str(ws))
    assert out.content.startswith('     1\t{\n     2\t "cells": ['), out.content
    (ws / "bad.ipynb").write_text("{oops\n")
    out = await execute_tool("Read", {"file_path": "bad.ipynb"}, str(ws))
    assert out.content == "     1\t{oops", out.content


async def test_an_error_output_shows_its_name_and_value(ws: Path) -> None:
    error = {
        "ename": "ZeroDivisionError",
        "evalue": "division by zero",
        "output_type": "error",
        "traceback": ["\x1b[31m..."],
    }
    (ws / "e.ipynb").write_text(as_nbformat_writes(notebook([code("a", ["1/0"], [error])])))
    out = await execute_tool("Read", {"file_path": "e.ipynb"}, str(ws))
    assert out.content.endswith("<output>ZeroDivisionError: division by zero</output>")


# --------------------------------------------------------------------------- spec, permissions


def test_the_spec() -> None:
    spec = TOOL_SPECS["NotebookEdit"]
    assert not spec.is_read_only({}) and not spec.is_concurrency_safe({"notebook_path": "a"})
    assert set(spec.json_schema()["required"]) == {"notebook_path", "new_source"}
    assert spec.summary({"notebook_path": "/w/a.ipynb"}) == "NotebookEdit: /w/a.ipynb"


CWD = "/w/proj"


def ctx(
    deny: tuple[str, ...] = (), mode: PermissionMode = PermissionMode.DEFAULT
) -> PermissionContext:
    rules = PermissionRules(deny=[parse_rule(t, "projectSettings", CWD) for t in deny])
    return PermissionContext(cwd=CWD, home="/home/alice", rules=rules, mode=mode)


@pytest.mark.parametrize(
    "rule, path, expected",
    [
        ("Edit(./secret/**)", "secret/a.ipynb", Behavior.DENY),
        ("Edit(./secret/**)", "/w/proj/secret/a.ipynb", Behavior.DENY),
        ("Edit(*.ipynb)", "deep/down/a.ipynb", Behavior.DENY),
        ("Edit(./secret/**)", "open/a.ipynb", Behavior.ASK),
        ("NotebookEdit(./secret/**)", "secret/a.ipynb", Behavior.DENY),
    ],
)
def test_edit_rules_cover_notebook_edit(rule: str, path: str, expected: Behavior) -> None:
    decision = check("NotebookEdit", {"notebook_path": path, "new_source": "x"}, ctx((rule,)))
    assert decision.behavior == expected, decision.reason
    if expected == Behavior.DENY:
        assert rule in decision.reason


def test_modes_and_the_workspace_boundary_read_notebook_path() -> None:
    accept = ctx(mode=PermissionMode.ACCEPT_EDITS)
    inside = check("NotebookEdit", {"notebook_path": "a.ipynb", "new_source": ""}, accept)
    assert inside.behavior == Behavior.ALLOW, inside.reason
    outside = check("NotebookEdit", {"notebook_path": "/etc/a.ipynb", "new_source": ""}, accept)
    assert outside.behavior == Behavior.ASK and "/etc/a.ipynb" in outside.reason
    plan = check("NotebookEdit", {"notebook_path": "a.ipynb"}, ctx(mode=PermissionMode.PLAN))
    assert plan.behavior == Behavior.DENY
    grant = grant_for("NotebookEdit", {"notebook_path": "a.ipynb", "new_source": ""}, ctx())
    assert grant.rule == "Edit(//w/proj/a.ipynb)"


async def test_a_deny_rule_holds_at_execution_through_a_link(ws: Path) -> None:
    """A link to a denied notebook is refused when the call runs, whatever its own name."""
    (ws / "secret").mkdir()
    (ws / "nb.ipynb").rename(ws / "secret" / "nb.ipynb")
    os.symlink("secret", ws / "open")
    rules = PermissionRules(deny=[parse_rule("Edit(./secret/**)", "projectSettings", str(ws))])
    perms = PermissionContext(cwd=str(ws), home=str(ws.parent), rules=rules)
    inp = {"notebook_path": "open/nb.ipynb", "cell_id": "calc", "new_source": "x"}
    out = await execute_tool("NotebookEdit", inp, str(ws), permissions=perms)
    assert out.is_error and "Edit(./secret/**)" in out.content, out.content
    assert cells_of(ws / "secret" / "nb.ipynb")[2]["source"] == ["6 * 7"]
