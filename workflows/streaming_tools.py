"""StreamingToolExecutor, workflow side: tool_use blocks start while the model still streams.

Deterministic: tools start in block order as `can_execute_tool` allows, as activities; results
go back in the final message's order. Blocks of a model-call attempt that failed are discarded:
queued ones never start, running ones are cancelled, and nothing of theirs reaches the
transcript.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from durable_agent.engine.contracts import RunToolOutput, ToolCall
    from durable_agent.engine.messages import ToolResultBlock
    from durable_agent.engine.state import EagerTools, ProgressKind, ToolResultRef
    from durable_agent.engine.tools import ToolName

INTERRUPTED_TOOL = "Interrupted by user: this tool call was cancelled and may have partly run."
NOT_RUN_TOOL = "Interrupted by user before this tool call ran; it did not run."
SIBLING_FAILED = "Cancelled because a sibling tool call failed ({summary}); it may have partly run."


class ToolStatus(StrEnum):
    QUEUED = "queued"
    EXECUTING = "executing"
    COMPLETED = "completed"
    YIELDED = "yielded"
    DISCARDED = "discarded"


@dataclass
class CallNotes:
    """What running one call taught the loop, beside its result (filled by the Runner)."""

    denial: str | None = None
    """Why the permission rules, the mode or a PreToolUse hook refused it (it did not run)."""
    feedback: list[str] = field(default_factory=list)
    """What its hooks tell Claude after the results (PostToolUse block reasons, context)."""
    stop: str | None = None
    """A hook's `continue: false`: the prompt ends `hook_stopped` with this stopReason."""


Runner = Callable[[ToolCall, str, CallNotes], Awaitable[RunToolOutput]]
Emit = Callable[[ProgressKind, str, bool], None]
Failure = Callable[[ActivityError, ToolCall], str]


@dataclass
class TrackedTool:
    call: ToolCall
    status: ToolStatus = ToolStatus.QUEUED
    run_id: str = ""
    output: RunToolOutput | None = None
    error: str | None = None
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    notes: CallNotes = field(default_factory=CallNotes)


def _failed(tool: TrackedTool) -> bool:
    return tool.error is not None or (tool.output is not None and tool.output.is_error)


