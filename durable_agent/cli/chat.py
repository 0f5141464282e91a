"""`durable-agent chat`: a multi-turn session; each line is a prompt sent as an Update."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import signal
import sys
import threading
import uuid
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError

from durable_agent.cli.approving import ask_in_terminal
from durable_agent.cli.connect import connect
from durable_agent.cli.console import Console
from durable_agent.cli.errors import EXIT_DETACHED, CliError
from durable_agent.cli.reconnect import riding_out
from durable_agent.cli.serving import prepared, serving
from durable_agent.cli.sessions import (
    compact_request,
    find_session,
    fleet_start,
    new_session_id,
    new_session_queue,
    session_memo,
    state_name,
)
from durable_agent.cli.stopping import Stopped, stop_session, until_stopped
from durable_agent.cli.travel import bring_back, sync, upload
from durable_agent.cli.watching import (
    idle_hint,
    install_interrupt,
    query_result,
    send_interrupt,
    stalls_of,
    watch,
)
from durable_agent.engine.contracts import (
    PromptAccepted,
    PromptRequest,
    SessionInput,
    SessionStatus,
)
from durable_agent.engine.messages import Usage
from durable_agent.engine.pricing import cost_usd
from durable_agent.engine.state import QueryConfig, QueryResult
from durable_agent.engine.todos import todo_text
from durable_agent.names import Queries, Signals, Updates, Workflows

EXIT_WORDS = {"/exit", "/quit", "exit", "quit"}


async def read_line(prompt: str) -> str | None:
    """One line from stdin (None at end of input), without blocking the event loop. The read
    runs in a daemon thread, not the loop's executor: a chat stopped while it waits for a line
    (SIGTERM) must not wait at exit for a line that never comes."""
    loop = asyncio.get_running_loop()
    got: asyncio.Future[str | None] = loop.create_future()

    def settle(line: str | None, error: BaseException | None) -> None:
        if got.done():
            return
        if error is not None:
            got.set_exception(error)
        else:
            got.set_result(line)

    def read() -> None:
        line, error = None, None
        try:
            if sys.stdin.isatty():
                print(prompt, end="", file=sys.stderr, flush=True)
            text = sys.stdin.readline()
            line = text.rstrip("\n") if text else None
        except Exception as exc:  # (a line that is not text) raised where it is awaited
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
            loop.call_soon_threadsafe(settle, line, error)

    threading.Thread(target=read, daemon=True, name="chat-stdin").start()
    return await got


async def chat(
    client: Client,
    console: Console,
    config: QueryConfig,
    task_queue: str,
    session_id: str,
    memo: dict[str, Any] | None = None,
) -> int:
    """Chat in `session_id`: started on `task_queue` with `memo` when memo is given, else the
    running session of that id."""
    travel = None
    if memo is not None:
        travel = await upload(config.workspace, console)
        config, fair = fleet_start(config, task_queue)
        handle = await client.start_workflow(
            Workflows.SESSION,
            SessionInput(
                session_id=session_id,
                config=config,
                workspace=travel.hosted if travel else None,
            ),
            id=session_id,
            task_queue=task_queue,
            static_summary="chat",
            memo=memo,
            result_type=SessionStatus,
            **fair,
        )
    else:
        handle = client.get_workflow_handle(session_id, result_type=SessionStatus)
    console.info(f"session {session_id}: one prompt per line; /exit or end of input to finish")

    async def talk() -> int:
        detached = asyncio.Event()
        install_interrupt(lambda: send_interrupt(handle, console), detached.set)
        started = memo is not None  # a new session's first prompt is its "startup"
        spent: dict[str, Usage] = {}  # what this chat's prompts cost, by model (for /cost)
        while not detached.is_set():
            line = await read_line("› ")
            if line is None or line.strip() in EXIT_WORDS:
                break
            if not line.strip():
                continue
            if line.strip().startswith("/"):
                request = await slash_command(line.strip(), handle, console, spent)
                if request is None:
                    continue
            else:
                # A CLI's first prompt to a session it came back to: SessionStart "resume".
                request = PromptRequest(prompt=line, session_start=None if started else "resume")
                started = True
                if travel is not None:  # files edited here since the last prompt travel with it
                    request.checkpoint_id = await sync(travel)
            update_id = f"prompt-{uuid.uuid4()}"  # the same id on a retry: sent once, not twice

            def submit(request: PromptRequest = request, update_id: str = update_id) -> Any:
                return handle.execute_update(
                    Updates.SUBMIT_PROMPT, request, id=update_id, result_type=PromptAccepted
                )

            try:
                accepted = await riding_out(submit, console, session_id)
            except WorkflowUpdateFailedError as exc:
                console.info(f"not sent: {exc.cause}")
                continue
            except RPCError as exc:
                raise CliError(f"session {session_id} is not running: {exc.message}") from exc
            child = client.get_workflow_handle(accepted.query_workflow_id, result_type=QueryResult)
            outcome = riding_out(functools.partial(query_result, child), console, session_id)
            result = await watch(
                outcome,
                child,
                console,
                detached,
                *idle_hint(task_queue),
                on_approval=functools.partial(ask_in_terminal, child, console, read_line),
                stalls=stalls_of(client, child.id),
            )
            if result is None:
                break
            for model, used in result.usage_by_model.items():
                spent[model] = spent.get(model, Usage()) + used
            await bring_back(travel, result.workspace, console)
            console.result(session_id, result)
        if detached.is_set():
            console.info(f"detached; the session goes on: durable-agent tail {session_id}")
            return EXIT_DETACHED
        await riding_out(lambda: handle.signal(Signals.CLOSE), console, session_id)
        await riding_out(handle.result, console, session_id)
        return 0

    # SIGTERM stops what this chat started (its session, or its prompt in a joined one), as it
    # stops `-p`; Ctrl-C keeps its meaning here (interrupt, then detach).
    outcome = await until_stopped(talk(), (signal.SIGTERM,))
    if isinstance(outcome, Stopped):
        await stop_session(client, handle, memo is not None, console)
        return outcome.exit_code
    return outcome


SLASH_HELP = """commands (anything else is a prompt):
  /help     this list
  /status   the session: prompts so far, permission mode, what it allows, the last outcome
  /cost     what this chat's prompts cost so far (Anthropic's list prices)
  /compact [instructions]
            summarise the conversation now, to free context (what to keep, if you say)
  /exit     end the session (so does end of input, Ctrl-D)"""


async def slash_command(
    line: str, handle: WorkflowHandle[Any, SessionStatus], console: Console, spent: dict[str, Usage]
) -> PromptRequest | None:
    """A chat command; never sent to Claude as a prompt. `/compact` is run by the session like
    a prompt (the request returned); the others are answered here."""
    name = line.split()[0].lower()
    if name == "/compact":
        return compact_request(line)
    if name == "/help":
        console.info(SLASH_HELP)
    elif name == "/status":
        try:
            status = await asyncio.wait_for(
                handle.query(Queries.STATUS, result_type=SessionStatus), 10
            )
        except (RPCError, TimeoutError):
            console.info("the session does not answer now; durable-agent status shows why")
            return None
        mode = status.permission_mode or "unchecked"
        console.info(
            f"session {status.session_id}: {status.queries} prompt(s), permission mode {mode}"
        )
        for grant in status.session_grants:
            console.info(f"  allowed for this session: {grant.label()}")
        if status.todos:
            console.info(todo_text(status.todos))
        if status.last_result is not None:
            last = status.last_result
            console.info(f"  last prompt: {last.terminal.value} after {last.turn_count} turn(s)")
    elif name == "/cost":
        total = cost_usd(spent)
        used = sum(spent.values(), Usage())
        console.info(
            f"this chat: ${total:.4f} ({used.input_tokens:,} input, {used.output_tokens:,} "
            f"output, {used.cache_read_input_tokens:,} cache-read tokens)"
        )
    else:
        console.info(f"unknown command {name}; /help lists them")
    return None


async def cmd_chat(args: argparse.Namespace) -> int:
    console = Console(args.output_format)
    if args.session is None:
        session_id = new_session_id()
        task_queue = new_session_queue(args, session_id)
        async with prepared(args, console, task_queue) as (client, config):
            memo = session_memo(task_queue, config, "chat")
            return await chat(client, console, config, task_queue, session_id, memo)
    # An existing session goes on on its own task queue (the one its first CLI served).
    async with prepared(args, console, None) as (client, config):
        place = await find_session(client, args.session)
        async with serving(client, console, args.session, place, args.no_worker):
            return await chat(client, console, config, place.task_queue, args.session)


async def cmd_tail(args: argparse.Namespace) -> int:
    """Follow the prompt running in a session until it ends."""
    console = Console("text")
    client = await connect(console, start_server=False)
    handle = client.get_workflow_handle(args.session_id, result_type=SessionStatus)
    try:
        desc = await riding_out(handle.describe, console, args.session_id)
    except RPCError as exc:
        raise CliError(
            f"no session {args.session_id}: {exc.message}", "durable-agent list shows sessions"
        ) from exc
    if desc.status != WorkflowExecutionStatus.RUNNING:
        return await _ended(handle, console, state_name(desc.status))
    try:
        status = await riding_out(
            lambda: asyncio.wait_for(handle.query(Queries.STATUS, result_type=SessionStatus), 10),
            console,
            args.session_id,
        )
    except (RPCError, TimeoutError) as exc:
        raise CliError(
            f"cannot read session {args.session_id}", "durable-agent status shows why"
        ) from exc
    if status.running_query_id is None:
        console.info(f"session {args.session_id} is not running a prompt now")
        if status.last_result is not None:
            console.result(args.session_id, status.last_result)
        return 0
    child = client.get_workflow_handle(status.running_query_id, result_type=QueryResult)
    detached = asyncio.Event()
    install_interrupt(detached.set, detached.set)
    outcome = riding_out(child.result, console, args.session_id)
    result = await watch(outcome, child, console, detached, "no progress yet", 3600.0)
    if result is None:
        return EXIT_DETACHED
    console.result(args.session_id, result)
    return 0


async def _ended(handle: WorkflowHandle[Any, SessionStatus], console: Console, state: str) -> int:
    """`tail` of a session that has ended: nothing to follow (no worker answers its queries);
    how it ended, and the last prompt's answer and outcome when it completed."""
    console.info(f"session {handle.id} has ended ({state}); nothing to follow")
    if state != "completed":
        console.info(f"durable-agent status {handle.id} shows what it has")
        return 0
    try:
        ended = await handle.result()
    except Exception:  # noqa: BLE001 — an unreadable result leaves the state shown
        return 0
    result = ended.last_result
    if result is None:
        console.info(
            "it ran no prompt" + (f"; last error: {ended.last_error}" if ended.last_error else "")
        )
        return 0
    if result.final_text:
        print(result.final_text, flush=True)
    console.result(handle.id, result)
    return 0
