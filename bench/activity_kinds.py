"""What a loop turn costs by the kind of step it runs: two activities (the floor of
`loop_overhead.py`), one activity (the durable loop's turn today: the model step, a Read inside
it), one local activity (a direction not taken yet, measured here to decide on it).

A bare workflow runs N turns of no-op steps on the embedded dev server; for each kind: ms per
turn, and the dev server's and this process's (the worker's) CPU ms per turn from /proc, the
three kinds interleaved after a warm-up round, medians of --repeats runs, with ratios against
the two-activity floor measured in the same run. A local activity runs inside the workflow
task that asks for it: consecutive ones need no round trip to the server at all (the task is
held, and heartbeated past 80 % of its timeout), and none of the activity task's events.

    uv run python bench/activity_kinds.py [--turns 40] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow
from temporalio.worker import Worker

if __name__ == "__main__":  # run as a script: the project's packages from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

with workflow.unsafe.imports_passed_through():
    from bench.common import cpu_seconds, dev_env, dev_server_pid
    from durable_agent.wiring import workflow_runner

KINDS = ("two activities", "one activity", "one local activity")
TIMEOUT = timedelta(seconds=30)


@activity.defn(name="kinds_model")
async def model(turn: int) -> int:
    return turn


@activity.defn(name="kinds_tool")
async def tool(turn: int) -> int:
    return turn


@workflow.defn(name="ActivityKinds")
class KindsWorkflow:
    @workflow.run
    async def run(self, turns: int, kind: str) -> int:
        for i in range(turns):
            if kind == "one local activity":
                await workflow.execute_local_activity(
                    "kinds_model", i, start_to_close_timeout=TIMEOUT
                )
                continue
            await workflow.execute_activity("kinds_model", i, start_to_close_timeout=TIMEOUT)
            if kind == "two activities":
                await workflow.execute_activity("kinds_tool", i, start_to_close_timeout=TIMEOUT)
        return turns


async def main(turns: int, repeats: int) -> None:
    samples: dict[str, list[tuple[float, float, float]]] = {kind: [] for kind in KINDS}
    async with dev_env() as env:
        server = dev_server_pid()
        queue = f"bench-kinds-{uuid.uuid4()}"
        async with Worker(
            env.client, task_queue=queue, workflows=[KindsWorkflow], activities=[model, tool],
            workflow_runner=workflow_runner(),
        ):  # fmt: skip
            for run in range(repeats + 1):  # the first round warms up
                for kind in KINDS:
                    began, s0, w0 = time.monotonic(), cpu_seconds(server), time.process_time()
                    await env.client.execute_workflow(
                        KindsWorkflow.run, args=[turns, kind], id=f"bench-kinds-{uuid.uuid4()}",
                        task_queue=queue,
                    )  # fmt: skip
                    took = time.monotonic() - began
                    s, w = cpu_seconds(server) - s0, time.process_time() - w0
                    if run:
                        samples[kind].append((took, s, w))
    per_turn = {
        kind: [statistics.median(x[i] for x in values) / turns * 1000 for i in range(3)]
        for kind, values in samples.items()
    }
    floor = per_turn["two activities"]
    print(f"{turns} turns per run, median of {repeats} runs; ratios against two activities")
    print(f"{'step a turn':<20} {'ms/turn':>8} {'ratio':>6} {'server CPU':>11} {'ratio':>6} "
          f"{'worker CPU':>11} {'ratio':>6}")  # fmt: skip
    for kind, (ms, server_ms, worker_ms) in per_turn.items():
        print(
            f"{kind:<20} {ms:>8.1f} {ms / floor[0]:>6.2f} {server_ms:>11.1f} "
            f"{server_ms / floor[1]:>6.2f} {worker_ms:>11.1f} {worker_ms / floor[2]:>6.2f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    ns = parser.parse_args()
    asyncio.run(main(ns.turns, ns.repeats))
