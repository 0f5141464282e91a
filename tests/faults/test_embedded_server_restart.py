"""The embedded dev server killed under a running `durable-agent run` and started again with
`durable-agent server`: it comes back on its recorded port (the default port is taken), and
when that port is taken too, the waiting CLI follows it to its new address."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from durable_agent.devserver import (
    DEFAULT_PORT,
    DevServerInfo,
    ensure_dev_server,
    pid_alive,
    recorded,
    stop_dev_server,
)
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from tests.faults.harness import ROOT, process_env, wait_for

GIVE_UP = "40"
"""The CLI's reconnect limit: without the fix it gives up after this, not after 900 s."""


@contextlib.contextmanager
def _taken(port: int) -> Iterator[None]:
    """Someone else listens on `port` and hangs up on whoever connects (if someone already
    listens there, so much the better)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        yield
        return
    sock.listen()
    closed = threading.Event()

    def hang_up() -> None:
        while not closed.is_set():
            with contextlib.suppress(OSError):
                sock.accept()[0].close()

    thread = threading.Thread(target=hang_up, daemon=True)
    thread.start()
    try:
        yield
    finally:
        closed.set()
        sock.shutdown(socket.SHUT_RDWR)  # wakes accept()
        sock.close()
        thread.join()


def _env(tmp_path: Path, base_url: str) -> dict[str, str]:
    env = process_env(tmp_path, "", base_url, "", DURABLE_AGENT_WARM_WORKER="0")
    env["DURABLE_AGENT_RECONNECT_SECONDS"] = GIVE_UP
    for name in ("TEMPORAL_ADDRESS", "DURABLE_AGENT_TASK_QUEUE"):  # the embedded server's own
        del env[name]
    return env


def _cli(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "durable_agent", *args], cwd=ROOT, env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _kill(info: DevServerInfo) -> None:
    os.killpg(info.pid, signal.SIGKILL)
    while pid_alive(info.pid):  # our child (ensure_dev_server here): reap it
        with contextlib.suppress(ChildProcessError):
            os.waitpid(info.pid, os.WNOHANG)
        time.sleep(0.05)


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


async def _restart_under_a_run(tmp_path: Path, occupy_recorded: bool) -> tuple[str, str, str]:
    """Start the embedded server (the default port taken), run a prompt through the CLI with
    its own worker, kill the server during the tool, start it again with `durable-agent
    server`. The CLI's stderr and the server's addresses (first, second)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    home = tmp_path / "home"
    command = "echo started >> marker; sleep 2; echo real-output"
    turns = [tool_turn([("b1", "Bash", {"command": command})]), text_turn("all done")]
    with _taken(DEFAULT_PORT), ReplayServer(turns) as api:
        env = _env(tmp_path, api.base_url)
        first, _ = ensure_dev_server(home)
        cli = None
        try:
            cli = _cli(["run", "go", "--workspace", str(workspace), "--allowedTools", "Bash"], env)
            await wait_for((workspace / "marker").exists, 60, "the tool to start")
            _kill(first)
            with _taken(_port(first.address)) if occupy_recorded else contextlib.nullcontext():
                server = await asyncio.to_thread(
                    subprocess.run,
                    [sys.executable, "-m", "durable_agent", "server", "--no-warm-worker"],
                    cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
                )  # fmt: skip
                assert server.returncode == 0, server.stderr
                try:
                    out, err = await asyncio.to_thread(cli.communicate, timeout=60)
                except subprocess.TimeoutExpired:
                    cli.kill()
                    out, err = cli.communicate()
            second = recorded(home)
        finally:
            if cli is not None:
                cli.kill()
            stop_dev_server(home)
    assert second is not None and cli is not None
    assert cli.returncode == 0, err[-2000:]
    assert "all done" in out
    assert "Traceback" not in err
    assert (workspace / "marker").read_text() == "started\n"
    return err, first.address, second.address


async def test_a_killed_embedded_server_comes_back_on_its_port(tmp_path):
    _, first, second = await _restart_under_a_run(tmp_path, occupy_recorded=False)
    assert _port(first) != DEFAULT_PORT  # the default was taken: a port of its own
    assert second == first


async def test_a_waiting_cli_follows_the_embedded_server_to_its_new_port(tmp_path):
    err, first, second = await _restart_under_a_run(tmp_path, occupy_recorded=True)
    assert second != first
    assert f"moved to {second}" in err
