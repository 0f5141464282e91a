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
from collections.abc import Coroutine
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


class Stops:
    """SIGTERM and SIGINT (or `signals`) for as long as the CLI runs. Before the session is
    opened one ends the CLI at once (nothing started, as by default); from `hold` (the session
    opens) one is held, so that a session whose start is on its way is never left
    behind; once it is open, `around` the work: the work is cancelled and the caller stops
    the session. A second signal ends the process at once: what the first one sent is in the
    session's history already."""

    def __init__(self, signals: tuple[int, ...] = STOP_SIGNALS, opened: bool = False) -> None:
        self.got: int | None = None
        self._task: asyncio.Future[Any] | None = None
        self._holding = opened
        """A signal is held (the session is opening, or open with no work going yet)."""
        loop = asyncio.get_running_loop()
        for sig in signals:
            loop.add_signal_handler(sig, self._on, sig)

    def _on(self, signum: int) -> None:
        if self.got is not None:
            os._exit(128 + self.got)
        if self._task is None and not self._holding:
            os._exit(128 + signum)
        self.got = signum
        if self._task is not None:
            self._task.cancel()

    def hold(self) -> None:
        """The session is about to be started (or joined): from now on a signal is held until
        `around` the work, which then stops at once."""
        self._holding = True

    async def around(self, work: Coroutine[Any, Any, T]) -> T | Stopped:
        """What `work` returns (its error raised), or Stopped when a signal came first (also
        while the session opened: then `work` never starts)."""
        if self.got is not None:
            work.close()
            return Stopped(self.got)
        self._task = task = asyncio.ensure_future(work)
        try:
            return await task
        except (asyncio.CancelledError, Exception):
            # (a cancelled Update call raises the SDK's own error, not CancelledError)
            if self.got is None:
                raise
            return Stopped(self.got)


async def until_stopped(
    work: Coroutine[Any, Any, T], signals: tuple[int, ...] = STOP_SIGNALS
) -> T | Stopped:
    """`Stops.around` for a CLI whose session is open already."""
    return await Stops(signals, opened=True).around(work)


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
