"""What the SDK (and asyncio) log as errors in a CLI process — a worker's completion that
failed, a task's lost exception — as one line on stderr, never a chain of tracebacks: the
message and the innermost cause, and the disk when the cause is a full one
(DURABLE_AGENT_DEBUG=1 keeps the tracebacks)."""

from __future__ import annotations

import errno
import logging
import os
import sys

from durable_agent.devserver import full_disk
from durable_agent.paths import state_home

LOGGERS = ("temporalio", "asyncio")


class OneLine(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(f"durable-agent: {describe(record)}\n")
        except Exception:  # noqa: BLE001 — logging must not raise
            self.handleError(record)


def describe(record: logging.LogRecord) -> str:
    message = (record.getMessage().strip().splitlines() or [record.name])[0]
    exc = record.exc_info[1] if record.exc_info else None
    if exc is None:
        return message[:300]
    cause = innermost(exc)
    text = (str(cause).strip().splitlines() or [""])[0]
    line = f"{message}: {type(cause).__name__}" + (f": {text}" if text else "")
    if isinstance(cause, OSError) and cause.errno == errno.ENOSPC:
        line += f" ({full_disk(state_home(), 'no space left on device') or 'a disk is full'})"
    return line[:400]


def innermost(exc: BaseException) -> BaseException:
    """The first full disk in the chain of causes, else the last cause."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        if isinstance(current, OSError) and current.errno == errno.ENOSPC:
            return current
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen[-1]


def one_line() -> None:
    """Route the SDK's and asyncio's error logs through OneLine (once per process)."""
    if os.environ.get("DURABLE_AGENT_DEBUG"):
        return
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(h, OneLine) for h in logger.handlers):
            logger.addHandler(OneLine(logging.ERROR))
            logger.propagate = False
