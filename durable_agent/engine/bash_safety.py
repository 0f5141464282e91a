"""Which Bash commands only read: those may run beside other read-only tools and start early.

Deliberately conservative: a pipeline of known read-only programs, no redirection, no command
separators, no substitutions. Anything else is treated as having side effects.
"""

from __future__ import annotations

import shlex

READ_ONLY_PROGRAMS = frozenset(
    {
        "cat", "head", "tail", "ls", "pwd", "echo", "wc", "grep", "rg", "find", "file", "stat",
        "du", "df", "tree", "which", "whoami", "date", "uname", "env", "printenv", "sort", "uniq",
        "cut", "tr", "diff", "cmp", "basename", "dirname", "realpath", "readlink", "sleep", "true",
        "nl", "column", "less", "more", "md5sum", "sha256sum", "jq",
    }
)  # fmt: skip
READ_ONLY_GIT = frozenset(
    {"status", "log", "diff", "show", "rev-parse", "ls-files", "blame", "describe", "shortlog"}
)
FORBIDDEN = (";", "&", ">", "<", "`", "$(", "\n", "||")
FIND_WRITES = frozenset(
    {"-exec", "-execdir", "-delete", "-ok", "-okdir", "-fprint", "-fprintf", "-fls"}
)


def _segment_reads_only(words: list[str]) -> bool:
    if not words:
        return False
    program, args = words[0], words[1:]
    if program == "git":
        return bool(args) and args[0] in READ_ONLY_GIT
    if program == "find":
        return not FIND_WRITES.intersection(args)
    if program in ("sort",) and any(a.startswith("-o") for a in args):
        return False
    return program in READ_ONLY_PROGRAMS


def is_read_only_command(command: str) -> bool:
    """True only for a pipeline of read-only programs with no redirection or chaining."""
    if any(token in command for token in FORBIDDEN):
        return False
    try:
        segments = [shlex.split(part) for part in command.split("|")]
    except ValueError:
        return False
    return all(_segment_reads_only(words) for words in segments)
