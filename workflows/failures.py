"""How failures read to the model and the user (workflow side, deterministic)."""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, RetryState
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

with workflow.unsafe.imports_passed_through():
    from durable_agent.engine.contracts import ToolCall
    from durable_agent.engine.state import QueryConfig


def tool_failure(exc: ActivityError, call: ToolCall) -> str:
    if isinstance(exc.cause, ActivityTimeoutError):
        lost = "The worker running this tool stopped responding"
        if call.read_only:
            return f"{lost} on every attempt; the tool did not finish."
        return f"{lost}. It may have partly run; it was not re-run, to avoid running it twice."
    return f"The tool failed to run: {error_text(exc)}"


def duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    return f"{seconds / 60:.0f}m" if seconds < 3600 else f"{seconds / 3600:.1f}h"


def error_type(exc: BaseException) -> str | None:
    cause = exc.__cause__
    return cause.type if isinstance(cause, ApplicationError) else None


def model_error(exc: ActivityError, cfg: QueryConfig) -> str:
    text = error_text(exc)
    if exc.retry_state == RetryState.TIMEOUT:
        opts = cfg.activity
        limit = (
            opts.unattended_max_seconds if cfg.call.unattended else opts.model_call_timeout_seconds
        )
        text = f"gave up after {limit / 3600:g} h of retries; last error: {text}"
    if error_text(exc).startswith(("ConnectionError:", "ConnectionReset:")):  # `kind: message`
        text += "; check ANTHROPIC_BASE_URL, the network and any proxy settings"
    return text


def error_text(exc: BaseException) -> str:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ApplicationError):
            return cause.message
        cause = cause.__cause__
    return str(exc)
