"""Classification of Messages API failures into retry decisions (pure; no SDK imports).

The activity turns a decision into a Temporal `ApplicationError`; the workflow's RetryPolicy
lists NON_RETRYABLE_ERROR_TYPES so Temporal never retries what cannot succeed.
"""

from __future__ import annotations

import re
from enum import StrEnum

from pydantic import BaseModel


class ErrorKind(StrEnum):
    """Error classes; the value is the ApplicationError type name."""

    OVERLOADED = "Overloaded"
    RATE_LIMITED = "RateLimited"
    SERVER_ERROR = "ServerError"
    CONNECTION = "ConnectionError"
    TIMEOUT = "Timeout"
    AUTHENTICATION = "AuthenticationError"
    PERMISSION = "PermissionDenied"
    PROMPT_TOO_LONG = "PromptTooLong"
    INVALID_REQUEST = "InvalidRequest"
    NOT_FOUND = "NotFound"
    UNKNOWN = "UnknownModelError"


NON_RETRYABLE_ERROR_TYPES: tuple[str, ...] = (
    ErrorKind.AUTHENTICATION.value,
    ErrorKind.PERMISSION.value,
    ErrorKind.PROMPT_TOO_LONG.value,
    ErrorKind.INVALID_REQUEST.value,
    ErrorKind.NOT_FOUND.value,
)

BASE_DELAY_SECONDS = 0.5
MAX_DELAY_SECONDS = 32.0

_PTL = re.compile(r"prompt is too long:\s*(\d+)\s*tokens\s*>\s*(\d+)", re.IGNORECASE)
_TYPE_KIND = {
    "overloaded_error": ErrorKind.OVERLOADED,
    "rate_limit_error": ErrorKind.RATE_LIMITED,
    "api_error": ErrorKind.SERVER_ERROR,
    "authentication_error": ErrorKind.AUTHENTICATION,
    "permission_error": ErrorKind.PERMISSION,
    "not_found_error": ErrorKind.NOT_FOUND,
    "request_too_large": ErrorKind.PROMPT_TOO_LONG,
}


class ErrorDecision(BaseModel):
    kind: ErrorKind
    retryable: bool
    delay_seconds: float | None = None
    message: str = ""
    prompt_tokens: int | None = None
    max_tokens: int | None = None


def parse_retry_after(headers: dict[str, str]) -> float | None:
    """Seconds to wait from `retry-after-ms` / `retry-after` (numeric form only here)."""
    lower = {k.lower(): v for k, v in headers.items()}
    if "retry-after-ms" in lower:
        try:
            return max(0.0, float(lower["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    if "retry-after" in lower:
        try:
            return max(0.0, float(lower["retry-after"]))
        except ValueError:
            return None
    return None


def backoff_delay(attempt: int) -> float:
    """500 ms doubling per attempt, capped (attempt is 1-based)."""
    return min(MAX_DELAY_SECONDS, BASE_DELAY_SECONDS * 2 ** max(0, attempt - 1))


def classify_status(
    status: int | None,
    error_type: str | None = None,
    message: str = "",
    headers: dict[str, str] | None = None,
    attempt: int = 1,
) -> ErrorDecision:
    """Map an API failure to a decision. `status=None` means no HTTP response (connection/timeout).

    The body's `error.type` wins over the status: an `error` event mid-stream arrives with
    status 200 and type `overloaded_error`.
    """
    headers = {k.lower(): v for k, v in (headers or {}).items()}
    match = _PTL.search(message)
    if match or status == 413:
        return ErrorDecision(
            kind=ErrorKind.PROMPT_TOO_LONG,
            retryable=False,
            message=message or "prompt is too long",
            prompt_tokens=int(match.group(1)) if match else None,
            max_tokens=int(match.group(2)) if match else None,
        )
    kind = _TYPE_KIND.get(error_type or "")
    if kind is None:
        if status is None:
            kind = ErrorKind.CONNECTION
        elif status == 529:
            kind = ErrorKind.OVERLOADED
        elif status == 429:
            kind = ErrorKind.RATE_LIMITED
        elif status == 401:
            kind = ErrorKind.AUTHENTICATION
        elif status == 403:
            kind = ErrorKind.PERMISSION
        elif status == 404:
            kind = ErrorKind.NOT_FOUND
        elif status in (408, 409) or status >= 500:
            kind = ErrorKind.SERVER_ERROR
        elif 400 <= status < 500:
            kind = ErrorKind.INVALID_REQUEST
        else:
            kind = ErrorKind.UNKNOWN
    retryable = kind.value not in NON_RETRYABLE_ERROR_TYPES
    if headers.get("x-should-retry", "").lower() == "false":
        retryable = False
    delay = parse_retry_after(headers) if retryable else None
    if retryable and delay is None:
        delay = backoff_delay(attempt)
    return ErrorDecision(kind=kind, retryable=retryable, delay_seconds=delay, message=message)
