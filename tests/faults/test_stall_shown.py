"""A prompt whose step the worker keeps failing (its store cannot take the answer: a file-size
limit, as a full disk) shows nothing new for as long as the step is retried; the CLI says what
it waits for, and finishes once the store takes writes again."""

from __future__ import annotations

import asyncio
import resource
import subprocess
import sys
import uuid
from typing import IO

from durable_agent.replay import ReplayServer, text_turn
from tests.faults.harness import ROOT, WorkerProcess, process_env, wait_for
from tests.faults.test_store_faults import _small_files


def _run(args: list[str], env: dict[str, str], err: IO[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "durable_agent", "run", *args], cwd=ROOT, env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True,
    )  # fmt: skip


async def test_the_cli_says_which_step_keeps_failing_and_why(own_server, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    task_queue = f"stall-{uuid.uuid4()}"
    with ReplayServer([text_turn("a long answer " * 1500)]) as api:
        env = process_env(
            tmp_path, own_server.address, api.base_url, task_queue,
            DURABLE_AGENT_IDLE_HINT_SECONDS="2",
        )  # fmt: skip
        worker = WorkerProcess(env, tmp_path / "worker.log")
        worker.start(preexec_fn=_small_files)
        err_path = tmp_path / "cli.err"
        try:
            with err_path.open("w") as err:
                cli = _run(["go", "--no-worker", "--workspace", str(workspace)], env, err)
                said = "the session's transcript could not be written"
                await wait_for(lambda: said in err_path.read_text(), 45, "the CLI to say why")
                assert worker.proc is not None
                unlimited = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
                resource.prlimit(worker.proc.pid, resource.RLIMIT_FSIZE, unlimited)
                out, _ = await asyncio.to_thread(cli.communicate, timeout=60)
        finally:
            worker.stop()
    shown = err_path.read_text()
    assert cli.returncode == 0, shown[-2000:]
    line = next(x for x in shown.splitlines() if said in x)
    assert line.startswith("waiting for: ") and "(attempt " in line, line
    assert "File too large" in line, line
    assert "a long answer" in out
