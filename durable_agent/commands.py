"""The CLI's commands; imported lazily by `durable_agent.cli`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import difflib
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from durable_agent import telemetry
from durable_agent.cli import (
    CliError,
    _workspace,
    build_config,
    new_session_id,
)
from durable_agent.console import Console, result_details
from durable_agent.devserver import DevServerError, ensure_dev_server, running, stop_dev_server
from durable_agent.engine.state import MAX_PROMPT_CHARS, QueryConfig, QueryResult
from durable_agent.paths import state_home
from durable_agent.reconnect import riding_out
from durable_agent.replay import ReplayServer, load_cassette
from durable_agent.watching import run_prompt

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
DEMO_WORKSPACE = EXAMPLES / "demo-workspace"
DEMO_CASSETTE = EXAMPLES / "demo.jsonl"


async def dispatch(args: argparse.Namespace) -> int:
    if args.command == "run":
        return await cmd_run(args)
    if args.command == "resume":
        return await cmd_resume(args)
    if args.command == "chat":
        from durable_agent.chat import cmd_chat

        return await cmd_chat(args)
    if args.command == "tail":
        from durable_agent.chat import cmd_tail

        return await cmd_tail(args)
    if args.command == "demo":
        return await cmd_demo(args)
    if args.command == "server":
        return cmd_server(args)
    if args.command == "status":
        return await cmd_status(args)
    if args.command == "interrupt":
        return await cmd_interrupt(args)
    if args.command == "list":
        return await cmd_list()
    raise CliError(f"unknown command {args.command}")


async def connect(console: Console, start_server: bool = True) -> Client:
    """TEMPORAL_ADDRESS if set; else the dev server of this state dir (started if needed)."""
    from durable_agent.wiring import connect as worker_connect
    from durable_agent.wiring import quiet_runtime

    address = os.environ.get("TEMPORAL_ADDRESS")
    hint = "check TEMPORAL_ADDRESS, or unset it to use the embedded dev server"
    patience = connect_seconds()  # a server that is restarting comes back within seconds
    if not address:
        home = state_home()
        try:
            if start_server:
                info, started = ensure_dev_server(home)
                if started:
                    console.info(
                        f"started Temporal dev server at {info.address} (Web UI {info.ui_url})"
                    )
            else:
                found = running(home)
                if found is None:
                    raise CliError(
                        "no Temporal dev server is running for this state dir",
                        "run `durable-agent server` or set TEMPORAL_ADDRESS",
                    )
                info = found
        except DevServerError as exc:
            raise CliError(str(exc), "set TEMPORAL_ADDRESS to use another Temporal server") from exc
        address, hint = info.address, f"see the dev server log {info.log_path}"
        patience = max(patience, 15.0)  # a dev server that just started may need a few seconds
    telemetry.setup_from_env()
    runtime = quiet_runtime()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    said = False
    while True:
        try:
            client = await worker_connect(address, runtime=runtime)
        except RuntimeError as exc:  # the SDK raises RuntimeError when it cannot connect
            if loop.time() >= deadline:
                raise CliError(f"cannot reach Temporal at {address}: {exc}", hint) from None
            if not said and patience > 3:
                console.info(f"cannot reach Temporal at {address} yet; retrying for {patience:g}s…")
                said = True
            await asyncio.sleep(0.5)
            continue
        if said:
            console.info(f"connected to Temporal at {address}")
        return client


def connect_seconds() -> float:
    """How long the CLI tries to reach Temporal at start (DURABLE_AGENT_CONNECT_SECONDS)."""
    return float(os.environ.get("DURABLE_AGENT_CONNECT_SECONDS", "30"))


def _require_api_key() -> None:
    from activities.credentials import Credentials

    if Credentials().helper() is not None:
        return
    if not (os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")):
        raise CliError(
            "ANTHROPIC_API_KEY is not set",
            "export ANTHROPIC_API_KEY=… (and ANTHROPIC_BASE_URL for a compatible server), "
            "or try `durable-agent demo`, which needs no key",
        )


async def cmd_run(args: argparse.Namespace) -> int:
    console = Console(args.output_format)
    if not args.prompt.strip():
        raise CliError("the prompt is empty", 'durable-agent run "what to do"')
    if len(args.prompt) > MAX_PROMPT_CHARS:
        raise CliError(
            f"the prompt has {len(args.prompt):,} characters (at most {MAX_PROMPT_CHARS:,})",
            "put long material in a file in the workspace and ask the agent to read it",
        )
    if args.record and args.no_worker:
        raise CliError("--record needs the worker in this process", "drop --no-worker")
    record = Path(args.record) if args.record else None
    session_id = new_session_id()
    task_queue = new_session_queue(args, session_id)
    async with prepared(args, console, task_queue, record) as (client, config):
        memo = session_memo(task_queue, config, "run")
        return await run_prompt(client, console, args.prompt, config, task_queue, session_id, memo)


SESSION_QUEUE_PREFIX = "durable-agent-session-"


def session_queue(session_id: str) -> str:
    """The task queue of a session whose worker runs in its CLI: no other worker polls it."""
    return f"{SESSION_QUEUE_PREFIX}{session_id}"


def shared_queue() -> str:
    """The queue `python worker.py` serves: $DURABLE_AGENT_TASK_QUEUE, default `durable-agent`."""
    from durable_agent.wiring import DEFAULT_TASK_QUEUE

    return os.environ.get("DURABLE_AGENT_TASK_QUEUE") or DEFAULT_TASK_QUEUE


def new_session_queue(args: argparse.Namespace, session_id: str) -> str:
    """A session served by this process's worker gets a queue of its own, so that another
    CLI's worker (with its own API endpoint and key) never runs it, and this worker runs no
    other session. --no-worker, or DURABLE_AGENT_TASK_QUEUE set explicitly, puts it on the
    shared queue for `python worker.py`. A recording run is always on its own queue: other
    workers would not record."""
    if getattr(args, "record", None):
        return session_queue(session_id)
    if args.no_worker or os.environ.get("DURABLE_AGENT_TASK_QUEUE"):
        return shared_queue()
    return session_queue(session_id)


def api_endpoint() -> str:
    return os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL


DEFAULT_BASE_URL = "https://api.anthropic.com"


def session_memo(task_queue: str, config: QueryConfig, command: str) -> dict[str, Any]:
    """Where a session runs, for `resume` and `chat --session` (never the API key). A memo, not
    workflow input: the workflow code and its histories do not see it."""
    return {
        "task_queue": task_queue,
        "base_url": api_endpoint(),
        "workspace": config.workspace,
        "command": command,
    }


@dataclasses.dataclass
class SessionPlace:
    task_queue: str
    memo: dict[str, Any]


async def find_session(client: Client, session_id: str) -> SessionPlace:
    """A running session's task queue (as the server has it) and its memo; a clear error for
    an unknown or finished one."""
    handle = client.get_workflow_handle(session_id)
    try:
        desc = await handle.describe()
    except RPCError as exc:
        raise CliError(
            f"no session {session_id}: {exc.message}", "durable-agent list shows sessions"
        ) from exc
    if desc.status != WorkflowExecutionStatus.RUNNING:
        raise CliError(
            f"session {session_id} is {_state(desc.status)}; there is nothing to resume",
            f"durable-agent status {session_id} shows how it ended",
        )
    try:
        memo = await desc.memo()
    except Exception:  # noqa: BLE001 — an unreadable memo only costs the endpoint check
        memo = {}
    return SessionPlace(task_queue=desc.task_queue, memo=dict(memo))


def check_endpoint(console: Console, session_id: str, place: SessionPlace) -> None:
    recorded = place.memo.get("base_url")
    if recorded and recorded != api_endpoint():
        console.info(
            f"warning: session {session_id} was started against {recorded}; "
            f"it goes on against {api_endpoint()} (ANTHROPIC_BASE_URL)"
        )


async def cmd_resume(args: argparse.Namespace) -> int:
    """Pick a session up again on its own task queue, with this environment's API settings,
    and follow it to its end."""
    from durable_agent.watching import watch_session

    console = Console(args.output_format)
    if not args.no_worker:
        _require_api_key()
    client = await connect(console)
    place = await find_session(client, args.session_id)
    if place.memo.get("command") == "chat":
        raise CliError(
            f"session {args.session_id} is a chat",
            f"durable-agent chat --session {args.session_id} picks it up",
        )
    async with serving(client, console, args.session_id, place, args.no_worker):
        return await watch_session(client, console, args.session_id, place.task_queue)


@contextlib.asynccontextmanager
async def serving(
    client: Client, console: Console, session_id: str, place: SessionPlace, no_worker: bool
) -> AsyncIterator[None]:
    """A worker in this process on an existing session's queue (unless --no-worker), with this
    environment's ANTHROPIC_* settings."""
    from durable_agent.wiring import build_worker

    task_queue = place.task_queue
    if no_worker:
        console.info(f"following session {session_id}; a worker on {task_queue!r} must serve it")
        yield
        return
    check_endpoint(console, session_id, place)
    async with build_worker(client, task_queue):
        console.info(f"resuming session {session_id} on task queue {task_queue!r}")
        yield


