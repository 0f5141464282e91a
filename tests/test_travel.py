"""Travelling workspaces: with a shared store, a session submitted from one machine runs its
tools on a worker of another (its own state dir, no access to the submitter's directory), in a
copy made from the uploaded snapshot; the files the model left come back to the submitter."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from durable_agent.replay import ReplayServer, text_turn, tool_turn
from durable_agent.store.postgres import PostgresStore
from durable_agent.wiring import build_worker
from tests.helpers import replay_client_factory
from tests.test_claude_cli import env_for
from tests.test_cli import cli_env, durable_agent
from tests.test_shared_store import run_p


async def test_a_session_runs_its_tools_on_another_machine_and_its_files_come_back(
    dev_env, tmp_path, pg_url
):
    ws = tmp_path / "submitter" / "project"
    ws.mkdir(parents=True)
    (ws / "greet.py").write_text("print('helo')\n")
    (ws / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (ws / "run.sh").chmod(0o755)
    (ws / ".gitignore").write_text("build/\n")
    (ws / "build").mkdir()
    (ws / "build" / "big.o").write_text("ignored")
    seen = tmp_path / "seen-by-the-tool"  # written by the shell itself: paths not mapped
    turns = [
        tool_turn(
            [
                (
                    "e1",
                    "Edit",
                    {
                        "file_path": str(ws / "greet.py"),
                        "old_string": "helo",
                        "new_string": "hello",
                    },
                )
            ]
        ),  # fmt: skip
        tool_turn(
            [
                (
                    "b1",
                    "Bash",
                    {
                        "command": f"cd {ws} && ./run.sh && pwd && rm run.sh "
                        f"&& pwd > {seen} && ls -A >> {seen}"
                    },
                )
            ]
        ),
        tool_turn([("w1", "Write", {"file_path": f"{ws}/notes.md", "content": "done\n"})]),
        text_turn("Fixed."),
    ]
    env = cli_env(
        tmp_path,
        ANTHROPIC_API_KEY="dummy",
        TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
        DURABLE_AGENT_STORE=pg_url,
    )
    worker_home = tmp_path / "worker-home"
    store = PostgresStore(worker_home, pg_url)
    with ReplayServer(turns) as server:
        env["ANTHROPIC_BASE_URL"] = server.base_url
        worker = build_worker(
            dev_env.client, env["DURABLE_AGENT_TASK_QUEUE"], store, replay_client_factory(server)
        )
        async with worker:
            proc = await _run(
                env,
                ["run", "fix it", "--workspace", str(ws), "--no-worker", "--output-format",
                 "json", "--permission-mode", "acceptEdits", "--allowedTools", "Bash"],
            )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["terminal"] == "completed", result
    # The tools ran in the worker's copy; the model saw its own paths, never the copy's.
    bash_result = server.requests[2]["messages"][-1]["content"][0]
    assert bash_result["content"] == f"ran\n{ws}", bash_result
    assert str(worker_home) not in json.dumps(server.requests)
    where, *listing = seen.read_text().splitlines()
    assert where.startswith(str(worker_home / "workspaces")), where
    assert sorted(listing) == [".gitignore", "greet.py"]  # build/ is ignored: never sent
    assert not any((worker_home / "workspaces").rglob("*.py"))  # the copy went with the session
    # ... and the files came back.
    assert (ws / "greet.py").read_text() == "print('hello')\n"
    assert (ws / "notes.md").read_text() == "done\n"
    assert not (ws / "run.sh").exists()
    assert (ws / "build" / "big.o").read_text() == "ignored"
    assert "wrote back 3 files (1 added, 1 changed, 1 deleted)" in proc.stderr
    store.db.close()


async def _run(env: dict[str, str], args: list[str]) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(durable_agent, args, env)


@pytest.fixture(autouse=True)
def _no_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DURABLE_AGENT_STORE", raising=False)
    assert "DURABLE_AGENT_STORE" not in os.environ


def tree_hashes(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under `root` (but .gitignore'd build/): its content hash and mode."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_file() and not rel.startswith("build/"):
            out[rel] = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mode)
    return out


def test_rewind_restores_the_files_as_they_were_before_a_prompt(dev_env, tmp_path, pg_url):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("first\n")
    (ws / "b.txt").write_text("bee\n")
    (ws / ".gitignore").write_text("build/\n")
    turns = [
        tool_turn([("w1", "Write", {"file_path": "c.txt", "content": "sea\n"})]),
        text_turn("Wrote c."),
        tool_turn([("b1", "Bash", {"command": "rm b.txt && chmod +x c.txt && echo 2 >> a.txt"})]),
        text_turn("Changed them."),
    ]
    with ReplayServer(turns) as server:
        env = env_for(dev_env, tmp_path, server)
        env["DURABLE_AGENT_STORE"] = pg_url
        original = tree_hashes(ws)
        first = run_p(env, ws, "write c", "--permission-mode", "acceptEdits")
        after_first = tree_hashes(ws)
        run_p(env, ws, "change", "--resume", first["session_id"], "--allowedTools", "Bash")
    assert "c.txt" in after_first and after_first != original
    changed = tree_hashes(ws)
    assert "b.txt" not in changed and changed != after_first
    (ws / "build").mkdir()
    (ws / "build" / "out.o").write_text("ignored: rewind leaves it")
    sid = first["session_id"]

    back = durable_agent(["rewind", sid, "--to", "2", "--workspace", str(ws)], env)
    assert back.returncode == 0, back.stderr
    assert tree_hashes(ws) == after_first, back.stdout
    assert "as before prompt 2" in back.stdout
    back = durable_agent(["rewind", sid, "--to", "1"], env)  # the session's own workspace
    assert back.returncode == 0, back.stderr
    assert tree_hashes(ws) == original
    assert (ws / "build" / "out.o").exists()
    missing = durable_agent(["rewind", sid, "--to", "9"], env)
    assert missing.returncode == 2 and "has no prompt 9" in missing.stderr, missing.stderr


async def test_a_travelling_session_claims_a_host_and_checkpoints_each_batch(
    dev_env, tmp_path, pg_url, task_queue
):
    """In-process (its histories are kept for replay): the claim on the shared queue, the
    tools on the host's queue, a checkpoint after the batch that wrote, none after the read."""
    from durable_agent.workspace import load_manifest, snapshot, store_manifest
    from tests.helpers import record_histories, start_session

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    store = PostgresStore(tmp_path / "host-home", pg_url)
    base = store_manifest(snapshot(ws, store.blobs()), store.blobs())
    turns = [
        tool_turn([("w1", "Write", {"file_path": str(ws / "b.txt"), "content": "b\n"})]),
        tool_turn([("r1", "Read", {"file_path": str(ws / "b.txt")})]),
        text_turn("Done."),
    ]
    with ReplayServer(turns) as server:
        worker = build_worker(dev_env.client, task_queue, store, replay_client_factory(server))
        async with worker:
            sid, handle = await start_session(dev_env.client, ws, task_queue, checkpoint_id=base)
            status = await handle.result()
    await record_histories(dev_env.client, sid)
    result = status.last_result
    assert result is not None and result.workspace is not None, status
    assert result.workspace.host_queue and result.workspace.host_queue.startswith(task_queue)
    final = load_manifest(result.workspace.checkpoint_id, store.blobs())
    assert sorted(final.files) == ["a.txt", "b.txt"]
    assert not (ws / "b.txt").exists()  # the tools wrote the host's copy, not this folder
    read = server.requests[2]["messages"][-1]["content"][0]["content"]
    assert "b" in str(read)
    history = await dev_env.client.get_workflow_handle(f"{sid}-q1").fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled.count("claim_workspace_host") == 1
    assert scheduled.count("checkpoint_workspace") == 1
    store.db.close()


