"""The retry classifier: (failure, context) → decision. Pure."""

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from durable_agent.engine.errors import (
    FALLBACK_TRIGGERED,
    GAVE_UP,
    Action,
    ApiFailure,
    ErrorKind,
    RetryContext,
    RetryMode,
    RetryTrack,
    backoff_delay,
    classify,
    parse_retry_after,
)


def decide(status=None, etype=None, message="", headers=None, reset=False, **ctx):
    failure = ApiFailure(
        status=status,
        error_type=etype,
        message=message,
        headers=headers or {},
        connection_reset=reset,
    )
    return classify(failure, RetryContext(**ctx))


@pytest.mark.parametrize(
    ("status", "etype", "kind", "action"),
    [
        (529, None, ErrorKind.OVERLOADED, Action.RETRY),
        (429, "rate_limit_error", ErrorKind.RATE_LIMITED, Action.RETRY),
        (500, "api_error", ErrorKind.SERVER_ERROR, Action.RETRY),
        (503, None, ErrorKind.SERVER_ERROR, Action.RETRY),
        (400, "invalid_request_error", ErrorKind.INVALID_REQUEST, Action.FAIL),
        (404, None, ErrorKind.NOT_FOUND, Action.FAIL),
        (401, "authentication_error", ErrorKind.AUTHENTICATION, Action.REFRESH_CREDENTIALS),
        (403, "permission_error", ErrorKind.PERMISSION, Action.REFRESH_CREDENTIALS),
        (200, "overloaded_error", ErrorKind.OVERLOADED, Action.RETRY),  # error event mid-stream
        (200, "api_error", ErrorKind.SERVER_ERROR, Action.RETRY),
    ],
)
def test_status_and_body_type(status, etype, kind, action):
    d = decide(status, etype)
    assert (d.kind, d.action) == (kind, action)
    assert (d.delay_seconds is not None) == d.retryable


def test_connection_errors():
    assert decide(None).action == Action.RETRY
    reset = decide(None, reset=True)
    assert (reset.kind, reset.action) == (ErrorKind.CONNECTION_RESET, Action.REBUILD_CLIENT)


def test_prompt_too_long_is_parsed_and_never_retried():
    d = decide(400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum")
    assert (d.kind, d.action, d.prompt_tokens, d.max_tokens) == (
        ErrorKind.PROMPT_TOO_LONG,
        Action.FAIL,
        210000,
        200000,
    )
    assert decide(413).kind == ErrorKind.PROMPT_TOO_LONG
    assert d.error_type == "PromptTooLong" and not d.retryable


def test_529_is_retried_three_times_then_fails_or_falls_back():
    track = RetryTrack()
    actions = []
    for attempt in range(1, 5):
        d = decide(529, attempt=attempt, track=track)
        actions.append(d.action)
        track = d.track
    assert actions == [Action.RETRY] * 3 + [Action.FAIL]
    last = decide(529, attempt=4, track=RetryTrack(consecutive_529=3), has_fallback=True)
    assert last.action == Action.FALLBACK and last.error_type == FALLBACK_TRIGGERED


def test_a_non_529_error_resets_the_529_count():
    d = decide(500, track=RetryTrack(consecutive_529=2))
    assert d.track.consecutive_529 == 0


def test_background_sources_fail_at_once_on_529():
    d = decide(529, query_source="tool_use_summary")
    assert d.action == Action.FAIL and "background" in d.message and d.error_type == GAVE_UP
    assert decide(529, query_source="compact").action == Action.RETRY


def test_credentials_are_refreshed_once():
    first = decide(401)
    assert first.action == Action.REFRESH_CREDENTIALS and first.track.credential_refreshes == 1
    second = decide(401, track=first.track)
    assert second.action == Action.FAIL


def test_ten_retries_outside_unattended_mode():
    assert decide(500, attempt=10).action == Action.RETRY  # the 10th retry is attempt 11
    d = decide(500, attempt=11)
    assert d.action == Action.FAIL and "gave up after 10 retries" in d.message


def test_unattended_mode_retries_429_and_529_forever_with_a_5_minute_cap():
    for status in (429, 529):
        d = decide(
            status, attempt=500, mode=RetryMode.UNATTENDED, track=RetryTrack(consecutive_529=499)
        )
        assert d.action == Action.RETRY and d.delay_seconds == 300.0
    assert decide(500, attempt=11, mode=RetryMode.UNATTENDED).action == Action.FAIL


def test_retry_after_headers():
    assert decide(429, headers={"retry-after": "2"}).delay_seconds == 2.0
    assert decide(429, headers={"Retry-After-Ms": "1500", "retry-after": "9"}).delay_seconds == 1.5
    now = datetime(2026, 1, 1, tzinfo=UTC)
    http_date = format_datetime(now + timedelta(seconds=42), usegmt=True)
    assert parse_retry_after({"retry-after": http_date}, now) == 42.0
    assert parse_retry_after({"retry-after": "soon"}) is None


def test_x_should_retry():
    assert decide(529, headers={"x-should-retry": "false"}).action == Action.FAIL
    assert (
        decide(400, "invalid_request_error", headers={"X-Should-Retry": "true"}).action
        == Action.RETRY
    )


def test_backoff_is_exponential_capped_and_jittered():
    assert [backoff_delay(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]
    assert backoff_delay(20) == 32.0 and backoff_delay(20, cap=300) == 300.0
    assert backoff_delay(1, jitter=0.999) == pytest.approx(0.5 * 1.25, rel=1e-2)


def test_media_errors_are_withheld_not_retried():
    d = decide(
        400,
        "invalid_request_error",
        "messages.0.content.1.image.source.base64: image exceeds 5 MB maximum",
    )
    assert d.kind == ErrorKind.MEDIA and d.action == Action.FAIL and d.error_type == "MediaError"
    assert (
        decide(400, "invalid_request_error", "tools: unknown field").kind
        == ErrorKind.INVALID_REQUEST
    )
