"""What the CLI prints: progress events, a spinner while waiting, final results."""

from __future__ import annotations

import itertools
import json
import sys
import time
from typing import TextIO

from durable_agent.engine.state import ProgressEvent, ProgressKind, QueryResult, Terminal

FORMATS = ("text", "json", "stream-json")
CONNECTION_HINT = "check ANTHROPIC_BASE_URL, the network and any proxy settings"
"""The words workflows/failures.py adds to a prompt's final connection error."""


class Console:
    """Renders a run in one of the output formats; the spinner only on a terminal's stderr."""

    def __init__(
        self, output_format: str = "text", out: TextIO = sys.stdout, err: TextIO = sys.stderr
    ):
        self.format = output_format
        self.out = out
        self.err = err
        self._spin = itertools.cycle("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")
        self._spinning = False
        self._hinted = False
        self._started = time.monotonic()

    def info(self, text: str) -> None:
        """A status line for people (stderr, so stdout stays machine-readable)."""
        self._clear()
        print(text, file=self.err, flush=True)

    def event(self, event: ProgressEvent) -> None:
        self._clear()
        if self.format == "stream-json":
            print(json.dumps({"type": event.kind, **event.model_dump()}), file=self.out, flush=True)
        elif self.format == "text":
            if event.kind == ProgressKind.TEXT:
                print(event.text, file=self.out, flush=True)
            elif event.kind == ProgressKind.TOOL_CALL:
                print(f"  ⏺ {event.text}", file=self.err, flush=True)
            elif event.kind == ProgressKind.TOOL_RESULT:
                mark = "✗" if event.is_error else "⎿"
                print(f"    {mark} {event.text}", file=self.err, flush=True)
            elif event.kind in (ProgressKind.STATUS, ProgressKind.RETRY):
                print(f"  · {event.text}", file=self.err, flush=True)
                if event.kind == ProgressKind.RETRY and not self._hinted:
                    self._hint_connection(event.text)
            elif event.kind == ProgressKind.APPROVAL:
                print(f"  ? {event.text}", file=self.err, flush=True)

    def _hint_connection(self, text: str) -> None:
        """With the first retry of an API that cannot be reached, what to check: the prompt
        keeps retrying for minutes and its final error would be the first to say it."""
        if text.startswith(("ConnectionError (", "ConnectionReset (")):
            self._hinted = True
            print(
                f"    hint: {CONNECTION_HINT} (the call keeps retrying; Ctrl-C stops it)",
                file=self.err,
                flush=True,
            )

    def spin(self, what: str) -> None:
        if self.format != "text" or not self.err.isatty():
            return
        elapsed = time.monotonic() - self._started
        self.err.write(f"\r{next(self._spin)} {what} ({elapsed:.0f}s)\033[K")
        self.err.flush()
        self._spinning = True

    def _clear(self) -> None:
        if self._spinning:
            self.err.write("\r\033[K")
            self.err.flush()
            self._spinning = False

    def result(self, session_id: str, result: QueryResult) -> None:
        self._clear()
        if self.format in ("json", "stream-json"):
            payload = {"type": "result", "session_id": session_id, **result.model_dump(mode="json")}
            print(json.dumps(payload), file=self.out, flush=True)
            return
        usage = result.usage
        line = (
            f"{result.terminal.value} after {result.turn_count} turn(s); tokens in "
            f"{usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens}"
            f", out {usage.output_tokens}; session {session_id}"
        )
        if result.terminal != Terminal.COMPLETED:
            line = f"stopped: {line}" + (f" — {result.message}" if result.message else "")
        print(line, file=self.err, flush=True)
        if (
            result.transitions
            or result.retries
            or result.fallback_used
            or result.permission_denials
        ):
            for detail in result_details(result):
                print(f"  {detail}", file=self.err, flush=True)


def result_details(result: QueryResult) -> list[str]:
    """The recoveries a query went through, one line each."""
    lines = []
    if result.transitions:
        lines.append("transitions: " + ", ".join(t.value for t in result.transitions))
    if result.retries:
        lines.append(
            "retried: " + ", ".join(f"{k} ×{v}" for k, v in sorted(result.retries.items()))
        )
    if result.fallback_used:
        lines.append(f"fallback model used: {result.model}")
    for denial in result.permission_denials:
        lines.append(f"denied {denial.tool_name} ({denial.tool_use_id}): {denial.reason}")
    if result.permission_denials:
        lines.append(
            "to allow a tool: --allowedTools 'Bash(npm test:*)' Edit, --permission-mode "
            "acceptEdits, or permissions.allow in .claude/settings.json"
        )
    return lines


def fail(message: str, hint: str | None = None, code: int = 2) -> int:
    """One clear line (and a hint) instead of a traceback."""
    print(f"durable-agent: error: {message}", file=sys.stderr)
    if hint:
        print(f"hint: {hint}", file=sys.stderr)
    return code
