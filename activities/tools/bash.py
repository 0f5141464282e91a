"""Bash: a command in its own process group, with a timeout; killed on cancellation."""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
from typing import IO

from activities.tools.base import MAX_OUTPUT_CHARS, ToolOutput, Workspace
from activities.tools.environment import tool_environment
from activities.tools.sandbox import SandboxPolicy, sandbox_argv
from activities.transcript import off_loop
from durable_agent.engine.tools import BashInput

DEFAULT_TIMEOUT_MS = 120_000
_KEEP = MAX_OUTPUT_CHARS // 2


class _HeadTail:
    """Keeps the first and last bytes of a stream of any length in bounded memory."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        room = self.keep - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > self.keep:
            excess = len(self.tail) - self.keep
            self.dropped += excess
            del self.tail[:excess]

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        if self.dropped:
            return f"{head}\n\n[... {self.dropped} bytes of output truncated ...]\n\n{tail}"
        return head + tail


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _output_text(out: IO[bytes]) -> str:
    """What the command wrote, head and tail kept when long (blocking: reads the file)."""
    buffer = _HeadTail(_KEEP)
    out.seek(0)
    while chunk := out.read(65536):
        buffer.feed(chunk)
    return buffer.text().rstrip("\n")


async def run_bash(
    args: BashInput, ws: Workspace, sandbox: SandboxPolicy | None = None
) -> ToolOutput:
    """With `sandbox`, the command runs under bubblewrap (activities/tools/sandbox.py)."""
    timeout = (args.timeout or DEFAULT_TIMEOUT_MS) / 1000
    argv = ["bash", "-c", args.command]
    if sandbox is not None:
        argv = await off_loop(sandbox_argv, argv, sandbox)  # stats the policy's paths
    # Output goes to a file, not a pipe: the call ends when the shell exits, even when a
    # background job (`sleep 1000 &`) keeps the output open.
    with await off_loop(tempfile.TemporaryFile) as out:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=ws.root,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            env=tool_environment(ws.root),
        )
        timed_out = False
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            timed_out = True
            _kill_group(proc)
            await proc.wait()
        except BaseException:
            _kill_group(proc)  # cancelled: the activity was cancelled or the worker is stopping
            raise
        output = await off_loop(_output_text, out)
    if timed_out:
        return ToolOutput(f"{output}\n\nCommand timed out after {timeout:g}s and was killed.", True)
    code = proc.returncode
    if code:
        return ToolOutput(f"{output}\n\nExit code {code}".lstrip("\n"), True)
    return ToolOutput(output or "(no output)")
