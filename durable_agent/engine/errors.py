"""Classification of Messages API failures into retry decisions: one pure function.

The activity turns a decision into a Temporal `ApplicationError`; the workflow's RetryPolicy
lists NON_RETRYABLE_ERROR_TYPES so Temporal never retries what cannot succeed.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum

from pydantic import BaseModel, Field


class ErrorKind(StrEnum):
    """Error classes; the value is the ApplicationError type name."""

    OVERLOADED = "Overloaded"
    RATE_LIMITED = "RateLimited"
    SERVER_ERROR = "ServerError"
    CONNECTION = "ConnectionError"
    CONNECTION_RESET = "ConnectionReset"
    TIMEOUT = "Timeout"
    AUTHENTICATION = "AuthenticationError"
    PERMISSION = "PermissionDenied"
    PROMPT_TOO_LONG = "PromptTooLong"
    MEDIA = "MediaError"
    INVALID_REQUEST = "InvalidRequest"
    NOT_FOUND = "NotFound"
    MALFORMED = "MalformedResponse"
    """A 200 the client cannot read: a malformed or cut-short stream, a body that is not SSE."""
    UNKNOWN = "UnknownModelError"


class Action(StrEnum):
    """What to do about a failure."""

    RETRY = "retry"
    FAIL = "fail"
    REFRESH_CREDENTIALS = "refresh_credentials"
    REBUILD_CLIENT = "rebuild_client"
    FALLBACK = "fallback"


class RetryMode(StrEnum):
    DEFAULT = "default"
    UNATTENDED = "unattended"
    """429/529 retried indefinitely (backoff capped at 5 minutes) until the activity's deadline."""


FALLBACK_TRIGGERED = "FallbackTriggered"
GAVE_UP = "RetriesExhausted"
TRANSCRIPT_DAMAGED = "TranscriptDamaged"
"""The session's transcript lost an entry the call needs (cut short, edited by hand)."""
NON_RETRYABLE_ERROR_TYPES: tuple[str, ...] = (
    ErrorKind.PROMPT_TOO_LONG.value,
    ErrorKind.MEDIA.value,
    ErrorKind.INVALID_REQUEST.value,
    ErrorKind.NOT_FOUND.value,
    FALLBACK_TRIGGERED,
    GAVE_UP,
    TRANSCRIPT_DAMAGED,
)

DEFAULT_MAX_RETRIES = 10
"""Retries of one model call after its first attempt (the reference engine's DEFAULT_MAX_RETRIES)."""
MAX_529_RETRIES = 3
MAX_MALFORMED_ATTEMPTS = 3
"""Unreadable answers (typically a proxy's hiccup) get this many tries in all, not 10."""
MAX_CREDENTIAL_REFRESHES = 1
BASE_DELAY_SECONDS = 0.5
MAX_DELAY_SECONDS = 32.0
UNATTENDED_MAX_DELAY_SECONDS = 300.0
FOREGROUND_529_SOURCES = frozenset(
    {
        "repl_main_thread", "sdk", "agent", "agent:custom", "agent:default", "agent:builtin",
        "compact", "hook_agent", "hook_prompt", "verification_agent", "side_question", "auto_mode",
    }
)  # fmt: skip

_PTL = re.compile(r"prompt is too long:\s*(\d+)\s*tokens\s*>\s*(\d+)", re.IGNORECASE)
_MEDIA = re.compile(
    r"(image|media|pdf|document)\b.*\b(too large|exceeds?|maximum|dimensions|size)", re.IGNORECASE
)
WITHHELD_KINDS = frozenset({"PromptTooLong", "MediaError"})
"""Failures the loop may recover from: returned to the workflow, never raised or retried."""
_TYPE_KIND = {
    "overloaded_error": ErrorKind.OVERLOADED,
    "rate_limit_error": ErrorKind.RATE_LIMITED,
    "api_error": ErrorKind.SERVER_ERROR,
    "authentication_error": ErrorKind.AUTHENTICATION,
    "permission_error": ErrorKind.PERMISSION,
    "not_found_error": ErrorKind.NOT_FOUND,
    "request_too_large": ErrorKind.PROMPT_TOO_LONG,
    "invalid_request_error": ErrorKind.INVALID_REQUEST,
    "timeout_error": ErrorKind.TIMEOUT,
}
_STATUS_KIND = {
    529: ErrorKind.OVERLOADED,
    429: ErrorKind.RATE_LIMITED,
    401: ErrorKind.AUTHENTICATION,
    403: ErrorKind.PERMISSION,
    404: ErrorKind.NOT_FOUND,
    408: ErrorKind.TIMEOUT,
    413: ErrorKind.PROMPT_TOO_LONG,
}


