"""A session's cron jobs as Temporal Schedules: create, list, delete. Client calls, shared by
the CronCreate / CronList / CronDelete tools (in the tool activity) and `durable-agent
schedule` (the CLI).

How a Schedule reaches a session: a Schedule can only start workflows, so each job's action
starts a `ScheduledPromptWorkflow` (workflows/schedules.py) on the session's task queue, which
signals the session (`scheduled_prompt`) and ends. The session queues the prompt like one a
person sent; it runs between prompts. Everything is durable: the Schedule lives in the server,
the signal in the session's history. The workflow deletes a one-shot job's Schedule once sent,
and any job's Schedule whose session has ended; a session deletes its jobs as it ends."""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from pydantic import BaseModel
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    WorkflowExecutionStatus,
)
from temporalio.service import RPCError, RPCStatusCode

from durable_agent.engine.schedules import (
    CRON_MAX_AGE,
    MAX_CRON_JOBS,
    ScheduledPromptInput,
    schedule_id,
    split_schedule_id,
)
from durable_agent.names import Workflows

MEMO_KEY = "durable_agent_cron"
"""The memo entry of a job's Schedule: what `list` shows without describing each."""
CATCHUP_WINDOW = timedelta(days=1)
"""A firing missed while the server was down is made up within this (the session queues a
job's prompt once, however many firings were missed)."""


class CronError(Exception):
    """Why a job could not be created or deleted (one line)."""


class CronJob(BaseModel):
    """One cron job of a session, as the server has it."""

    id: str
    session_id: str
    cron: str
    prompt: str
    recurring: bool
    time_zone: str
    next_runs: list[datetime]
    """The next few firings (UTC); none: it has ended (one-shot done, or 7 days passed)."""
    ends: datetime | None = None

    @property
    def schedule_id(self) -> str:
        return schedule_id(self.session_id, self.id)

    def line(self) -> str:
        """`cron job 1a2b3c4d "*/5 * * * *" (UTC), recurring, next 2025-… UTC: prompt`."""
        kind = "recurring" if self.recurring else "once"
        upcoming = (
            f"next {self.next_runs[0]:%Y-%m-%d %H:%M} UTC"
            if self.next_runs
            else "ended, no more runs"
        )
        prompt = " ".join(self.prompt.split())
        prompt = prompt if len(prompt) <= 80 else prompt[:77] + "..."
        return f'cron job {self.id} "{self.cron}" ({self.time_zone}), {kind}, {upcoming}: {prompt}'


def local_time_zone() -> str:
    """This machine's IANA time zone ($TZ, else /etc/localtime's target), else UTC."""
    candidates = [os.environ.get("TZ", "").lstrip(":")]
    localtime = Path("/etc/localtime")
    if localtime.is_symlink():
        candidates.append(str(localtime.resolve()).partition("zoneinfo/")[2])
    try:
        candidates.append(Path("/etc/timezone").read_text().strip())
    except OSError:
        pass
    for name in candidates:
        if name and _known_zone(name):
            return name
    return "UTC"


def _known_zone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ValueError, OSError, KeyError):
        return False
    return True