async def test_a_travelling_sessions_mcp_connections_are_closed_on_its_host(
    dev_env, tmp_path, pg_url, task_queue
):
    """Its MCP calls run on the workspace's host, which opens its own connections: the tools
    are listed (then let go) wherever the session's step runs, and the session's end closes
    the connections on the host, not on whichever worker takes the shared queue's task."""
    import sysconfig

    from durable_agent.workspace import snapshot, store_manifest
    from tests.helpers import start_session

    ws = tmp_path / "ws"
    ws.mkdir()
    store = PostgresStore(tmp_path / "host-home", pg_url)
    base = store_manifest(snapshot(ws, store.blobs()), store.blobs())
    time_server = {
        "name": "time",
        "command": str(Path(sysconfig.get_path("scripts")) / "mcp-server-time"),
        "args": ["--local-timezone", "UTC"],
    }
    call = ("t1", "mcp__time__get_current_time", {"timezone": "UTC"})
    turns = [tool_turn([call]), text_turn("Done.")]
    with ReplayServer(turns) as server:
        worker = build_worker(dev_env.client, task_queue, store, replay_client_factory(server))
        async with worker:
            config = {"mcp_servers": [time_server]}
            sid, handle = await start_session(
                dev_env.client, ws, task_queue, checkpoint_id=base, config=config
            )
            status = await handle.result()
    result = status.last_result
    assert result is not None and result.workspace is not None, status
    host = result.workspace.host_queue
    assert host and host != task_queue
    answered = server.requests[1]["messages"][-1]["content"][0]
    assert not answered.get("is_error") and "UTC" in json.dumps(answered), answered
    history = await handle.fetch_history()
    queues, outcomes = {}, {}
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            sched = event.activity_task_scheduled_event_attributes
            queues[event.event_id] = (sched.activity_type.name, sched.task_queue.name)
        if event.HasField("activity_task_completed_event_attributes"):
            done = event.activity_task_completed_event_attributes
            data = done.result.payloads[0].data if done.result.payloads else b"{}"
            outcomes[queues[done.scheduled_event_id][0]] = json.loads(data)
    placed = dict(queues.values())
    assert placed["connect_mcp_servers"] == task_queue
    assert placed["close_mcp_session"] == host
    assert outcomes["close_mcp_session"] == {"closed": 1}  # the one the host's call opened
    store.db.close()


