"""History bytes per turn: a prompt of N Read turns, its workflow history's size / N.

The prompt's workflow (the session's child, `<session>-q1`) holds the turns; the session's
own history is a few events whatever N. Each turn is a model call answered with a `Read` of a
20-line file (run inside the model step) — the loop's own cost in history, not the tools'
output: a tool's output is in the transcript, the history keeps a reference and a preview.
The baseline, measured in the same run, is the two-activity floor workflow of
bench/loop_overhead.py (a no-op "model" and a no-op "tool" activity a turn).

    uv run python bench/history_size.py [--turns 50 100 200]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import uuid
from pathlib import Path

if __name__ == "__main__":  # the workflow sandbox re-runs this file as __temporal_main__
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio.client import Client
from temporalio.worker import Worker

from activities.transcript import TranscriptStore
from bench.common import dev_env
from bench.loop_overhead import FloorActivities, FloorWorkflow, script, workspace
from durable_agent.replay import ReplayServer
from tests.helpers import run_session


async def history_bytes(client: Client, workflow_id: str) -> tuple[int, int, int]:
    """(bytes, events, runs) of a workflow's histories: every run of the id (a long prompt
    continues as new, so no one history grows without bound)."""
    size = events = runs = 0
    async for execution in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
        handle = client.get_workflow_handle(workflow_id, run_id=execution.run_id)
        history = await handle.fetch_history()
        size += sum(e.ByteSize() for e in history.events)
        events += len(history.events)
        runs += 1
    return size, events, runs


async def durable(client: Client, turns: int) -> str:
    with tempfile.TemporaryDirectory() as tmp, ReplayServer(script(turns)) as server:
        session_id, status = await run_session(
            client, server, TranscriptStore(Path(tmp) / "state"), workspace(tmp),
            "read notes.txt again and again", f"bench-history-{uuid.uuid4()}",
            max_turns=turns + 5,
        )  # fmt: skip
    result = status.last_result
    assert result is not None and result.turn_count == turns + 1, result
    return f"{session_id}-q1"


async def floor(client: Client, turns: int) -> str:
    acts = FloorActivities()
    queue = f"bench-floor-{uuid.uuid4()}"
    workflow_id = f"bench-floor-{uuid.uuid4()}"
    async with Worker(
        client, task_queue=queue, workflows=[FloorWorkflow], activities=[acts.model, acts.tool]
    ):
        await client.execute_workflow(FloorWorkflow.run, turns, id=workflow_id, task_queue=queue)
    return workflow_id


async def main(counts: list[int]) -> None:
    print(f"{'turns':>6} {'durable B/turn':>15} {'events/turn':>12} {'runs':>5}"
          f" {'floor B/turn':>13} {'events/turn':>12} {'durable/floor':>14}")  # fmt: skip
    async with dev_env() as env:
        for n in counts:
            durable_id, floor_id = await durable(env.client, n), await floor(env.client, n)
            await asyncio.sleep(2)  # visibility: the listing catches up with the runs
            d_bytes, d_events, d_runs = await history_bytes(env.client, durable_id)
            f_bytes, f_events, _ = await history_bytes(env.client, floor_id)
            print(
                f"{n:>6} {d_bytes / n:>15.0f} {d_events / n:>12.1f} {d_runs:>5}"
                f" {f_bytes / n:>13.0f} {f_events / n:>12.1f} {d_bytes / f_bytes:>14.2f}",
                flush=True,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[50, 100, 200])
    asyncio.run(main(parser.parse_args().turns))