async def create_job(
    client: Client,
    session_id: str,
    job: str,
    cron: str,
    prompt: str,
    recurring: bool = True,
    time_zone: str | None = None,
) -> CronJob:
    """The job's Schedule, created (or the one already there: a retried call). CronError when
    the session is not running, has MAX_CRON_JOBS jobs, or `cron` never matches."""
    queue = await _session_queue(client, session_id)
    sid = schedule_id(session_id, job)
    mine = await session_jobs(client, session_id)
    if len([j for j in mine if j.id != job]) >= MAX_CRON_JOBS:
        raise CronError(
            f"the session has {MAX_CRON_JOBS} cron jobs already; delete one first (CronDelete)"
        )
    zone = time_zone or local_time_zone()
    now = datetime.now(UTC)
    memo: dict[str, object] = {"session_id": session_id, "job_id": job, "cron": cron}
    memo |= {"prompt": prompt, "recurring": recurring, "time_zone": zone}
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(
            Workflows.SCHEDULED_PROMPT,
            ScheduledPromptInput(
                session_id=session_id, job_id=job, prompt=prompt, once=not recurring
            ),
            id=sid,
            task_queue=queue,
            static_summary=prompt[:200],
            # It waits for a worker of the session's queue (the session's CLI may be gone for a
            # while: `resume`); meanwhile the job's next firings are skipped, not piled up.
            execution_timeout=CRON_MAX_AGE,
        ),
        spec=ScheduleSpec(
            cron_expressions=[cron],
            time_zone_name=zone,
            end_at=now + CRON_MAX_AGE if recurring else None,
        ),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP, catchup_window=CATCHUP_WINDOW),
        state=ScheduleState(
            note=f"durable-agent cron job of session {session_id}",
            limited_actions=not recurring,
            remaining_actions=0 if recurring else 1,
        ),
    )
    try:
        handle = await client.create_schedule(sid, schedule, memo={MEMO_KEY: memo})
    except ScheduleAlreadyRunningError:
        handle = client.get_schedule_handle(sid)
    except RPCError as exc:
        if exc.status == RPCStatusCode.INVALID_ARGUMENT:
            raise CronError(f"the server refused {cron!r}: {exc.message}") from exc
        raise
    desc = await handle.describe()
    if not desc.info.next_action_times:
        await handle.delete()
        within = "the 7 days a recurring job lasts" if recurring else "the coming year"
        raise CronError(f"{cron!r} matches no time in {within}; nothing was scheduled")
    return CronJob(
        id=job,
        session_id=session_id,
        cron=cron,
        prompt=prompt,
        recurring=recurring,
        time_zone=zone,
        next_runs=list(desc.info.next_action_times[:3]),
        ends=desc.schedule.spec.end_at,
    )


async def _session_queue(client: Client, session_id: str) -> str:
    """The running session's task queue (the job's workflow runs where the session does)."""
    try:
        desc = await client.get_workflow_handle(session_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise CronError(f"no session {session_id}") from exc
        raise
    if desc.status != WorkflowExecutionStatus.RUNNING:
        state = desc.status.name.lower() if desc.status else "unknown"
        raise CronError(f"session {session_id} is {state}: a cron job needs a running session")
    return desc.task_queue


async def session_jobs(client: Client, session_id: str | None = None) -> list[CronJob]:
    """The cron jobs of `session_id` (None: of every session), oldest first. The server's
    list: a job created in the last moment may be missing from it."""
    jobs = []
    async for entry in await client.list_schedules():
        ids = split_schedule_id(entry.id)
        if ids is None or (session_id is not None and ids[0] != session_id):
            continue
        memo = (await entry.memo()).get(MEMO_KEY)
        if not isinstance(memo, dict):
            continue
        jobs.append(
            CronJob(
                id=ids[1],
                session_id=ids[0],
                cron=str(memo.get("cron", "?")),
                prompt=str(memo.get("prompt", "")),
                recurring=bool(memo.get("recurring", True)),
                time_zone=str(memo.get("time_zone", "UTC")),
                next_runs=list(entry.info.next_action_times[:3]) if entry.info else [],
            )
        )
    return jobs


async def delete_job(client: Client, session_id: str, job: str) -> bool:
    """Delete the job's Schedule; False when there is none."""
    try:
        await client.get_schedule_handle(schedule_id(session_id, job)).delete()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True


async def delete_schedules(
    client: Client, schedule_ids: Iterable[str], session_id: str | None = None
) -> int:
    """Delete these Schedules and, with `session_id`, every job of that session the list
    shows; how many were deleted."""
    wanted = set(schedule_ids)
    if session_id is not None:
        wanted |= {job.schedule_id for job in await session_jobs(client, session_id)}
    deleted = 0
    for sid in sorted(wanted):
        ids = split_schedule_id(sid)
        if ids is not None and await delete_job(client, *ids):
            deleted += 1
    return deleted
