"""Tool execution without streaming: batches from partition_tool_calls (the reference engine's
runTools), run after the model's answer is complete. Deterministic: workflow side."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from durable_agent.engine.contracts import RunToolOutput, ToolCall
    from durable_agent.engine.messages import ToolResultBlock, ToolUseBlock
    from durable_agent.engine.state import ProgressKind, ToolResultRef
    from durable_agent.engine.tools import partition_tool_calls

from workflows.failures import tool_failure
from workflows.streaming_tools import INTERRUPTED_TOOL, NOT_RUN_TOOL


async def run_tool_batches(
    calls: list[ToolCall],
    run: Callable[[ToolCall], Awaitable[RunToolOutput]],
    emit: Callable[[ProgressKind, str, bool], None],
    interrupted: Callable[[], bool],
    limit: int,
) -> tuple[list[ToolResultRef], list[int]]:
    """Consecutive safe calls run together (at most `limit` at once), others alone; results in
    request order whatever finishes first, with the size of each for the context estimate."""
    by_id = {c.id: c for c in calls}
    blocks = [ToolUseBlock(id=c.id, name=c.name) for c in calls]
    slots = asyncio.Semaphore(limit)
    outputs: dict[str, RunToolOutput] = {}
    failed: dict[str, str] = {}
    started: set[str] = set()

    async def one(call: ToolCall) -> None:
        async with slots:
            if interrupted():
                return
            started.add(call.id)
            emit(ProgressKind.TOOL_CALL, call.summary, False)
            done = await run(call)
            outputs[call.id] = done
            emit(ProgressKind.TOOL_RESULT, f"{call.summary} → {done.preview}", done.is_error)

    for batch in partition_tool_calls(blocks, lambda b: by_id[b.id].concurrency_safe):
        if interrupted():
            break
        results = await asyncio.gather(
            *(one(by_id[b.id]) for b in batch.blocks), return_exceptions=True
        )
        for block, res in zip(batch.blocks, results, strict=True):
            if isinstance(res, ActivityError) and not interrupted():
                failed[block.id] = tool_failure(res, by_id[block.id])
            elif isinstance(res, BaseException) and not interrupted():
                raise res
    refs = []
    for call in calls:
        if call.id in outputs:
            refs.append(ToolResultRef(tool_use_id=call.id, inline=outputs[call.id].inline))
            continue
        text = failed.get(call.id) or (INTERRUPTED_TOOL if call.id in started else NOT_RUN_TOOL)
        emit(ProgressKind.TOOL_RESULT, f"{call.summary} → {text}", True)
        inline = ToolResultBlock(tool_use_id=call.id, content=text, is_error=True)
        refs.append(ToolResultRef(tool_use_id=call.id, inline=inline))
    return refs, [o.content_chars for o in outputs.values()]
