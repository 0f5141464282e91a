"""Riding out a Temporal outage in the CLI: the session lives on the server, so a server restart
or a network blip is a wait, never the end of `run`, `chat`, `tail` or `status`."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio.service import RPCError, RPCStatusCode

from durable_agent.cli.console import Console
from durable_agent.cli.errors import CliError

T = TypeVar("T")

TRANSIENT = frozenset(
    {
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.RESOURCE_EXHAUSTED,
        RPCStatusCode.ABORTED,
        RPCStatusCode.INTERNAL,
        RPCStatusCode.UNKNOWN,
        RPCStatusCode.CANCELLED,
    }
)
"""What an unreachable, restarting or overloaded server answers; anything else is an answer.
CANCELLED is the transport's word for a connection that closed before the call was sent (the
old address of a restarted dev server, taken by someone who hangs up): the CLI never cancels an
RPC itself (its own cancellations are asyncio's), so it means the server is away."""


def is_outage(exc: BaseException) -> bool:
    return isinstance(exc, RPCError) and exc.status in TRANSIENT


def give_up_seconds() -> float:
    """How long the CLI waits for the server to come back (DURABLE_AGENT_RECONNECT_SECONDS)."""
    return float(os.environ.get("DURABLE_AGENT_RECONNECT_SECONDS", "900"))


async def riding_out(
    call: Callable[[], Awaitable[T]],
    console: Console,
    session_id: str,
    give_up_after: float | None = None,
) -> T:
    """`call()` until it answers: while the server is unreachable, say so once, retry with
    backoff (0.5 s doubling to 5 s), and say when it is back. Gives up after `give_up_after`
    seconds of outage with a one-line error that says the session goes on."""
    limit = give_up_seconds() if give_up_after is None else give_up_after
    loop = asyncio.get_running_loop()
    down_since: float | None = None
    delay = 0.5
    while True:
        try:
            result = await call()
        except RPCError as exc:
            if exc.status not in TRANSIENT:
                raise
            now = loop.time()
            if down_since is None:
                down_since = now
                console.info(f"lost the Temporal server ({_reason(exc)}); reconnecting…")
            elif now - down_since > limit:
                raise CliError(
                    f"the Temporal server has been unreachable for {limit:g}s: {_reason(exc)}",
                    f"the session goes on there; follow it later: durable-agent tail {session_id}",
                ) from exc
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
            continue
        if down_since is not None:
            console.info(f"reconnected after {loop.time() - down_since:.0f}s")
        return result


def _reason(exc: RPCError) -> str:
    first = (exc.message or exc.status.name).splitlines()[0]
    return first[:120]
