"""ms per turn: the durable loop vs a bare two-activity Temporal workflow vs a plain asyncio loop.

Each turn is one model call to the replay server answered with a trivial `Read` of a small
file, then the read; a final text turn ends the loop.

- durable: the product worker (`build_worker`) runs one SessionWorkflow prompt of N Read turns.
- floor: a bare workflow (defined here, its own task queue) runs N times a no-op "model"
  activity then a no-op "tool" activity, then one more "model" activity; run by the product's
  workflow runner (`workflow_runner()`: no sandbox by default, as the durable loop's).
- floor-sdk: the same, run as a Temporal worker runs it by default (the SDK's sandbox).
- asyncio: `anthropic.AsyncAnthropic` streams from the same kind of replay server and the
  product's Read (`run_read`) runs in-process; no Temporal.

A turn is timed from one model call to the next, first to last (N turns), so worker start and
workflow start/finish are left out. The three run interleaved on the one embedded dev server,
after a short warm-up round; the median of --repeats runs is printed with the ratios.

The fake API answers from a process of its own (bench.common.ApiProcess), as the real API is
not in the worker's process; `--api-in-process` serves it from a thread of the timed process
instead, where its request parsing and SSE writing share that process's interpreter lock.

    uv run python bench/loop_overhead.py [--turns 40] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

if __name__ == "__main__":  # the workflow sandbox re-runs this file as __temporal_main__
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

with workflow.unsafe.imports_passed_through():
    import anthropic

    from activities.tools.base import Workspace
    from activities.tools.read import run_read
    from activities.transcript import TranscriptStore
    from bench.common import ApiProcess, dev_env
    from durable_agent.engine.state import DEFAULT_MODEL
    from durable_agent.engine.tools import ReadInput
    from durable_agent.replay import ReplayServer, Turn, text_turn, tool_turn
    from durable_agent.wiring import workflow_runner
    from tests.helpers import run_session

FILE = "notes.txt"
FILE_TEXT = "".join(f"line {i}: nothing to see here\n" for i in range(1, 21))


def script(turns: int) -> list[Turn]:
    reads = [tool_turn([(f"r{i}", "Read", {"file_path": FILE})]) for i in range(turns)]
    return [*reads, text_turn("done")]


def workspace(tmp: str) -> Path:
    ws = Path(tmp) / "ws"
    ws.mkdir()
    (ws / FILE).write_text(FILE_TEXT)
    return ws


def per_turn_ms(times: list[float], turns: int) -> float:
    assert len(times) == turns + 1, f"expected {turns + 1} model calls, saw {len(times)}"
    return (times[-1] - times[0]) / turns * 1000


FakeApi = ApiProcess | ReplayServer
IN_PROCESS = False
"""--api-in-process: the fake API answers from a thread of this process."""


def fake_api(turns: list[Turn]) -> FakeApi:
    return ReplayServer(turns) if IN_PROCESS else ApiProcess(turns)


def check(server: FakeApi) -> list[float]:
    if isinstance(server, ReplayServer):
        violations, times = server.violations, server.request_times
    else:
        state = server.state()
        violations, times = state["violations"], state["request_times"]
    assert not violations, violations
    return list(times)


# --- durable: the product ---------------------------------------------------------------


async def durable_ms(client: Client, turns: int) -> float:
    with tempfile.TemporaryDirectory() as tmp, fake_api(script(turns)) as server:
        _, status = await run_session(
            client, server, TranscriptStore(Path(tmp) / "state"), workspace(tmp),
            f"read {FILE} again and again", f"bench-durable-{uuid.uuid4()}",
            max_turns=turns + 5,
        )  # fmt: skip
        result = status.last_result
        assert result is not None and result.terminal.value == "completed", result
        return per_turn_ms(check(server), turns)


# --- floor: a bare workflow, two no-op activities a turn ---------------------------------


class FloorActivities:
    def __init__(self) -> None:
        self.model_times: list[float] = []

    @activity.defn(name="floor_model")
    async def model(self, turn: int) -> int:
        self.model_times.append(time.monotonic())
        return turn

    @activity.defn(name="floor_tool")
    async def tool(self, turn: int) -> int:
        return turn


@workflow.defn(name="LoopOverheadFloor")
class FloorWorkflow:
    @workflow.run
    async def run(self, turns: int) -> int:
        timeout = timedelta(seconds=30)
        for i in range(turns):
            await workflow.execute_activity("floor_model", i, start_to_close_timeout=timeout)
            await workflow.execute_activity("floor_tool", i, start_to_close_timeout=timeout)
        await workflow.execute_activity("floor_model", turns, start_to_close_timeout=timeout)
        return turns


async def floor_ms(client: Client, turns: int, sdk_default: bool = False) -> float:
    acts = FloorActivities()
    queue = f"bench-floor-{uuid.uuid4()}"
    # The durable loop's runner, whatever DURABLE_AGENT_SANDBOX says; or the SDK's default.
    runner = SandboxedWorkflowRunner() if sdk_default else workflow_runner()
    async with Worker(
        client,
        task_queue=queue,
        workflows=[FloorWorkflow],
        activities=[acts.model, acts.tool],
        workflow_runner=runner,
    ):
        await client.execute_workflow(
            FloorWorkflow.run, turns, id=f"bench-floor-{uuid.uuid4()}", task_queue=queue
        )
    return per_turn_ms(acts.model_times, turns)


# --- asyncio: the same fake API and Read, no Temporal ------------------------------------


async def asyncio_ms(_client: Client, turns: int) -> float:
    with tempfile.TemporaryDirectory() as tmp, fake_api(script(turns)) as server:
        ws = Workspace.open(str(workspace(tmp)))
        api = anthropic.AsyncAnthropic(base_url=server.base_url, api_key="dummy", max_retries=0)
        messages: list[anthropic.types.MessageParam] = [
            {"role": "user", "content": f"read {FILE} again and again"}
        ]
        try:
            for _ in range(turns + 5):
                async with api.messages.stream(
                    model=DEFAULT_MODEL, max_tokens=1024, messages=messages
                ) as stream:
                    msg = await stream.get_final_message()
                messages.append({"role": "assistant", "content": msg.content})
                uses = [b for b in msg.content if b.type == "tool_use"]
                if not uses:
                    break
                results: list[anthropic.types.ToolResultBlockParam] = []
                for use in uses:
                    out = await run_read(ReadInput.model_validate(use.input), ws)
                    results.append(
                        {"type": "tool_result", "tool_use_id": use.id, "content": out.content}
                    )
                messages.append({"role": "user", "content": results})
        finally:
            await api.close()
        return per_turn_ms(check(server), turns)


# --- the run ------------------------------------------------------------------------------

Measure = Callable[[Client, int], Awaitable[float]]


async def floor_sdk_ms(client: Client, turns: int) -> float:
    return await floor_ms(client, turns, sdk_default=True)


LOOPS: dict[str, Measure] = {
    "durable": durable_ms,
    "floor": floor_ms,
    "floor-sdk": floor_sdk_ms,
    "asyncio": asyncio_ms,
}
WARMUP_TURNS = 3


async def main(turns: int, repeats: int) -> None:
    started = time.monotonic()
    samples: dict[str, list[float]] = {name: [] for name in LOOPS}
    async with dev_env() as env:
        for measure in LOOPS.values():  # first-run imports, sandbox set-up, connections
            await measure(env.client, WARMUP_TURNS)
        for _ in range(repeats):
            for name, measure in LOOPS.items():
                samples[name].append(await measure(env.client, turns))
    med = {name: statistics.median(values) for name, values in samples.items()}
    where = "a thread of this process" if IN_PROCESS else "a process of its own"
    print(f"{turns} Read turns per run, median of {repeats} runs (ms per turn)")
    print(f"the fake API answers from {where}")
    print(f"{'loop':<9}  {'ms/turn':>8}  {'min':>7}  {'max':>7}")
    for name, values in samples.items():
        print(f"{name:<9}  {med[name]:>8.1f}  {min(values):>7.1f}  {max(values):>7.1f}")
    print(f"durable/floor    {med['durable'] / med['floor']:>5.2f}")
    print(f"durable/floor-sdk {med['durable'] / med['floor-sdk']:>4.2f}")
    print(f"durable/asyncio  {med['durable'] / med['asyncio']:>5.2f}")
    print(f"floor/asyncio    {med['floor'] / med['asyncio']:>5.2f}")
    print(f"(whole run {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--api-in-process",
        action="store_true",
        help="serve the fake API from a thread of the timed process (as before 2026-12-07)",
    )
    ns = parser.parse_args()
    IN_PROCESS = ns.api_in_process
    asyncio.run(main(ns.turns, ns.repeats))
