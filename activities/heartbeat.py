"""Background heartbeats for long activities, at about half the heartbeat timeout."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

from temporalio import activity

HEARTBEAT_INTERVAL_SECONDS = 1.0
"""How often a long activity heartbeats at most: an interrupt's cancel arrives with the reply."""


@dataclass
class _Beats:
    """When an attempt last heartbeat (time.monotonic()), for every `heartbeating` block in it."""

    task_token: bytes
    last: float


_BEATS: contextvars.ContextVar[_Beats | None] = contextvars.ContextVar("beats", default=None)


def _attempt_beats(interval: float) -> _Beats:
    """The attempt's record, begun at its start (the server times its heartbeat from there)."""
    info = activity.info()
    beats = _BEATS.get()
    if beats is None or beats.task_token != info.task_token:
        started = info.started_time
        if started.tzinfo is None:
            started = started.replace(tzinfo=UTC)
        since_start = (datetime.now(UTC) - started).total_seconds()
        beats = _Beats(info.task_token, time.monotonic() - min(max(since_start, 0.0), interval))
        _BEATS.set(beats)
    return beats


@contextlib.asynccontextmanager
async def heartbeating(*details: object) -> AsyncIterator[None]:
    """Heartbeat in the background while the body runs (no-op outside an activity). A beat
    comes one interval after the attempt's last, or its start: not at once, as a beat is an RPC
    and a write on the server that an attempt ending within the interval (most model calls of a
    fast API, most tools) does not need, and never more than an interval late however the
    attempt's work is split between blocks."""
    if not activity.in_activity():
        yield
        return
    timeout = activity.info().heartbeat_timeout
    interval = min(timeout.total_seconds() / 2, HEARTBEAT_INTERVAL_SECONDS) if timeout else 10.0
    beats = _attempt_beats(interval)

    async def beat() -> None:
        while True:
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - beats.last)))
            activity.heartbeat(*details)
            beats.last = time.monotonic()

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
