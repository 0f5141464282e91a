"""Issue 26's first-request figure: seconds from `uv run durable-agent run` (and `-p`) starting
to its first model request, in a fresh clone, with the dev server up and
PYTHONDONTWRITEBYTECODE=1 (as in many CI images), bytecode never compiled by hand.

What it does, as a user would:
1. `git clone` this checkout's HEAD into a temporary directory; `uv sync --frozen` there (uv
   does not compile bytecode at install unless told to);
2. `uv run durable-agent server` there, with a fresh $DURABLE_AGENT_HOME and the fake Messages
   API as ANTHROPIC_BASE_URL: the dev server, and the warm worker it starts for this
   environment (whose first imports fill durable-agent's own bytecode cache,
   durable_agent/bytecode.py);
3. --rounds rounds of `uv run durable-agent run "say done"`, `uv run durable-agent -p "say
   done"` and the floor `uv run python -c "import temporalio.client"` (what any Temporal
   client must import, through the same `uv run`), each a new process, timed from just before
   it starts to the fake API receiving its first request (the floor: to its exit).

Medians are printed, the first round included (it is a fresh clone's first run), with each
series' ratio to the floor.

    uv run python bench/first_request.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))

from bench.cli_startup import FirstRequest, timed  # noqa: E402
from durable_agent.replay import ReplayServer  # noqa: E402

UV = shutil.which("uv") or "uv"


def fresh_clone(tmp: Path) -> Path:
    clone = tmp / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "UV_"))}
    began = time.monotonic()
    subprocess.run([UV, "sync", "--frozen", "-q"], cwd=clone, env=env, check=True)
    print(f"fresh clone of HEAD, `uv sync --frozen`: {time.monotonic() - began:.1f} s")
    return clone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--settle", type=float, default=0.0, help="seconds between `server` and the first run"
    )
    opts = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="first-request-"))
    clone = fresh_clone(tmp)
    workspace = tmp / "ws"
    workspace.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANTHROPIC_", "TEMPORAL_", "DURABLE_AGENT_", "VIRTUAL_ENV", "UV_"))
    }
    env.update(
        DURABLE_AGENT_HOME=str(tmp / "home"),
        ANTHROPIC_API_KEY="bench",
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.pop("PYTHONPYCACHEPREFIX", None)
    # Not this checkout's venv (`uv run` put it first on PATH): outside a project, `uv run
    # durable-agent` would find that one's script and measure this checkout, not the clone.
    ours = str(ROOT / ".venv" / "bin")
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != ours)
    script = FirstRequest()
    cli = [UV, "run", "--project", str(clone), "--frozen", "durable-agent"]
    series: dict[str, list[float]] = {}
    try:
        with ReplayServer(script) as server:
            env["ANTHROPIC_BASE_URL"] = server.base_url
            began = time.monotonic()
            subprocess.run([*cli, "server"], cwd=clone, env=env, check=True, capture_output=True)
            print(
                f"`durable-agent server` (dev server, warm worker): {time.monotonic() - began:.1f} s"
            )
            time.sleep(opts.settle)  # 0: the first run waits for the starting warm worker
            runs = {
                "run": [*cli, "run", "say done", "--workspace", str(workspace)],
                "-p": [*cli, "-p", "say done"],
            }
            for _ in range(opts.rounds):
                for name, cmd in runs.items():
                    start, _total = timed(cmd, env, workspace, expect="served by the warm worker")
                    first = script.first_after(start)
                    if first is None:
                        raise SystemExit(f"{name}: no model request")
                    series.setdefault(name, []).append(first)
                _, floor = timed(
                    [
                        UV,
                        "run",
                        "--project",
                        str(clone),
                        "--frozen",
                        "python",
                        "-c",
                        "import temporalio.client",
                    ],
                    env,
                    workspace,  # fmt: skip
                )
                series.setdefault("floor", []).append(floor)
    finally:
        subprocess.run([*cli, "server", "--stop"], cwd=clone, env=env, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)

    floor = statistics.median(series["floor"])
    print(f"{opts.rounds} rounds, PYTHONDONTWRITEBYTECODE=1, fresh clone")
    for name, values in series.items():
        what = "to exit" if name == "floor" else "to first model request"
        median = statistics.median(values)
        listed = ", ".join(f"{v:.2f}" for v in values)
        print(
            f"  {name:<6} {what:<23} median {median:5.2f} s  {median / floor:4.1f}× floor  ({listed})"
        )


if __name__ == "__main__":
    main()