@contextlib.asynccontextmanager
async def prepared(
    args: argparse.Namespace,
    console: Console,
    task_queue: str | None,
    record: Path | None = None,
) -> AsyncIterator[tuple[Client, QueryConfig]]:
    """Config from the options, a Temporal client, and (unless --no-worker) a worker in this
    process on `task_queue` for the duration (None: the client only, for the caller to find
    the queue)."""
    from activities.model import default_client
    from durable_agent.wiring import build_worker

    config = build_config(args, _workspace(args.workspace))
    if not args.no_worker:
        _require_api_key()
    client = await connect(console)
    async with AsyncExitStack() as stack:
        if not args.no_worker and task_queue is not None:
            factory = default_client
            if record is not None:
                factory = _recording(stack, record, console)
            await stack.enter_async_context(
                build_worker(client, task_queue, client_factory=factory)
            )
        yield client, config


def _recording(stack: AsyncExitStack, cassette: Path, console: Console) -> Any:
    """Send the model calls through a recording proxy (the run is on its own task queue, so
    no other worker, which would not record, takes it)."""
    from activities.model import ClientOptions, default_client
    from durable_agent.replay.record import RecordingProxy

    if cassette.exists():
        raise CliError(f"{cassette} exists already", "choose a new file for --record")
    proxy = RecordingProxy(cassette, api_endpoint()).start()
    stack.callback(proxy.stop)
    console.info(f"recording the model calls to {cassette}")

    def factory(opts: ClientOptions) -> Any:
        return default_client(dataclasses.replace(opts, base_url=proxy.base_url))

    return factory