class ApiFailure(BaseModel):
    """What went wrong, as the activity saw it. `status=None`: no HTTP response."""

    status: int | None = None
    error_type: str | None = None
    message: str = ""
    headers: dict[str, str] = Field(default_factory=dict)
    connection_reset: bool = False
    malformed: bool = False
    """The API answered 200 but what it sent cannot be read (`message` says what it sent)."""


class RetryTrack(BaseModel):
    """Counters carried across activity attempts (in heartbeat details)."""

    consecutive_529: int = 0
    credential_refreshes: int = 0
    malformed: int = 0

    def after(self, kind: ErrorKind, action: Action) -> RetryTrack:
        return RetryTrack(
            consecutive_529=self.consecutive_529 + 1 if kind == ErrorKind.OVERLOADED else 0,
            credential_refreshes=self.credential_refreshes
            + (1 if action == Action.REFRESH_CREDENTIALS else 0),
            malformed=self.malformed + (1 if kind == ErrorKind.MALFORMED else 0),
        )


class RetryContext(BaseModel):
    attempt: int = 1
    """1-based attempt number of this call."""
    query_source: str = "sdk"
    mode: RetryMode = RetryMode.DEFAULT
    track: RetryTrack = RetryTrack()
    has_fallback: bool = False
    max_retries: int = DEFAULT_MAX_RETRIES
    now: datetime | None = None
    jitter: float = 0.0
    """A random number in [0, 1) supplied by the caller; adds up to 25 % of the base delay."""


class ErrorDecision(BaseModel):
    kind: ErrorKind
    action: Action
    delay_seconds: float | None = None
    message: str = ""
    prompt_tokens: int | None = None
    max_tokens: int | None = None
    track: RetryTrack = RetryTrack()

    @property
    def retryable(self) -> bool:
        return self.action in (Action.RETRY, Action.REFRESH_CREDENTIALS, Action.REBUILD_CLIENT)

    @property
    def error_type(self) -> str:
        """The ApplicationError type: the kind, or why the kind is not retried any more."""
        if self.action == Action.FALLBACK:
            return FALLBACK_TRIGGERED
        if self.action == Action.FAIL and self.kind.value not in NON_RETRYABLE_ERROR_TYPES:
            return GAVE_UP
        return self.kind.value


