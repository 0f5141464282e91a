"""The commands run, resume, demo, server, status, interrupt and list (chat and tail: chat.py);
imported only when one of them runs."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import difflib
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from durable_agent import temporal_config, warm
from durable_agent.cli.args import controls_for
from durable_agent.cli.connect import connect, require_api_key
from durable_agent.cli.console import Console, result_details
from durable_agent.cli.errors import CliError
from durable_agent.cli.following import follow_with
from durable_agent.cli.reconnect import riding_out
from durable_agent.cli.serving import prepared, served_warm, serving, warm_worker_for
from durable_agent.cli.sessions import (
    find_session,
    new_session_id,
    new_session_queue,
    query_workflow_id,
    session_memo,
    state_name,
    worker_hint,
)
from durable_agent.cli.travel import Travel
from durable_agent.cli.watching import TRAVEL_MEMO, run_prompt, watch_session
from durable_agent.devserver import DevServerError, ensure_dev_server, running, stop_dev_server
from durable_agent.engine.contracts import SessionStatus
from durable_agent.engine.state import (
    MAX_PROMPT_CHARS,
    ModelCallConfig,
    QueryConfig,
    QueryResult,
    Terminal,
)
from durable_agent.engine.todos import todo_text
from durable_agent.names import Queries, Signals, Workflows
from durable_agent.paths import state_home

__all__ = ["COMMANDS", "new_session_queue"]  # new_session_queue: the tests reach it here

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEMO_WORKSPACE = EXAMPLES / "demo-workspace"
DEMO_CASSETTE = EXAMPLES / "demo.jsonl"


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
    found = await warm_worker_for(args)
    if found is not None:  # a worker with this environment and code is up: no worker here
        async with prepared(args, console, None) as (client, config):
            memo = session_memo(found.task_queue, config, "run")
            async with served_warm(client, console, found):
                return await run_prompt(
                    client, console, args.prompt, config, found.task_queue, session_id, memo
                )
    async with prepared(args, console, task_queue, record) as (client, config):
        memo = session_memo(task_queue, config, "run")
        return await run_prompt(client, console, args.prompt, config, task_queue, session_id, memo)


async def cmd_resume(args: argparse.Namespace) -> int:
    """Pick a session up again on its own task queue, with this environment's API settings,
    and follow it to its end."""
    console = Console(args.output_format)
    if not args.no_worker:
        require_api_key()
    client = await connect(console)
    place = await find_session(client, args.session_id)
    if place.memo.get("command") == "chat":
        raise CliError(
            f"session {args.session_id} is a chat",
            f"durable-agent chat --session {args.session_id} picks it up",
        )
    base, local = place.memo.get(TRAVEL_MEMO), place.memo.get("workspace")
    travel = Travel(Path(local), base) if base and local else None
    async with serving(client, console, args.session_id, place, args.no_worker):
        return await watch_session(client, console, args.session_id, place.task_queue, travel)


async def cmd_demo(args: argparse.Namespace) -> int:
    import anthropic

    from activities.model import ClientOptions
    from durable_agent.replay import ReplayServer, load_cassette
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

        # The demo workspace's own .claude/settings.json allows what the fix needs (the tests,
        # an edit of stats.py); a user's personal settings do not change the recorded demo.
        only_project = argparse.Namespace(setting_sources="project")
        controls = controls_for(only_project, workspace)
        config = QueryConfig(
            workspace=str(workspace),
            max_turns=20,
            call=ModelCallConfig(permissions=controls.permissions, tool_hooks=controls.tool_hooks),
            settings=controls.settings,
        )
        async with build_worker(client, task_queue, client_factory=factory) as worker:
            follow_with(client, worker)
            memo = {**session_memo(task_queue, config, "demo"), "base_url": server.base_url}
            code = await run_prompt(client, console, DEMO_PROMPT, config, task_queue, memo=memo)
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


async def cmd_server(args: argparse.Namespace) -> int:
    home = state_home()
    if args.stop:
        warm.stop_all(home)
        print(
            "stopped" if stop_dev_server(home) else "no dev server was running for this state dir"
        )
        return 0
    try:
        info, started = ensure_dev_server(home)
    except DevServerError as exc:
        raise CliError(str(exc), exc.hint) from None
    print(f"{'started' if started else 'running'}: Temporal dev server at {info.address}")
    print(f"Web UI: {info.ui_url}")
    print(f"data: {info.db_path}")
    lines = warm.describe(home)
    if not args.no_warm_worker and warm.find(home) is None and warm.enabled():
        warm.spawn(home)
        lines.append("starting a warm worker for this environment (runs from it need no worker)")
    for line in lines:
        print(line)
    return 0


async def cmd_warm_worker(_args: argparse.Namespace) -> int:
    """The warm worker `server` starts: serves its fingerprint's queue until the dev server
    stops or it is sent SIGTERM (`server --stop`). Like `python worker.py`, it gives memory
    back once idle after work and, idle well above its size after its first work, has itself
    replaced by a fresh process (`DURABLE_AGENT_RECYCLE_ABOVE`, durable_agent/operating.py):
    it lives as long as the dev server, through any number of sessions."""
    import signal

    from activities.model import ModelActivities, default_client
    from durable_agent.operating import (
        SettingsError,
        WorkerSettings,
        release_memory_when_idle,
        replace_process,
    )
    from durable_agent.store import open_store
    from durable_agent.wiring import build_worker, recycler_for

    if temporal_config.external():
        raise CliError(
            "the warm worker is for the embedded dev server",
            "unset TEMPORAL_ADDRESS, TEMPORAL_PROFILE and TEMPORAL_CONFIG_FILE",
        )
    home = state_home()
    fp = warm.fingerprint()
    record = warm.WarmRecord(pid=os.getpid(), task_queue=warm.warm_queue(fp))
    client = await connect(Console(), start_server=False)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        settings = WorkerSettings.from_env()
    except SettingsError as exc:
        raise CliError(str(exc), exc.hint or "see `python worker.py --help`") from exc
    recycler = recycler_for(settings)
    store = open_store()
    model = ModelActivities(store, default_client, temporal=client)
    async with build_worker(client, record.task_queue, store=store, model=model) as worker:
        follow_with(client, worker)
        warm.write_record(home, fp, record)
        warm.started(home, fp)
        print(f"warm worker pid {record.pid} on {record.task_queue}", flush=True)
        # Meanwhile, so that the first session's model call finds its client ready.
        prewarming = asyncio.create_task(model.prewarm())
        releasing = asyncio.create_task(
            release_memory_when_idle(settings.idle_check_seconds, recycler=recycler)
        )
        try:
            while running(home) is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), WARM_CHECK_SECONDS)
                if stop.is_set() or (recycler is not None and recycler.wanted.is_set()):
                    break
        finally:
            warm.remove_record(home, fp, record.pid)
            prewarming.cancel()
            releasing.cancel()
    if recycler is not None and recycler.wanted.is_set() and not stop.is_set():
        print(f"recycling: {recycler.reason}; this process is replaced by a fresh one", flush=True)
        warm.restarting(home, fp, record.pid)  # no CLI starts a second one meanwhile
        replace_process(recycler.settled)
    return 0


WARM_CHECK_SECONDS = 2.0
"""How often the warm worker looks whether its dev server still runs."""


STATUS_PATIENCE = 60.0
"""Seconds `status` waits for an unreachable server."""


async def cmd_status(args: argparse.Namespace) -> int:
    console = Console()
    client = await connect(console, start_server=False)
    handle = client.get_workflow_handle(args.session_id, result_type=SessionStatus)
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
                lambda: asyncio.wait_for(
                    handle.query(Queries.STATUS, result_type=SessionStatus), 10
                ),
                console,
                args.session_id,
                STATUS_PATIENCE,
            )
    except TimeoutError as exc:
        if failing := await failing_task(client, args.session_id):
            raise CliError(failing, "the worker's log has the whole error") from exc
        from durable_agent.cli.pending import session_waiting_lines

        for line in await session_waiting_lines(client, args.session_id):
            print(line if line.startswith("running: ") else f"waiting for: {line}")
        raise CliError(
            f"session {args.session_id} is {state_name(desc.status)} but no worker answers for it",
            worker_hint(args.session_id, desc.task_queue),
        ) from exc
    except Exception as exc:  # noqa: BLE001 — failed/terminated sessions have no status to show
        if failing := await failing_task(client, args.session_id):
            raise CliError(failing, "the worker's log has the whole error") from exc
        raise CliError(f"session {args.session_id} is {state_name(desc.status)}: {exc}") from exc
    if args.output_format == "json":
        print(status.model_dump_json(indent=2))
        return 0
    print(f"session {status.session_id}: {state_name(desc.status)}, {status.queries} prompt(s)")
    for line in _controls_lines(status):
        print(line)
    if status.todos:
        print(todo_text(status.todos))
    from durable_agent.cli.schedules import status_lines

    for line in await status_lines(client, status):
        print(line)
    stuck = False
    for workflow_id in (args.session_id, status.running_query_id):
        if workflow_id and (failing := await failing_task(client, workflow_id)):
            print(failing)
            stuck = stuck or workflow_id == status.running_query_id
    if status.running_query_id and stuck:  # its queries would only time out
        print(f"running: {status.running_query_id}")
    elif status.running_query_id:
        print(await _running_line(client, status.running_query_id))
        from durable_agent.cli.pending import waiting_lines

        for line in await waiting_lines(client, status.running_query_id):
            print(f"waiting for: {line}")
        from durable_agent.cli.approving import waiting

        for request in await waiting(client.get_workflow_handle(status.running_query_id)):
            print(
                f"waiting for approval: {request.summary} (request {request.request_id}): "
                f"{request.reason}; answer with durable-agent approve {args.session_id}"
            )
    if status.last_result is not None:
        _print_result(status.last_result)
        for line in _transcript_lines(status):
            print(line)
    if status.last_error:
        print(f"last error: {status.last_error}")
    return 0


def _transcript_lines(status: SessionStatus) -> list[str]:
    """After a failed prompt: whether this machine's copy of the transcript is damaged, and
    what to do then (the next prompt would fail the same way)."""
    result = status.last_result
    if result is None or result.terminal != Terminal.MODEL_ERROR:
        return []
    from activities.transcript import TranscriptDamaged
    from durable_agent.store import open_store

    store = open_store()
    try:
        store.chain(status.session_id, status.head_uuid or result.head_uuid)
    except TranscriptDamaged as exc:
        shown = str(exc) in result.message  # the prompt's own error named it
        return [
            *([] if shown else [f"transcript: {exc}"]),
            "what to do: this session cannot go on from its damaged transcript; start a new "
            "session in the same workspace (durable-agent run PROMPT --workspace DIR)",
        ]
    except Exception:  # noqa: BLE001 — not here, unreadable: status shows what it has
        return []
    return []


async def _running_line(client: Client, query_id: str) -> str:
    """The running prompt: its text, what it is doing now and for how long."""
    from datetime import UTC, datetime

    child = client.get_workflow_handle(query_id)
    line = f"running: {query_id}"
    with contextlib.suppress(RPCError, TimeoutError):
        desc = await child.describe()
        prompt = " ".join((await desc.static_summary() or "").split())
        elapsed = _age(datetime.now(UTC) - desc.start_time).removesuffix(" ago")
        phase = await asyncio.wait_for(child.query(Queries.PHASE, result_type=str), 5)
        line += f" for {elapsed}, {phase}"
        if prompt:
            line += f": {prompt[:80]!r}"
    return line


def _controls_lines(status: SessionStatus) -> list[str]:
    """Permission mode, sandbox, rules and hooks of the session's settings, a line each."""
    if status.permission_mode is None:
        return []
    lines = [
        f"permission mode: {status.permission_mode}"
        + (", Bash sandboxed" if status.sandboxed else "")
    ]
    settings = status.settings or {}
    files = [layer.get("path") or layer.get("source") for layer in settings.get("layers", [])]
    lines.append(f"settings: {', '.join(map(str, files)) if files else '(no settings files)'}")
    perms = settings.get("permissions") or {}
    for behavior in ("deny", "ask", "allow"):
        if perms.get(behavior):
            lines.append(f"  {behavior}: {', '.join(perms[behavior])}")
    for grant in status.session_grants:
        lines.append(f"  allowed for this session: {grant.label()}")
    hooks = settings.get("hooks") or {}
    if hooks:
        counts = (f"{event} ({len(groups)})" for event, groups in hooks.items())
        lines.append(f"  hooks: {', '.join(counts)}")
    return lines


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


