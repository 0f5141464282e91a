"""argparse as the CLI wants it: a usage error is one line and a hint (not a usage block), said
by the command it belongs to (`run --wrong-flag` is run's error), and a rule flag that took the
prompt as one more rule says so."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

# Flags that take every word after them (nargs="+", as Claude Code's do): a prompt after them is
# read as a rule, and argparse alone only says the prompt is missing.
GREEDY = (
    "--allowedTools",
    "--allowed-tools",
    "--disallowedTools",
    "--disallowed-tools",
    "--add-dir",
)


class Parser(argparse.ArgumentParser):
    _argv: list[str]

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._argv = list(sys.argv[1:] if args is None else args)
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and self.is_command:  # else the top level reports them, with its usage
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    @property
    def is_command(self) -> bool:
        return " " in self.prog  # "durable-agent run"

    def error(self, message: str) -> NoReturn:
        hint = f"{self.prog} --help lists its options"
        if not self.is_command:
            hint = f"{self.prog} --help lists the commands"
        unknown = self._unknown_options() if "required" in message else []
        if unknown:  # `run --wrong-flag`: the flag is the mistake, not the missing prompt
            message = f"unrecognized arguments: {' '.join(unknown)}"
        if "invalid choice" in message and not self.is_command:
            message = message.split(" (choose from")[0]  # would list the internal commands
        greedy = self._greedy_flag() if "required: prompt" in message else None
        if greedy is not None:
            flag, rule = greedy
            message = f"{flag} took the prompt as one more rule (it reads every word after it)"
            hint = f"write {flag}={rule}, or put the prompt first ({self.prog} PROMPT {flag} ...)"
        self.exit(2, f"{self.prog}: error: {message}\nhint: {hint}\n")

    def _unknown_options(self) -> list[str]:
        known = self._option_string_actions
        words = getattr(self, "_argv", [])
        words = words[: words.index("--")] if "--" in words else words
        return [w for w in words if w[:1] == "-" and w != "-" and w.split("=")[0] not in known]

    def _greedy_flag(self) -> tuple[str, str] | None:
        """The last greedy flag given without `=` and its first rule, if one was."""
        found = None
        for i, word in enumerate(getattr(self, "_argv", [])):
            if word in GREEDY:
                found = (word, self._argv[i + 1] if i + 1 < len(self._argv) else "RULE")
        return found
