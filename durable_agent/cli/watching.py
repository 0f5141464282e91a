"""Showing a prompt's progress while it runs, and its result."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from durable_agent import telemetry
from durable_agent.cli.console import Console
from durable_agent.cli.errors import EXIT_DETACHED, EXIT_STOPPED, CliError
from durable_agent.cli.reconnect import is_outage, riding_out
from durable_agent.cli.schedules import with_wakeups
from durable_agent.cli.sessions import fleet_start, new_session_id, query_workflow_id
from durable_agent.cli.stalls import Stall, described
from durable_agent.cli.travel import Travel, bring_back, upload
from durable_agent.engine.contracts import SessionInput, SessionStatus
from durable_agent.engine.state import (
    ProgressEvent,
    ProgressKind,
    QueryConfig,
    QueryResult,
    Terminal,
)
from durable_agent.names import Queries, Signals, Workflows

T = TypeVar("T")


def exit_code(terminal: Terminal) -> int:
    return 0 if terminal == Terminal.COMPLETED else EXIT_STOPPED


def install_interrupt(
    on_first: object, on_second: object, signals: tuple[int, ...] = (signal.SIGINT,)
) -> None:
    """First Ctrl-C interrupts the prompt; the second detaches (the session keeps running).
    With SIGTERM among `signals` it counts as a Ctrl-C (`timeout` stops the prompt)."""
    loop = asyncio.get_running_loop()
    presses = {"n": 0}

    def handler() -> None:
        presses["n"] += 1
        (on_first if presses["n"] == 1 else on_second)()  # type: ignore[operator]

    for sig in signals:
        try:
            loop.add_signal_handler(sig, handler)
        except (NotImplementedError, RuntimeError):
            pass


def send_interrupt(handle: WorkflowHandle[Any, Any], console: Console) -> asyncio.Future[None]:
    """Signal the session to interrupt its prompt, in the background. A session that has just
    ended (Ctrl-C as the run finishes) has nothing left to interrupt: that is not an error."""

    async def send() -> None:
        try:
            await handle.signal(Signals.INTERRUPT)
        except RPCError as exc:
            if exc.status not in (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION):
                console.info(f"could not interrupt: {exc.message} (Ctrl-C again detaches)")

    return asyncio.ensure_future(send())


def stalls_of(client: Client, workflow_id: str) -> Callable[[], Awaitable[list[str]]]:
    """What the running prompt `workflow_id` waits for, when it is not plain progress."""

    async def stalls() -> list[str]:
        from durable_agent.cli.pending import stalled_lines

        return await stalled_lines(client, workflow_id)

    return stalls


def idle_hint(task_queue: str) -> tuple[str, float]:
    """What to say when no worker has picked a prompt up, and after how long."""
    text = (
        f"no progress yet: is a worker running on task queue {task_queue!r}? "
        "(uv run python worker.py)"
    )
    return text, float(os.environ.get("DURABLE_AGENT_IDLE_HINT_SECONDS", "15"))


async def run_prompt(
    client: Client,
    console: Console,
    prompt: str,
    config: QueryConfig,
    task_queue: str,
    session_id: str | None = None,
    memo: dict[str, Any] | None = None,
) -> int:
    """Start a one-prompt session on `task_queue` (with `memo`: where it runs, see
    sessions.session_memo), show its progress, print its result."""

    session_id = session_id or new_session_id()
    with telemetry.tracer().start_as_current_span("invoke_agent durable-agent") as span:
        span.set_attributes(
            {"gen_ai.operation.name": "invoke_agent", "durable_agent.session_id": session_id}
        )
        code = await _run_session(client, console, prompt, config, task_queue, session_id, memo)
        span.set_attribute("durable_agent.exit_code", code)
        return code


async def _run_session(
    client: Client,
    console: Console,
    prompt: str,
    config: QueryConfig,
    task_queue: str,
    session_id: str,
    memo: dict[str, Any] | None = None,
) -> int:
    travel = await upload(config.workspace, console)
    if travel is not None:  # what `resume` elsewhere writes back from
        memo = {**(memo or {}), TRAVEL_MEMO: travel.base_id}
    config, fair = fleet_start(config, task_queue)
    await client.start_workflow(
        Workflows.SESSION,
        SessionInput(
            session_id=session_id,
            config=config,
            initial_prompt=prompt,
            close_when_idle=True,
            workspace=travel.hosted if travel else None,
        ),
        id=session_id,
        task_queue=task_queue,
        static_summary=prompt[:200],
        memo=memo,
        result_type=SessionStatus,
        **fair,
    )
    return await watch_session(client, console, session_id, task_queue, travel)


TRAVEL_MEMO = "workspace_base"
"""The session memo's key for the checkpoint a CLI uploaded (a travelling workspace)."""


