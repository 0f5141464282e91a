"""The shared store end to end: sessions run by one machine are resumed, forked and shown by
another that has only the store's URL and the Temporal address (its own, empty state dir)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import psycopg

from durable_agent.engine.state import Terminal
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from tests.helpers import run_session
from tests.test_claude_cli import env_for, workspace
from tests.test_cli import durable_agent
from workflows.session import query_workflow_id


def run_p(env: dict[str, str], cwd: Path, *flags: str, stdin: str | None = None) -> dict[str, Any]:
    proc = subprocess.run(
        ["durable-agent", "-p", *flags, "--output-format", "json"], cwd=cwd, env=env,
        capture_output=True, text=True, timeout=120, input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def test_another_machine_resumes_forks_and_shows_a_session_from_the_store(
    dev_env, tmp_path, pg_url
):
    big = "x" * 5000
    turns = [
        tool_turn([("b1", "Bash", {"command": f"printf '{big}'"})], "Running it."),
        text_turn("Noted: blue."),
        text_turn("Blue, as you said."),
        text_turn("Forked: blue."),
    ]
    with ReplayServer(turns) as server:
        env = env_for(dev_env, tmp_path, server)
        env["DURABLE_AGENT_STORE"] = pg_url
        ws = workspace(tmp_path)
        first = run_p(env, ws, "remember: blue", "--allowedTools", "Bash")
        other = {**env, "DURABLE_AGENT_HOME": str(tmp_path / "other-machine")}
        resumed = run_p(other, ws, "what colour?", "--resume", first["session_id"])
        forked = run_p(
            other, ws, "and the fork?", "--resume", first["session_id"], "--fork-session"
        )
        status = durable_agent(["status", first["session_id"]], other)
    assert resumed["session_id"] == first["session_id"] != forked["session_id"]
    assert len(server.requests) == 4
    seen = str(server.requests[2]["messages"])
    assert "remember: blue" in seen and "Noted: blue." in seen and big in seen
    assert "remember: blue" in str(server.requests[3]["messages"])
    assert status.returncode == 0, status.stderr
    assert "completed" in status.stdout and "in the store" not in status.stderr
    # Nothing of the sessions was written under either machine's state dir: it is all shared.
    for home in (tmp_path / "home", tmp_path / "other-machine"):
        assert not list(home.glob("sessions/*.jsonl")), list(home.glob("sessions/*"))
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT count(*) FROM entries WHERE session_id = %s", (first["session_id"],)
        ).fetchone()
    assert rows is not None and rows[0] == 6  # prompt, tool call, result, answer, prompt, answer


async def test_an_oversized_payload_travels_through_the_store(
    dev_env, tmp_path, pg_url, workspace, task_queue
):
    """A 300 KB system prompt in the workflow's input: offloaded as a blob of the shared store
    (not a file of the state dir), read back by the worker, the history small."""
    from temporalio.client import Client

    from durable_agent.payloads import data_converter
    from durable_agent.store.postgres import PostgresStore

    env = {"DURABLE_AGENT_STORE": pg_url}
    client = await Client.connect(
        dev_env.client.service_client.config.target_host,
        data_converter=data_converter(tmp_path / "home", env),
    )
    store = PostgresStore(tmp_path / "worker-home", pg_url)
    huge = "Project rules. " * 20_000
    with ReplayServer([text_turn("ok")]) as server:
        sid, status = await run_session(
            client, server, store, workspace, "go", task_queue, system_prompt=huge
        )
    assert status.last_result is not None and status.last_result.terminal == Terminal.COMPLETED
    assert huge in server.requests[0]["system"][0]["text"]
    assert not (tmp_path / "home" / "payloads").exists()
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT count(*) FROM blobs WHERE length(data) > 262144").fetchone()
    assert row is not None and row[0] >= 1
    history = await client.get_workflow_handle(query_workflow_id(sid, 1)).fetch_history()
    assert max(e.ByteSize() for e in history.events) < 64 * 1024
    assert [e.uuid for e in store.chain(sid, status.head_uuid)][-1] == status.head_uuid
    store.db.close()