def _print_result(result: QueryResult) -> None:
    print(
        f"last prompt: {result.terminal.value} after {result.turn_count} turn(s)"
        + (f" — {result.message}" if result.message else "")
    )
    for line in result_details(result):
        print(line)


async def cmd_interrupt(args: argparse.Namespace) -> int:
    client = await connect(Console(), start_server=False)
    try:
        await client.get_workflow_handle(args.session_id).signal(Signals.INTERRUPT)
    except RPCError as exc:
        raise CliError(f"cannot interrupt {args.session_id}: {exc.message}") from exc
    print(f"interrupt sent to {args.session_id}")
    return 0


async def cmd_approve(args: argparse.Namespace) -> int:
    """Answer (or list) the tool calls waiting for approval in a session's running prompt."""
    from durable_agent.cli import approving
    from durable_agent.engine.contracts import ApprovalAnswer

    if args.always and args.deny is not None:
        raise CliError("--always and --deny contradict each other", "give one of them")
    client = await connect(Console(), start_server=False)
    child = await approving.running_prompt(client, args.session_id)
    requests = await approving.waiting(child)
    if args.list:
        for request in requests:
            print("\n".join(approving.describe(request)))
        if not requests:
            print(f"nothing waits for approval in {args.session_id}")
        return 0
    request_id = approving.pick(requests, args.request_id, args.session_id)
    if args.deny is not None:
        answer = ApprovalAnswer(
            request_id=request_id, behavior="deny", message=args.deny, by=approving.answerer()
        )
    else:
        answer = ApprovalAnswer(
            request_id=request_id, behavior="allow", always=args.always, by=approving.answerer()
        )
    ack = await approving.send(child, answer)
    if ack is None:
        raise CliError(f"{request_id} no longer waits (answered elsewhere, or interrupted)")
    print(ack)
    return 0


