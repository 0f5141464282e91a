"""ScheduleWakeup, CronCreate, CronList, CronDelete. A wake-up is session state the workflows
keep from the call's input (engine/schedules.py): its tool only answers the model. A cron job
is a Temporal Schedule (durable_agent/schedules.py): its tools make client calls."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from temporalio.client import Client
from temporalio.service import RPCError

from activities.tools.base import ToolOutput, Workspace
from durable_agent.engine.schedules import WakeupRequest, clamp_delay, job_id
from durable_agent.engine.tools import (
    CronCreateInput,
    CronDeleteInput,
    CronListInput,
    ScheduleWakeupInput,
    ToolName,
)
from durable_agent.schedules import CronError, create_job, delete_job, session_jobs

CronInput = CronCreateInput | CronListInput | CronDeleteInput


async def run_schedule_wakeup(args: ScheduleWakeupInput, ws: Workspace) -> ToolOutput:
    """The answer says the delay relative to now: the due time is the workflow's to fix."""
    del ws  # it touches no file
    delay = clamp_delay(args.delaySeconds)
    clamped = "" if delay == args.delaySeconds else f" ({args.delaySeconds} clamped to 60-3600)"
    return ToolOutput(
        f"Wake-up scheduled in {delay} seconds{clamped}: {args.reason}. Then this session runs "
        "the prompt you gave, with this conversation. Nothing waits for it now: end your turn."
    )


async def run_cron_elsewhere(args: object, ws: Workspace) -> ToolOutput:
    """The cron tools need the worker's Temporal client (`CronTools`)."""
    del args, ws
    return ToolOutput("Cron jobs cannot be managed here: no Temporal client.", is_error=True)


class CronTools:
    """The cron tools of one call: its session's jobs, through the worker's client."""

    def __init__(self, client: Client, session_id: str, tool_use_id: str) -> None:
        self.client, self.session_id, self.tool_use_id = client, session_id, tool_use_id

    async def run(self, args: CronInput) -> ToolOutput:
        try:
            if isinstance(args, CronCreateInput):
                return await self._create(args)
            if isinstance(args, CronDeleteInput):
                return await self._delete(args.id.strip())
            return await self._list()
        except CronError as exc:
            return ToolOutput(f"{exc}.", is_error=True)
        except RPCError as exc:  # the server is away: the model may try again later
            return ToolOutput(f"Temporal did not answer: {exc.message}", is_error=True)

    async def _create(self, args: CronCreateInput) -> ToolOutput:
        # The id comes from the call: a retried call finds its own job, never makes a second.
        job = await create_job(
            self.client,
            self.session_id,
            job_id(self.tool_use_id),
            args.cron,
            args.prompt,
            args.recurring,
        )
        ends = (
            f"; it ends {job.ends:%Y-%m-%d %H:%M} UTC (7 days)"
            if job.ends
            else "; it runs once, then is deleted"
        )
        return ToolOutput(
            f"Scheduled cron job {job.id}: {job.cron!r} in {job.time_zone}, next run "
            f"{job.next_runs[0]:%Y-%m-%d %H:%M} UTC{ends}. Its prompt runs in this session "
            "between prompts. CronDelete with this id cancels it."
        )

    async def _list(self) -> ToolOutput:
        jobs = await session_jobs(self.client, self.session_id)
        if not jobs:
            return ToolOutput("This session has no cron jobs.")
        return ToolOutput("\n".join(job.line() for job in jobs))

    async def _delete(self, job: str) -> ToolOutput:
        if not await delete_job(self.client, self.session_id, job):
            return ToolOutput(
                f"No cron job {job!r} in this session (CronList lists them).", is_error=True
            )
        return ToolOutput(f"Cron job {job} is deleted: it will not run again.")


def scheduled_fields(tool_id: str, name: str, raw: dict[str, Any]) -> dict[str, Any]:
    """What the workflows keep of a valid ScheduleWakeup or CronCreate call (ToolCall.wakeup,
    ToolCall.cron_job); nothing for an invalid one (its tool says why) or any other tool."""
    try:
        if name == ToolName.SCHEDULE_WAKEUP:
            args = ScheduleWakeupInput.model_validate(raw)
            wakeup = WakeupRequest(
                delay_seconds=clamp_delay(args.delaySeconds), reason=args.reason, prompt=args.prompt
            )
            return {"wakeup": wakeup}
        if name == ToolName.CRON_CREATE:
            CronCreateInput.model_validate(raw)
            return {"cron_job": job_id(tool_id)}
    except ValidationError:
        pass
    return {}
