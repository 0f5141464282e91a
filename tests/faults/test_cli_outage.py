"""The CLI rides out a Temporal server restart: `run --no-worker` says it is reconnecting and
reports the session's real outcome; `chat` and `tail` keep going too."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import IO

import pytest
from temporalio.client import Client

from durable_agent.replay import ReplayServer, text_turn, tool_turn
from tests.faults.harness import ROOT, WorkerProcess, process_env, wait_for

OUTAGE_SECONDS = 12.0
"""Longer than the SDK client's own retries of a failed call (about 10 s), so that the outage
reaches the CLI's code; a shorter one is ridden out inside the client, and the test would
depend on when the CLI's call happened to fall (1 run in 6 failed with 6 s)."""


def _cli(
    args: list[str],
    env: dict[str, str],
    stdin: bool = False,
    into: Path | None = None,
    cwd: Path = ROOT,
) -> subprocess.Popen[str]:
    """With `into`, its stdout and stderr go to `into`.out and `into`.err, to be read while
    it runs."""
    out: IO[str] | int = subprocess.PIPE
    err: IO[str] | int = subprocess.PIPE
    if into is not None:
        out, err = into.with_suffix(".out").open("w"), into.with_suffix(".err").open("w")
    return subprocess.Popen(
        [sys.executable, "-m", "durable_agent", *args], cwd=cwd, env=env,
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, stdout=out, stderr=err,
        text=True,
    )  # fmt: skip


def _finish(proc: subprocess.Popen[str], seconds: float) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"the CLI did not finish in {seconds:g}s\n{err[-2000:]}") from None
    return proc.returncode, out, err


@pytest.mark.parametrize("form", ["run", "print"])
async def test_run_no_worker_rides_out_a_server_restart(own_server, tmp_path, form):
    """`run --no-worker`, and `-p` (`claude -p`'s form, its worker elsewhere too): a fault
    campaign found `-p` ended with "unexpected RPCError: tcp connect error" after an 8 s
    outage, its result never printed, while the session went on."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    command = "echo started >> marker; sleep 3; echo real-output"
    turns = [tool_turn([("b1", "Bash", {"command": command})]), text_turn("all done")]
    task_queue = f"outage-{uuid.uuid4()}"
    with ReplayServer(turns) as api:
        env = process_env(tmp_path, own_server.address, api.base_url, task_queue)
        with WorkerProcess(env, tmp_path / "worker.log"):
            if form == "run":
                args = ["run", "go", "--no-worker", "--workspace", str(workspace)]
                proc = _cli([*args, "--allowedTools", "Bash"], env)
            else:
                args = ["-p", "go", "--output-format", "json", "--allowedTools", "Bash"]
                proc = _cli(args, {**env, "DURABLE_AGENT_NO_WORKER": "1"}, cwd=workspace)
            await wait_for((workspace / "marker").exists, 60, "the tool to start")
            own_server.kill()
            down_at = time.monotonic()
            await asyncio.sleep(OUTAGE_SECONDS)
            own_server.start()
            code, out, err = await asyncio.to_thread(_finish, proc, 90)
            back_in = time.monotonic() - down_at
    assert code == 0, err[-2000:]
    assert "reconnecting" in err and "Traceback" not in err and "RPCError" not in err
    assert "all done" in out
    if form == "print":
        result = json.loads(out.strip().splitlines()[-1])
        assert result["type"] == "result" and result["result"] == "all done", result
    assert (workspace / "marker").read_text() == "started\n"
    assert api.requests[1]["messages"][-1]["content"][0]["content"] == "real-output"
    assert back_in < OUTAGE_SECONDS + 30


async def _session_id(address: str) -> str:
    client = await Client.connect(address)
    for _ in range(200):
        async for wf in client.list_workflows('WorkflowType="SessionWorkflow"'):
            return wf.id
        await asyncio.sleep(0.1)
    raise AssertionError("no session was started")


async def test_chat_tail_and_status_ride_out_a_server_restart(own_server, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    tail_path = tmp_path / "tail"
    # Long enough for `tail` to start and attach while it runs (a first CLI start in a fresh
    # clone compiles the project's modules and took more than 3 s in CI).
    command = "echo started >> marker; sleep 10; echo real-output"
    turns = [
        tool_turn([("b1", "Bash", {"command": command})]),
        text_turn("first answer"),
        text_turn("second answer"),
    ]
    task_queue = f"outage-{uuid.uuid4()}"
    with ReplayServer(turns) as api:
        env = process_env(tmp_path, own_server.address, api.base_url, task_queue)
        with WorkerProcess(env, tmp_path / "worker.log"):
            chat = _cli(
                ["chat", "--no-worker", "--workspace", str(workspace), "--allowedTools", "Bash"],
                env,
                stdin=True,
            )
            assert chat.stdin is not None
            chat.stdin.write("first\nsecond\n")
            chat.stdin.close()
            chat.stdin = None  # sent; communicate() must not touch it again
            await wait_for((workspace / "marker").exists, 60, "the tool to start")
            sid = await _session_id(own_server.address)
            tail = _cli(["tail", sid], env, into=tail_path)
            shown = tail_path.with_suffix(".err")  # tail follows once it shows the Bash
            await wait_for(lambda: "Bash" in shown.read_text(), 9, "tail to follow the Bash")
            own_server.kill()
            status = _cli(["status", sid], env)  # asked while the server is away
            await asyncio.sleep(OUTAGE_SECONDS)
            own_server.start()
            results = await asyncio.gather(
                *(asyncio.to_thread(_finish, p, 90) for p in (chat, tail, status))
            )
    (chat_code, chat_out, chat_err), (tail_code, _, _), (st_code, st_out, st_err) = results
    tail_out = tail_path.with_suffix(".out").read_text()
    tail_err = tail_path.with_suffix(".err").read_text()
    for code, err in ((chat_code, chat_err), (tail_code, tail_err), (st_code, st_err)):
        assert code == 0, err[-2000:]
        assert "Traceback" not in err and "RPCError" not in err
    # status was started during the outage: it waited for the server rather than failing
    assert "retrying" in st_err or "reconnecting" in st_err
    assert "first answer" in chat_out and "second answer" in chat_out
    assert "first answer" in tail_out
    assert f"session {sid}" in st_out
    assert (workspace / "marker").read_text() == "started\n"
    assert "first" in str(api.requests[0]["messages"][0]["content"])
