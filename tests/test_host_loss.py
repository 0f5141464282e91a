"""A travelling workspace's host SIGKILLed while a tool's hook runs (fault campaign 6): the
session goes on on another worker of the fleet. The hook the lost host started is not run
again on the new host (the hook ledger names the step, not its activity, which a new host's
does not share); a PreToolUse hook whose verdict was lost blocks its call; and when the lost
host held a tool's changes that no checkpoint has, the model is told (HOST_LOST_FEEDBACK).
Before: the hook ran twice, the tool ran after the rerun let it through, and a change lost
with the host was reported to the model as a plain success."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from activities.tools.registry import HOST_LOST_TEXT
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from tests.faults.harness import (
    WorkerProcess,
    _cmdline,
    another_machine,
    cli_process,
    descendants,
    process_env,
    wait_for,
)
from tests.helpers import record_histories
from workflows.hosting import HOST_LOST_FEEDBACK

HOOK_SLEEP = "sleep 6.5"


def _settings(path: Path, event: str, hook: str) -> None:
    path.parent.mkdir(parents=True)
    matcher = {"matcher": "Bash", "hooks": [{"type": "command", "command": hook}]}
    path.write_text(json.dumps({"hooks": {event: [matcher]}}))


def _address(env: Any) -> str:
    return str(env.client.service_client.config.target_host)


@dataclass
class Fleet:
    workers: list[WorkerProcess]
    cli_env: dict[str, str]
    """A CLI's environment on the submitter's machine: the session runs on the workers."""
    client: Client


@contextlib.asynccontextmanager
async def _fleet(
    tmp_path: Path, address: str, pg_url: str, api: ReplayServer, machines: bool = False
) -> AsyncIterator[Fleet]:
    """Two `python worker.py` on one queue and a shared PostgreSQL store, polling; with
    `machines`, each a machine of its own (hostname, process table: a new host cannot see the
    old one's processes, as across a real partition)."""
    task_queue = f"host-loss-{uuid.uuid4()}"

    def env_of(name: str) -> dict[str, str]:
        return process_env(
            tmp_path / name, address, api.base_url, task_queue, DURABLE_AGENT_STORE=pg_url
        )

    def wrap(name: str) -> list[str] | None:
        return another_machine(f"machine-{name}") if machines else None

    workers = [WorkerProcess(env_of(n), tmp_path / f"{n}.log", wrap=wrap(n)) for n in "ab"]
    try:
        client = await Client.connect(address)
        for name, worker in zip("ab", workers, strict=True):
            worker.start()
            await worker.polling(client, task_queue, host=f"machine-{name}" if machines else None)
        yield Fleet(workers, {**env_of("cli"), "DURABLE_AGENT_NO_WORKER": "1"}, client)
    finally:
        for worker in workers:
            worker.stop()


async def _running(workers: list[WorkerProcess], command: str) -> WorkerProcess:
    """The worker whose processes run `command` (its words as the command line has them)."""
    needle = command.replace(" ", "\0").encode()

    def found() -> list[WorkerProcess]:
        return [
            w for w in workers
            if w.proc and any(needle in _cmdline(p) for p in descendants(w.proc.pid))
        ]  # fmt: skip

    await wait_for(lambda: bool(found()), 10, f"the worker running {command}")
    (worker,) = found()
    return worker


@pytest.mark.parametrize("event", ["PreToolUse", "PostToolUse"])
async def test_a_host_lost_during_a_tools_hook(dev_env, tmp_path, pg_url, event):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "keep.txt").write_text("kept\n")
    hook_marker, tool_marker = tmp_path / "hook-marker", tmp_path / "tool-marker"
    hook = f"echo start >> {hook_marker}; {HOOK_SLEEP}; echo end >> {hook_marker}"
    command = f"echo ran >> {tool_marker}; echo made > made-by-tool.txt"
    turns = [tool_turn([("b1", "Bash", {"command": command})]), text_turn("all done")]
    with ReplayServer(turns) as api:
        async with _fleet(tmp_path, _address(dev_env), pg_url, api) as fleet:
            _settings(Path(fleet.cli_env["DURABLE_AGENT_SETTINGS"]), event, hook)
            args = ["-p", "go", "--output-format", "json", "--allowedTools", "Bash"]
            cli = cli_process(args, fleet.cli_env, ws)
            await wait_for(hook_marker.exists, 90, "the hook to start")
            (await _running(fleet.workers, HOOK_SLEEP)).kill()
            out, err = await asyncio.to_thread(cli.communicate, timeout=150)
    assert cli.returncode == 0, err[-2000:]
    assert hook_marker.read_text() == "start\n", "the lost host's hook ran again elsewhere"
    if event == "PreToolUse":  # its verdict went with the host: the call is blocked
        assert not tool_marker.exists()
        assert not (ws / "made-by-tool.txt").exists()
    else:  # the tool ran on the lost host, its change not checkpointed: the model is told
        assert tool_marker.read_text() == "ran\n"
        told = json.dumps(api.requests[1]["messages"][-1])
        assert HOST_LOST_FEEDBACK[:60] in told, told[:2000]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["result"] == "all done"
    await record_histories(fleet.client, result["session_id"])


async def test_a_stopped_host_whose_polls_take_the_retries_is_replaced(dev_env, tmp_path, pg_url):
    """The host SIGSTOPped mid-tool (as a partition leaves it: its outstanding polls still take
    tasks, each then started and lapsed): once the tool's attempts have all lapsed, another
    worker hosts the workspace and reports the call interrupted, and the model is told the
    host's changes went with it. Before: the session kept waiting for the stopped host, and
    the model heard the tool "stopped responding" while its next steps went to that host."""
    ws = tmp_path / "ws"
    ws.mkdir()
    marker = tmp_path / "marker"
    command = f"echo start >> {marker}; sleep 3600"
    turns = [tool_turn([("b1", "Bash", {"command": command})]), text_turn("all done")]
    paused = 0
    with ReplayServer(turns) as api:
        async with _fleet(tmp_path, _address(dev_env), pg_url, api, machines=True) as fleet:
            args = ["-p", "go", "--output-format", "json", "--allowedTools", "Bash"]
            cli = cli_process(args, fleet.cli_env, ws)
            await wait_for(marker.exists, 90, "the tool to start")
            (paused,) = (await _running(fleet.workers, "sleep 3600")).worker_pids()
            os.kill(paused, signal.SIGSTOP)
            try:
                out, err = await asyncio.to_thread(cli.communicate, timeout=180)
            finally:
                os.kill(paused, signal.SIGCONT)
    assert cli.returncode == 0, err[-2000:]
    told = json.dumps(api.requests[1]["messages"][-1])
    assert HOST_LOST_TEXT[:60] in told and HOST_LOST_FEEDBACK[:60] in told, told[:2000]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["result"] == "all done"
    await record_histories(fleet.client, result["session_id"])