async def cmd_list(args: argparse.Namespace) -> int:
    """Recent sessions, newest first: how each ended (its last prompt's Terminal, not the
    workflow's status), its first prompt, workspace and age."""
    import json
    from datetime import UTC, datetime

    client = await connect(Console(), start_server=False)
    rows = []
    query = f'WorkflowType="{Workflows.SESSION}"'
    async for wf in client.list_workflows(query, limit=args.limit):
        rows.append(await _session_row(client, wf))
    rows.sort(key=lambda r: r["started"], reverse=True)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no sessions yet")
    now = datetime.now(UTC)
    for row in rows:
        age = _age(now - datetime.fromisoformat(row["started"]))
        prompt = " ".join((row["prompt"] or "").split())
        prompt = prompt if len(prompt) <= 50 else prompt[:49] + "…"
        print(f"{row['session_id']}  {row['outcome']:<20} {age:>8}  {prompt!r}  {row['workspace']}")
    return 0


async def _session_row(client: Client, wf: Any) -> dict[str, Any]:
    status = wf.status.name.lower() if isinstance(wf.status, WorkflowExecutionStatus) else "?"
    outcome = status
    if wf.status == WorkflowExecutionStatus.COMPLETED:
        try:
            ended = await client.get_workflow_handle(wf.id, result_type=SessionStatus).result()
        except Exception:  # noqa: BLE001 — a result we cannot read leaves the status shown
            ended = None
        if ended is not None and ended.last_result is not None:
            outcome = ended.last_result.terminal.value
        elif ended is not None:
            outcome = "failed" if ended.last_error else "no prompt"
    try:
        memo = await wf.memo()
    except Exception:  # noqa: BLE001 — an unreadable memo only costs the workspace column
        memo = {}
    prompt = None
    with contextlib.suppress(RPCError):
        first = await client.get_workflow_handle(query_workflow_id(wf.id, 1)).describe()
        prompt = await first.static_summary()
    return {
        "session_id": wf.id,
        "outcome": outcome,
        "status": status,
        "prompt": prompt,
        "workspace": memo.get("workspace"),
        "command": memo.get("command"),
        "started": wf.start_time.isoformat(),
    }


