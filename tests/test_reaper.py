"""The reaper (durable_agent/reaper.py): a worker process killed takes its tools with it; one
that exits on purpose leaves them be. Real processes: a small worker-like child starts a tool
with the tool environment, then is SIGKILLed or exits as the CLI does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from activities.tools.environment import WORKER_TAG_NAME, proc_stat, scan_environ
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parent.parent

CHILD = textwrap.dedent(
    """
    import subprocess, sys, time
    from activities.tools.environment import reaper_pid, tool_environment
    from durable_agent.operating import child_processes
    env = tool_environment()
    # a command and its background job, in a session of their own as a Bash's are
    subprocess.Popen(["sh", "-c", "sleep 300 & sleep 300"], env=env, start_new_session=True)
    time.sleep(0.2)
    print(env[sys.argv[2]], reaper_pid(), child_processes(), flush=True)
    if sys.argv[1] == "exit":
        from durable_agent.cli import hard_exit
        hard_exit(0)
    time.sleep(300)
    """
)


def _alive(pid: int) -> bool:
    stat = proc_stat(pid)
    return stat is not None and stat[0] != "Z"


def _worker_child(mode: str) -> tuple[subprocess.Popen[str], str, int, int]:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, mode, WORKER_TAG_NAME], cwd=ROOT, text=True,
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert child.stdout is not None
    tag, reaper, children = child.stdout.readline().split()
    return child, tag, int(reaper), int(children)


def _tools_of(tag: str) -> list[int]:
    return [pid for pid, _ in scan_environ((f"{WORKER_TAG_NAME}={tag}".encode(),), False)]


def test_a_killed_worker_process_takes_its_tools_with_it():
    child, tag, reaper, children = _worker_child("kill")
    try:
        assert tag == f"{child.pid}.{proc_stat(child.pid)[19]}"  # type: ignore[index]
        assert children == 1, "the reaper is not counted as a running tool (recycling waits)"
        tools = _tools_of(tag)
        assert len(tools) == 3  # sh and its two sleeps
        assert reaper not in tools  # the reaper carries no tag: it does not kill itself
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert wait_until(lambda: not any(_alive(p) for p in tools), 3), "the tools outlived it"
        assert wait_until(lambda: not _alive(reaper), 3), "the reaper stays after its work"
    finally:
        child.kill()
        for pid in _tools_of(tag):
            os.kill(pid, signal.SIGKILL)


def test_a_worker_process_that_exits_on_purpose_leaves_its_tools_be():
    """The CLI's end (hard_exit), a drained worker's, a recycle's exec: a session's own end
    still ends its processes (end_tool_processes); the reaper is for a process that died."""
    child, tag, reaper, _ = _worker_child("exit")
    tools = _tools_of(tag)
    try:
        assert child.wait(10) == 0
        assert wait_until(lambda: not _alive(reaper), 3), "the reaper did not stand down"
        assert all(_alive(p) for p in tools)
    finally:
        for pid in tools:
            os.kill(pid, signal.SIGKILL)
