"""The shared store goes down mid-session: the model's answer, received while it is down, is
kept by the worker and stored when it comes back (the API is not called again); meanwhile
`status` says, in one line, which store failed; the session then completes with every entry
stored once."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from durable_agent.replay import ReplayServer, Turn, text_turn, tool_turn
from durable_agent.store.postgres import PostgresStore
from tests import postgres
from tests.faults.harness import ROOT, WorkerProcess, process_env, transcript_problems, wait_for


async def test_a_store_outage_is_a_status_line_and_loses_nothing(dev_env, tmp_path, pg_server):
    del pg_server  # the suite's server: PostgreSQL is installed (or the test is skipped)
    address = dev_env.client.service_client.config.target_host
    answered = threading.Event()
    release = threading.Event()
    turns = [tool_turn([("b1", "Bash", {"command": "echo hi > out.txt"})]), text_turn("Done.")]

    def script(body: dict[str, Any], index: int) -> Turn:
        if index == 1:  # the second call: the store goes down before its answer is stored
            answered.set()
            release.wait(60)
        return turns[index]

    ws = tmp_path / "ws"
    ws.mkdir()
    with postgres.postgres_server() as pg, ReplayServer(script) as api:
        url = pg.fresh_database()
        queue = f"outage-{tmp_path.name}"
        env = process_env(tmp_path, address, api.base_url, queue, DURABLE_AGENT_STORE=url)
        worker = WorkerProcess(env, tmp_path / "worker.log").start()
        try:
            await worker.polling(dev_env.client, queue)
            cli = {**env, "DURABLE_AGENT_HOME": str(tmp_path / "cli-home"), "PYTHONPATH": str(ROOT)}
            run = asyncio.ensure_future(
                asyncio.to_thread(
                    _cli,
                    [
                        "run",
                        "go",
                        "--workspace",
                        str(ws),
                        "--no-worker",
                        "--allowedTools",
                        "Bash",
                        "--output-format",
                        "json",
                    ],
                    cli,
                )  # fmt: skip
            )
            await wait_for(answered.is_set, 120, "the second model call")
            pg.stop()
            release.set()
            session_id = await _session_of(dev_env, queue)
            line = ""

            def said() -> bool:
                nonlocal line
                status = _cli(["status", session_id], cli)
                line = status.stdout + status.stderr
                return f"127.0.0.1:{pg.port}" in line and "could not be written" in line

            try:
                await wait_for(said, 90, "status naming the store")
            except AssertionError as exc:
                raise AssertionError(f"{exc}; status said:\n{line}") from None
            assert "Traceback" not in line
            pg.start()
            proc = await asyncio.wait_for(run, 180)
        finally:
            worker.stop()
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        assert result["terminal"] == "completed"
        assert len(api.requests) == 2  # the answer received during the outage was kept
        store = PostgresStore(tmp_path / "reader", url)
        path = store.local_transcript(result["session_id"])
        assert transcript_problems(path) == []
        uuids = [json.loads(x)["uuid"] for x in path.read_text().splitlines()]
        assert len(uuids) == len(set(uuids)) == 4
        store.db.close()
    print(f"status during the outage: {line.strip().splitlines()[-1]}")


async def _session_of(dev_env: Any, queue: str) -> str:
    found: list[str] = []

    async def look() -> None:
        async for wf in dev_env.client.list_workflows(f'TaskQueue="{queue}"'):
            if "-q" not in wf.id:
                found.append(wf.id)

    for _ in range(100):
        await look()
        if found:
            return found[0]
        await asyncio.sleep(0.2)
    raise AssertionError("no session on the queue")


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_agent", *args], cwd=Path(ROOT), env=env,
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
