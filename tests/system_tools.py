"""Tests that need a system tool (bubblewrap, ripgrep, jq): off CI a missing one skips them with
the command that installs it; under `CI=true` it fails them, so a CI machine without the tool
cannot go green on skips."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

# tool on PATH -> the Debian/Ubuntu package that provides it
PACKAGES = {"bwrap": "bubblewrap", "rg": "ripgrep", "jq": "jq"}


def on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1")


def require(tool: str) -> None:
    """Skip (off CI) or fail (under CI=true) the running test when `tool` is not on PATH."""
    if shutil.which(tool) is not None:
        return
    why = f"{tool} is not installed: apt-get install {PACKAGES[tool]}"
    if on_ci():
        pytest.fail(f"{why}; under CI=true a missing system tool fails the run", pytrace=False)
    pytest.skip(why)


def needs(tool: str) -> pytest.MarkDecorator:
    """Mark a test as needing `tool`; tests/conftest.py applies `require` before it runs."""
    assert tool in PACKAGES, tool
    return pytest.mark.needs_tool(tool)


def path_without(tmp_path: Path, *tools: str) -> str:
    """This PATH with every directory that holds one of `tools` replaced by a copy without it:
    how a test sees a machine that lacks them (never uninstall them)."""
    out = []
    for number, entry in enumerate(os.environ["PATH"].split(os.pathsep)):
        folder = Path(entry)
        if not any((folder / tool).exists() for tool in tools):
            out.append(entry)
            continue
        shadow = tmp_path / f"path-{number}"
        shadow.mkdir(exist_ok=True)
        for found in folder.iterdir():
            if found.name not in tools and not (shadow / found.name).exists():
                (shadow / found.name).symlink_to(found)
        out.append(str(shadow))
    return os.pathsep.join(out)
