"""Seconds from `durable-agent run` starting to its first model request, dev server already up.

One dev server is started for a temporary $DURABLE_AGENT_HOME (as `durable-agent server` would;
the CLI finds it there, no TEMPORAL_ADDRESS) and one ReplayServer answers every request with a
short text turn. `durable-agent run` then runs --repeats times, one after another; each run is
timed from just before its process starts to the ReplayServer receiving its first request
(and, for reference, to the process's exit). The floor, measured in the same run the same
number of times, is a bare interpreter importing what any Temporal client needs:
`python -c "import temporalio.client"`. Medians and their ratio are printed.

    uv run python bench/cli_startup.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))

from durable_agent.devserver import ensure_dev_server, stop_dev_server  # noqa: E402
from durable_agent.replay import ReplayServer, Turn, text_turn  # noqa: E402

FLOOR = [sys.executable, "-c", "import temporalio.client"]


def cli_command() -> list[str]:
    """The installed `durable-agent` script next to this interpreter, else `-m durable_agent`."""
    script = Path(sys.executable).with_name("durable-agent")
    return [str(script)] if script.exists() else [sys.executable, "-m", "durable_agent"]


class FirstRequest:
    """A ReplayServer script that notes when each request arrives."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.arrived = threading.Event()

    def __call__(self, body: dict[str, Any], index: int) -> Turn:
        self.times.append(time.monotonic())
        self.arrived.set()
        return text_turn("done")

    def first_after(self, start: float) -> float | None:
        return next((t - start for t in self.times if t >= start), None)


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(start, seconds to exit) of one process; it must succeed."""
    start = time.monotonic()
    proc = subprocess.run(
        cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:3]} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return start, time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    opts = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="cli-startup-"))
    home, workspace = tmp / "home", tmp / "ws"
    workspace.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "TEMPORAL_"))}
    env.pop("DURABLE_AGENT_TASK_QUEUE", None)
    env.update(DURABLE_AGENT_HOME=str(home), ANTHROPIC_API_KEY="bench")
    script = FirstRequest()
    info, _ = ensure_dev_server(home)
    firsts: list[float] = []
    exits: list[float] = []
    floors: list[float] = []
    try:
        with ReplayServer(script) as server:
            env["ANTHROPIC_BASE_URL"] = server.base_url
            cmd = [*cli_command(), "run", "say done", "--workspace", str(workspace)]
            timed(cmd, env, ROOT)  # warm-up: the dev server's first workflows, the OS caches
            for _ in range(opts.repeats):
                _, floor = timed(FLOOR, env, ROOT)
                floors.append(floor)
                start, total = timed(cmd, env, ROOT)
                first = script.first_after(start)
                if first is None:
                    raise SystemExit("the run made no model request")
                firsts.append(first)
                exits.append(total)
    finally:
        stop_dev_server(home)
        shutil.rmtree(tmp, ignore_errors=True)

    first, total, floor = (statistics.median(x) for x in (firsts, exits, floors))
    print(f"dev server {info.address}; {opts.repeats} runs of: {' '.join(cmd[:2])} …")
    print(f"  run → first model request  median {first:.2f} s  ({_all(firsts)})")
    print(f"  run → exit                 median {total:.2f} s  ({_all(exits)})")
    print(f"  floor (import temporalio.client) median {floor:.2f} s  ({_all(floors)})")
    print(f"  first request / floor      {first / floor:.1f}×")


def _all(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


if __name__ == "__main__":
    main()
