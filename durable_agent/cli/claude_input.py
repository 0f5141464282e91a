"""The drop-in front-end's stdin with `--input-format stream-json`: one JSON object a line,
read as bytes so that a line that is not UTF-8, not JSON, not an object or not valid Unicode
is refused by its number and reason (InputError), never reported as a bug."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
from typing import Any

from durable_agent.cli.errors import CliError

HINT = (
    "with --input-format stream-json, each stdin line is one JSON object such as "
    '{"type": "user", "message": {"role": "user", "content": "…"}}'
)


class InputError(CliError):
    """A stdin line (or the lack of one) this front-end cannot take; ends the run with an
    error result."""

    def __init__(self, message: str) -> None:
        super().__init__(f"stdin: {message}", HINT)


class Stdin:
    """stdin's lines (bytes) as they come, read in a daemon thread (not the loop's executor:
    a CLI stopped while its stdin stays open must not wait at exit for a line that never
    comes); None at the end."""

    def __init__(self) -> None:
        self.lines: asyncio.Queue[bytes | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def read() -> None:
            try:
                for line in sys.stdin.buffer:
                    loop.call_soon_threadsafe(self.lines.put_nowait, line)
            except Exception:  # noqa: BLE001 — stdin unreadable, or the loop gone: its end
                pass
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody reads any more
                loop.call_soon_threadsafe(self.lines.put_nowait, None)

        threading.Thread(target=read, daemon=True, name="stdin-lines").start()


def parse_line(raw: bytes, number: int) -> dict[str, Any] | None:
    """Stdin line `number` as a JSON object (None for a blank line)."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"line {number} is not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from None
    if not line.strip():
        return None
    try:
        message = json.loads(line)
    except RecursionError:
        raise InputError(f"line {number} is nested too deeply to read") from None
    except ValueError as exc:
        raise InputError(f"line {number} is not JSON ({exc}): {line.strip()[:80]}") from None
    if not isinstance(message, dict):
        raise InputError(f"line {number} is a JSON {_kind(message)}, not an object")
    try:  # a \ud800 escape decodes to a string that cannot be sent on
        json.dumps(message, ensure_ascii=False).encode("utf-8")
    except RecursionError:
        raise InputError(f"line {number} is nested too deeply to read") from None
    except UnicodeEncodeError as exc:
        raise InputError(
            f"line {number} holds an unpaired surrogate ({exc.object[exc.start]!r}), "
            "not valid Unicode"
        ) from None
    return message


def _kind(value: object) -> str:
    match value:
        case list():
            return "array"
        case str():
            return "string"
        case bool():
            return "boolean"
        case int() | float():
            return "number"
        case None:
            return "null"
    return type(value).__name__
