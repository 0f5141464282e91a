"""What the parts of one prompt's loop share (workflow side): the prompt's State, its progress
events, the user's interrupt and the activities it cancels.

QueryWorkflow owns one `LoopContext`; its helpers (hook runs, approvals, compaction) read and
write the State through it. Nobody holds a State across an await: a signal may have changed it
meanwhile, so each reads `ctx.state` again after one."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from durable_agent.engine.contracts import QueryInput
    from durable_agent.engine.state import ProgressEvent, ProgressKind, QueryConfig, State

T = TypeVar("T")


class _Interrupted(Exception):
    """Raised inside the loop when the user's interrupt cancelled the running step."""


class LoopContext:
    """The prompt's state is `state` alone (carried whole across continue-as-new); the rest is
    what is in flight (activities an interrupt cancels) and what the user sent (interrupt)."""

    def __init__(self, inp: QueryInput, state: State) -> None:
        self.inp = inp
        self.cfg: QueryConfig = inp.config
        self.state = state
        self.interrupted = False
        self.events: list[ProgressEvent] = list(inp.events)  # the run before's newest
        self.running: list[asyncio.Future[Any]] = []
        self.phase = "starting"

    def interrupt(self) -> None:
        """Cancel the running activities; the query ends aborted_*."""
        self.interrupted = True
        for task in self.running:
            task.cancel()

    def emit(self, kind: ProgressKind, text: str, is_error: bool = False) -> None:
        """Record a progress event; indices run on across continue-as-new."""
        index = self.state.event_count
        self.events.append(ProgressEvent(index=index, kind=kind, text=text, is_error=is_error))
        self.state = self.state.model_copy(update={"event_count": index + 1})

    async def guarded(self, awaitable: Awaitable[T]) -> T:
        """Await an activity so that an interrupt cancels it and surfaces as _Interrupted."""
        task = asyncio.ensure_future(awaitable)
        self.running.append(task)
        try:
            return await task
        except (ActivityError, CancelledError, asyncio.CancelledError) as exc:
            if self.interrupted:
                raise _Interrupted from exc
            raise
        finally:
            self.running.remove(task)