def parse_retry_after(headers: dict[str, str], now: datetime | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `retry-after` in seconds or as an HTTP date."""
    lower = {k.lower(): v for k, v in headers.items()}
    if "retry-after-ms" in lower:
        try:
            return max(0.0, float(lower["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    raw = lower.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def backoff_delay(attempt: int, cap: float = MAX_DELAY_SECONDS, jitter: float = 0.0) -> float:
    """500 ms doubling per attempt (1-based), capped, plus up to 25 % of the base as jitter."""
    base = min(cap, BASE_DELAY_SECONDS * 2 ** min(max(0, attempt - 1), 30))
    return base + jitter * 0.25 * base


def kind_of(failure: ApiFailure) -> ErrorKind:
    """The body's `error.type` wins over the status (an `error` event arrives with status 200)."""
    if failure.malformed:
        return ErrorKind.MALFORMED
    if _PTL.search(failure.message) or failure.status == 413:
        return ErrorKind.PROMPT_TOO_LONG
    if failure.status == 400 and _MEDIA.search(failure.message):
        return ErrorKind.MEDIA
    by_type = _TYPE_KIND.get(failure.error_type or "")
    if by_type is not None:
        return by_type
    if failure.status is None:
        return ErrorKind.CONNECTION_RESET if failure.connection_reset else ErrorKind.CONNECTION
    if failure.status in _STATUS_KIND:
        return _STATUS_KIND[failure.status]
    if failure.status >= 500 or failure.status == 409:
        return ErrorKind.SERVER_ERROR
    if 400 <= failure.status < 500:
        return ErrorKind.INVALID_REQUEST
    return ErrorKind.UNKNOWN


def classify(failure: ApiFailure, ctx: RetryContext) -> ErrorDecision:
    """Map a failure and its context to a decision; `track` in the result is for the next try."""
    kind = kind_of(failure)
    action, why = _action(kind, failure, ctx)
    persistent = ctx.mode == RetryMode.UNATTENDED and kind in (
        ErrorKind.OVERLOADED,
        ErrorKind.RATE_LIMITED,
    )
    retrying = action in (Action.RETRY, Action.REFRESH_CREDENTIALS, Action.REBUILD_CLIENT)
    if retrying and not persistent and ctx.attempt > ctx.max_retries:
        action, why = Action.FAIL, f"gave up after {ctx.attempt - 1} retries"
    delay = None
    if action in (Action.RETRY, Action.REFRESH_CREDENTIALS, Action.REBUILD_CLIENT):
        cap = UNATTENDED_MAX_DELAY_SECONDS if persistent else MAX_DELAY_SECONDS
        delay = parse_retry_after(failure.headers, ctx.now)
        if delay is None:
            delay = backoff_delay(ctx.attempt, cap, ctx.jitter)
    match = _PTL.search(failure.message)
    message = failure.message or kind.value
    return ErrorDecision(
        kind=kind,
        action=action,
        delay_seconds=delay,
        message=f"{message} ({why})" if why else message,
        prompt_tokens=int(match.group(1)) if match else None,
        max_tokens=int(match.group(2)) if match else None,
        track=ctx.track.after(kind, action),
    )


def _action(kind: ErrorKind, failure: ApiFailure, ctx: RetryContext) -> tuple[Action, str]:
    if kind in (ErrorKind.PROMPT_TOO_LONG, ErrorKind.MEDIA):
        return Action.FAIL, ""
    should_retry = {k.lower(): v for k, v in failure.headers.items()}.get("x-should-retry", "")
    if should_retry.lower() == "false":
        return Action.FAIL, "the server said x-should-retry: false"
    if kind == ErrorKind.OVERLOADED:
        if ctx.query_source not in FOREGROUND_529_SOURCES:
            return (
                Action.FAIL,
                f"background query source {ctx.query_source!r} is not retried on 529",
            )
        if ctx.mode == RetryMode.UNATTENDED:
            return Action.RETRY, ""
        if ctx.track.consecutive_529 >= MAX_529_RETRIES:
            if ctx.has_fallback:
                return (
                    Action.FALLBACK,
                    f"{ctx.track.consecutive_529 + 1} overloaded responses in a row",
                )
            return Action.FAIL, f"still overloaded after {MAX_529_RETRIES} retries"
        return Action.RETRY, ""
    if kind in (ErrorKind.AUTHENTICATION, ErrorKind.PERMISSION):
        if ctx.track.credential_refreshes < MAX_CREDENTIAL_REFRESHES:
            return Action.REFRESH_CREDENTIALS, ""
        return Action.FAIL, "the credentials were refreshed and still refused"
    if kind == ErrorKind.CONNECTION_RESET:
        return Action.REBUILD_CLIENT, ""
    if kind == ErrorKind.MALFORMED:
        tries = ctx.track.malformed + 1
        if tries >= MAX_MALFORMED_ATTEMPTS:
            return Action.FAIL, f"gave up after {tries} unreadable answers"
        return Action.RETRY, ""
    if should_retry.lower() == "true":
        return Action.RETRY, ""
    if kind in (ErrorKind.INVALID_REQUEST, ErrorKind.NOT_FOUND):
        return Action.FAIL, ""
    return Action.RETRY, ""
