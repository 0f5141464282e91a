"""Background heartbeats for long activities, at about half the heartbeat timeout."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from temporalio import activity

HEARTBEAT_INTERVAL_SECONDS = 1.0
"""How often a long activity heartbeats at most: an interrupt's cancel arrives with the reply."""


@contextlib.asynccontextmanager
async def heartbeating(*details: object) -> AsyncIterator[None]:
    """Heartbeat in the background while the body runs (no-op outside an activity)."""
    if not activity.in_activity():
        yield
        return
    timeout = activity.info().heartbeat_timeout
    interval = min(timeout.total_seconds() / 2, HEARTBEAT_INTERVAL_SECONDS) if timeout else 10.0

    async def beat() -> None:
        # The first beat after `interval`, not at once: the server times the heartbeat from the
        # attempt's start, and a beat is an RPC and a write on the server, which a call that
        # ends within the interval (most model calls of a fast API, most tools) spares.
        while True:
            await asyncio.sleep(interval)
            activity.heartbeat(*details)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
