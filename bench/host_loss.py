"""Seconds from the loss of the machine hosting a session's workspace to the next tool result
the model gets, against a tool result's ordinary round trip measured in the same run.

    uv run python bench/host_loss.py [--rounds 3]

Two `python worker.py` processes (their own state dirs) share a dev server and a PostgreSQL
started for the run. Each round submits a session (`run --no-worker`) whose Bash call marks
where it runs, then sleeps; the worker it runs on is SIGKILLed a second into the sleep and its
home deleted, and a new worker starts so that two stay up. Timed: the kill to the model request
that carries the call's result ("may have run"), and, as the baseline, a quick Bash call's
start to the model request carrying its result."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import dev_env  # noqa: E402
from durable_agent.replay import ReplayServer, Turn, text_turn, tool_turn  # noqa: E402
from tests import postgres  # noqa: E402
from tests.faults.harness import WorkerProcess, process_env, wait_for  # noqa: E402


class Clock:
    """When each session's Bash started (its marker) and when each model request came."""

    def __init__(self, marks: Path) -> None:
        self.marks = marks
        self.requests: dict[str, list[float]] = {}

    def script(self) -> Any:
        def turn(body: dict[str, Any], _index: int) -> Turn:
            first = body["messages"][0]["content"]
            text = first if isinstance(first, str) else first[0]["text"]
            name = text.split()[0]
            self.requests.setdefault(name, []).append(time.monotonic())
            stage = sum(1 for m in body["messages"] if m["role"] == "assistant")
            if stage == 0:
                pause = "sleep 30" if name.startswith("lose") else "true"
                mark = f"echo $PWD > {self.marks}/{name}"
                return tool_turn([("b1", "Bash", {"command": f"{mark} && {pause}"})])
            return text_turn("done")

        return turn


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    opts = ap.parse_args()
    if why := postgres.available():
        sys.exit(f"needs PostgreSQL: {why}")
    tmp = Path(tempfile.mkdtemp(prefix="da-bench-loss-"))
    marks = tmp / "marks"
    marks.mkdir()
    clock = Clock(marks)
    losses: list[float] = []
    baselines: list[float] = []
    with postgres.postgres_server() as pg, ReplayServer(clock.script()) as api:
        async with dev_env() as env:
            address = env.client.service_client.config.target_host
            extra = {"DURABLE_AGENT_STORE": pg.fresh_database()}
            queue = "bench-host-loss"

            def worker(n: int) -> WorkerProcess:
                wenv = process_env(tmp, address, api.base_url, queue, **extra)
                wenv["DURABLE_AGENT_HOME"] = str(tmp / f"host{n}")
                return WorkerProcess(wenv, tmp / f"worker{n}.log").start()

            workers = {n: worker(n) for n in range(2)}
            for w in workers.values():
                await w.polling(env.client, queue)
            cli = process_env(tmp, address, api.base_url, queue, **extra)
            cli["DURABLE_AGENT_HOME"] = str(tmp / "submitter")
            try:
                for r in range(opts.rounds):
                    ws = tmp / f"ws{r}"
                    ws.mkdir()
                    (ws / "a.txt").write_text("a\n")
                    for name in (f"quick{r}", f"lose{r}"):
                        run = asyncio.ensure_future(asyncio.to_thread(_run, cli, ws, name))
                        marker = marks / name
                        await wait_for(marker.exists, 120, f"{name}'s Bash call")
                        started = time.monotonic()
                        if name.startswith("lose"):
                            await asyncio.sleep(1)
                            host = next(n for n in workers
                                        if marker.read_text().startswith(str(tmp / f"host{n}")))  # fmt: skip
                            workers[host].kill()
                            started = time.monotonic()
                            shutil.rmtree(tmp / f"host{host}", ignore_errors=True)
                            workers[host + 10] = worker(host + 10)
                            del workers[host]
                        proc = await run
                        if proc.returncode != 0:
                            sys.exit(f"{name} failed: {proc.stderr[-2000:]}")
                        took = clock.requests[name][1] - started
                        (losses if name.startswith("lose") else baselines).append(took)
            finally:
                for w in workers.values():
                    w.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    loss, base = statistics.median(losses), statistics.median(baselines)
    print(f"host lost -> next tool result: {loss:6.1f} s  (median of {len(losses)}: "
          + ", ".join(f"{x:.1f}" for x in losses) + ")")  # fmt: skip
    print(f"ordinary tool round trip:      {base:6.2f} s  (median of {len(baselines)})")
    print(f"ratio: {loss / base:.0f}x (the heartbeat timeout, 5 s, then the host's start timeout, "
          "15 s, then a new host materialises the checkpoint)")  # fmt: skip


def _run(env: dict[str, str], ws: Path, name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_agent", "run", f"{name} go", "--workspace", str(ws),
         "--no-worker", "--allowedTools", "Bash"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
