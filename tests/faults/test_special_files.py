"""A FIFO in the workspace: a Read, Write or Edit of it (or of a link to it) ends at once with an
error result the model reads, instead of blocking a worker thread in the kernel forever."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from temporalio.api.enums.v1 import EventType

from durable_agent.cli.sessions import query_workflow_id
from durable_agent.names import Activities
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from tests.faults.harness import ROOT

BOUND_SECONDS = 60
"""The CLI's whole life (start, three model calls, its embedded worker); a hang runs into it."""


def _env(tmp_path: Path, address: str, base_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "TEMPORAL_"))}
    env.update(
        ANTHROPIC_API_KEY="dummy",
        ANTHROPIC_BASE_URL=base_url,
        TEMPORAL_ADDRESS=address,
        DURABLE_AGENT_HOME=str(tmp_path / "home"),
        DURABLE_AGENT_TASK_QUEUE=f"fifo-{uuid.uuid4()}",
        DURABLE_AGENT_WARM_WORKER="0",
        DURABLE_AGENT_SETTINGS=str(tmp_path / "no-user-settings.json"),
        DURABLE_AGENT_MANAGED_SETTINGS=str(tmp_path / "no-managed-settings.json"),
    )
    return env


async def test_tools_on_a_fifo_end_in_seconds_with_an_error_result(dev_env, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    os.mkfifo(ws / "fifo")
    os.symlink("fifo", ws / "link")
    turns = [
        # Read, Grep and Glob run inside the model step (in-step read-only tools).
        tool_turn(
            [
                ("r1", "Read", {"file_path": "fifo"}),
                ("r2", "Read", {"file_path": "link", "offset": 2, "limit": 1}),
                ("g1", "Grep", {"pattern": "x", "path": "fifo"}),
                ("g2", "Grep", {"pattern": "x"}),
                ("l1", "Glob", {"pattern": "*"}),
            ]
        ),
        # Write and Edit run as their own activities.
        tool_turn(
            [
                ("w1", "Write", {"file_path": "fifo", "content": "x"}),
                ("w2", "Write", {"file_path": "link", "content": "x"}),
                ("e1", "Edit", {"file_path": "fifo", "old_string": "a", "new_string": "b"}),
            ]
        ),
        text_turn("done"),
    ]
    address = dev_env.client.service_client.config.target_host
    with ReplayServer(turns) as api:
        args = ["run", "go", "--workspace", str(ws), "--output-format", "json"]
        args += ["--permission-mode", "acceptEdits"]
        began = time.monotonic()
        try:
            proc = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "durable_agent", *args],
                env=_env(tmp_path, address, api.base_url), cwd=ROOT, capture_output=True,
                text=True, timeout=BOUND_SECONDS, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"the CLI hung on a FIFO for {BOUND_SECONDS}s") from exc
        took = time.monotonic() - began
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["terminal"] == "completed"
    assert len(api.requests) == 3 and api.violations == []
    results = {
        b["tool_use_id"]: b
        for request in api.requests[1:]
        for b in request["messages"][-1]["content"]
        if b.get("type") == "tool_result"
    }
    for tid in ("r1", "r2", "g1", "w1", "w2", "e1"):
        assert results[tid].get("is_error"), results[tid]
        expected = "it is a symbolic link to" if tid == "w2" else "not a regular file"
        assert expected in str(results[tid]["content"]), results[tid]
    assert not results["g2"].get("is_error") and not results["l1"].get("is_error")
    assert "fifo" not in str(results["l1"]["content"])  # Glob lists regular files only
    assert took < BOUND_SECONDS / 2, f"took {took:.1f}s"
    # The reads ran inside the model step, where the issue found them hanging: only Write
    # and Edit had activities of their own.
    handle = dev_env.client.get_workflow_handle(query_workflow_id(result["session_id"], 1))
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in (await handle.fetch_history()).events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    # The Write through a link is refused by the permission check: it never runs.
    assert scheduled.count(Activities.RUN_TOOL) == 2, scheduled
