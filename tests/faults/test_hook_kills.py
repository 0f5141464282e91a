"""A worker killed while a user hook runs (a Stop hook; a PreCompact hook inside compaction): the
session recovers within 15 s of the kill, the hook ran once, nothing it started is left running.

The replacement worker is started, and polling, before the kill: the 15 s measure the system
(heartbeat timeout, retry, sticky timeout), not the seconds `python worker.py` takes to import
on a busy machine (5-8 s measured on a loaded 2-core box)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from durable_agent.engine.contracts import SessionInput, SessionStatus
from durable_agent.engine.state import ModelCallConfig, QueryConfig, Terminal
from durable_agent.engine.tool_hooks import tool_hook_settings
from durable_agent.replay import ReplayServer, Turn, text_turn, tool_turn
from tests.faults.harness import WorkerProcess, process_env, transcript_problems, wait_for
from workflows.session import SessionWorkflow

HOOK = "echo x >> hook-marker; sleep 90; echo late >> hook-late"
SUMMARY = "<summary>1. Request and intent: list files. 7. Next step: finish.</summary>"


def _hooks(workspace: Path, event: str) -> None:
    settings = workspace / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    hooks = {event: [{"hooks": [{"type": "command", "command": HOOK, "timeout": 120}]}]}
    settings.write_text(json.dumps({"hooks": hooks}))


def _hook_processes(workspace: Path) -> list[int]:
    """Live processes started as a hook in this workspace (hooks get CLAUDE_PROJECT_DIR)."""
    needle = f"CLAUDE_PROJECT_DIR={workspace}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if needle in environ.split(b"\0"):
                found.append(int(entry.name))
    return found


def _marked(workspace: Path) -> bool:
    marker = workspace / "hook-marker"
    return marker.exists() and marker.read_text() != ""


async def _kill_during_hook(
    own_server, tmp_path: Path, event: str, turns: list[Turn], snapshot: bool = False
) -> tuple[Path, SessionStatus, ReplayServer, float, list[int], list[int], dict[str, str]]:
    """Run a session whose `event` hook marks and sleeps; once it has marked, start a second
    worker, and when that one polls SIGKILL the first; how long the session took after the kill."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("a")
    _hooks(workspace, event)
    task_queue = f"hook-kill-{uuid.uuid4()}"
    with ReplayServer(turns) as api:
        env = process_env(tmp_path, own_server.address, api.base_url, task_queue)
        worker = WorkerProcess(env, tmp_path / "worker.log").start()
        spare = WorkerProcess(env, tmp_path / "spare.log")
        try:
            client = await Client.connect(
                own_server.address, data_converter=pydantic_data_converter
            )
            sid = f"hook-kill-{uuid.uuid4()}"
            config = QueryConfig(workspace=str(workspace))  # default heartbeat timeouts
            if snapshot:  # as the CLI runs it: the hooks from the prompt's settings snapshot
                settings = json.loads((workspace / ".claude" / "settings.json").read_text())
                call = ModelCallConfig(tool_hooks=tool_hook_settings(settings["hooks"]))
                config = QueryConfig(workspace=str(workspace), settings=settings, call=call)
            handle = await client.start_workflow(
                SessionWorkflow.run,
                SessionInput(
                    session_id=sid, config=config, initial_prompt="go", close_when_idle=True
                ),
                id=sid,
                task_queue=task_queue,
            )
            await wait_for(lambda: _marked(workspace), 60, f"the {event} hook to start")
            booting = time.monotonic()
            await spare.start().polling(client, task_queue)
            print(f"the second worker polled after {time.monotonic() - booting:.1f}s")
            assert (workspace / "hook-marker").read_text() == "x\n"  # still in the first worker
            worker.kill_reaper()  # what the takeover ends (the reaper's part: test_tool_kills)
            worker.kill()
            killed_at = time.monotonic()
            orphans = _hook_processes(workspace)
            status = await handle.result()
            recovered = time.monotonic() - killed_at
        finally:
            worker.stop()
            spare.stop()
            left = _end(_hook_processes(workspace))  # the check is below; end them in any case
    return workspace, status, api, recovered, orphans, left, env


def _end(pids: list[int]) -> list[int]:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


def _check_after(workspace: Path, env: dict[str, str], recovered: float, left: list[int]) -> None:
    print(f"recovered {recovered:.1f}s after the kill")
    assert (workspace / "hook-marker").read_text() == "x\n"  # the hook ran once
    assert recovered < 15, f"took {recovered:.1f}s to recover"
    assert left == [], "the lost attempt's hook was still running after the session ended"
    assert not (workspace / "hook-late").exists()
    home = Path(env["DURABLE_AGENT_HOME"])
    assert transcript_problems(next((home / "sessions").glob("*.jsonl"))) == []


async def test_worker_killed_during_a_stop_hook(own_server, tmp_path):
    workspace, status, api, recovered, orphans, left, env = await _kill_during_hook(
        own_server, tmp_path, "Stop", [text_turn("done")]
    )
    assert orphans, "the killed worker's hook should still have been running"
    result = status.last_result
    assert result is not None and result.terminal == Terminal.COMPLETED
    assert result.final_text == "done" and len(api.requests) == 1
    _check_after(workspace, env, recovered, left)


async def test_worker_killed_during_a_pre_compact_hook(own_server, tmp_path):
    turns = [
        tool_turn([("g1", "Glob", {"pattern": "*"})], input_tokens=170_000),  # over the threshold
        text_turn(SUMMARY),
        text_turn("done"),
    ]
    workspace, status, api, recovered, orphans, left, env = await _kill_during_hook(
        own_server, tmp_path, "PreCompact", turns, snapshot=True
    )
    assert orphans, "the killed worker's hook should still have been running"
    result = status.last_result
    assert result is not None and result.terminal == Terminal.COMPLETED
    assert result.compactions == 1 and result.final_text == "done"
    assert len(api.requests) == 3  # one summary request: the retry did not re-summarise
    assert "<summary></summary> tags" in json.dumps(api.requests[1]["messages"][-1])
    _check_after(workspace, env, recovered, left)


async def test_worker_killed_during_a_pre_tool_use_hook(own_server, tmp_path):
    """The lost attempt's PreToolUse verdict is unknown: the hook is not run again, and the
    call it guarded does not run either (an unknown verdict never lets a call through)."""
    turns = [tool_turn([("b1", "Bash", {"command": "echo ran >> tool-marker"})]), text_turn("done")]
    workspace, status, api, recovered, orphans, left, env = await _kill_during_hook(
        own_server, tmp_path, "PreToolUse", turns, snapshot=True
    )
    assert orphans, "the killed worker's hook should still have been running"
    result = status.last_result
    assert result is not None and result.terminal == Terminal.COMPLETED
    assert result.final_text == "done" and len(api.requests) == 2
    assert not (workspace / "tool-marker").exists()
    told = json.dumps(api.requests[1]["messages"][-1])
    assert "Blocked by a PreToolUse hook" in told and "not re-run" in told
    _check_after(workspace, env, recovered, left)
