"""Where a travelling workspace's tools run (DESIGN §6): the host, a worker holding a copy of
the session's last checkpoint. The first tool claims one (an activity any worker of the shared
queue takes); tools and checkpoints go to its own task queue; a host that cannot start a task
within HOST_START_TIMEOUT is lost, and the next claim materialises the last checkpoint
elsewhere.

Used only when the session's workspace travels (`QueryInput.workspace`): histories of sessions
whose tools work in place take none of these steps."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, TimeoutError, TimeoutType

with workflow.unsafe.imports_passed_through():
    from durable_agent.engine.contracts import (
        CheckpointInput,
        CheckpointOutput,
        ClaimHostInput,
        ClaimHostOutput,
    )
    from durable_agent.engine.state import HostedWorkspace
    from durable_agent.names import Activities
    from workflows.activity_options import HOST_START_TIMEOUT

T = TypeVar("T")
R = TypeVar("R", bound=BaseModel)


CLAIM_TIMEOUT = timedelta(minutes=10)
"""Materialising a checkpoint on a new host: a big workspace takes a while (it heartbeats)."""

HOST_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=5)
MAX_HOST_LOSSES = 5
"""Hosts one step may lose before it fails: a fleet that loses this many is not one to trust."""

HOST_LOSS_PATCH = "host-loss-v1"
"""A hosted step whose attempts all lapsed (heartbeat timeouts) has lost its host too; a host
lost during a batch (a tool, or a tool's hook, after a tool had changed files) is
reported to the model (HOST_LOST_FEEDBACK); a step that may change files and ran on the new
host leaves the batch to be checkpointed; a hook step keeps one ledger name across hosts, so
the new host never runs a hook the lost one started. Histories from before: the loss was
reported only when it came during the checkpoint, a new host's hook changes were never
checkpointed, and the hook ran again on the new host."""


HOST_LOST_FEEDBACK = (
    "The machine holding the workspace was lost while these tools ran: the workspace was "
    "restored from its last checkpoint, so file changes made since then (by these tools or "
    "the ones before them in this batch) are lost. Check the files before relying on them."
)


def host_lost(exc: ActivityError, heartbeat: bool = False) -> bool:
    """The activity could not start on the host's queue in time: no worker polls it. With
    `heartbeat` (HOST_LOSS_PATCH), also when its last attempt stopped heartbeating: a host cut
    off or stopped whose outstanding polls still took the retries (each then started and
    lapsed), so that its tasks never failed to start (fault campaign 6: the session waited for
    the partitioned host, and the model was told the call stopped responding)."""
    cause = exc.cause
    if not isinstance(cause, TimeoutError):
        return False
    return cause.type == TimeoutType.SCHEDULE_TO_START or (
        heartbeat and cause.type == TimeoutType.HEARTBEAT
    )


class Hosting:
    """The session's workspace host, as this prompt knows it."""

    def __init__(self, session_id: str, workspace: HostedWorkspace | None) -> None:
        self.session_id = session_id
        self.workspace = workspace
        self._claiming = asyncio.Lock()
        self.dirty = False
        """A tool that may change files ran since the last checkpoint."""
        self.changes_lost = False
        """A host was lost holding such changes (the batch tells the model, HOST_LOSS_PATCH)."""

    @property
    def enabled(self) -> bool:
        return self.workspace is not None

    @property
    def lost_count(self) -> int:
        return self.workspace.lost_hosts if self.workspace else 0

    async def queue(self) -> str:
        """The host's task queue, claiming a host first when there is none."""
        assert self.workspace is not None
        async with self._claiming:
            if self.workspace.host_queue is None:
                claimed = await workflow.execute_activity(
                    Activities.CLAIM_HOST,
                    ClaimHostInput(
                        session_id=self.session_id, checkpoint_id=self.workspace.checkpoint_id
                    ),
                    result_type=ClaimHostOutput,
                    start_to_close_timeout=CLAIM_TIMEOUT,
                    heartbeat_timeout=timedelta(seconds=30),
                    retry_policy=HOST_RETRY,
                    summary="claim a host for the workspace",
                )
                self.workspace = self.workspace.model_copy(
                    update={"host_queue": claimed.host_queue}
                )
            assert self.workspace.host_queue is not None
            return self.workspace.host_queue

    def lost(self, queue: str) -> None:
        assert self.workspace is not None
        if self.workspace.host_queue == queue:
            self.workspace = self.workspace.model_copy(
                update={"host_queue": None, "lost_hosts": self.workspace.lost_hosts + 1}
            )
            self.changes_lost = self.changes_lost or self.dirty
            self.dirty = False  # what changed since the checkpoint went with the host

    async def on_host(self, step: Callable[[str, str], Awaitable[T]]) -> T:
        """`step(host_queue, checkpoint_id)` on the host, again on a new host each time the
        host is lost (MAX_HOST_LOSSES times at most)."""
        assert self.workspace is not None
        for losses in range(MAX_HOST_LOSSES + 1):
            queue = await self.queue()
            try:
                return await step(queue, self.workspace.checkpoint_id)
            except ActivityError as exc:
                lapsed = isinstance(exc.cause, TimeoutError) and workflow.patched(HOST_LOSS_PATCH)
                if not host_lost(exc, lapsed) or losses == MAX_HOST_LOSSES:
                    raise
                workflow.logger.warning("workspace host %s lost; claiming another", queue)
                self.lost(queue)
        raise AssertionError("unreachable")

    async def run(self, req: R, step: Callable[[R, str | None], Awaitable[T]], changes: bool) -> T:
        """`step(req, None)` where it is (no travelling workspace), else `step` with the
        request naming the checkpoint (`hosted`) on the host's queue; `changes`: it may change
        files (the batch is checkpointed after)."""
        if self.workspace is None:
            return await step(req, None)
        if changes:
            self.dirty = True

        def hosted(queue: str, checkpoint_id: str) -> Awaitable[T]:
            return step(req.model_copy(update={"hosted": checkpoint_id}), queue)

        out = await self.on_host(hosted)
        if changes and not self.dirty and workflow.patched(HOST_LOSS_PATCH):
            self.dirty = True  # the host was lost meanwhile: the new one ran it, to be recorded
        return out

    async def checkpoint(self) -> None:
        """Record the host's files as the session's new checkpoint, when a tool may have
        changed them."""
        if self.workspace is None or not self.dirty:
            return

        async def record(queue: str, checkpoint_id: str) -> CheckpointOutput:
            return await workflow.execute_activity(
                Activities.CHECKPOINT_WORKSPACE,
                CheckpointInput(session_id=self.session_id, checkpoint_id=checkpoint_id),
                result_type=CheckpointOutput,
                task_queue=queue,
                schedule_to_start_timeout=HOST_START_TIMEOUT,
                start_to_close_timeout=CLAIM_TIMEOUT,
                heartbeat_timeout=timedelta(seconds=30),
                retry_policy=HOST_RETRY,
                summary="checkpoint the workspace",
            )

        out = await self.on_host(record)  # a new host records the checkpoint it was made from
        self.workspace = self.workspace.model_copy(update={"checkpoint_id": out.checkpoint_id})
        self.dirty = False
