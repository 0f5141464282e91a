"""Turn wall time with the StreamingToolExecutor on vs off, for 1, 3 and 6 tool calls.

The replay server streams one turn for 2 s; tool_use block i completes at 0.3·(i+1) s; each
tool is a read-only `sleep 1`. On, tools start as their blocks complete; off, after the stream.
A turn is measured from the model request to the next one (the tool results), on the embedded
dev server; the median of --repeat runs is printed.

    uv run python bench/streaming_tools.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from temporalio.testing import WorkflowEnvironment  # noqa: E402

from activities.transcript import TranscriptStore  # noqa: E402
from bench.common import dev_env  # noqa: E402
from durable_agent.replay import ReplayServer, text_turn  # noqa: E402
from durable_agent.replay.cassette import timed_tool_turn  # noqa: E402
from tests.helpers import run_session  # noqa: E402

STREAM_SECONDS = 2.0
TOOL_SECONDS = 1.0


async def turn_seconds(env: WorkflowEnvironment, tools: int, streaming: bool) -> float:
    calls = [(f"t{i}", "Bash", {"command": f"sleep {TOOL_SECONDS:g}"}) for i in range(tools)]
    ready = [0.3 * (i + 1) for i in range(tools)]
    turn = timed_tool_turn(calls, ready_at=ready, end_at=STREAM_SECONDS)
    with tempfile.TemporaryDirectory() as tmp, ReplayServer([turn, text_turn("done")]) as server:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        _, status = await run_session(
            env.client, server, TranscriptStore(Path(tmp) / "state"), workspace, "go",
            f"bench-{uuid.uuid4()}", streaming_tool_execution=streaming,
        )  # fmt: skip
        assert status.last_result is not None and status.last_result.terminal.value == "completed"
        return server.request_times[1] - server.request_times[0]


async def main(repeat: int) -> None:
    async with dev_env() as env:
        print(f"stream {STREAM_SECONDS:g}s, tools of {TOOL_SECONDS:g}s each, median of {repeat}")
        print(f"{'tools':>5}  {'off (s)':>8}  {'on (s)':>7}  {'on/off':>6}  {'ideal':>6}")
        for tools in (1, 3, 6):
            off = statistics.median([await turn_seconds(env, tools, False) for _ in range(repeat)])
            on = statistics.median([await turn_seconds(env, tools, True) for _ in range(repeat)])
            ideal = max(STREAM_SECONDS, 0.3 * tools + TOOL_SECONDS)
            print(f"{tools:>5}  {off:>8.2f}  {on:>7.2f}  {on / off:>6.2f}  {ideal:>6.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    asyncio.run(main(parser.parse_args().repeat))