async def cmd_demo(args: argparse.Namespace) -> int:
    import anthropic

    from activities.model import ClientOptions
    from durable_agent.wiring import build_worker

    console = Console(args.output_format)
    if not DEMO_CASSETTE.exists() or not DEMO_WORKSPACE.is_dir():
        raise CliError(f"the demo files are missing under {EXAMPLES}", "run from a full checkout")
    tmp = Path(tempfile.mkdtemp(prefix="durable-agent-demo-"))
    workspace = tmp / "workspace"
    shutil.copytree(DEMO_WORKSPACE, workspace)
    server = ReplayServer(load_cassette(DEMO_CASSETTE)).start()
    console.info(f"demo workspace: {workspace}")
    console.info(f"fake Messages API (replaying {DEMO_CASSETTE.name}) at {server.base_url}")
    try:
        client = await connect(console)
        task_queue = f"durable-agent-demo-{uuid.uuid4().hex[:8]}"

        def factory(_opts: ClientOptions) -> anthropic.AsyncAnthropic:
            return anthropic.AsyncAnthropic(api_key="demo", base_url=server.base_url, max_retries=0)

        config = QueryConfig(workspace=str(workspace), max_turns=20)
        async with build_worker(client, task_queue, client_factory=factory):
            code = await run_prompt(client, console, DEMO_PROMPT, config, task_queue)
        if server.violations:
            raise CliError(
                "the demo's requests did not match the recording: " + "; ".join(server.violations)
            )
        console.info("what the agent changed:")
        for line in workspace_diff(DEMO_WORKSPACE, workspace):
            console.info(f"  {line}")
        _demo_footer(console, client)
        return code
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


