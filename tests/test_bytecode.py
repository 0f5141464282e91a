"""durable_agent/bytecode.py: where a durable-agent process keeps its bytecode, and when not."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

LIMIT = 8192
"""Bytes a file may have: the module below compiles to more."""


def _limited() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails or is cut short
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


def _import(code: str, tmp_path: Path, limit: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(tmp_path / "pycache")
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(Path(__file__).parent.parent)])
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
        preexec_fn=_limited if limit else None,
    )  # fmt: skip


def _big_module(tmp_path: Path) -> None:
    """A module whose .pyc exceeds LIMIT, with everything else the processes import already
    cached (the cache is new: Python's own start-up would otherwise be cut short too)."""
    warm = _import("import durable_agent", tmp_path, limit=False)
    assert warm.returncode == 0, warm.stderr
    lines = [f"VALUE_{i} = {list(range(i % 50))!r}" for i in range(400)]
    (tmp_path / "bigmod.py").write_text("\n".join(lines) + "\n")


def test_a_file_size_limit_would_leave_a_truncated_pyc_that_breaks_the_next_import(tmp_path):
    """The hazard itself, in plain Python: a .pyc written under the limit is cut short and the
    next process that imports the module fails. If this stops failing, Python fixed it."""
    _big_module(tmp_path)
    first = _import("import bigmod", tmp_path, limit=True)
    assert first.returncode == 0, first.stderr
    second = _import("import bigmod", tmp_path, limit=False)
    assert second.returncode != 0 and "EOFError" in second.stderr, second.stderr


def test_under_a_file_size_limit_durable_agent_writes_no_bytecode(tmp_path):
    _big_module(tmp_path)
    code = "import durable_agent, sys, bigmod; print(sys.dont_write_bytecode)"
    first = _import(code, tmp_path, limit=True)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "True"
    second = _import(code, tmp_path, limit=False)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "False"
    assert list((tmp_path / "pycache").rglob("bigmod*.pyc")), "without a limit it is cached"
    third = _import("import bigmod", tmp_path, limit=False)
    assert third.returncode == 0, third.stderr
