"""`delete_schedules`: the client call that ends cron jobs (a one-shot job once sent, the jobs
of a session that ended, a job whose session has gone)."""

from __future__ import annotations

from temporalio import activity
from temporalio.client import Client

from durable_agent.engine.schedules import DeleteSchedulesInput, DeleteSchedulesOutput
from durable_agent.names import Activities
from durable_agent.schedules import delete_schedules


class ScheduleActivities:
    """Receives the worker's client."""

    def __init__(self, client: Client) -> None:
        self.client = client

    @activity.defn(name=Activities.DELETE_SCHEDULES)
    async def delete_schedules(self, req: DeleteSchedulesInput) -> DeleteSchedulesOutput:
        deleted = await delete_schedules(self.client, req.schedule_ids, req.session_id)
        return DeleteSchedulesOutput(deleted=deleted)
