"""Bash: a command in its own process group, with a timeout; killed on cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

from activities.tools.base import MAX_OUTPUT_CHARS, ToolOutput, Workspace
from activities.tools.environment import tool_environment
from durable_agent.engine.tools import BashInput

DEFAULT_TIMEOUT_MS = 120_000
DRAIN_SECONDS = 0.5
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


async def run_bash(args: BashInput, ws: Workspace) -> ToolOutput:
    timeout = (args.timeout or DEFAULT_TIMEOUT_MS) / 1000
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        args.command,
        cwd=ws.root,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
        env=tool_environment(ws.root),
    )
    buffer = _HeadTail(_KEEP)

    async def pump() -> None:
        assert proc.stdout is not None
        while chunk := await proc.stdout.read(65536):
            buffer.feed(chunk)

    reader = asyncio.ensure_future(pump())
    timed_out = False
    try:
        await asyncio.wait_for(proc.wait(), timeout)
        # The call ends when its shell exits: a background job (`sleep 1000 &`) that still holds
        # the output pipe gets a moment to flush, not the whole timeout.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(reader), DRAIN_SECONDS)
    except TimeoutError:
        timed_out = True
        _kill_group(proc)
        await proc.wait()
    except BaseException:
        _kill_group(proc)  # cancelled: the activity was cancelled or the worker is stopping
        raise
    finally:
        if not reader.done():
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        transport = getattr(proc, "_transport", None)
        if transport is not None:
            transport.close()  # our end of the pipe: a lingering writer gets EPIPE, not a hang
    output = buffer.text().rstrip("\n")
    if timed_out:
        return ToolOutput(f"{output}\n\nCommand timed out after {timeout:g}s and was killed.", True)
    code = proc.returncode
    if code:
        return ToolOutput(f"{output}\n\nExit code {code}".lstrip("\n"), True)
    return ToolOutput(output or "(no output)")
