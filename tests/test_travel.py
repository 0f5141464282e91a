"""Travelling workspaces: with a shared store, a session submitted from one machine runs its
tools on a worker of another (its own state dir, no access to the submitter's directory), in a
copy made from the uploaded snapshot; the files the model left come back to the submitter."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess

import pytest

from durable_agent.replay import ReplayServer, text_turn, tool_turn
from durable_agent.store.postgres import PostgresStore
from durable_agent.wiring import build_worker
from tests.helpers import replay_client_factory
from tests.test_cli import cli_env, durable_agent


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
