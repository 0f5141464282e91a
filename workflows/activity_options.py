"""The activities the workflows call, by name, with their timeouts and retry policies."""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from durable_agent.engine.contracts import (
        AppendEntryInput,
        AppendEntryOutput,
        CallModelInput,
        CallModelOutput,
        RunToolInput,
        RunToolOutput,
    )
    from durable_agent.engine.errors import MAX_DELAY_SECONDS, NON_RETRYABLE_ERROR_TYPES
    from durable_agent.engine.state import QueryConfig

MODEL_MAX_ATTEMPTS = 10

MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=MAX_DELAY_SECONDS),
    maximum_attempts=MODEL_MAX_ATTEMPTS,
    non_retryable_error_types=list(NON_RETRYABLE_ERROR_TYPES),
)
TOOL_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)
STORE_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=20)
STORE_TIMEOUT = timedelta(seconds=30)


def call_model(req: CallModelInput, summary: str) -> Awaitable[CallModelOutput]:
    cfg = req.config
    return workflow.execute_activity(
        "call_model",
        req,
        result_type=CallModelOutput,
        start_to_close_timeout=timedelta(seconds=cfg.model_call_timeout_seconds),
        heartbeat_timeout=timedelta(seconds=cfg.model_heartbeat_seconds),
        retry_policy=MODEL_RETRY,
        summary=summary,
    )


def run_tool(req: RunToolInput, cfg: QueryConfig, summary: str) -> Awaitable[RunToolOutput]:
    return workflow.execute_activity(
        "run_tool",
        req,
        result_type=RunToolOutput,
        start_to_close_timeout=timedelta(seconds=cfg.tool_timeout_seconds),
        heartbeat_timeout=timedelta(seconds=cfg.tool_heartbeat_seconds),
        retry_policy=TOOL_RETRY,
        summary=summary,
    )


def append_entry(req: AppendEntryInput) -> Awaitable[AppendEntryOutput]:
    return workflow.execute_activity(
        "append_entry",
        req,
        result_type=AppendEntryOutput,
        start_to_close_timeout=STORE_TIMEOUT,
        retry_policy=STORE_RETRY,
    )
