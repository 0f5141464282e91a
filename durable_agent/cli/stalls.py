"""What a prompt that shows no progress waits for, said once per kind of wait: a step whose
worker went quiet (an outage, a dead worker), a step retried after an error (a store error, a
full disk), a step no worker takes (cli/pending.py describes each)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.service import RPCError

from durable_agent.cli.console import Console
from durable_agent.cli.pending import describe_activity, is_progress, with_disk

Stalls = Callable[[], Awaitable[list[str]]]


def described(child: WorkflowHandle[Any, Any]) -> Stalls:
    """The waits of `child` from its own description (steps named by kind, not summary)."""

    async def stalls() -> list[str]:
        try:
            desc = await child.describe()
        except RPCError:
            return []  # gone or unreachable: riding_out says so
        now = datetime.now(UTC)
        lines = (
            describe_activity(a, now, "", desc.task_queue)
            for a in desc.raw_description.pending_activities
        )
        return [with_disk(line) for line in lines if not is_progress(line)]

    return stalls


class Stall:
    """After `idle` seconds without progress, and as often, what the prompt waits for; each
    kind of wait once (the same wait with other numbers is not said again)."""

    def __init__(self, now: float, stalls: Stalls) -> None:
        self.looked = now
        self.stalls = stalls
        self.said: set[str] = set()

    async def say(self, console: Console, progress: bool, idle: float) -> None:
        now = asyncio.get_running_loop().time()
        if progress:
            self.looked = now
            self.said.clear()
        if now - self.looked < idle:
            return
        self.looked = now
        for line in await self.stalls():
            if (kind := re.sub(r"\d+", "#", line)) not in self.said:
                self.said.add(kind)
                console.info(f"waiting for: {line}")
