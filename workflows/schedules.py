"""Wake-ups and cron jobs, the workflow side: what a prompt keeps of its ScheduleWakeup and
CronCreate calls (`keep_scheduled`), the session's wait between prompts that wakes it up
(`wait_idle`), the end of its jobs (`end_schedules`), and ScheduledPromptWorkflow.

ScheduledPromptWorkflow is what a session's cron job (a Temporal Schedule) starts at each
firing. A Schedule can only start a workflow, and a session takes prompts by Update, which a
workflow cannot send: so the Schedule starts this small workflow on the session's task queue,
which signals the session (`scheduled_prompt`) and ends. Both the firing (the Schedule, in the
server) and the prompt (the signal, in the session's history) are durable; the session queues
the prompt like one a person sent and runs it between prompts. A one-shot job's Schedule is
deleted once its prompt is sent; a job whose session has ended deletes its own Schedule."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, FailureError

with workflow.unsafe.imports_passed_through():
    from durable_agent.engine.contracts import PromptRequest, SessionState, ToolCall
    from durable_agent.engine.schedules import (
        MAX_CRON_JOBS,
        MAX_WAKEUPS,
        DeleteSchedulesInput,
        DeleteSchedulesOutput,
        ScheduledPrompt,
        ScheduledPromptInput,
        Wakeup,
        add_wakeups,
        schedule_id,
        wakeup_id,
        wakeup_lines,
    )
    from durable_agent.engine.state import ProgressKind
    from durable_agent.names import Activities, Signals, Workflows

from workflows.loop_context import LoopContext

SCHEDULE_TIMEOUT = timedelta(seconds=30)
SCHEDULE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=10)


async def delete_schedules(req: DeleteSchedulesInput) -> DeleteSchedulesOutput:
    return await workflow.execute_activity(
        Activities.DELETE_SCHEDULES,
        req,
        result_type=DeleteSchedulesOutput,
        start_to_close_timeout=SCHEDULE_TIMEOUT,
        retry_policy=SCHEDULE_RETRY,
        summary=f"delete {len(req.schedule_ids)} schedule(s)",
    )


def keep_scheduled(ctx: LoopContext, ran: list[ToolCall]) -> None:
    """The wake-ups and cron jobs of the batch's calls that ran become the prompt's (its result
    gives them to the session); each wake-up's due time is workflow time now plus its delay."""
    now = workflow.now()
    wakeups = [
        Wakeup(
            id=wakeup_id(call.id),
            due=now + timedelta(seconds=call.wakeup.delay_seconds),
            reason=call.wakeup.reason,
            prompt=call.wakeup.prompt,
        )
        for call in ran
        if call.wakeup is not None
    ]
    jobs = [call.cron_job for call in ran if call.cron_job is not None]
    if not wakeups and not jobs:
        return
    state = ctx.state
    kept = add_wakeups(state.wakeups, wakeups)
    cron_jobs = (*state.cron_jobs, *(j for j in jobs if j not in state.cron_jobs))
    ctx.state = state.model_copy(
        update={"wakeups": tuple(kept), "cron_jobs": cron_jobs[-MAX_CRON_JOBS:]}
    )
    for line in wakeup_lines(wakeups, now):
        ctx.emit(ProgressKind.STATUS, line)
    if len(state.wakeups) + len(wakeups) > MAX_WAKEUPS:
        ctx.emit(ProgressKind.STATUS, f"at most {MAX_WAKEUPS} wake-ups wait: the oldest dropped")


async def wait_idle(state: SessionState, close_when_idle: bool) -> None:
    """The session's wait between prompts: until a prompt waits or the session is to end.
    Meanwhile each wake-up that falls due queues its prompt: the wait is a timer in history, so
    it fires on whichever worker runs the session then, whatever restarted in between. A
    session that closes when idle stays open while a wake-up is pending. (Without wake-ups this
    is the wait it always was: a history from before them takes no new step here.)"""

    def ready() -> bool:
        idle_end = close_when_idle and state.queries > 0 and not state.wakeups
        return bool(state.queued) or state.closed or idle_end

    while state.wakeups:
        first = state.wakeups[0]
        wait = (first.due - workflow.now()).total_seconds()
        if wait > 0:
            workflow.set_current_details(
                f"waiting for wake-up {first.id} at {first.due:%Y-%m-%d %H:%M:%S} UTC: "
                f"{first.reason}"
            )
            try:
                await workflow.wait_condition(
                    ready, timeout=wait, timeout_summary=f"wake-up {first.id}"
                )
                return
            except TimeoutError:
                pass
        now = workflow.now()
        for w in [w for w in state.wakeups if w.due <= now]:
            state.queued.append(PromptRequest(prompt=w.prompt, scheduled=w.id))
        state.wakeups = [w for w in state.wakeups if w.due > now]
        if state.queued:
            return
    await workflow.wait_condition(ready)


async def end_schedules(session_id: str, state: SessionState) -> None:
    """As the session ends: wake-ups not yet due never run; the cron jobs its prompts created
    are deleted (with any other the server lists for it)."""
    state.wakeups = []
    if not state.cron_jobs:
        return
    ids = [schedule_id(session_id, job) for job in state.cron_jobs]
    try:
        await delete_schedules(DeleteSchedulesInput(schedule_ids=ids, session_id=session_id))
    except ActivityError as exc:  # they end themselves at their next firing
        workflow.logger.warning("could not delete the session's cron jobs: %s", exc)
    state.cron_jobs = []


@workflow.defn(name=Workflows.SCHEDULED_PROMPT)
class ScheduledPromptWorkflow:
    @workflow.run
    async def run(self, inp: ScheduledPromptInput) -> str:
        session = workflow.get_external_workflow_handle(inp.session_id)
        sent = ScheduledPrompt(job_id=inp.job_id, prompt=inp.prompt)
        try:
            await session.signal(Signals.SCHEDULED_PROMPT, sent)
        except FailureError as exc:  # the session has ended: so has its job
            workflow.logger.info("session %s is gone (%s): job deleted", inp.session_id, exc)
            gone = True
        else:
            gone = False
        if gone or inp.once:
            mine = schedule_id(inp.session_id, inp.job_id)
            await delete_schedules(DeleteSchedulesInput(schedule_ids=[mine]))
        if gone:
            return f"session {inp.session_id} has ended; job {inp.job_id} deleted"
        return f"prompt of job {inp.job_id} sent to session {inp.session_id}"
