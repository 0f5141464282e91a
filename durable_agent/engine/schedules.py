"""Wake-ups and schedules (issue 25 item 3), the pure part: the bounds, the ids, the cron check,
and what the workflows keep of them.

A wake-up (`ScheduleWakeup`) is session state: the session waits on a Temporal timer until the
earliest is due, then queues its prompt. A cron job (`CronCreate`) is a Temporal Schedule named
after its session (`schedule_id`); each firing starts a `ScheduledPromptWorkflow`, which signals
the session (workflows/schedules.py)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

MIN_WAKEUP_SECONDS = 60
MAX_WAKEUP_SECONDS = 3600
"""A wake-up's delay is clamped to 1 minute … 1 hour (Claude Code's range)."""
MAX_WAKEUPS = 10
"""Pending wake-ups a session keeps (the newest): carried across continue-as-new."""
MAX_SCHEDULED_PROMPT_CHARS = 10_000
"""A wake-up's or a job's prompt is kept in workflow state and schedules: long material belongs
in a file the prompt names."""
MAX_REASON_CHARS = 500
MAX_CRON_JOBS = 50
"""Cron jobs of one session (Claude Code's limit)."""
CRON_MAX_AGE = timedelta(days=7)
"""A recurring job ends 7 days after it was created (Claude Code's expiry: a forgotten job
does not run forever)."""
CRON_MARK = "-cron-"
"""Between the session id and the job id in a schedule's id."""


def clamp_delay(seconds: int) -> int:
    return max(MIN_WAKEUP_SECONDS, min(MAX_WAKEUP_SECONDS, seconds))


def _short_hash(text: str, length: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def wakeup_id(tool_use_id: str) -> str:
    """`w` and 7 hex digits, from the ScheduleWakeup call: the workflow and the tool agree on it
    without telling each other (retries included)."""
    return "w" + _short_hash(tool_use_id, 7)


def job_id(tool_use_id: str) -> str:
    """8 hex digits (a job id never starts with `w`, so it is never read as a wake-up's)."""
    return _short_hash(tool_use_id, 8)


def schedule_id(session_id: str, job: str) -> str:
    """The Temporal Schedule of a session's job."""
    return f"{session_id}{CRON_MARK}{job}"


def split_schedule_id(raw: str) -> tuple[str, str] | None:
    """(session id, job id) of a schedule id of ours; None for any other."""
    session, mark, job = raw.rpartition(CRON_MARK)
    if not mark or not session or not re.fullmatch(r"[0-9a-f]{8}", job):
        return None
    return session, job


# --------------------------------------------------------------------------- cron expressions

_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    ("month", 1, 12, {m: i + 1 for i, m in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
    )}),
    ("day-of-week", 0, 7, {d: i for i, d in enumerate(
        ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
    )}),
)  # fmt: skip
_ITEM = re.compile(r"(?P<range>\*|[0-9a-z]+(?:-[0-9a-z]+)?)(?:/(?P<step>[0-9]+))?$")


def cron_problem(expr: str) -> str | None:
    """Why `expr` is not a 5-field cron expression (minute hour day-of-month month
    day-of-week, with `*`, ranges `1-5`, steps `*/15`, lists `1,15,30`, and month and weekday
    names); None when it is one."""
    fields = expr.split()
    if len(fields) != 5:
        return f"{len(fields)} fields; a cron expression has 5: minute hour day-of-month month day-of-week"
    for text, (name, low, high, names) in zip(fields, _FIELDS, strict=True):
        for item in text.lower().split(","):
            problem = _item_problem(item, low, high, names)
            if problem is not None:
                return f"{name} {text!r}: {problem}"
    return None


def _item_problem(item: str, low: int, high: int, names: dict[str, int]) -> str | None:
    found = _ITEM.match(item)
    if found is None:
        return "use *, a number, a range (1-5), a step (*/15) or a list (1,15,30)"
    if found["step"] is not None and int(found["step"]) < 1:
        return "a step must be at least 1"
    if found["range"] == "*":
        return None
    bounds = []
    for part in found["range"].split("-"):
        value = names.get(part, int(part) if part.isdigit() else None)
        if value is None:
            return f"{part!r} is not a number" + (" or a name" if names else "")
        if not low <= value <= high:
            return f"{value} is outside {low}-{high}"
        bounds.append(value)
    if len(bounds) == 2 and bounds[0] > bounds[1]:
        return f"the range {bounds[0]}-{bounds[1]} runs backwards"
    return None


# --------------------------------------------------------------------------- workflow state


class WakeupRequest(BaseModel):
    """A valid ScheduleWakeup call (ToolCall.wakeup): the workflow keeps it once the call ran."""

    model_config = ConfigDict(frozen=True)

    delay_seconds: int
    """Clamped already (MIN_WAKEUP_SECONDS … MAX_WAKEUP_SECONDS)."""
    reason: str
    prompt: str


class Wakeup(BaseModel):
    """A pending wake-up of a session."""

    model_config = ConfigDict(frozen=True)

    id: str
    due: datetime
    """When its prompt is queued (UTC, workflow time)."""
    reason: str
    prompt: str


def add_wakeups(pending: Sequence[Wakeup], new: Sequence[Wakeup]) -> list[Wakeup]:
    """The pending wake-ups with the new ones (one of the same id replaced), the newest
    MAX_WAKEUPS, in due order."""
    ids = {w.id for w in new}
    kept = [w for w in pending if w.id not in ids] + list(new)
    return sorted(kept[-MAX_WAKEUPS:], key=lambda w: (w.due, w.id))


def wakeup_lines(wakeups: Sequence[Wakeup], now: datetime | None = None) -> list[str]:
    """One line per pending wake-up, for `status`: its id, when, why."""
    lines = []
    for w in wakeups:
        left = ""
        if now is not None:
            seconds = max(0, int((w.due - now).total_seconds()))
            left = (
                f" (in {seconds // 60} min {seconds % 60} s)"
                if seconds >= 60
                else f" (in {seconds} s)"
            )
        lines.append(f"wake-up {w.id} at {w.due:%Y-%m-%d %H:%M:%S} UTC{left}: {w.reason}")
    return lines


class ScheduledPrompt(BaseModel):
    """A job's prompt, signalled to its session each time the schedule fires."""

    job_id: str
    prompt: str


class ScheduledPromptInput(BaseModel):
    """The input of the workflow a session's Temporal Schedule starts at each firing."""

    session_id: str
    job_id: str
    prompt: str
    once: bool = False
    """A one-shot job: its schedule is deleted once the prompt is sent."""


class DeleteSchedulesInput(BaseModel):
    """Schedules to delete (those already gone are fine)."""

    schedule_ids: list[str] = Field(default_factory=list)
    session_id: str | None = None
    """Also every other schedule of this session's (a session that ends)."""


class DeleteSchedulesOutput(BaseModel):
    deleted: int