async def test_a_sub_agents_copy_of_a_travelling_workspace_goes_with_the_session(
    dev_env, tmp_path, pg_url, task_queue
):
    """A sub-agent works in a copy of its own on the host (its session id's), made from the
    parent's checkpoint; its changes come back as the parent's checkpoint, and when the session
    ends no copy is left under the host's home: neither the parent's nor the sub-agent's."""
    from typing import Any

    from durable_agent.replay import Turn
    from durable_agent.workspace import load_manifest, snapshot, store_manifest
    from tests.helpers import start_session

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    store = PostgresStore(tmp_path / "host-home", pg_url)
    base = store_manifest(snapshot(ws, store.blobs()), store.blobs())
    parent = [
        tool_turn([("a1", "Agent", {"description": "d", "prompt": "write c.txt"})]),
        text_turn("parent done"),
    ]
    child = [
        tool_turn([("w1", "Write", {"file_path": str(ws / "c.txt"), "content": "c\n"})]),
        text_turn("child wrote c.txt"),
    ]

    def route(body: dict[str, Any], index: int) -> Turn:
        first = body["messages"][0]["content"][0].get("text")
        return child.pop(0) if first == "write c.txt" else parent.pop(0)

    with ReplayServer(route) as server:
        worker = build_worker(dev_env.client, task_queue, store, replay_client_factory(server))
        async with worker:
            _, handle = await start_session(dev_env.client, ws, task_queue, checkpoint_id=base)
            status = await handle.result()
    result = status.last_result
    assert result is not None and result.workspace is not None, status
    assert result.final_text == "parent done"
    final = load_manifest(result.workspace.checkpoint_id, store.blobs())
    assert sorted(final.files) == ["a.txt", "c.txt"]  # the sub-agent's file is the session's
    left = sorted(p.name for p in (tmp_path / "host-home" / "workspaces").iterdir())
    assert left == []
    store.db.close()


