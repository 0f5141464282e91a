"""Which Bash commands only read: those may run beside other read-only tools, start early, and be
retried after a lost worker. A mistake here runs a side effect twice, so the check is an explicit
table and anything it does not know is a side effect.

A command is read-only when it is a pipeline (`|`) of segments, each a program in `READ_ONLY`
whose arguments its rule accepts; no redirection, chaining, background job, substitution or
variable assignment. Wrappers (`env`, `nice`, `timeout`, `xargs`, `sudo`, `command`, …) are not in
the table: they run another program, so they never make a command read-only.

The check is linear in the command's length, and a command longer than `MAX_CHECKED_CHARS` is
not looked at: it is a side effect.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

Rule = Callable[[list[str]], bool]

FORBIDDEN = (";", "&", ">", "<", "`", "$(", "\n", "||", "\\")

MAX_CHECKED_CHARS = 64 * 1024
"""Longer commands are not analysed (here, or against permission rules): no read-only command
needs that much text, and checking it would only cost time."""

# A word of a segment: unquoted text (not a bash blank), '...' and "..." run together, as
# shlex.split reads them once FORBIDDEN is ruled out (no backslash, `$(`, backtick). One
# character or one quoted string per step: no nested quantifier, no backtracking.
_WORD = re.compile(r"""(?:[^ \t'"]|'[^']*'|"[^"]*")+""")
_QUOTED = re.compile(r"'([^']*)'|\"([^\"]*)\"")


def _any(args: list[str]) -> bool:
    return True


def _without(*options: str) -> Rule:
    """Read-only unless an argument is one of `options` (also `--opt=…` and `-oVALUE` forms)."""

    def rule(args: list[str]) -> bool:
        for arg in args:
            for opt in options:
                if arg == opt or (opt.startswith("--") and arg.startswith(opt + "=")):
                    return False
                if len(opt) == 2 and not opt.startswith("--") and arg.startswith(opt):
                    return False
        return True

    return rule


def _positionals(args: list[str]) -> list[str]:
    return [a for a in args if not a.startswith("-") or a == "-"]


def _uniq(args: list[str]) -> bool:
    # `uniq INPUT OUTPUT` writes OUTPUT. The value of a separate-word option (`-f 2`) counts as
    # a positional too, which can only make the command a side effect: the safe direction.
    if not _without("--output")(args):
        return False
    return len(_positionals(args)) <= 1


_DATE_FLAGS = frozenset({"-u", "--utc", "--universal", "-R", "--rfc-email", "-I"})
_DATE_VALUE = frozenset({"-d", "--date", "-r", "--reference"})


def _date(args: list[str]) -> bool:
    """Only printing: `+FORMAT`, UTC/format flags, `-d`/`-r` with a value; `-s` or a bare
    `MMDDhhmm` sets the clock."""
    expect_value = False
    for arg in args:
        if expect_value:
            expect_value = False
        elif arg.startswith("+") or arg in _DATE_FLAGS:
            continue
        elif arg in _DATE_VALUE:
            expect_value = True
        elif arg.startswith(("--date=", "--reference=", "--iso-8601", "-I", "--rfc-3339=")):
            continue
        else:
            return False
    return True


_FIND_ACTIONS = (
    "-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls",
)  # fmt: skip

READ_ONLY_GIT: dict[str, Rule] = {
    name: _without("--output", "-o") if name in ("diff", "log", "show") else _without("--output")
    for name in (
        "status", "log", "diff", "show", "rev-parse", "ls-files", "blame", "describe", "shortlog",
    )
}  # fmt: skip


def _git(args: list[str]) -> bool:
    if not args or args[0] not in READ_ONLY_GIT:
        return False  # global options (-c, -C, --git-dir) and every other subcommand
    return READ_ONLY_GIT[args[0]](args[1:])


READ_ONLY: dict[str, Rule] = {
    # print or inspect, whatever the arguments
    **dict.fromkeys(
        (
            "cat",
            "head",
            "tail",
            "ls",
            "pwd",
            "echo",
            "wc",
            "grep",
            "stat",
            "du",
            "df",
            "which",
            "whoami",
            "uname",
            "printenv",
            "cut",
            "tr",
            "diff",
            "cmp",
            "basename",
            "dirname",
            "realpath",
            "readlink",
            "sleep",
            "true",
            "nl",
            "column",
            "md5sum",
            "sha256sum",
            "jq",
        ),
        _any,
    ),  # fmt: skip
    "rg": _without("--pre"),  # --pre runs a program on every file
    "file": _without("-C", "--compile"),  # -C writes a compiled magic file
    "sort": _without("-o", "--output", "--compress-program"),
    "uniq": _uniq,
    "tree": _without("-o", "--output"),
    "find": _without(*_FIND_ACTIONS),
    "date": _date,
    "git": _git,
}


def _segment_reads_only(words: list[str]) -> bool:
    if not words:
        return False
    rule = READ_ONLY.get(words[0])
    return rule is not None and rule(words[1:])


def _split(segment: str) -> list[str] | None:
    """The words of one pipeline segment after quote removal; None for an unbalanced quote."""
    words: list[str] = []
    end = 0
    for m in _WORD.finditer(segment):
        if segment[end : m.start()].strip(" \t"):
            return None  # skipped text: a quote with no closing one
        words.append(_QUOTED.sub(lambda q: q.group(1) or q.group(2) or "", m.group()))
        end = m.end()
    return None if segment[end:].strip(" \t") else words


def is_read_only_command(command: str) -> bool:
    """True only for a pipeline of table-approved programs with no redirection or chaining."""
    return len(command) <= MAX_CHECKED_CHARS and _read_only(command)


@functools.lru_cache(maxsize=64)
def _read_only(command: str) -> bool:
    # Cached: one call is classified more than once (may it run concurrently, is it read-only).
    if any(token in command for token in FORBIDDEN):
        return False
    segments = [_split(part) for part in command.split("|")]
    return all(words is not None and _segment_reads_only(words) for words in segments)
