"""Sessions per worker: N concurrent sessions of 5 turns at 1 s model latency on one worker.

One `python worker.py` process (the product's worker, as an operator runs it) serves every
session; the embedded dev server and the fake Messages API (each answer held back --latency
seconds before its first event) run beside it. A session's prompt gets 4 `Read` turns then a
text answer: 5 model calls, so the ideal completion time of any number of sessions is
5 × latency. For each N it prints:

- completion time (all N started at once, to the last one finished) vs that ideal;
- failures (a session that did not complete);
- CPU ms per turn of the worker and of the dev server (their /proc counters over the round);
- the worker's RSS: idle (after a warm-up round), at the end of the round, and after the
  sessions ended (--settle seconds later: what the worker keeps), and whether the worker
  recycled itself meanwhile (DURABLE_AGENT_RECYCLE_ABOVE; then the RSS after is the fresh
  process's, read once it serves again; `--recycle-above 0` turns recycling off).

The worker may run --concurrency activities at once (DURABLE_AGENT_MAX_CONCURRENT_ACTIVITIES,
the worker's default: 50, which caps 500 sessions waiting 1 s a call at 50 calls a second;
with 500 the worker's loop falls behind its heartbeats and model calls are retried).

    uv run python bench/sessions_per_worker.py [--sessions 50 200 500] [--latency 1.0]

With --fleet K..., the store is a real PostgreSQL (tests/postgres.py) and each K is a round
of --sessions (its first count) served by K `python worker.py` processes on the one task
queue, each with its own state dir: completion time and its ratio to the first K's.

    uv run python bench/sessions_per_worker.py --fleet 1 3 --sessions 200
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))

from bench.common import cpu_seconds, dev_env, dev_server_pid  # noqa: E402
from durable_agent.replay import ReplayServer, Turn, text_turn, tool_turn  # noqa: E402
from tests.helpers import free_port, start_session, start_worker_logged, worker_env  # noqa: E402

READS = 4
CLI_CONFIG: dict[str, object] = {"settings": {}}
"""As the CLI starts a session: with its settings snapshot (here: no settings files), from which
the workflow knows there are no Stop hooks to run."""
FILE = "notes.txt"


class Script:
    """A session's n-th call (its request has n-1 assistant messages): a Read, or the end."""

    def __init__(self, latency: float) -> None:
        self.latency = latency

    def __call__(self, body: dict[str, Any], index: int) -> Turn:
        done = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        if done < READS:
            turn = tool_turn([(f"r{done}", "Read", {"file_path": FILE})])
        else:
            turn = text_turn("done")
        return turn.model_copy(update={"pause_before": {0: self.latency}})


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def wait_ready(health: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the worker exited:\n{log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"the worker did not become ready:\n{log.read_text()[-2000:]}")


async def round_of(client: Any, queue: str, ws: Path, sessions: int) -> tuple[float, int]:
    """(seconds from the first start to the last end, failures)."""
    began = time.monotonic()
    started = await asyncio.gather(
        *(
            start_session(client, ws, queue, f"read {FILE}", prefix="bench", config=CLI_CONFIG)
            for _ in range(sessions)
        )
    )
    results = await asyncio.gather(*(h.result() for _, h in started), return_exceptions=True)
    elapsed = time.monotonic() - began
    failures = 0
    for status in results:
        if isinstance(status, BaseException):
            failures += 1
            continue
        last = status.last_result
        if last is None or last.terminal.value != "completed" or last.turn_count != READS + 1:
            failures += 1
    return elapsed, failures


RECYCLE = "DURABLE_AGENT_RECYCLE_ABOVE"
RECYCLED = "drained; starting afresh"
"""What the worker prints when it has replaced itself with a fresh process (operating.py)."""


async def main(
    counts: list[int],
    latency: float,
    concurrency: int,
    settle: float,
    recycle_above: str | None = None,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        (ws / FILE).write_text("".join(f"line {i}\n" for i in range(1, 21)))
        home, log = Path(tmp) / "home", Path(tmp) / "worker.log"
        queue = f"bench-sessions-{uuid.uuid4()}"
        health = free_port()
        async with dev_env() as env:
            server_pid = dev_server_pid()
            address = env.client.service_client.config.target_host
            with ReplayServer(Script(latency)) as api:
                worker_vars = worker_env(
                    api.base_url, home, queue, address,
                    DURABLE_AGENT_MAX_CONCURRENT_ACTIVITIES=str(concurrency),
                    DURABLE_AGENT_HEALTH_ADDRESS=f"127.0.0.1:{health}",
                    DURABLE_AGENT_DRAIN_SECONDS="0",
                    **({} if recycle_above is None else {RECYCLE: recycle_above}),
                )  # fmt: skip
                print(f"worker recycling: {RECYCLE}={worker_vars.get(RECYCLE, 'its default')}")
                worker = start_worker_logged(worker_vars, log)
                try:
                    wait_ready(health, worker, log)
                    await round_of(env.client, queue, ws, 5)  # imports, sandbox, connections
                    await asyncio.sleep(settle)
                    idle = rss_mb(worker.pid)
                    print(f"worker RSS idle (after a warm-up of 5 sessions): {idle:.0f} MB")
                    print(
                        f"{'sessions':>8} {'time':>7} {'ideal':>6} {'ratio':>6} {'fail':>5}"
                        f" {'worker ms/turn':>15} {'server ms/turn':>15}"
                        f" {'RSS end':>8} {'RSS after':>10} {'after/idle':>10} {'recycled':>8}"
                    )
                    for n in counts:
                        w0, s0 = cpu_seconds(worker.pid), cpu_seconds(server_pid)
                        elapsed, failures = await round_of(env.client, queue, ws, n)
                        w1, s1 = cpu_seconds(worker.pid), cpu_seconds(server_pid)
                        end = rss_mb(worker.pid)
                        recycles = log.read_text().count(RECYCLED)
                        await asyncio.sleep(settle)
                        recycled = log.read_text().count(RECYCLED) > recycles
                        if recycled:  # the same pid, a fresh process: read it once it serves
                            await asyncio.to_thread(wait_ready, health, worker, log)
                            await asyncio.sleep(2)
                        after = rss_mb(worker.pid)
                        turns = n * (READS + 1)
                        ideal = (READS + 1) * latency
                        print(
                            f"{n:>8} {elapsed:>6.1f}s {ideal:>5.1f}s {elapsed / ideal:>5.1f}x"
                            f" {failures:>5} {(w1 - w0) * 1000 / turns:>15.1f}"
                            f" {(s1 - s0) * 1000 / turns:>15.1f} {end:>7.0f}M {after:>9.0f}M"
                            f" {after / idle:>10.2f} {'yes' if recycled else 'no':>8}",
                            flush=True,
                        )
                finally:
                    worker.terminate()
                    worker.wait(timeout=60)


async def fleet_main(sizes: list[int], sessions: int, latency: float, concurrency: int) -> None:
    from tests import postgres

    if postgres.available() is not None:
        raise SystemExit(f"--fleet needs PostgreSQL: {postgres.available()}")
    with tempfile.TemporaryDirectory() as tmp, postgres.postgres_server() as pg:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        (ws / FILE).write_text("".join(f"line {i}\n" for i in range(1, 21)))
        async with dev_env() as env:
            server_pid = dev_server_pid()
            address = env.client.service_client.config.target_host
            print(f"{sessions} sessions of {READS + 1} turns at {latency:g} s, store PostgreSQL")
            print(f"{'workers':>7} {'time':>7} {'ratio':>6} {'fail':>5} {'server ms/turn':>15}")
            first = None
            with ReplayServer(Script(latency)) as api:
                for k in sizes:
                    queue = f"bench-fleet-{uuid.uuid4()}"
                    store = pg.fresh_database()
                    workers = []
                    try:
                        for i in range(k):
                            health = free_port()
                            home, log = Path(tmp) / f"home-{k}-{i}", Path(tmp) / f"w-{k}-{i}.log"
                            worker_vars = worker_env(
                                api.base_url, home, queue, address,
                                DURABLE_AGENT_MAX_CONCURRENT_ACTIVITIES=str(concurrency),
                                DURABLE_AGENT_HEALTH_ADDRESS=f"127.0.0.1:{health}",
                                DURABLE_AGENT_DRAIN_SECONDS="0",
                                DURABLE_AGENT_STORE=store,
                            )  # fmt: skip
                            workers.append(start_worker_logged(worker_vars, log))
                            wait_ready(health, workers[-1], log)
                        await round_of(env.client, queue, ws, 5)
                        s0 = cpu_seconds(server_pid)
                        elapsed, failures = await round_of(env.client, queue, ws, sessions)
                        server_ms = (cpu_seconds(server_pid) - s0) * 1000 / (sessions * (READS + 1))
                    finally:
                        for worker in workers:
                            worker.terminate()
                        for worker in workers:
                            worker.wait(timeout=60)
                    first = first or elapsed
                    print(
                        f"{k:>7} {elapsed:>6.1f}s {elapsed / first:>5.2f}x {failures:>5}"
                        f" {server_ms:>15.1f}",
                        flush=True,
                    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[50, 200, 500])
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds before RSS is read")
    parser.add_argument(
        "--recycle-above",
        help="the worker's DURABLE_AGENT_RECYCLE_ABOVE (0: never recycle; default: its own)",
    )
    parser.add_argument("--fleet", type=int, nargs="+", help="workers per round, on PostgreSQL")
    ns = parser.parse_args()
    if ns.fleet:
        asyncio.run(fleet_main(ns.fleet, ns.sessions[0], ns.latency, ns.concurrency))
    else:
        asyncio.run(main(ns.sessions, ns.latency, ns.concurrency, ns.settle, ns.recycle_above))