def _age(delta: Any) -> str:
    seconds = int(delta.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


async def cmd_export(args: argparse.Namespace) -> int:
    """The files a session's model left (its travelling workspace's last checkpoint) into DIR;
    a file of DIR that differs is left as it is and named."""
    from durable_agent.cli.travel import export, require_shared_store

    require_shared_store("export", "reads a session's files")
    console = Console()
    client = await connect(console, start_server=False)
    handle = client.get_workflow_handle(args.session_id, result_type=SessionStatus)
    try:
        desc = await riding_out(handle.describe, console, args.session_id, STATUS_PATIENCE)
        if desc.status == WorkflowExecutionStatus.COMPLETED:
            status = await handle.result()
        else:
            status = await asyncio.wait_for(
                handle.query(Queries.STATUS, result_type=SessionStatus), 10
            )
    except RPCError as exc:
        raise CliError(
            f"no session {args.session_id}: {exc.message}", "durable-agent list"
        ) from exc
    except TimeoutError as exc:
        raise CliError(
            f"session {args.session_id} runs but no worker answers for it",
            worker_hint(args.session_id, desc.task_queue),
        ) from exc
    last = status.last_result
    if last is None or last.workspace is None:
        raise CliError(
            f"session {args.session_id} has no files in the shared store (its tools worked in "
            "the workspace in place, or no prompt has finished yet)",
            f"durable-agent status {args.session_id}",
        )
    summary = await export(last.workspace.checkpoint_id, Path(args.dir))
    print(f"{args.dir}: {summary}")
    return 0


async def cmd_rewind(args: argparse.Namespace) -> int:
    from durable_agent.cli.rewind import cmd_rewind as rewind

    return await rewind(args)


async def cmd_schedule(args: argparse.Namespace) -> int:
    from durable_agent.cli.schedules import cmd_schedule as schedule

    return await schedule(args)


COMMANDS: dict[str, Callable[[argparse.Namespace], Coroutine[Any, Any, int]]] = {
    "export": cmd_export,
    "rewind": cmd_rewind,
    "run": cmd_run,
    "approve": cmd_approve,
    "resume": cmd_resume,
    "demo": cmd_demo,
    "server": cmd_server,
    "status": cmd_status,
    "interrupt": cmd_interrupt,
    "list": cmd_list,
    "warm-worker": cmd_warm_worker,
    "schedule": cmd_schedule,
}