class StreamingToolExecutor:
    def __init__(self, run: Runner, emit: Emit, failure: Failure, limit: int, eager: EagerTools):
        self._run = run
        self._emit = emit
        self._failure = failure
        self._limit = limit
        self._eager = eager
        self.tools: list[TrackedTool] = []
        self.streaming = True
        self.discarded = False
        self.interrupted = False
        self._sibling_failure: str | None = None
        self._crash: Exception | None = None

    def add_tool(self, call: ToolCall) -> None:
        if self.discarded or any(t.call.id == call.id for t in self.tools):
            return
        self.tools.append(TrackedTool(call))
        self._process_queue()

    def completed(self, calls: list[ToolCall], done: list[RunToolOutput]) -> None:
        """Tools the model-call step already ran: results to yield, nothing to start."""
        by_id = {c.id: c for c in calls}
        for output in done:
            call = by_id.get(output.tool_use_id)
            if call is None or any(t.call.id == call.id for t in self.tools):
                continue
            self._emit(ProgressKind.TOOL_CALL, call.summary, False)
            tracked = TrackedTool(call, ToolStatus.COMPLETED, output.run_id, output)
            self.tools.append(tracked)

    def can_execute_tool(self, concurrency_safe: bool) -> bool:
        """Nothing executing, or it and every executing tool are concurrency-safe."""
        executing = [t for t in self.tools if t.status == ToolStatus.EXECUTING]
        return not executing or (
            concurrency_safe and all(t.call.concurrency_safe for t in executing)
        )

    def _may_start_now(self, call: ToolCall) -> bool:
        if not self.streaming:
            return True
        if self._eager == EagerTools.ALL:
            return True
        if self._eager == EagerTools.SAFE:
            return call.concurrency_safe and call.read_only
        return False

    def _process_queue(self) -> None:
        if self.discarded or self.interrupted:
            return
        for tool in self.tools:
            if tool.status != ToolStatus.QUEUED:
                continue
            executing = sum(t.status == ToolStatus.EXECUTING for t in self.tools)
            startable = self._may_start_now(tool.call) and executing < self._limit
            if startable and self.can_execute_tool(tool.call.concurrency_safe):
                self._start(tool)
            elif not tool.call.concurrency_safe or not startable:
                break  # later blocks never overtake one that must wait

    def _start(self, tool: TrackedTool) -> None:
        tool.status = ToolStatus.EXECUTING
        tool.run_id = str(workflow.uuid4())
        self._emit(ProgressKind.TOOL_CALL, tool.call.summary, False)
        tool.task = asyncio.create_task(self._guarded(tool))

    async def _guarded(self, tool: TrackedTool) -> None:
        """A bug in a tool's task must reach the loop (and fail the prompt), not leave the tool
        executing forever with nobody awaiting its task."""
        try:
            await self._execute(tool)
        except Exception as exc:
            self._crash = exc
            raise

    async def _execute(self, tool: TrackedTool) -> None:
        try:
            tool.output = await self._run(tool.call, tool.run_id, tool.notes)
        except (asyncio.CancelledError, CancelledError, ActivityError) as exc:
            if self.discarded:
                tool.status = ToolStatus.DISCARDED
                return
            if self.interrupted:
                tool.error = INTERRUPTED_TOOL
            elif self._sibling_failure is not None:
                tool.error = SIBLING_FAILED.format(summary=self._sibling_failure)
            elif isinstance(exc, ActivityError):
                tool.error = self._failure(exc, tool.call)
            else:
                raise
        if self.discarded:
            tool.status = ToolStatus.DISCARDED
            return
        tool.status = ToolStatus.COMPLETED
        denied = tool.output is not None and tool.output.denied
        if tool.call.name == ToolName.BASH and _failed(tool) and not denied:
            self._abort_siblings(tool)
        self._yield_completed()
        self._process_queue()

    def _yield_completed(self) -> None:
        for done in self.completed_results():
            preview = done.error or (done.output.preview if done.output else "")
            self._emit(ProgressKind.TOOL_RESULT, f"{done.call.summary} → {preview}", _failed(done))

    def _abort_siblings(self, failed: TrackedTool) -> None:
        """A failed Bash cancels the tools running beside it, not the turn."""
        self._sibling_failure = failed.call.summary
        for tool in self.tools:
            if tool is not failed and tool.status == ToolStatus.EXECUTING and tool.task:
                tool.task.cancel()

    def completed_results(self) -> list[TrackedTool]:
        """Finished results in block order, each yielded once; an unsafe tool still running
        holds back what follows it."""
        out = []
        for tool in self.tools:
            if tool.status == ToolStatus.COMPLETED:
                tool.status = ToolStatus.YIELDED
                out.append(tool)
            elif tool.status == ToolStatus.EXECUTING and not tool.call.concurrency_safe:
                break
        return out

    def reconcile(self, final: list[ToolCall]) -> None:
        """The final message is the only source of truth: a block signalled but absent from it
        is discarded; one present but never signalled is queued, in the message's order."""
        wanted = {c.id for c in final}
        for tool in self.tools:
            if tool.call.id not in wanted:
                self._discard_tool(tool)
        by_id = {t.call.id: t for t in self.tools if t.call.id in wanted}
        kept = [by_id.get(c.id) or TrackedTool(c) for c in final]
        self.tools = kept + [t for t in self.tools if t.call.id not in wanted]

    def end_stream(self) -> None:
        """Phase 2: the stream ended; everything left may start as the rules allow."""
        self.streaming = False
        self._process_queue()

    async def remaining_results(self) -> None:
        await workflow.wait_condition(
            lambda: (
                self._crash is not None
                or (
                    all(t.status != ToolStatus.EXECUTING for t in self.tools)
                    and (self.interrupted or all(t.status != ToolStatus.QUEUED for t in self.tools))
                )
            )
        )
        if self._crash is not None:
            raise self._crash

    def discard(self) -> None:
        """This attempt's blocks are void (the model call failed, or a fallback took over)."""
        self.discarded = True
        for tool in self.tools:
            self._discard_tool(tool)

    def _discard_tool(self, tool: TrackedTool) -> None:
        if tool.status == ToolStatus.EXECUTING and tool.task is not None:
            tool.task.cancel()
        tool.status = ToolStatus.DISCARDED

    def interrupt(self) -> None:
        self.interrupted = True
        for tool in self.tools:
            if tool.status == ToolStatus.EXECUTING and tool.task is not None:
                tool.task.cancel()

    def notes(self, final: list[ToolCall]) -> list[tuple[ToolCall, CallNotes]]:
        """The notes of the final message's calls, in its order (a discarded block's never)."""
        by_id = {t.call.id: t for t in self.tools}
        return [(call, by_id[call.id].notes) for call in final if call.id in by_id]

    def results(self, final: list[ToolCall]) -> tuple[list[ToolResultRef], list[int]]:
        """Every tool_use of the final message answered exactly once, in order."""
        self._yield_completed()
        by_id = {t.call.id: t for t in self.tools}
        refs, sizes = [], []
        for call in final:
            tool = by_id.get(call.id)
            if tool is not None and tool.output is not None and tool.error is None:
                refs.append(
                    ToolResultRef(
                        tool_use_id=call.id, run_id=tool.run_id, inline=tool.output.inline
                    )
                )
                sizes.append(tool.output.content_chars)
                continue
            if tool is not None and tool.error is not None:
                text = tool.error
            else:
                text = NOT_RUN_TOOL
                self._emit(ProgressKind.TOOL_RESULT, f"{call.summary} → {text}", True)
            inline = ToolResultBlock(tool_use_id=call.id, content=text, is_error=True)
            refs.append(ToolResultRef(tool_use_id=call.id, inline=inline))
        return refs, sizes
