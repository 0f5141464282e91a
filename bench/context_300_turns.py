"""300 scripted turns with 10 KB tool results on a 200k window, on the embedded dev server.

Prints the peak request size, how many compactions ran and the workflow history per turn.
The replay server reports each request's size (bytes / 4) as its input tokens, so compaction
triggers when the conversation really nears the window.

    uv run python bench/context_300_turns.py [--turns 300] [--result-kb 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from temporalio.testing import WorkflowEnvironment  # noqa: E402

from activities.transcript import TranscriptStore  # noqa: E402
from bench.common import dev_env  # noqa: E402
from durable_agent.replay import ReplayServer, Turn, text_turn, tool_turn  # noqa: E402
from tests.helpers import run_session  # noqa: E402
from workflows.session import query_workflow_id  # noqa: E402


class Script:
    def __init__(self, turns: int) -> None:
        self.turns = turns
        self.model_calls = 0
        self.summaries = 0
        self.request_tokens: list[int] = []

    def __call__(self, body: dict, index: int) -> Turn:
        tokens = len(json.dumps(body)) // 4
        if "<summary></summary> tags" in json.dumps(body["messages"][-1]):
            self.summaries += 1
            return text_turn(
                f"<summary>Work so far: {self.model_calls} turns of reading data.</summary>"
            )
        self.model_calls += 1
        self.request_tokens.append(tokens)
        if self.model_calls >= self.turns:
            return text_turn("done", input_tokens=tokens)
        return tool_turn(
            [(f"t{self.model_calls}", "Bash", {"command": "cat data.txt"})], input_tokens=tokens
        )


async def history_bytes(env: WorkflowEnvironment, workflow_id: str) -> tuple[int, int]:
    total, runs = 0, 0
    async for wf in env.client.list_workflows(f'WorkflowId="{workflow_id}"'):
        history = await env.client.get_workflow_handle(
            workflow_id, run_id=wf.run_id
        ).fetch_history()
        total += sum(e.ByteSize() for e in history.events)
        runs += 1
    return total, runs


CONFIGS = {
    "default (microcompact from 100k, autocompact at 167k)": {},
    "microcompact off (autocompact only)": {"microcompact_above_tokens": 10**9},
}


async def main(turns: int, result_kb: int) -> None:
    async with dev_env() as env:
        print(f"{turns} turns, {result_kb} KB tool results, 200,000-token window")
        for name, config in CONFIGS.items():
            await one(env, name, turns, result_kb, config)


async def one(
    env: WorkflowEnvironment, name: str, turns: int, result_kb: int, config: dict[str, int]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        line = "0123456789" * 9 + "\n"
        (workspace / "data.txt").write_text(line * (result_kb * 1024 // len(line)))
        script = Script(turns)
        started = time.monotonic()
        with ReplayServer(script) as server:
            sid, status = await run_session(
                env.client, server, TranscriptStore(Path(tmp) / "state"), workspace,
                "read data.txt again and again", f"bench-{uuid.uuid4()}", max_turns=turns + 5,
                **config,
            )  # fmt: skip
        wall = time.monotonic() - started
        result = status.last_result
        assert result is not None
        total, runs = await history_bytes(env, query_workflow_id(sid, 1))
    per_turn_ms = wall / max(1, result.turn_count) * 1000
    print(f"\n{name}")
    print(
        f"  turns: {result.turn_count} ({result.terminal.value}), wall {wall:.1f}s, {per_turn_ms:.0f} ms/turn"
    )
    print(f"  peak request tokens (bytes/4): {max(script.request_tokens):,}")
    print(f"  compactions: {result.compactions} (summary requests: {script.summaries})")
    print(
        f"  workflow history: {total:,} bytes over {runs} run(s), {total / result.turn_count:,.0f} bytes/turn"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--result-kb", type=int, default=10)
    ns = parser.parse_args()
    asyncio.run(main(ns.turns, ns.result_kb))
