"""SessionWorkflow: the QueryEngine. Holds the conversation head across prompts."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError, FailureError

with workflow.unsafe.imports_passed_through():
    from durable_agent.engine.contracts import (
        PromptAccepted,
        PromptRequest,
        QueryInput,
        SessionInput,
        SessionStatus,
    )
    from durable_agent.engine.state import MAX_PROMPT_CHARS, QueryResult
    from workflows.activity_options import STORE_RETRY, STORE_TIMEOUT
    from workflows.query import QueryWorkflow


def query_workflow_id(session_id: str, index: int) -> str:
    return f"{session_id}-q{index}"


@workflow.defn(name="SessionWorkflow")
class SessionWorkflow:
    @workflow.init
    def __init__(self, inp: SessionInput) -> None:
        self._session_id = inp.session_id
        self._head = inp.head_uuid
        self._queries = inp.queries
        self._pending: PromptRequest | None = (
            PromptRequest(prompt=inp.initial_prompt, max_turns=inp.initial_max_turns)
            if inp.initial_prompt
            else None
        )
        self._running: str | None = None
        self._last: QueryResult | None = None
        self._last_error: str | None = None
        self._closed = False
        self._transcript_path = ""
        self._context_tokens = inp.context_tokens

    @workflow.update
    def submit_prompt(self, req: PromptRequest) -> PromptAccepted:
        """Queue a prompt; returns the id its QueryWorkflow will have (it starts right after)."""
        self._pending = req
        index = self._queries + 1
        return PromptAccepted(
            query_workflow_id=query_workflow_id(self._session_id, index), index=index
        )

    @submit_prompt.validator
    def _validate_prompt(self, req: PromptRequest) -> None:
        if not req.prompt.strip():
            raise ValueError("the prompt is empty")
        if len(req.prompt) > MAX_PROMPT_CHARS:
            raise ValueError(
                f"the prompt has {len(req.prompt):,} characters (at most {MAX_PROMPT_CHARS:,}); "
                "put long material in a file in the workspace and refer to it"
            )
        if self._closed:
            raise ValueError("this session is closed; start a new one")
        if self._running is not None or self._pending is not None:
            raise ValueError(
                "a prompt is already running in this session; wait for it or interrupt it"
            )
        if req.max_turns is not None and req.max_turns < 1:
            raise ValueError("max_turns must be at least 1")

    @workflow.signal
    async def interrupt(self) -> None:
        """Interrupt the running prompt, if any."""
        if self._running is not None:
            try:
                await workflow.get_external_workflow_handle(self._running).signal("interrupt")
            except FailureError:
                # The prompt finished while the signal was on its way: nothing to interrupt,
                # and the session must not fail over it.
                workflow.logger.info("interrupt arrived after %s ended", self._running)

    @workflow.signal
    def close(self) -> None:
        """End the session once the running prompt (if any) finishes."""
        self._closed = True

    @workflow.query
    def status(self) -> SessionStatus:
        return SessionStatus(
            session_id=self._session_id,
            running_query_id=self._running,
            head_uuid=self._head,
            queries=self._queries,
            last_result=self._last,
            last_error=self._last_error,
            closed=self._closed,
        )

    @workflow.query
    def transcript_path(self) -> str:
        return self._transcript_path

    @workflow.run
    async def run(self, inp: SessionInput) -> SessionStatus:
        self._transcript_path = await workflow.execute_activity(
            "transcript_location",
            self._session_id,
            result_type=str,
            start_to_close_timeout=STORE_TIMEOUT,
            retry_policy=STORE_RETRY,
        )
        runs_here = 0
        while True:
            await workflow.wait_condition(
                lambda: (
                    self._pending is not None
                    or self._closed
                    or (inp.close_when_idle and self._queries > 0)
                )
            )
            if self._pending is None:
                break
            if runs_here >= inp.queries_per_run or workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(
                    SessionInput(
                        session_id=self._session_id,
                        config=inp.config,
                        head_uuid=self._head,
                        initial_prompt=self._pending.prompt,
                        initial_max_turns=self._pending.max_turns,
                        close_when_idle=inp.close_when_idle,
                        queries=self._queries,
                        context_tokens=self._context_tokens,
                        queries_per_run=inp.queries_per_run,
                    )
                )
            runs_here += 1
            await self._run_prompt(inp, self._pending)
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self.status()

    async def _run_prompt(self, inp: SessionInput, req: PromptRequest) -> None:
        index = self._queries + 1
        child_id = query_workflow_id(self._session_id, index)
        config = inp.config
        if req.max_turns is not None:
            config = config.model_copy(update={"max_turns": req.max_turns})
        handle = await workflow.start_child_workflow(
            QueryWorkflow.run,
            QueryInput(
                session_id=self._session_id,
                prompt=req.prompt,
                parent_uuid=self._head,
                config=config,
                context_tokens=self._context_tokens,
            ),
            id=child_id,
            static_summary=req.prompt[:200],
            execution_timeout=timedelta(days=30),
        )
        self._running = child_id
        self._pending = None
        self._queries = index
        try:
            result = await handle
        except ChildWorkflowError as exc:
            self._last_error = f"query {child_id} failed: {exc.cause or exc}"
            self._last = None
        else:
            self._last = result
            self._last_error = None
            self._head = result.head_uuid
            self._context_tokens = result.context_tokens
        finally:
            self._running = None
