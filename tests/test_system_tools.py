"""A test that needs bubblewrap, ripgrep or jq, on a machine without it: off CI it skips and
says how to install it; under CI=true it fails (tests/system_tools.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.system_tools import path_without
from tests.test_cli import ROOT

# One test per tool, and the end-to-end one that once failed with an IndexError.
NEEDY = {
    "bwrap": [
        "tests/test_sandbox.py::test_the_rest_of_the_filesystem_is_read_only",
        "tests/test_permissions_e2e.py::"
        "test_sandboxed_bash_writes_only_the_workspace_has_no_network_and_cannot_read_denied_files",
    ],
    "rg": ["tests/test_confinement.py::test_ripgrep_never_follows_links_even_if_configured_to"],
    "jq": ["tests/test_claude_cli.py::test_a_ci_script_reads_the_result_with_jq"],
}


def pytest_without(tmp_path: Path, tool: str, ci: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PATH"] = path_without(tmp_path, tool)
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        # -n 0: one process; the project's `-n 2` would start two xdist workers for 1-2 tests
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rsE",
            "-n",
            "0",
            "-p",
            "no:cacheprovider",
            *NEEDY[tool],
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "tool, package", [("bwrap", "bubblewrap"), ("rg", "ripgrep"), ("jq", "jq")]
)
def test_off_ci_a_missing_tool_skips_with_its_install_command(tmp_path, tool, package):
    proc = pytest_without(tmp_path, tool, ci=None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    count = len(NEEDY[tool])
    assert f"{count} skipped" in proc.stdout, proc.stdout
    assert f"is not installed: apt-get install {package}" in proc.stdout, proc.stdout


def test_under_ci_a_missing_tool_fails_the_run(tmp_path):
    proc = pytest_without(tmp_path, "bwrap", ci="true")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "2 error" in proc.stdout and "skipped" not in proc.stdout, proc.stdout
    assert "apt-get install bubblewrap; under CI=true" in proc.stdout, proc.stdout


def ci_run_without_bwrap(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    """.ci/run on a machine without bubblewrap and without apt-get to install it. A fake `uv`
    stands for everything after the tool check, so a check that lets the run go on ends at
    once (exit 99) instead of running the suite."""
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    (fake / "uv").write_text("#!/bin/sh\necho UV-RAN\nexit 99\n")
    (fake / "uv").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["HOME"] = str(tmp_path)  # .ci/run puts ~/.local/bin (a real uv) first on PATH
    env["PATH"] = f"{fake}{os.pathsep}{path_without(tmp_path, 'bwrap', 'apt-get', 'sudo')}"
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        ["bash", str(ROOT / ".ci" / "run")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_ci_run_without_bubblewrap_fails_under_ci_before_the_suite(tmp_path):
    proc = ci_run_without_bwrap(tmp_path, ci="true")
    assert proc.returncode == 1 and "UV-RAN" not in proc.stdout, proc
    assert "error: could not install bubblewrap" in proc.stderr, proc.stderr
    assert "hint: apt-get install bubblewrap" in proc.stderr, proc.stderr


def test_ci_run_without_bubblewrap_off_ci_warns_and_goes_on(tmp_path):
    proc = ci_run_without_bwrap(tmp_path, ci=None)
    assert proc.returncode == 99 and "UV-RAN" in proc.stdout, proc
    assert "warning: bubblewrap not installed; the tests that need it are skipped" in proc.stderr