def workspace_diff(before: Path, after: Path) -> list[str]:
    """Unified diff of the text files the agent changed."""
    out: list[str] = []
    for new in sorted(p for p in after.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        rel = new.relative_to(after)
        old = before / rel
        old_lines = old.read_text(errors="replace").splitlines() if old.exists() else []
        new_lines = new.read_text(errors="replace").splitlines()
        out += difflib.unified_diff(old_lines, new_lines, f"a/{rel}", f"b/{rel}", lineterm="")
    return out


DEMO_PROMPT = "The tests in this project fail. Find the bug, fix it, and run the tests."


def _demo_footer(console: Console, client: Client) -> None:
    target = client.service_client.config.target_host
    info = running(state_home())
    console.info(f"history: uv run temporal workflow list --address {target}")
    if info is not None:
        console.info(f"Web UI: {info.ui_url}")


def cmd_server(args: argparse.Namespace) -> int:
    home = state_home()
    if args.stop:
        print(
            "stopped" if stop_dev_server(home) else "no dev server was running for this state dir"
        )
        return 0
    try:
        info, started = ensure_dev_server(home)
    except DevServerError as exc:
        raise CliError(str(exc)) from exc
    print(f"{'started' if started else 'running'}: Temporal dev server at {info.address}")
    print(f"Web UI: {info.ui_url}")
    print(f"data: {info.db_path}")
    return 0


STATUS_PATIENCE = 60.0
"""Seconds `status` waits for an unreachable server."""


async def cmd_status(args: argparse.Namespace) -> int:
    from workflows.session import SessionWorkflow

    console = Console()
    client = await connect(console, start_server=False)
    handle = client.get_workflow_handle_for(SessionWorkflow.run, args.session_id)
    try:
        # A one-shot look: rides out a short outage (a server restart), not a long one.
        desc = await riding_out(handle.describe, console, args.session_id, STATUS_PATIENCE)
    except RPCError as exc:
        raise CliError(
            f"no session {args.session_id}: {exc.message}", "durable-agent list shows sessions"
        ) from exc
    try:
        if desc.status == WorkflowExecutionStatus.COMPLETED:
            # no worker needed for a finished session
            status = await riding_out(handle.result, console, args.session_id, STATUS_PATIENCE)
        else:
            status = await riding_out(
                lambda: asyncio.wait_for(handle.query(SessionWorkflow.status), 10),
                console,
                args.session_id,
                STATUS_PATIENCE,
            )
    except TimeoutError as exc:
        if failing := await failing_task(client, args.session_id):
            raise CliError(failing, "the worker's log has the whole error") from exc
        raise CliError(
            f"session {args.session_id} is {_state(desc.status)} but no worker answers for it",
            worker_hint(args.session_id, desc.task_queue),
        ) from exc
    except Exception as exc:  # noqa: BLE001 — failed/terminated sessions have no status to show
        if failing := await failing_task(client, args.session_id):
            raise CliError(failing, "the worker's log has the whole error") from exc
        raise CliError(f"session {args.session_id} is {_state(desc.status)}: {exc}") from exc
    if args.output_format == "json":
        print(status.model_dump_json(indent=2))
        return 0
    print(f"session {status.session_id}: {_state(desc.status)}, {status.queries} prompt(s)")
    for workflow_id in (args.session_id, status.running_query_id):
        if workflow_id and (failing := await failing_task(client, workflow_id)):
            print(failing)
    if status.running_query_id:
        print(f"running: {status.running_query_id}")
    if status.last_result is not None:
        _print_result(status.last_result)
    if status.last_error:
        print(f"last error: {status.last_error}")
    return 0


async def failing_task(client: Client, workflow_id: str) -> str | None:
    """One line when the workflow's task keeps failing (a bug, or code that no longer matches
    its history): it is not progressing, and retries until a fixed worker takes it."""
    try:
        desc = await client.get_workflow_handle(workflow_id).describe()
        raw = desc.raw_description
        if not raw.HasField("pending_workflow_task") or raw.pending_workflow_task.attempt < 2:
            return None
        attempt = raw.pending_workflow_task.attempt
        reverse = await client.workflow_service.get_workflow_execution_history_reverse(
            GetWorkflowExecutionHistoryReverseRequest(
                namespace=client.namespace,
                execution=WorkflowExecution(workflow_id=workflow_id),
                maximum_page_size=100,
            )
        )
    except RPCError:
        return None
    why = next(
        (
            e.workflow_task_failed_event_attributes.failure.message
            for e in reverse.history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        ),
        "",
    )
    first_line = why.strip().splitlines()[0] if why.strip() else "no reason recorded"
    return (
        f"{workflow_id}: its workflow task is failing (attempt {attempt}): {first_line} "
        "— it is stuck until a fixed worker runs it"
    )


def worker_hint(session_id: str, task_queue: str) -> str:
    if task_queue.startswith(SESSION_QUEUE_PREFIX):
        return f"its CLI has gone; pick it up again: durable-agent resume {session_id}"
    return f"start a worker for task queue {task_queue!r}: uv run python worker.py"


def _state(status: WorkflowExecutionStatus | None) -> str:
    return status.name.lower() if status else "unknown"


def _print_result(result: QueryResult) -> None:
    print(
        f"last prompt: {result.terminal.value} after {result.turn_count} turn(s)"
        + (f" — {result.message}" if result.message else "")
    )
    for line in result_details(result):
        print(line)


async def cmd_interrupt(args: argparse.Namespace) -> int:
    from workflows.session import SessionWorkflow

    client = await connect(Console(), start_server=False)
    try:
        await client.get_workflow_handle(args.session_id).signal(SessionWorkflow.interrupt)
    except RPCError as exc:
        raise CliError(f"cannot interrupt {args.session_id}: {exc.message}") from exc
    print(f"interrupt sent to {args.session_id}")
    return 0


async def cmd_list() -> int:
    client = await connect(Console(), start_server=False)
    count = 0
    async for wf in client.list_workflows('WorkflowType="SessionWorkflow"', limit=50):
        status = wf.status.name.lower() if isinstance(wf.status, WorkflowExecutionStatus) else "?"
        print(f"{wf.id}  {status:<11} {wf.start_time:%Y-%m-%d %H:%M:%S}")
        count += 1
    if count == 0:
        print("no sessions yet")
    return 0
