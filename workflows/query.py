"""QueryWorkflow: one prompt → Terminal. The reference engine's `while True` query loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    CancelledError,
)

with workflow.unsafe.imports_passed_through():
    from durable_agent.engine.context import estimate_text_tokens
    from durable_agent.engine.contracts import (
        AppendEntryInput,
        CallModelInput,
        CallModelOutput,
        CompactInput,
        PlanCollapseInput,
        QueryInput,
        RetryNotice,
        RunToolInput,
        RunToolOutput,
        StopHooksInput,
        ToolCall,
        ToolReady,
        WithheldError,
    )
    from durable_agent.engine.errors import FALLBACK_TRIGGERED
    from durable_agent.engine.loop import (
        AfterStopHooks,
        PreCall,
        Recovery,
        after_compaction,
        after_fallback,
        after_model_response,
        after_stop_hooks,
        before_model_call,
        budget_status,
        compaction_failed,
        drain_target,
        model_request,
        on_withheld,
        prepare_request,
        thresholds,
        token_budget,
        token_budget_continuation,
        with_tool_results,
        withheld_terminal,
    )
    from durable_agent.engine.state import (
        PendingUser,
        ProgressEvent,
        ProgressKind,
        QueryConfig,
        QueryResult,
        State,
        Terminal,
        ToolResultRef,
        Transition,
    )
    from durable_agent.names import Queries, Signals, Workflows
    from workflows import activity_options as steps

from workflows.batch_tools import run_tool_batches
from workflows.failures import duration, error_text, error_type, model_error, tool_failure
from workflows.streaming_tools import StreamingToolExecutor

T = TypeVar("T")

STOP_HOOKS_PATCH = "stop-hooks-v1"
"""Histories recorded before Stop hooks existed end without the hooks activity."""


class _Interrupted(Exception):
    """Raised inside the loop when the user's interrupt cancelled the running step."""


BUG_EXCEPTION_TYPES: list[type[BaseException]] = [
    AssertionError,
    AttributeError,
    LookupError,
    NameError,
    TypeError,
    ValueError,  # pydantic's ValidationError too
    ArithmeticError,
    _Interrupted,
]
"""A bug in our own loop code fails the prompt (the session records it and takes the next
one) instead of retrying its workflow task forever. Anything else, a non-determinism error
after a bad deploy above all, keeps retrying, so that a fixed worker can carry the prompt on;
`status` shows such a workflow."""


