"""What the benchmarks share: the embedded dev server, with its throttle lifted, and a fake
Messages API in a process of its own."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from durable_agent.devserver import server_args, temporal_binary
from durable_agent.replay.cassette import Turn, save_turn
from durable_agent.replay.server import STATE_PATH

ROOT = Path(__file__).resolve().parent.parent


@contextlib.asynccontextmanager
async def dev_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=str(temporal_binary()),
        dev_server_extra_args=server_args(),
    )
    try:
        yield env
    finally:
        await env.shutdown()
        await asyncio.sleep(0.5)  # the SDK's native layer can crash on an immediate exit


class ApiProcess:
    """The fake Messages API serving `turns` from a process of its own, as the real API is
    elsewhere: its CPU and its interpreter lock are not the measured loop's (an in-process
    ReplayServer answers from a thread of the process whose event loop is being timed)."""

    def __init__(self, turns: list[Turn]) -> None:
        self._turns = turns
        self._dir = tempfile.TemporaryDirectory()
        self._proc: subprocess.Popen[str] | None = None
        self.base_url = ""

    def __enter__(self) -> ApiProcess:
        cassette = Path(self._dir.name) / "turns.jsonl"
        for turn in self._turns:
            save_turn(cassette, turn)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "durable_agent.replay", "serve", str(cassette)],
            cwd=ROOT, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().strip()
        if not line.startswith("ANTHROPIC_BASE_URL="):
            self.__exit__()
            raise RuntimeError(f"the replay server did not start: {line!r}")
        self.base_url = line.split("=", 1)[1]
        return self

    def state(self) -> dict[str, Any]:
        """The requests' count and times (time.monotonic(), this machine's clock) and the
        violations the server saw."""
        with urllib.request.urlopen(self.base_url + STATE_PATH, timeout=10) as reply:
            state: dict[str, Any] = json.load(reply)
        return state

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
            if self._proc.stdout is not None:
                self._proc.stdout.close()
        self._dir.cleanup()


TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def dev_server_pid() -> int:
    """The `temporal server start-dev` child of this process."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and b"start-dev" in cmdline:
            return int(entry.name)
    raise RuntimeError("no dev server child")
