"""Fake activities registered under the production names (call_model, run_tool, …)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from durable_agent.engine.contracts import (
    AppendEntryInput,
    AppendEntryOutput,
    CallModelInput,
    CallModelOutput,
    EndProcessesInput,
    EndProcessesOutput,
    EndToolProcessesInput,
    RunToolInput,
    RunToolOutput,
    StopHooksInput,
    StopHooksOutput,
    ToolCall,
    ToolReady,
)
from durable_agent.engine.messages import Usage
from durable_agent.names import Activities, Signals
from durable_agent.wiring import WORKFLOWS

SAFE = {"Read", "Grep", "Glob"}


def tools(*specs: tuple[str, str], safe: set[str] | None = None) -> list[ToolCall]:
    """(id, name) pairs → ToolCalls with the real safety of the name (or of the ids in `safe`)."""
    return [
        ToolCall(
            id=i,
            name=n,
            concurrency_safe=n in SAFE or i in (safe or set()),
            read_only=n in SAFE or i in (safe or set()),
            summary=f"{n}: {i}",
        )
        for i, n in specs
    ]


@dataclass
class Stream:
    """A model call that signals its tool_use blocks as they complete, streams on, then ends."""

    calls: list[ToolCall]
    """The final message's tool calls."""
    signalled: list[ToolCall] | None = None
    """What is signalled during the stream (default: `calls`)."""
    gap: float = 0.05
    tail: float = 0.4
    fail: Exception | None = None
    """Raise after streaming: this attempt fails (and Temporal retries)."""
    text: str = ""
    stale: list[ToolCall] = field(default_factory=list)
    """Signalled after the others as the attempt before this one (a late signal)."""


def reply(
    text: str = "", calls: list[ToolCall] | None = None
) -> Callable[[CallModelInput], CallModelOutput]:
    def make(req: CallModelInput) -> CallModelOutput:
        return CallModelOutput(
            assistant_uuid=req.assistant_uuid,
            stop_reason="tool_use" if calls else "end_turn",
            usage=Usage(input_tokens=10, output_tokens=5),
            text=text,
            tool_calls=calls or [],
            attempt=activity.info().attempt,
        )

    return make


BLOCK = "block"  # a script step that waits (heartbeating) until cancelled


@dataclass
class Fakes:
    script: list[object] = field(default_factory=list)
    tool_delays: dict[str, float] = field(default_factory=dict)
    blocking_tools: set[str] = field(default_factory=set)
    failing_tools: set[str] = field(default_factory=set)
    model_calls: list[CallModelInput] = field(default_factory=list)
    model_spans: list[tuple[float, float]] = field(default_factory=list)
    error_tools: set[str] = field(default_factory=set)
    client: Client | None = None
    appended: list[AppendEntryInput] = field(default_factory=list)
    tool_spans: dict[str, tuple[float, float]] = field(default_factory=dict)
    cancelled: list[str] = field(default_factory=list)
    runs: list[tuple[str, str]] = field(default_factory=list)
    running: int = 0
    max_running: int = 0
    started: asyncio.Event = field(default_factory=asyncio.Event)
    tool_started: asyncio.Event = field(default_factory=asyncio.Event)
    ended_sessions: list[str] = field(default_factory=list)
    ended_tools: list[str | None] = field(default_factory=list)

    @activity.defn(name=Activities.CALL_MODEL)
    async def call_model(self, req: CallModelInput) -> CallModelOutput:
        self.model_calls.append(req)
        step = self.script[min(len(self.model_calls), len(self.script)) - 1]
        if step == BLOCK:
            await self._block("model")
        if isinstance(step, Exception):
            raise step
        if isinstance(step, Stream):
            return await self._stream(req, step)
        assert callable(step)
        return step(req)

    async def _stream(self, req: CallModelInput, step: Stream) -> CallModelOutput:
        start = time.monotonic()
        info = activity.info()
        assert self.client is not None and info.workflow_id is not None
        handle = self.client.get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)
        for call in step.calls if step.signalled is None else step.signalled:
            await asyncio.sleep(step.gap)
            ready = ToolReady(call_id=req.assistant_uuid, attempt=info.attempt, call=call)
            await handle.signal(Signals.TOOL_USE_READY, ready)
        for call in step.stale:
            late = ToolReady(call_id=req.assistant_uuid, attempt=info.attempt - 1, call=call)
            await handle.signal(Signals.TOOL_USE_READY, late)
        if step.tail == float("inf"):
            await self._block("model")
        await asyncio.sleep(step.tail)
        self.model_spans.append((start, time.monotonic()))
        if step.fail is not None:
            raise step.fail
        return reply(step.text, step.calls)(req)

    async def _block(self, what: str) -> None:
        self.started.set()
        try:
            while True:
                activity.heartbeat()
                await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            self.cancelled.append(what)
            raise

    @activity.defn(name=Activities.RUN_TOOL)
    async def run_tool(self, req: RunToolInput) -> RunToolOutput:
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        start = time.monotonic()
        try:
            self.tool_started.set()
            if req.tool_use_id in self.failing_tools:
                raise ApplicationError("disk on fire", non_retryable=True)
            if req.tool_use_id in self.blocking_tools:
                await self._block(req.tool_use_id)
            await asyncio.sleep(self.tool_delays.get(req.tool_use_id, 0.01))
        finally:
            self.running -= 1
            self.tool_spans[req.tool_use_id] = (start, time.monotonic())
        self.runs.append((req.tool_use_id, req.run_id))
        failed = req.tool_use_id in self.error_tools
        return RunToolOutput(
            tool_use_id=req.tool_use_id, is_error=failed, preview=f"ran {req.name}"
        )

    @activity.defn(name=Activities.APPEND_ENTRY)
    async def append_entry(self, req: AppendEntryInput) -> AppendEntryOutput:
        self.appended.append(req)
        return AppendEntryOutput(uuid=req.entry.uuid)

    @activity.defn(name=Activities.RUN_STOP_HOOKS)
    async def run_stop_hooks(self, req: StopHooksInput) -> StopHooksOutput:
        return StopHooksOutput()

    @activity.defn(name=Activities.TRANSCRIPT_LOCATION)
    async def transcript_location(self, session_id: str) -> str:
        return f"/fake/{session_id}.jsonl"

    @activity.defn(name=Activities.END_SESSION_PROCESSES)
    async def end_session_processes(self, req: EndProcessesInput) -> EndProcessesOutput:
        self.ended_sessions.append(req.session_id)
        return EndProcessesOutput(killed=0)

    @activity.defn(name=Activities.END_TOOL_PROCESSES)
    async def end_tool_processes(self, req: EndToolProcessesInput) -> EndProcessesOutput:
        self.ended_tools.append(req.tool_use_id)
        return EndProcessesOutput(killed=0)

    def worker(self, client: Client, task_queue: str, **kwargs: object) -> Worker:
        self.client = client
        return Worker(
            client,
            task_queue=task_queue,
            workflows=WORKFLOWS,
            activities=[
                self.call_model,
                self.run_tool,
                self.append_entry,
                self.transcript_location,
                self.end_session_processes,
                self.end_tool_processes,
            ],
            **kwargs,  # type: ignore[arg-type]
        )


async def completed_activities(handle, count):
    """Wait until the workflow's history holds `count` completed activities."""
    for _ in range(200):
        history = await handle.fetch_history()
        done = [
            e
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
        ]
        if len(done) >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"fewer than {count} activities completed")