async def test_a_host_drops_the_copies_of_ended_sessions_it_was_left_with(
    dev_env, tmp_path, pg_url, task_queue
):
    """A former host (the session moved away, or it was down when the session ended) keeps
    its copies: its worker process sweeps them (`Workers.run`: at start, then every
    WORKSPACE_SWEEP_SECONDS), dropping those of ended sessions (a sub-agent's with its
    session's) and keeping a running session's, one in use and one Temporal does not know
    (until unused for a week)."""
    from durable_agent.operating import WorkerSettings
    from durable_agent.wiring import Workers, session_open
    from durable_agent.workspace import snapshot, store_manifest
    from tests.helpers import start_session

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    store = PostgresStore(tmp_path / "host-home", pg_url)
    base = store_manifest(snapshot(ws, store.blobs()), store.blobs())
    settings = WorkerSettings(drain_seconds=0, workspace_sweep_seconds=0.2)
    with ReplayServer([text_turn("Done."), text_turn("Done.")]) as server:
        worker = build_worker(
            dev_env.client, task_queue, store, replay_client_factory(server), settings=settings
        )
        assert isinstance(worker, Workers) and worker.hosts is not None
        hosts = worker.hosts
        runner = asyncio.ensure_future(worker.run())
        running, open_handle = await start_session(
            dev_env.client, ws, task_queue, close_when_idle=False
        )
        ended, handle = await start_session(dev_env.client, ws, task_queue)
        try:
            await handle.result()
            assert await session_open(dev_env.client, ended) is False
            assert await session_open(dev_env.client, running) is True
            assert await session_open(dev_env.client, "never-started") is None
            for copy_for in [ended, f"{ended}.agent-a1", running, "never-started"]:
                await asyncio.to_thread(hosts.ensure, copy_for, base)
            kept = sorted([running, "never-started"])
            for _ in range(100):
                if sorted(hosts.held().values()) == kept:
                    break
                await asyncio.sleep(0.1)
            assert sorted(hosts.held().values()) == kept
            with hosts._lock(running):  # a step is using it: never dropped, whatever its session
                assert not hosts.drop_unused(running)
            assert sorted(hosts.held().values()) == kept
            # A session Temporal does not know: its copy goes once unused for a week.
            week_ago = time.time() - 8 * 24 * 3600
            os.utime(tmp_path / "host-home" / "workspaces" / "never-started" / "at.json",
                     (week_ago, week_ago))  # fmt: skip
            for _ in range(100):
                if "never-started" not in hosts.held().values():
                    break
                await asyncio.sleep(0.1)
            assert sorted(hosts.held().values()) == [running]
        finally:
            await open_handle.terminate()
            for each in worker.group:
                await each.shutdown()
            await runner
    store.db.close()


async def test_the_sweep_never_drops_a_copy_a_step_works_in_or_a_tool_changed(tmp_path, pg_url):
    """The sweep asks Temporal once per session and acts later (after slow deletions): a
    session resumed meanwhile had its copy deleted under its running Bash (a fault campaign:
    2 of 10 tries with a 250,000-file sub-agent copy listed first; the tool's change was lost).
    A step now holds the copy it works in, and a tool that may change files keeps it from the
    sweep until the next checkpoint holds the change."""
    from activities.workspace import WorkspaceHosts, sweep
    from durable_agent.workspace import snapshot, store_manifest

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    store = PostgresStore(tmp_path / "host-home", pg_url)
    try:
        base = store_manifest(snapshot(ws, store.blobs()), store.blobs())
        hosts = WorkspaceHosts(store, "q/host-x")

        async def closed(_: str) -> bool:  # what the sweep heard before the session resumed
            return False

        async with hosts.in_copy("s1", base, changes=True) as tree:
            (tree / "a.txt").write_text("changed by the resumed session's Bash\n")
            assert await sweep(hosts, closed) == 0
            assert (tree / "a.txt").exists()
        assert await sweep(hosts, closed) == 0  # changed since its checkpoint: kept
        assert (tree / "a.txt").read_text() == "changed by the resumed session's Bash\n"
        await asyncio.to_thread(hosts.checkpoint, "s1", base)
        assert await sweep(hosts, closed) == 1  # at rest at its checkpoint: it may go
        assert not tree.exists()

        async with hosts.in_copy("s2", base) as tree:  # a read-only step (a Read, a hook)
            assert await sweep(hosts, closed) == 0
            assert (tree / "a.txt").read_text() == "a\n"
        assert await sweep(hosts, closed) == 1
        # The session's own end drops its copy whatever a step left (it has ended).
        async with hosts.in_copy("s3", base, changes=True):
            pass
        await asyncio.to_thread(hosts.drop, "s3")
        assert hosts.held() == {}
    finally:
        store.db.close()
