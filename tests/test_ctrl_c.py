"""Ctrl-C at any moment of a CLI run ends it cleanly: one line at most, never a traceback. While
the CLI imports (nothing has begun: exit 130), and just as the prompt finishes (the interrupt
finds the session ending or ended: the run still reports its result). Real subprocesses, the
replay server and a real Temporal dev server."""

from __future__ import annotations

import functools
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from durable_agent.replay import ReplayServer, text_turn
from tests.test_cli import ROOT, cli_env


def ctrl_c(env: dict[str, str], ws: Path, when: Any) -> subprocess.CompletedProcess[str]:
    """`durable-agent run` in `ws`, sent SIGINT once `when()` returns."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "durable_agent", "run", "hello", "--workspace", str(ws)],
        env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    when()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def clean(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode in (0, 130), f"exit {proc.returncode}, stderr:\n{proc.stderr}"
    for word in ("Traceback", "Error", "exception"):
        assert word not in proc.stderr, proc.stderr


@pytest.mark.parametrize("after", [0.03, 0.12])
def test_ctrl_c_while_the_cli_imports(tmp_path, after):
    ws = tmp_path / "ws"
    ws.mkdir()
    # No server is reached this early: a Temporal address nobody listens on is enough.
    env = cli_env(tmp_path, ANTHROPIC_API_KEY="dummy", TEMPORAL_ADDRESS="127.0.0.1:1")
    for attempt in range(8):
        # A loaded machine can spend the whole delay in Python's own start-up: later each try.
        proc = ctrl_c(env, ws, functools.partial(time.sleep, after + attempt * 0.05))
        if not in_python_start_up(proc):
            break
    clean(proc)
    assert proc.returncode == 130


_HANDLER_LINE = next(
    n
    for n, line in enumerate((ROOT / "durable_agent" / "__init__.py").read_text().splitlines(), 1)
    if "_signal.signal(_signal.SIGINT, _while_starting)" in line
)


def in_python_start_up(proc: subprocess.CompletedProcess[str]) -> bool:
    """The Ctrl-C came before any of our code ran (on a loaded machine, 30 ms can be
    Python's own start-up: site, runpy): Python's traceback, not one through durable_agent's
    files — or, earlier still, before the interpreter installed its own handler: the
    signal's default action ended it, silently). Such a try says nothing of the CLI and is
    made again."""
    if proc.returncode == -signal.SIGINT and not proc.stderr:
        return True
    # Until `__main__` has installed its handler (its first lines, after runpy found and
    # loaded its code) a Ctrl-C is the interpreter's; from then on nothing raises
    # KeyboardInterrupt until the CLI's modules are imported: a traceback through them
    # (durable_agent/cli/, durable_agent/engine/, ...) is what this test is for.
    # The package's own first lines (durable_agent/__init__ up to where it sets the handler,
    # `python -m durable_agent` being the CLI) are the interpreter's too.
    before_handler = [
        f'durable_agent/__init__.py", line {n}, in <module>' for n in range(1, _HANDLER_LINE + 1)
    ]
    ours = [
        line
        for line in proc.stderr.splitlines()
        if line.strip().startswith('File "')
        and "durable_agent/" in line
        and not line.rstrip().endswith(tuple(before_handler))
        and "durable_agent/__main__.py" not in line
    ]
    return "KeyboardInterrupt" in proc.stderr and not ours


def test_ctrl_c_as_the_run_finishes(dev_env, tmp_path):
    """SIGINT at a few moments after Claude's answer is served: the session may be finishing,
    finished, or its worker shutting down."""
    ws = tmp_path / "ws"
    ws.mkdir()
    for offset in (0.02, 0.1, 0.25):
        with ReplayServer([text_turn("hello back")]) as server:
            env = cli_env(
                tmp_path,
                ANTHROPIC_API_KEY="dummy",
                ANTHROPIC_BASE_URL=server.base_url,
                TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
            )

            def answered(offset: float = offset, server: ReplayServer = server) -> None:
                deadline = time.monotonic() + 60
                while not server.requests and time.monotonic() < deadline:
                    time.sleep(0.005)
                time.sleep(offset)

            proc = ctrl_c(env, ws, answered)
        clean(proc)
        assert len(server.requests) == 1
