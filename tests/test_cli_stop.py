"""What stops the CLI stops its agent, as it stops `claude -p`: `timeout 600 durable-agent -p …`
(SIGTERM), Ctrl-C (SIGINT) and the Agent SDK's close end the session's running prompt and its
tools, even when the session runs on a worker elsewhere (a fleet, the warm worker). Before, the
CLI died and the session went on without it: its command ran to the end, the model was called
again and the session stayed open."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from durable_agent.replay import ReplayServer, Turn, text_turn, tool_turn
from tests.faults.harness import WorkerProcess, cli_process, process_env, wait_for

SLEEP = 5
"""The command's sleep: the test waits past it to see that nothing came after."""
COMMAND = f"echo started >> marker; sleep {SLEEP}; echo finished >> marker"


def _bash() -> Turn:
    """The model's call of COMMAND."""
    return tool_turn([("b1", "Bash", {"command": COMMAND})])


@dataclass
class Place:
    address: str
    queue: str
    """The test's own task queue: its sessions, among the shared server's."""


@pytest.fixture
def place(dev_env) -> Place:
    return Place(dev_env.client.service_client.config.target_host, f"stop-{uuid.uuid4()}")


@contextlib.contextmanager
def _served(
    place: Place, tmp_path: Path, turns: list[Turn] | Callable[[dict[str, Any], int], Turn]
) -> Iterator[tuple[Path, ReplayServer, dict[str, str]]]:
    """A workspace, the fake API answering `turns`, and a `python worker.py` serving the test's
    queue: the session runs there, elsewhere than the CLI under test. Yields the workspace,
    the API and the environment of both."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with ReplayServer(turns) as api:
        env = process_env(tmp_path, place.address, api.base_url, place.queue)
        with WorkerProcess(env, tmp_path / "worker.log"):
            yield workspace, api, env


async def _sessions(place: Place) -> dict[str, WorkflowExecutionStatus | None]:
    client = await Client.connect(place.address)
    query = f'WorkflowType="SessionWorkflow" AND TaskQueue="{place.queue}"'
    return {wf.id: wf.status async for wf in client.list_workflows(query)}


async def _stopped_by_sigterm(proc: subprocess.Popen[str], place: Place) -> None:
    """SIGTERM to a CLI whose stdin stays open: it exits 143 within the Agent SDK's 5 s, and
    its session (the only one) has ended."""
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        code = await asyncio.to_thread(proc.wait, 30)
    finally:
        proc.kill()
        err = proc.stderr.read() if proc.stderr else ""
    assert code == 128 + signal.SIGTERM, err[-2000:]
    assert time.monotonic() - sent < 5 and "Traceback" not in err
    sessions = await _sessions(place)
    assert list(sessions.values()) == [WorkflowExecutionStatus.COMPLETED], sessions


async def _nothing_after_the_stop(workspace: Path, api: ReplayServer) -> None:
    """Past the command's sleep: it was ended, and the model was not called again."""
    await asyncio.sleep(SLEEP + 1)
    assert (workspace / "marker").read_text() == "started\n"
    assert len(api.requests) == 1


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_stopped_print_mode_stops_its_session_on_a_worker_elsewhere(place, tmp_path, sig):
    # A second call, had the session gone on, would take "resumed" (the test then fails).
    turns = [_bash(), text_turn("resumed")]
    with _served(place, tmp_path, turns) as (workspace, api, env):
        cli_env = {**env, "DURABLE_AGENT_NO_WORKER": "1"}
        args = ["-p", "go", "--output-format", "json", "--allowedTools", "Bash"]
        proc = cli_process(args, cli_env, workspace)
        await wait_for((workspace / "marker").exists, 60, "the tool to start")
        sent = time.monotonic()
        proc.send_signal(sig)
        out, err = await asyncio.to_thread(proc.communicate, timeout=30)
        took = time.monotonic() - sent
        assert proc.returncode == 128 + sig, err[-2000:]
        assert took < 5, f"{took:.1f}s to stop (the Agent SDK kills after 5 s)"
        assert "Traceback" not in err
        sessions = await _sessions(place)
        assert list(sessions.values()) == [WorkflowExecutionStatus.COMPLETED], sessions
        await _nothing_after_the_stop(workspace, api)
        if sig == signal.SIGTERM:  # the transcript stays: --resume goes on from it
            (session_id,) = sessions
            again = ["-p", "and now?", "--resume", session_id, "--output-format", "json"]
            proc = cli_process(again, cli_env, workspace)
            out, err = await asyncio.to_thread(proc.communicate, timeout=60)
            assert proc.returncode == 0, err[-2000:]
            assert '"result": "resumed"' in out
            first = api.requests[-1]["messages"]
            assert "go" in str(first[0]["content"]) and "b1" in str(first)


