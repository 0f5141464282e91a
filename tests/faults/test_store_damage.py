"""The store damaged or read-only mid-session, through real processes: a transcript cut short by
a tool ends the prompt at once with one line naming it (the cut bytes kept aside); a store
remounted read-only after a Bash ran reports the Bash as ran, once."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from durable_agent.replay import ReplayServer, text_turn, tool_turn
from tests.faults.harness import ROOT, WorkerProcess, process_env, wait_for


def _cli(args: list[str], env: dict[str, str], seconds: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_agent", *args], cwd=ROOT, env=env,
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=seconds,
    )  # fmt: skip


async def test_a_transcript_cut_short_by_a_tool_ends_the_prompt_in_one_line(own_server, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    home = tmp_path / "home"
    command = f"truncate -s -40 {home}/sessions/*.jsonl && touch cut"
    turns = [tool_turn([("b1", "Bash", {"command": command})]), text_turn("never asked for")]
    task_queue = f"torn-{uuid.uuid4()}"
    with ReplayServer(turns) as api:
        env = process_env(tmp_path, own_server.address, api.base_url, task_queue)
        with WorkerProcess(env, tmp_path / "worker.log"):
            args = ["run", "go", "--no-worker", "--workspace", str(workspace)]
            cli = asyncio.create_task(
                asyncio.to_thread(_cli, [*args, "--allowedTools", "Bash"], env, 40)
            )
            await wait_for((workspace / "cut").exists, 60, "the tool to cut the transcript")
            cut_at = time.monotonic()
            done = await cli
            ended_in = time.monotonic() - cut_at
            transcript = next((home / "sessions").glob("*.jsonl"))
            status = await asyncio.to_thread(_cli, ["status", transcript.stem], env, 60)
    assert ended_in < 10, f"the CLI took {ended_in:.1f}s after the damage\n{done.stderr}"
    assert done.returncode != 0
    assert "Traceback" not in done.stderr and "retry" not in done.stderr.lower()
    stopped = [ln for ln in done.stderr.splitlines() if ln.startswith("stopped: ")]
    assert len(stopped) == 1 and stopped[0].startswith("stopped: model_error"), done.stderr
    last = stopped[0]
    assert "damaged" in last and str(transcript) in last
    assert len(api.requests) == 1  # the damage is not paid for with model calls
    torn = list(transcript.parent.glob(f"{transcript.name}.torn-*"))
    assert len(torn) == 1 and str(torn[0]) in last
    kept = torn[0].read_bytes()
    assert kept.startswith(b'{"') and b'"b1"' in kept and not kept.endswith(b"\n")
    assert status.returncode == 0, status.stderr
    assert "damaged" in status.stdout and str(torn[0]) in status.stdout
    assert "what to do:" in status.stdout and "start a new session" in status.stdout


@pytest.mark.skipif(
    shutil.which("unshare") is None
    or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0,
    reason="needs unshare -m (root) for a real read-only mount",
)
async def test_a_store_made_read_only_after_a_bash_ran_reports_it_ran_once(own_server, tmp_path):
    """The worker runs in a mount namespace of its own; the Bash itself remounts the session's
    results folder read-only once it has run, so only the write of its result fails."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    home = tmp_path / "home"
    results = f"{home}/sessions/*.results"
    command = (
        f"echo ran >> marker && mount --bind {results} {results} "
        f"&& mount -o remount,ro,bind {results} && echo the-real-output"
    )
    turns = [tool_turn([("b1", "Bash", {"command": command})]), text_turn("all done")]
    task_queue = f"rofs-{uuid.uuid4()}"
    with ReplayServer(turns) as api:
        env = process_env(tmp_path, own_server.address, api.base_url, task_queue)
        with WorkerProcess(env, tmp_path / "worker.log", wrap=["unshare", "-m"]):
            args = ["run", "go", "--no-worker", "--workspace", str(workspace)]
            done = await asyncio.to_thread(_cli, [*args, "--allowedTools", "Bash"], env, 40)
    assert done.returncode == 0, done.stderr
    assert "all done" in done.stdout
    assert (workspace / "marker").read_text() == "ran\n"  # ran exactly once
    answer = api.requests[1]["messages"][-1]["content"][0]
    assert answer["tool_use_id"] == "b1"
    assert "failed to run" not in answer["content"]
    assert "the-real-output" in answer["content"] and not answer.get("is_error")
    assert not any((home / "sessions").glob("*.results/b1*.json"))  # not stored: read-only
