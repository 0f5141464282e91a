"""The embedded dev server's disk is full: the next run says so in one line, naming the disk,
instead of "the dev server did not start" and an empty log tail. The state dir is a 1 MiB
tmpfs, filled, in a mount namespace of the CLI's own (nothing is mounted on this machine)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.faults.harness import ROOT, process_env

FILL_AND_RUN = """set -e
mount -t tmpfs -o size=1m tmpfs "$DURABLE_AGENT_HOME"
dd if=/dev/zero of="$DURABLE_AGENT_HOME/filler" bs=4k 2>/dev/null || true
exec "$0" -m durable_agent run hello --workspace "$DURABLE_AGENT_HOME/.."
"""


def _namespaces() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _namespaces(), reason="no mount namespaces here (unshare -rm)")
def test_a_full_disk_is_named_in_one_line(tmp_path):
    env = process_env(tmp_path, "", "http://127.0.0.1:9", "", DURABLE_AGENT_WARM_WORKER="0")
    for name in ("TEMPORAL_ADDRESS", "DURABLE_AGENT_TASK_QUEUE"):  # the embedded server
        del env[name]
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.run(
        ["unshare", "-rm", "sh", "-c", FILL_AND_RUN, sys.executable],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    first, hint = proc.stderr.strip().splitlines()
    assert first.startswith("durable-agent: error: the Temporal dev server did not start: ")
    assert f"the disk of {home} is full (0.0 MiB free)" in first
    assert hint.startswith("hint: free space on that disk")
