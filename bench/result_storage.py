"""Bytes on disk per tool result: a prompt of N turns, each a Bash printing OUTPUT bytes (or a
Read of a file that size), and the store's bytes after it, by kind of file, / N.

The baseline, measured in the same run, is the output itself (OUTPUT bytes a turn): the
ratio says how many times each result is kept. Model text, tool inputs and the other
entries add a little beside it (a turn with no output is measured too, and subtracted).

    uv run python bench/result_storage.py [--turns 20] [--output 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path

if __name__ == "__main__":  # the workflow sandbox re-runs this file as __temporal_main__
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio.client import Client

from activities.transcript import TranscriptStore
from bench.common import dev_env
from durable_agent.replay import ReplayServer, Turn, text_turn, tool_turn
from tests.helpers import run_session


def _script(tool: str, turns: int, size: int) -> list[Turn]:
    def call(i: int) -> tuple[str, str, dict[str, object]]:
        if tool == "Read":
            return (f"t{i}", "Read", {"file_path": f"f{i}.txt"})
        return (f"t{i}", "Bash", {"command": f"head -c {size} f{i}.txt"})

    return [*(tool_turn([call(i)]) for i in range(turns)), text_turn("done")]


def _kind(path: Path, state: Path) -> str:
    parts = path.relative_to(state).parts
    if path.suffix == ".lock":
        return "locks"
    if path.suffix == ".jsonl":
        return "stream events" if path.name.endswith(".stream.jsonl") else "transcript"
    if path.name.endswith(".json"):  # sessions/<id>.results/<tool_use id>.<run id>.json
        return "result records" if len(parts) == 3 else f"{parts[2]} records"
    return parts[-1] if len(parts) == 3 else "/".join(parts[2:-1])  # full/, hooks/, ...


async def stored(client: Client, tool: str, turns: int, size: int) -> Counter[str]:
    """Bytes in the store after the prompt, by kind of file."""
    with tempfile.TemporaryDirectory() as tmp, ReplayServer(_script(tool, turns, size)) as api:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        line = ("x" * 99 + "\n") * (size // 100)
        for i in range(turns):
            (ws / f"f{i}.txt").write_text(f"{i:06d}" + line[6:] if size else "")
        state = Path(tmp) / "state"
        (ws / ".claude").mkdir()
        (ws / ".claude" / "settings.json").write_text('{"permissions": {"allow": ["Bash"]}}')
        _, status = await run_session(
            client, api, TranscriptStore(state), ws, "go", f"bench-results-{uuid.uuid4()}",
            max_turns=turns + 5,
        )  # fmt: skip
        assert status.last_result is not None and status.last_result.terminal == "completed"
        sizes: Counter[str] = Counter()
        for path in state.rglob("*"):
            if path.is_file():
                sizes[_kind(path, state)] += path.stat().st_size
        return sizes


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--output", type=int, default=20_000, help="bytes a tool prints")
    opts = parser.parse_args()
    async with dev_env() as env:
        for tool in ("Bash", "Read"):
            empty = await stored(env.client, tool, opts.turns, 0)
            full = await stored(env.client, tool, opts.turns, opts.output)
            kinds = sorted(set(empty) | set(full))
            print(f"{tool}: {opts.turns} turns of {opts.output} bytes (baseline: the output)")
            for kind in kinds:
                extra = (full[kind] - empty[kind]) / opts.turns
                print(f"  {kind:<16} {extra / 1000:7.1f} KB a turn  {extra / opts.output:5.2f}×")
            total = (sum(full.values()) - sum(empty.values())) / opts.turns
            print(f"  {'all':<16} {total / 1000:7.1f} KB a turn  {total / opts.output:5.2f}×")


if __name__ == "__main__":
    asyncio.run(main())