async def test_run_stopped_by_sigterm_interrupts_its_prompt(place, tmp_path):
    """`timeout … durable-agent run`: SIGTERM counts as the first Ctrl-C (the prompt is
    interrupted, the CLI reports it and exits), not as a detach."""
    turns = [_bash(), text_turn("never reached")]
    with _served(place, tmp_path, turns) as (workspace, api, env):
        args = ["run", "go", "--no-worker", "--workspace", str(workspace)]
        proc = cli_process([*args, "--allowedTools", "Bash"], env, workspace)
        await wait_for((workspace / "marker").exists, 60, "the tool to start")
        proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.to_thread(proc.communicate, timeout=30)
        assert proc.returncode == 1, err[-2000:]
        assert "interrupting" in err and "aborted_tools" in out + err
        sessions = await _sessions(place)
        assert list(sessions.values()) == [WorkflowExecutionStatus.COMPLETED], sessions
        await _nothing_after_the_stop(workspace, api)


@pytest.mark.parametrize("moment", ["tool", "idle"])
async def test_a_chat_stopped_by_sigterm_stops_its_session(place, tmp_path, moment):
    """SIGTERM while a prompt's tool runs, or while the chat waits for the next line (its
    stdin still open: the stop must not wait for a line that never comes)."""
    turns = [_bash(), text_turn("answered")]
    if moment == "idle":
        turns = [text_turn("answered")]
    with _served(place, tmp_path, turns) as (workspace, api, env):
        args = ["chat", "--no-worker", "--workspace", str(workspace), "--allowedTools", "Bash"]
        proc = cli_process(args, env, workspace, stdin=subprocess.PIPE)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        if moment == "tool":
            await wait_for((workspace / "marker").exists, 60, "the tool to start")
        else:
            line = await asyncio.to_thread(proc.stdout.readline)
            assert "answered" in line
            await asyncio.sleep(0.5)  # back at the prompt, reading stdin
        await _stopped_by_sigterm(proc, place)
        if moment == "tool":
            await _nothing_after_the_stop(workspace, api)


async def test_print_mode_stopped_at_any_moment_of_its_start_leaves_no_session_running(
    place, tmp_path
):
    """SIGTERM at moments across the CLI's start: before the session opens the CLI ends with
    nothing started; from the session's start on, the session is stopped, never left open."""
    slow = text_turn("an answer").model_copy(update={"pause_before": {0: 30.0}})  # never done
    with _served(place, tmp_path, lambda body, index: slow) as (_, _, env):
        cli_env = {**env, "DURABLE_AGENT_NO_WORKER": "1"}
        for offset in (0.3, 0.7, 1.1, 1.5, 1.9):
            proc = cli_process(["-p", "go"], cli_env, tmp_path)
            await asyncio.sleep(offset)
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.to_thread(proc.communicate, timeout=30)
            # (-15: still importing, the default handler; a shell reports 143 either way)
            assert proc.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM), (offset, err)
            assert "Traceback" not in err, (offset, err[-2000:])
        sessions = await _sessions(place)
        assert WorkflowExecutionStatus.RUNNING not in sessions.values(), sessions


async def test_stream_json_input_stopped_with_a_prompt_waiting_and_stdin_open(place, tmp_path):
    """The Agent SDK's form: user messages on stdin, which stays open. SIGTERM while the first
    prompt's tool runs: the second prompt never runs, and the CLI exits without waiting for
    a stdin line that never comes (a fault campaign found it waiting forever)."""
    turns = [_bash(), text_turn("never reached")]
    with _served(place, tmp_path, turns) as (workspace, api, env):
        args = ["-p", "--input-format", "stream-json", "--output-format", "stream-json"]
        args += ["--verbose", "--allowedTools", "Bash"]
        cli_env = {**env, "DURABLE_AGENT_NO_WORKER": "1"}
        proc = cli_process(args, cli_env, workspace, stdin=subprocess.PIPE)
        assert proc.stdin is not None
        for text in ("run the command", "and then this"):
            message = {"type": "user", "message": {"role": "user", "content": text}}
            proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()
        await wait_for((workspace / "marker").exists, 60, "the tool to start")
        await _stopped_by_sigterm(proc, place)
        await _nothing_after_the_stop(workspace, api)  # the waiting prompt never ran either
