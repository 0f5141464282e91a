"""Seconds from `durable-agent run` starting to its first model request, dev server already up.

One dev server is started for a temporary $DURABLE_AGENT_HOME (as `durable-agent server` would;
the CLI finds it there, no TEMPORAL_ADDRESS) and one ReplayServer answers every request with a
short text turn. Each series runs --repeats times, interleaved, one process after another:

- run: `durable-agent run` with its worker in the process (no warm worker);
- warm: `durable-agent run` served by the warm worker `durable-agent server` keeps for this
  environment (`durable-agent warm-worker`, started here and waited for);
- no-worker: `durable-agent run --no-worker`, a `python worker.py` already serving the shared
  queue (the CLI needs no anthropic, activities or temporalio.worker then);
- floor: a bare interpreter importing what any Temporal client needs,
  `python -c "import temporalio.client"`;
- anthropic: `python -c "import anthropic"`, what the in-process worker cannot do without.

A run is timed from just before its process starts to the ReplayServer receiving its first
request (and to the process's exit). Medians are printed, with the ratio to the floor.

Python's bytecode cache is on (in a temporary PYTHONPYCACHEPREFIX, filled by a warm-up round),
as for a user from the second run on, even where PYTHONDONTWRITEBYTECODE is set; --as-is
keeps the environment's setting (without bytecode every import compiles its source: about twice
the time).

    uv run python bench/cli_startup.py [--repeats 5] [--as-is]
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
ANTHROPIC = [sys.executable, "-c", "import anthropic"]


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


def timed(cmd: list[str], env: dict[str, str], cwd: Path, expect: str = "") -> tuple[float, float]:
    """(start, seconds to exit) of one process; it must succeed (and print `expect`)."""
    start = time.monotonic()
    proc = subprocess.run(
        cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:3]} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    if expect not in proc.stdout + proc.stderr:
        raise SystemExit(f"{cmd[:3]} did not say {expect!r}:\n{proc.stderr[-2000:]}")
    return start, time.monotonic() - start


def start_warm_worker(env: dict[str, str], home: Path) -> subprocess.Popen[str]:
    """`durable-agent warm-worker` for `env`, once its record is written (it polls then)."""
    proc = subprocess.Popen(
        [*cli_command(), "warm-worker"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "warm worker pid" not in line or not any((home / "warm").glob("*.json")):
        proc.kill()
        raise SystemExit(f"the warm worker did not start: {line}{proc.stdout.read()[-2000:]}")
    return proc


def start_worker(env: dict[str, str]) -> subprocess.Popen[str]:
    """`python worker.py` on the shared queue of `env`, once it says it is up."""
    proc = subprocess.Popen(
        [sys.executable, "worker.py"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "worker on task queue" not in line:
        proc.kill()
        raise SystemExit(f"worker.py did not start: {line}{proc.stdout.read()[-2000:]}")
    return proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--as-is", action="store_true", help="keep the bytecode settings")
    opts = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="cli-startup-"))
    home, workspace = tmp / "home", tmp / "ws"
    workspace.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "TEMPORAL_"))}
    env.update(
        DURABLE_AGENT_HOME=str(home),
        ANTHROPIC_API_KEY="bench",
        DURABLE_AGENT_TASK_QUEUE=f"bench-{os.getpid()}",  # for --no-worker and worker.py
    )
    if not opts.as_is:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    script = FirstRequest()
    info, _ = ensure_dev_server(home)
    cli = [*cli_command(), "run", "say done", "--workspace", str(workspace)]
    series: dict[str, list[float]] = {}
    exits: dict[str, list[float]] = {}
    worker = warm_worker = None
    try:
        with ReplayServer(script) as server:
            env["ANTHROPIC_BASE_URL"] = server.base_url
            # `run` puts its session on a queue of its own unless DURABLE_AGENT_TASK_QUEUE is
            # set: not for the default series.
            own = {k: v for k, v in env.items() if k != "DURABLE_AGENT_TASK_QUEUE"}
            worker = start_worker(env)
            warm_worker = start_warm_worker(own, home)
            cold = {**own, "DURABLE_AGENT_WARM_WORKER": "0"}
            runs = {
                "run": (cli, cold, ""),
                "warm": (cli, own, "served by the warm worker"),
                "no-worker": ([*cli, "--no-worker"], env, ""),
            }
            plain = {"floor": FLOOR, "anthropic": ANTHROPIC}
            for round_ in range(opts.repeats + 1):  # round 0: warm-up (caches, first workflows)
                for name, (cmd, run_env, expect) in runs.items():
                    start, total = timed(cmd, run_env, ROOT, expect)
                    first = script.first_after(start)
                    if first is None:
                        raise SystemExit(f"{name}: the run made no model request")
                    if round_:
                        series.setdefault(name, []).append(first)
                        exits.setdefault(name, []).append(total)
                for name, cmd in plain.items():
                    _, total = timed(cmd, env, ROOT)
                    if round_:
                        series.setdefault(name, []).append(total)
    finally:
        for proc in (worker, warm_worker):
            if proc is not None:
                proc.kill()
                proc.wait()
        stop_dev_server(home)
        shutil.rmtree(tmp, ignore_errors=True)

    floor = statistics.median(series["floor"])
    bytecode = "as the environment has it" if opts.as_is else "on"
    print(f"dev server {info.address}; {opts.repeats} rounds; bytecode cache {bytecode}")
    for name, values in series.items():
        what = "to first model request" if name in runs else "to exit"
        median = statistics.median(values)
        print(
            f"  {name:<10} {what:<23} median {median:5.2f} s  {median / floor:4.1f}× floor"
            f"  ({_all(values)})"
        )
        if name in exits:
            print(f"  {'':<10} {'to exit':<23} median {statistics.median(exits[name]):5.2f} s")


def _all(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


if __name__ == "__main__":
    main()
