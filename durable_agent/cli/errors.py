"""What every CLI module may raise or return: the one-line error and the exit codes."""

from __future__ import annotations

EXIT_USAGE = 2
EXIT_STOPPED = 1
EXIT_DETACHED = 130


class CliError(Exception):
    """Printed as one line (and a hint) instead of a traceback; exit code 2."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint
