"""What stops a front-end stops what it set going: SIGTERM (`timeout 600 durable-agent -p …`),
Ctrl-C and the Agent SDK's close end `claude -p`'s agent with the process, and here they stop
the session the CLI started, wherever its worker runs (else it would run on without anyone).
SIGHUP keeps its default: the CLI ends and the session goes on, as a lost terminal should
leave a durable session."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.service import RPCError

from durable_agent.cli.console import Console
from durable_agent.engine.contracts import SessionStatus
from durable_agent.names import Queries, Signals

T = TypeVar("T")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

STOP_SECONDS = 4.0
"""How long a stopped CLI waits for its session to end: under the 5 s the Agent SDK leaves
between its SIGTERM and a SIGKILL."""


@dataclass
class Stopped:
    signum: int

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


async def until_stopped(work: Awaitable[T], signals: tuple[int, ...] = STOP_SIGNALS) -> T | Stopped:
    """What `work` returns (its error raised), or Stopped when one of `signals` came first
    (`work` cancelled). A second signal while the stop runs ends the process at once: what
    the first one sent is in the session's history already."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(work)
    got: list[int] = []

    def on_signal(signum: int) -> None:
        if got:
            os._exit(128 + got[0])
        got.append(signum)
        task.cancel()

    for sig in signals:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        return await task
    except asyncio.CancelledError:
        if not got:
            raise
        return Stopped(got[0])


async def stop_session(
    client: Client, handle: WorkflowHandle[Any, Any], owned: bool, console: Console
) -> None:
    """End what this process set going: a session it started stops (the waiting prompts
    dropped, the running one interrupted, its tools cancelled) and is waited for up to
    STOP_SECONDS; in a session another process runs, the running prompt is interrupted. The
    transcript stays: `--resume` goes on from it."""
    sid = handle.id
    sent = False
    try:
        async with asyncio.timeout(STOP_SECONDS):
            if owned:
                await handle.signal(Signals.STOP)
                sent = True
                with contextlib.suppress(WorkflowFailureError):
                    await handle.result()
                return
            status = await handle.query(Queries.STATUS, result_type=SessionStatus)
            if status.running_query_id is None:
                return
            await handle.signal(Signals.INTERRUPT)
            sent = True
            with contextlib.suppress(WorkflowFailureError):
                await client.get_workflow_handle(status.running_query_id).result()
    except (TimeoutError, RPCError) as exc:
        if sent:  # in its history: it ends wherever it runs, when it can
            console.info(f"session {sid} is still stopping: durable-agent status {sid}")
        else:
            why = exc.message if isinstance(exc, RPCError) else "no answer from Temporal"
            console.info(
                f"could not stop session {sid} ({why}): it may go on; durable-agent interrupt {sid}"
            )