async def watch_session(
    client: Client,
    console: Console,
    session_id: str,
    task_queue: str,
    travel: Travel | None = None,
) -> int:
    """Follow a one-prompt session (`run`, `resume`) to its end; the exit code of `run`."""
    handle = client.get_workflow_handle(session_id, result_type=SessionStatus)
    console.info(f"session {session_id} (Ctrl-C interrupts; twice detaches)")
    detached = asyncio.Event()

    def interrupt() -> None:
        console.info("interrupting…")
        send_interrupt(handle, console)

    # SIGTERM too: `timeout 600 durable-agent run …` in a CI script stops the agent at the
    # deadline (the CLI reports the interrupted prompt and exits), as it stops `claude -p`.
    install_interrupt(interrupt, detached.set, (signal.SIGINT, signal.SIGTERM))
    child = client.get_workflow_handle(query_workflow_id(session_id, 1))
    outcome = riding_out(handle.result, console, session_id)
    status = await watch(
        outcome,
        child,
        console,
        detached,
        *idle_hint(task_queue),
        stalls=with_wakeups(client, session_id, stalls_of(client, child.id)),
    )
    if status is None:
        console.info(f"detached; the session goes on: durable-agent tail {session_id}")
        return EXIT_DETACHED
    if status.last_result is None:
        raise CliError(status.last_error or "the session ended without a result")
    await bring_back(travel, status.last_result.workspace, console)
    console.result(session_id, status.last_result)
    return exit_code(status.last_result.terminal)


async def watch(
    outcome: Awaitable[T],
    child: WorkflowHandle[Any, Any],
    console: Console,
    detached: asyncio.Event,
    idle_hint: str,
    idle_seconds: float = 15.0,
    on_approval: Callable[[], Awaitable[None]] | None = None,
    on_events: Callable[[list[ProgressEvent]], Awaitable[None]] | None = None,
    stalls: Callable[[], Awaitable[list[str]]] | None = None,
) -> T | None:
    """Print the prompt's progress events until `outcome` is ready (None if the user detached);
    `on_events` gets the new events, and when something starts waiting for an answer (a call
    for approval, an event for the SDK's hook callbacks) `on_approval` asks about it. After
    `idle_seconds` without an event, what `stalls()` (by default: the child's description)
    says the prompt waits for is shown, so a wait after an outage is never silent."""
    result = asyncio.ensure_future(outcome)
    stop = asyncio.ensure_future(detached.wait())
    since = 0
    loop = asyncio.get_running_loop()
    started = loop.time()
    hinted = False
    stall = Stall(started, stalls or described(child))
    try:
        while True:
            done = result.done()
            since, events, answered = await _show_events(child, console, since)
            if done and not answered:
                # The prompt ended but its last events did not come (the worker that answers
                # queries is reconnecting after an outage): ask again, or its answer is lost.
                since, events = await _last_events(child, console, since, events)
            if events and on_events is not None:
                await on_events(events)
            await stall.say(console, bool(events), idle_seconds)
            asks = any(e.kind in (ProgressKind.APPROVAL, ProgressKind.HOOK) for e in events)
            if asks and on_approval is not None:
                await on_approval()
            idle = asyncio.get_running_loop().time() - started > idle_seconds
            if since == 0 and idle and not hinted and not await _started(child):
                console.info(idle_hint)
                hinted = True
            if done:
                return result.result()
            if stop.done():
                return None
            console.spin("working")
            await asyncio.wait([result, stop], timeout=0.25, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (stop, result):
            if not pending.done():
                pending.cancel()
                with contextlib.suppress(BaseException):
                    await pending
        # An RPC cancelled mid-flight crashes the SDK's native layer if the process exits at
        # once (DESIGN.md §5): give it a moment to wind down.
        await asyncio.sleep(0.3)


QUERY_TIMEOUT = timedelta(seconds=5)
"""A progress query no worker answers (the worker is gone, or its task is lost in an outage)
would hold the watch for the server's 30 s and the client's retries of it."""


async def _started(child: WorkflowHandle[Any, Any]) -> bool:
    """Has any worker run the prompt's workflow yet?"""
    try:
        desc = await child.describe()
    except RPCError as exc:
        return is_outage(exc)  # while the server is away, no news is not "no worker"
    return desc.raw_description.workflow_execution_info.history_length > 3


LAST_EVENTS_SECONDS = 60.0
"""How long a finished prompt's last events are asked for before the result is shown without
them (a progress query needs a worker: after a server restart, one that has reconnected)."""


async def _last_events(
    child: WorkflowHandle[Any, Any], console: Console, since: int, shown: list[ProgressEvent]
) -> tuple[int, list[ProgressEvent]]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LAST_EVENTS_SECONDS
    while loop.time() < deadline:
        await asyncio.sleep(1.0)
        since, events, answered = await _show_events(child, console, since)
        shown = shown + events
        if answered:
            return since, shown
    console.info("the prompt's last progress could not be read (no worker answered)")
    return since, shown


async def _show_events(
    child: WorkflowHandle[Any, Any], console: Console, since: int
) -> tuple[int, list[ProgressEvent], bool]:
    """Print the events after `since`; the next index, those events, and whether the query was
    answered at all."""
    try:
        events = await asyncio.wait_for(
            child.query(
                Queries.PROGRESS, since, result_type=list[ProgressEvent], rpc_timeout=QUERY_TIMEOUT
            ),
            QUERY_TIMEOUT.total_seconds() + 1,
        )
    except (RPCError, TimeoutError):
        return since, [], False  # not started yet, or no worker answers now
    except Exception:  # noqa: BLE001 — a failed query must not end the watch
        return since, [], False
    for event in events:
        console.event(event)
        since = event.index + 1
    return since, events, True


async def query_result(child: WorkflowHandle[Any, QueryResult]) -> QueryResult:
    """The prompt's result; its workflow starts just after the Update returns."""
    while True:
        try:
            return await child.result()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            await asyncio.sleep(0.1)
