"""`durable-agent schedule add|list|delete`: a session's cron jobs (Temporal Schedules,
durable_agent/schedules.py) and its pending wake-ups; and the lines `status` shows of them."""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError

from durable_agent.cli.connect import connect
from durable_agent.cli.console import Console
from durable_agent.cli.errors import CliError
from durable_agent.engine.contracts import SessionStatus
from durable_agent.engine.schedules import (
    MAX_SCHEDULED_PROMPT_CHARS,
    cron_problem,
    split_schedule_id,
    wakeup_lines,
)
from durable_agent.names import Queries, Updates
from durable_agent.schedules import CronError, CronJob, create_job, delete_job, session_jobs

CRON_HINT = 'five fields: minute hour day-of-month month day-of-week, e.g. --cron "7 * * * *"'
LIST_HINT = "durable-agent schedule list [SESSION] shows the jobs and wake-ups"


async def cmd_schedule(args: argparse.Namespace) -> int:
    if args.schedule_command == "add":
        _check_add(args)
    if args.schedule_command == "delete" and args.id.startswith("w") and not args.session_id:
        raise CliError(
            f"{args.id} is a wake-up: name its session",
            f"durable-agent schedule delete {args.id} SESSION",
        )
    client = await connect(Console(), start_server=False)
    if args.schedule_command == "add":
        return await _add(client, args)
    if args.schedule_command == "list":
        return await _list(client, args.session_id, args.json)
    return await _delete(client, args.id.strip(), args.session_id)


def _check_add(args: argparse.Namespace) -> None:
    problem = cron_problem(args.cron)
    if problem is not None:
        raise CliError(f"--cron {args.cron!r}: {problem}", CRON_HINT)
    if not args.prompt.strip():
        raise CliError(
            "the prompt is empty", 'durable-agent schedule add SESSION --cron EXPR "PROMPT"'
        )
    if len(args.prompt) > MAX_SCHEDULED_PROMPT_CHARS:
        raise CliError(
            f"the prompt has {len(args.prompt):,} characters (at most "
            f"{MAX_SCHEDULED_PROMPT_CHARS:,})",
            "put long material in a file in the workspace and name it in the prompt",
        )


async def _add(client: Client, args: argparse.Namespace) -> int:
    job_id = uuid.uuid4().hex[:8]
    cron = " ".join(args.cron.split())
    try:
        job = await create_job(client, args.session_id, job_id, cron, args.prompt, not args.once)
    except CronError as exc:
        raise CliError(
            str(exc), "durable-agent list shows sessions; a job needs a running one"
        ) from exc
    print(job.line())
    print(f"cancel it with: durable-agent schedule delete {job.id}")
    return 0


async def _list(client: Client, session_id: str | None, as_json: bool) -> int:
    jobs = await session_jobs(client, session_id)
    wakeups = await _session_status(client, session_id) if session_id else None
    if as_json:
        found = {
            "cron_jobs": [job.model_dump(mode="json") for job in jobs],
            "wakeups": [w.model_dump(mode="json") for w in wakeups.wakeups] if wakeups else [],
        }
        print(json.dumps(found, indent=2))
        return 0
    for job in jobs:
        print(job.line() if session_id else f"{job.session_id}: {job.line()}")
    for line in wakeup_lines(wakeups.wakeups if wakeups else [], datetime.now(UTC)):
        print(line)
    if not jobs and not (wakeups and wakeups.wakeups):
        print(f"no cron jobs or wake-ups in {session_id}" if session_id else "no cron jobs")
    return 0


async def _session_status(client: Client, session_id: str) -> SessionStatus:
    handle = client.get_workflow_handle(session_id)
    try:
        return await asyncio.wait_for(handle.query(Queries.STATUS, result_type=SessionStatus), 10)
    except (RPCError, TimeoutError) as exc:
        raise CliError(
            f"cannot read session {session_id}", f"durable-agent status {session_id} shows why"
        ) from exc


async def _delete(client: Client, ident: str, session_id: str | None) -> int:
    if ident.startswith("w"):
        return await _cancel_wakeup(client, ident, session_id)
    if (whole := split_schedule_id(ident)) is not None:  # the Temporal Schedule's own id
        session_id, ident = whole
    if session_id is None:
        session_id = (await _job_named(client, ident)).session_id
    if not await delete_job(client, session_id, ident):
        raise CliError(f"no cron job {ident} in session {session_id}", LIST_HINT)
    print(f"cron job {ident} of session {session_id} deleted")
    return 0


async def _job_named(client: Client, ident: str) -> CronJob:
    found = [job for job in await session_jobs(client) if job.id == ident]
    if not found:
        raise CliError(f"no cron job {ident}", LIST_HINT)
    if len(found) > 1:
        sessions = ", ".join(job.session_id for job in found)
        raise CliError(
            f"cron job {ident} is in {len(found)} sessions ({sessions})",
            f"name the session: durable-agent schedule delete {ident} SESSION",
        )
    return found[0]


async def _cancel_wakeup(client: Client, ident: str, session_id: str | None) -> int:
    assert session_id is not None  # cmd_schedule checked
    handle = client.get_workflow_handle(session_id)
    try:
        said = await handle.execute_update(Updates.CANCEL_WAKEUP, ident, result_type=str)
    except WorkflowUpdateFailedError as exc:
        raise CliError(str(exc.cause or exc), LIST_HINT) from exc
    except RPCError as exc:
        raise CliError(
            f"cannot reach session {session_id}: {exc.message}", "durable-agent list shows sessions"
        ) from exc
    print(said)
    return 0


async def status_lines(client: Client, status: SessionStatus) -> list[str]:
    """What `status` shows of a session's wake-ups and cron jobs."""
    lines = wakeup_lines(status.wakeups, datetime.now(UTC))
    if status.wakeups and status.close_when_idle and not status.closed:
        lines.append("the session stays open for its wake-ups, then ends")
    try:
        jobs = await session_jobs(client, status.session_id)
    except RPCError:  # the jobs are extra: status shows the rest
        jobs = []
    lines += [job.line() for job in jobs]
    return lines


def with_wakeups(
    client: Client, session_id: str, stalls: Callable[[], Awaitable[list[str]]]
) -> Callable[[], Awaitable[list[str]]]:
    """`stalls`, and once no prompt runs, the wake-ups the session waits for (a headless
    session stays open for them)."""

    async def both() -> list[str]:
        lines = await stalls()
        handle = client.get_workflow_handle(session_id)
        try:
            status = await asyncio.wait_for(
                handle.query(Queries.STATUS, result_type=SessionStatus), 5
            )
        except (RPCError, TimeoutError):
            return lines
        if status.running_query_id is None:
            lines += wakeup_lines(status.wakeups)
        return lines

    return both
