"""What a prompt that shows no progress waits for: a step the worker keeps failing (a store
error, a full disk) is retried for as long as its policy allows, with nothing on screen; say
which step, how often it failed and why, once per new reason."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.service import RPCError

from durable_agent.cli.console import Console
from durable_agent.devserver import full_disk
from durable_agent.paths import state_home


async def waiting_on(child: WorkflowHandle[Any, Any]) -> str | None:
    """One line about the prompt's failing steps, or None when none is failing."""
    try:
        desc = await child.describe()
    except RPCError:
        return None  # gone or unreachable: riding_out says so
    for pending in desc.raw_description.pending_activities:
        if pending.attempt < 2 or not pending.HasField("last_failure"):
            continue
        why = (pending.last_failure.message.strip().splitlines() or ["no reason given"])[0]
        line = (
            f"waiting: {pending.activity_type.name} failed {pending.attempt - 1} time(s) and "
            f"is retried: {why[:200]}"
        )
        if not os.environ.get("TEMPORAL_ADDRESS") and (disk := full_disk(state_home(), why)):
            line += f" — {disk}"
        return line
    return None


class Stall:
    """After `idle_seconds` without progress, and as often, what the prompt waits for
    (stalls.waiting_on), each reason once."""

    def __init__(self, now: float) -> None:
        self.looked = now
        self.said: str | None = None

    async def say(
        self, child: WorkflowHandle[Any, Any], console: Console, progress: bool, idle: float
    ) -> None:
        now = asyncio.get_running_loop().time()
        if progress:
            self.looked, self.said = now, None
        if now - self.looked < idle:
            return
        self.looked = now
        why = await waiting_on(child)
        if why and why != self.said:
            console.info(why)
        self.said = why