@workflow.defn(name=Workflows.QUERY, failure_exception_types=BUG_EXCEPTION_TYPES)
class QueryWorkflow:
    def __init__(self) -> None:
        self._interrupted = False
        self._events: list[ProgressEvent] = []
        self._running: list[asyncio.Future[Any]] = []
        self._phase = "starting"
        self._session_id = ""
        self._next_event = 0
        self._retries: dict[str, int] = {}
        self._model = ""
        self._config: QueryConfig | None = None
        self._call_id: str | None = None
        self._executors: dict[int, StreamingToolExecutor] = {}

    @workflow.signal(name=Signals.INTERRUPT)
    def interrupt(self) -> None:
        """Cancel the running model call or tools; the query ends aborted_*."""
        self._interrupted = True
        for task in self._running:
            task.cancel()
        for executor in self._executors.values():
            executor.interrupt()

    @workflow.signal(name=Signals.TOOL_USE_READY)
    def tool_use_ready(self, ready: ToolReady) -> None:
        """A tool_use block is complete in the model's stream: it may start now."""
        cfg = self._config
        if cfg is None or not cfg.streaming_tool_execution or self._interrupted:
            return
        if ready.call_id != self._call_id:
            return  # a call that is over: nothing of it may run now
        executor = self._executors.get(ready.attempt)
        if executor is None:
            for old in self._executors.values():
                old.discard()  # a new attempt: the blocks of earlier ones are void
            executor = self._executors[ready.attempt] = self._executor(ready.call_id)
        executor.add_tool(ready.call)

    def _executor(self, assistant_uuid: str) -> StreamingToolExecutor:
        cfg = self._config
        assert cfg is not None

        def run(call: ToolCall, run_id: str) -> Awaitable[RunToolOutput]:
            req = RunToolInput(
                session_id=self._session_id,
                assistant_uuid=assistant_uuid,
                tool_use_id=call.id,
                name=call.name,
                workspace=cfg.workspace,
                run_id=run_id,
            )
            return steps.run_tool(req, cfg, call.summary, call.read_only)

        def emit(kind: ProgressKind, text: str, is_error: bool) -> None:
            self._emit(kind, text, is_error)

        return StreamingToolExecutor(run, emit, tool_failure, cfg.tool_concurrency, cfg.eager_tools)

    def _discard_executors(self) -> None:
        for executor in self._executors.values():
            executor.discard()
        self._executors = {}
        self._call_id = None

    @workflow.signal(name=Signals.MODEL_RETRY)
    def model_retry(self, notice: RetryNotice) -> None:
        """The model activity failed an attempt and Temporal will retry it: show why."""
        self._retries[notice.error_type] = self._retries.get(notice.error_type, 0) + 1
        wait = (
            ""
            if notice.delay_seconds is None
            else f", next try in {duration(notice.delay_seconds)}"
        )
        workflow.set_current_details(
            f"{notice.error_type}, attempt {notice.attempt}{wait}: {notice.message}"
        )
        self._emit(
            ProgressKind.STATUS,
            f"{notice.error_type} (attempt {notice.attempt}){wait}",
            is_error=True,
        )

    @workflow.query(name=Queries.PROGRESS)
    def progress(self, since: int = 0) -> list[ProgressEvent]:
        return [e for e in self._events if e.index >= since]

    @workflow.query(name=Queries.PHASE)
    def phase(self) -> str:
        return self._phase

    def _emit(self, kind: ProgressKind, text: str, is_error: bool = False) -> None:
        """Record a progress event; indices run on across continue-as-new."""
        self._events.append(
            ProgressEvent(index=self._next_event, kind=kind, text=text, is_error=is_error)
        )
        self._next_event += 1

    async def _guarded(self, awaitable: Awaitable[T]) -> T:
        """Await an activity so that an interrupt cancels it and surfaces as _Interrupted."""
        task = asyncio.ensure_future(awaitable)
        self._running.append(task)
        try:
            return await task
        except (ActivityError, CancelledError, asyncio.CancelledError) as exc:
            if self._interrupted:
                raise _Interrupted from exc
            raise
        finally:
            self._running.remove(task)

    @workflow.run
    async def run(self, inp: QueryInput) -> QueryResult:
        cfg = inp.config
        self._config = cfg
        self._session_id = inp.session_id
        self._model = cfg.model
        self._next_event = inp.state.event_count if inp.state else 0
        self._retries = dict(inp.state.retries) if inp.state else {}
        state = inp.state or State(
            head_uuid=inp.parent_uuid,
            pending=PendingUser(
                uuid=str(workflow.uuid4()), parent_uuid=inp.parent_uuid, prompt=inp.prompt
            ),
            context_tokens=inp.context_tokens + estimate_text_tokens(inp.prompt),
        )
        budget = token_budget(cfg, inp.prompt)
        iterations = 0
        while True:
            if (
                iterations >= cfg.iterations_per_run
                or workflow.info().is_continue_as_new_suggested()
            ):
                await workflow.wait_condition(workflow.all_handlers_finished)
                state = state.model_copy(
                    update={"event_count": self._next_event, "retries": dict(self._retries)}
                )
                workflow.continue_as_new(inp.model_copy(update={"state": state}))
            iterations += 1
            if self._interrupted:
                return await self._finish(state, Terminal.ABORTED_STREAMING, "interrupted by user")
            try:
                prepared = await self._prepare_context(inp, state)
            except _Interrupted:  # during autocompact
                return await self._finish(state, Terminal.ABORTED_STREAMING, "interrupted by user")
            if isinstance(prepared, QueryResult):
                return prepared
            state = prepared

            # call the model
            self._phase = "streaming"
            workflow.set_current_details(f"turn {state.turn_count}: waiting for the model")
            state, request = prepare_request(state, cfg)
            assistant_uuid = str(workflow.uuid4())
            self._call_id = assistant_uuid
            try:
                out = await self._guarded(
                    steps.call_model(
                        CallModelInput(
                            session_id=inp.session_id,
                            parent_uuid=state.head_uuid,
                            new_user=state.pending,
                            assistant_uuid=assistant_uuid,
                            config=cfg,
                            request=request,
                        ),
                        summary=f"turn {state.turn_count}: {request.model}",
                    )
                )
            except _Interrupted:
                self._discard_executors()
                return await self._finish(state, Terminal.ABORTED_STREAMING, "interrupted by user")
            except ActivityError as exc:
                self._discard_executors()
                if error_type(exc) == FALLBACK_TRIGGERED and cfg.fallback_model and not state.model:
                    # Same request (the pending entry is stored idempotently), other model.
                    self._emit(
                        ProgressKind.STATUS,
                        f"{request.model} stays overloaded; switching to {cfg.fallback_model}",
                    )
                    state = after_fallback(state, cfg.fallback_model)
                    continue
                return await self._finish(state, Terminal.MODEL_ERROR, model_error(exc, cfg))
            after = after_model_response(state, out, cfg, str(workflow.uuid4()))
            state = after.state
            if not after.run_tools:
                self._discard_executors()
            if after.withheld is not None:
                try:
                    recovered = await self._recover(inp, state, after.withheld)
                except _Interrupted:  # during reactive compact
                    return await self._finish(
                        state, Terminal.ABORTED_STREAMING, "interrupted by user"
                    )
                if isinstance(recovered, QueryResult):
                    return recovered
                state = recovered
                continue
            if out.text:
                self._emit(ProgressKind.TEXT, out.text)
            if (
                after.terminal == Terminal.COMPLETED
                and cfg.stop_hooks
                and workflow.patched(STOP_HOOKS_PATCH)
            ):
                hooked = await self._stop_hooks(inp, state)
                state = hooked.state
                if hooked.terminal is None:
                    self._emit(
                        ProgressKind.STATUS, "a Stop hook blocked: continuing with its feedback"
                    )
                    continue
                if hooked.terminal != Terminal.COMPLETED:
                    return await self._finish(state, hooked.terminal, hooked.message, out.text)
            if after.terminal == Terminal.COMPLETED and budget is not None:
                nudged = token_budget_continuation(state, budget, str(workflow.uuid4()))
                if nudged is not None:
                    state = nudged
                    self._emit(ProgressKind.STATUS, f"continuing: {budget_status(state, budget)}")
                    continue
            if after.terminal is not None:
                return await self._finish(state, after.terminal, after.message, out.text)
            if not after.run_tools:
                if cfg.max_turns is not None and state.turn_count > cfg.max_turns:
                    message = f"reached the maximum of {cfg.max_turns} turns"
                    return await self._finish(state, Terminal.MAX_TURNS, message)
                if state.transition is not None:
                    self._emit(ProgressKind.STATUS, f"continuing: {state.transition.value}")
                continue

            # run the tools
            self._phase = "tools"
            if cfg.streaming_tool_execution:
                refs, chars = await self._run_streamed(out)
            else:
                refs, chars = await self._run_tools(inp, assistant_uuid, out.tool_calls)
            pending = PendingUser(
                uuid=str(workflow.uuid4()), parent_uuid=assistant_uuid, results=refs
            )
            state = with_tool_results(state, chars, cfg).model_copy(update={"pending": pending})
            if self._interrupted:
                return await self._finish(state, Terminal.ABORTED_TOOLS, "interrupted by user")
            if cfg.max_turns is not None and state.turn_count + 1 > cfg.max_turns:
                return await self._finish(
                    state, Terminal.MAX_TURNS, f"reached the maximum of {cfg.max_turns} turns"
                )
            state = state.next(Transition.NEXT_TURN, turn_count=state.turn_count + 1)

    async def _stop_hooks(self, inp: QueryInput, state: State) -> AfterStopHooks:
        """Claude is done: the user's Stop hooks may send it back to work, or stop the query."""
        req = StopHooksInput(
            session_id=inp.session_id,
            workspace=inp.config.workspace,
            stop_hook_active=state.stop_hook_active,
            heartbeat_seconds=inp.config.tool_heartbeat_seconds,
        )
        try:
            out = await self._guarded(steps.run_stop_hooks(req))
        except _Interrupted:
            return AfterStopHooks(state=state, terminal=Terminal.COMPLETED)
        except ActivityError as exc:
            self._emit(
                ProgressKind.STATUS, f"Stop hooks did not run: {error_text(exc)}", is_error=True
            )
            return AfterStopHooks(state=state, terminal=Terminal.COMPLETED)
        return after_stop_hooks(
            state,
            out.blocking_errors,
            out.prevent_continuation,
            out.stop_reason,
            str(workflow.uuid4()),
        )

    async def _prepare_context(self, inp: QueryInput, state: State) -> State | QueryResult:
        """Before a call: warn near the limit, autocompact over the threshold, or stop at the
        blocking limit when autocompact is off."""
        cfg = inp.config
        action = before_model_call(state, cfg)
        if action == PreCall.BLOCK:
            message = (
                f"the context ({state.context_tokens:,} tokens) reached the blocking limit and "
                "autocompact is off"
            )
            return await self._finish(state, Terminal.BLOCKING_LIMIT, message)
        if action == PreCall.WARN:
            window = thresholds(state, cfg).window
            self._emit(
                ProgressKind.STATUS, f"context is {state.context_tokens:,} of {window:,} tokens"
            )
            return state.model_copy(update={"warned_context": True})
        if action == PreCall.AUTOCOMPACT:
            compacted = await self._compact(inp, state, reactive=False)
            return compacted if compacted is not None else compaction_failed(state)
        return state

    async def _compact(self, inp: QueryInput, state: State, reactive: bool) -> State | None:
        """Summarise into a compact boundary; None when the summary failed."""
        cfg = inp.config
        trigger = "reactive" if reactive else "auto"
        self._phase = "compacting"
        workflow.set_current_details(f"compacting {state.context_tokens:,} tokens ({trigger})")
        try:
            out = await self._guarded(
                steps.autocompact(
                    CompactInput(
                        session_id=inp.session_id,
                        parent_uuid=state.head_uuid,
                        pending=state.pending,
                        config=cfg,
                        request=model_request(state, cfg),
                        boundary_uuid=str(workflow.uuid4()),
                        summary_uuid=str(workflow.uuid4()),
                        trigger=trigger,
                        pre_tokens=state.context_tokens,
                    )
                )
            )
        except ActivityError as exc:
            self._emit(
                ProgressKind.STATUS, f"{trigger} compact failed: {error_text(exc)}", is_error=True
            )
            return None
        for note in out.hook_notes:
            self._emit(ProgressKind.STATUS, note, is_error=True)
        self._emit(
            ProgressKind.STATUS,
            f"compacted the conversation ({trigger}): {out.pre_tokens:,} → {out.post_tokens:,} tokens",
        )
        return after_compaction(
            state,
            cfg,
            out.summary_uuid,
            out.pre_tokens,
            out.post_tokens,
            str(workflow.uuid4()),
            reactive,
        )

    async def _recover(
        self, inp: QueryInput, state: State, withheld: WithheldError
    ) -> State | QueryResult:
        """prompt too long → drain stale results, then reactive compact; media → drop images.
        Each at most once per turn; then the error is the answer."""
        cfg = inp.config
        recovery = on_withheld(state, withheld, cfg)
        if recovery == Recovery.DRAIN:
            planned = await steps.plan_collapse(
                PlanCollapseInput(
                    session_id=inp.session_id,
                    parent_uuid=state.head_uuid,
                    pending=state.pending,
                    request=model_request(state, cfg),
                    target_tokens=drain_target(state, withheld, cfg),
                )
            )
            if planned.tool_use_ids:
                self._emit(
                    ProgressKind.STATUS,
                    f"cleared {len(planned.tool_use_ids)} large old tool results",
                )
                return state.next(
                    Transition.COLLAPSE_DRAIN_RETRY,
                    collapse_drained=True,
                    collapsed_ids=(*state.collapsed_ids, *planned.tool_use_ids),
                )
            state = state.model_copy(update={"collapse_drained": True})
            recovery = on_withheld(state, withheld, cfg)
        if recovery == Recovery.REACTIVE_COMPACT:
            compacted = await self._compact(inp, state, reactive=True)
            if compacted is not None:
                return compacted
            state = state.model_copy(update={"has_attempted_reactive_compact": True})
        if recovery == Recovery.STRIP_IMAGES:
            self._emit(
                ProgressKind.STATUS, "the request's images were too large; retrying without them"
            )
            return state.next(Transition.REACTIVE_COMPACT_RETRY, strip_images=True)
        return await self._finish(state, withheld_terminal(withheld), withheld.message)

    async def _run_streamed(self, out: CallModelOutput) -> tuple[list[ToolResultRef], list[int]]:
        """Phase 2: the tools of the successful attempt that did not start (or finish) while
        the stream ran; other attempts' tools are discarded."""
        executor = self._executors.pop(out.attempt, None) or self._executor(out.assistant_uuid)
        for old in self._executors.values():
            old.discard()
        self._executors = {out.attempt: executor}
        if self._interrupted:
            executor.interrupt()
        executor.reconcile(out.tool_calls)
        executor.end_stream()
        await executor.remaining_results()
        self._executors = {}
        self._call_id = None
        return executor.results(out.tool_calls)

    async def _run_tools(
        self, inp: QueryInput, assistant_uuid: str, calls: list[ToolCall]
    ) -> tuple[list[ToolResultRef], list[int]]:
        """Without streaming execution: batches from partition_tool_calls, after the stream."""
        cfg = inp.config

        def run(call: ToolCall) -> Awaitable[RunToolOutput]:
            workflow.set_current_details(f"running {call.summary}")
            req = RunToolInput(
                session_id=inp.session_id,
                assistant_uuid=assistant_uuid,
                tool_use_id=call.id,
                name=call.name,
                workspace=cfg.workspace,
            )
            return self._guarded(steps.run_tool(req, cfg, call.summary, call.read_only))

        return await run_tool_batches(
            calls, run, self._emit, lambda: self._interrupted, cfg.tool_concurrency
        )

    async def _finish(
        self, state: State, terminal: Terminal, message: str, final_text: str = ""
    ) -> QueryResult:
        """Store the pending user entry (so the transcript stays valid), then return."""
        if state.pending is not None:
            stored = await steps.append_entry(
                AppendEntryInput(session_id=self._session_id, entry=state.pending)
            )
            state = state.model_copy(update={"head_uuid": stored.uuid, "pending": None})
        if message:
            self._emit(ProgressKind.STATUS, message, is_error=terminal != Terminal.COMPLETED)
        return self._result(state, terminal, message=message, final_text=final_text)

    def _result(
        self, state: State, terminal: Terminal, message: str = "", final_text: str = ""
    ) -> QueryResult:
        self._phase = "done"
        workflow.set_current_details(f"finished: {terminal.value}")
        return QueryResult(
            terminal=terminal,
            message=message,
            head_uuid=state.head_uuid,
            turn_count=state.turn_count,
            usage=state.usage,
            final_text=final_text,
            transitions=list(state.transitions),
            query_workflow_id=workflow.info().workflow_id,
            compactions=state.compactions,
            context_tokens=state.context_tokens,
            model=state.model or self._model,
            fallback_used=state.model is not None,
            usage_by_model=state.usage_by_model,
            retries=dict(self._retries),
        )
