"""Background heartbeats for long activities, at about half the heartbeat timeout."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from temporalio import activity


@contextlib.asynccontextmanager
async def heartbeating(*details: object) -> AsyncIterator[None]:
    """Heartbeat in the background while the body runs (no-op outside an activity)."""
    if not activity.in_activity():
        yield
        return
    timeout = activity.info().heartbeat_timeout
    interval = timeout.total_seconds() / 2 if timeout else 10.0

    async def beat() -> None:
        while True:
            activity.heartbeat(*details)
            await asyncio.sleep(interval)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
