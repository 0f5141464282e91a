"""A hand-written shell lexer/parser: just enough of the shell to check a command's parts.

`split_command` splits a command line into its simple commands (`Part`: words, and the targets
of its redirections) at `&&`, `||`, `;`, `|`, `&`, newlines and subshell parentheses, with the
bodies of `$(...)`, backticks and `<(...)` / `>(...)` as parts of their own. Quotes are
respected; what cannot be read is a ShellParseError, which the rules treat as unparseable.

Checking a Bash command takes time linear in its length: a command whose analysis would cost more
than a fixed multiple of its length (`_Work`) raises TooComplex and counts as unparseable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


class ShellParseError(ValueError):
    pass


class TooComplex(ShellParseError):
    """The command would take more work to check than its length warrants (deeply nested
    substitutions, wrappers around thousands of words): it is checked as unparseable."""


class _Work:
    """What one command's analysis may still scan (characters of text, parsed or matched):
    a fixed multiple of the command's length, so that checking it stays linear."""

    FACTOR, BASE = 16, 1 << 20

    def __init__(self, command: str) -> None:
        self.left = self.FACTOR * len(command) + self.BASE

    def spend(self, chars: int) -> None:
        self.left -= chars
        if self.left < 0:
            raise TooComplex("the command is too complex to check against the permission rules")


@dataclass
class Word:
    value: str
    """The word after quote removal (what the program receives, expansions left as written)."""
    raw: str
    """The word as written."""
    dynamic: bool = False
    """Contains an unquoted or double-quoted expansion ($VAR, $(...), `...`) or a glob."""


@dataclass
class Part:
    """One simple command of a compound command line."""

    words: list[Word] = field(default_factory=list)
    writes: list[Word] = field(default_factory=list)
    """Targets of output redirections (`>`, `>>`, `&>`, ...)."""
    reads: list[Word] = field(default_factory=list)
    """Targets of input redirections (`<`)."""
    deny_only: bool = False
    """A reading of ambiguous text as a command (`$((...))` may be a subshell in a command
    substitution): deny and ask rules see it, allow rules need not cover it."""

    def text(self) -> str:
        return " ".join(w.raw for w in self.words)


_OPERATORS = ("&&", "||", "|&", ";;", "|", "&", ";", "(", ")")
_REDIRECTS = ("&>>", "&>", ">>", ">|", ">&", "<&", "<<<", "<<", "<>", ">", "<")
_KEYWORDS = frozenset(
    {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "{", "}", "esac"}
)


_MAX_DEPTH = 8
_FD = re.compile(r"\s*(\d+-?|-)")
# Characters that are only themselves inside a word (see _read_word): read in one step.
_PLAIN = re.compile(r"[^ \t\n&|;()<>\\'\"$`*?\[{]+")
_PLAIN_QUOTED = re.compile(r'[^"\\$`]+')


def split_command(command: str, _depth: int = 0, work: _Work | None = None) -> list[Part]:
    """Every simple command in `command`: split at `&&`, `||`, `;`, `|`, `&`, newlines and
    subshell parentheses, with the bodies of `$(...)`, backticks and `<(...)` / `>(...)` as parts
    of their own. Quotes are respected (a `;` inside quotes is an argument). ShellParseError for
    unbalanced quotes or parentheses.

    Heredoc bodies are not recognised: their lines are read as commands, which can only make a
    deny or ask rule match more, never allow more. TooComplex when the work (`work`, shared by
    the whole command) runs out.
    """
    if _depth > _MAX_DEPTH:
        raise ShellParseError("command substitutions nested too deep")
    work = work or _Work(command)
    work.spend(len(command))
    parts: list[Part] = []
    cur = Part()
    pending_redirect: str | None = None
    i, n = 0, len(command)

    def end_part() -> None:
        nonlocal cur
        if pending_redirect is not None:
            raise ShellParseError("redirection without a target")
        if cur.words or cur.writes or cur.reads:
            parts.append(cur)
        cur = Part()

    while i < n:
        c = command[i]
        if c in " \t":
            i += 1
            continue
        if c == "\\" and command.startswith("\\\n", i):
            i += 2
            continue
        if c == "\n":
            end_part()
            i += 1
            continue
        if c == "#":  # a comment runs to the end of the line
            i = command.find("\n", i)
            i = n if i < 0 else i
            continue
        special = c in "<>&|;()"
        op = next((o for o in _REDIRECTS if command.startswith(o, i)), None) if special else None
        if op is not None and not command.startswith("<(", i) and not command.startswith(">(", i):
            if pending_redirect is not None:
                raise ShellParseError("redirection without a target")
            pending_redirect = op
            i += len(op)
            if op in (">&", "<&"):  # `2>&1`: a descriptor, not a file
                m = _FD.match(command, i)
                if m:
                    i = m.end()
                    pending_redirect = None
            continue
        op = next((o for o in _OPERATORS if command.startswith(o, i)), None) if special else None
        if op is not None:
            if pending_redirect is not None:
                raise ShellParseError("redirection without a target")
            end_part()
            i += len(op)
            continue
        word, i, subs = _read_word(command, i, _depth, work)
        parts.extend(subs)
        if pending_redirect is not None:
            if pending_redirect in ("<<", "<<<"):
                pass  # heredoc delimiter / here-string: not a file
            elif pending_redirect.startswith("<") and pending_redirect != "<>":
                cur.reads.append(word)
            else:
                cur.writes.append(word)
            pending_redirect = None
            continue
        if re.fullmatch(r"\d+", word.raw) and i < n and command[i] in "<>":
            continue  # the descriptor of `2>file`
        cur.words.append(word)
    end_part()
    for part in parts:
        k = 0
        while (
            k < len(part.words) and part.words[k].value in _KEYWORDS and not part.words[k].dynamic
        ):
            k += 1
        del part.words[:k]
    return [p for p in parts if p.words or p.writes or p.reads]


def _read_word(s: str, i: int, depth: int, work: _Work) -> tuple[Word, int, list[Part]]:
    """One shell word from s[i]; returns it, the index after it, and the parts of any command
    substitution inside it."""
    start, n = i, len(s)
    value: list[str] = []
    dynamic = False
    brace = False
    subs: list[Part] = []
    while i < n:
        plain = _PLAIN.match(s, i)
        if plain:
            value.append(plain.group())
            i = plain.end()
            continue
        c = s[i]
        if c in " \t\n&|;()":  # a blank, or the first character of every operator
            break
        if c in "<>" and not s.startswith("<(", i) and not s.startswith(">(", i):
            break
        if c == "\\":
            if i + 1 < n and s[i + 1] != "\n":  # backslash-newline: a line continuation
                value.append(s[i + 1])
            i += 2
            continue
        if c == "'":
            j = s.find("'", i + 1)
            if j < 0:
                raise ShellParseError("unbalanced single quote")
            value.append(s[i + 1 : j])
            i = j + 1
            continue
        if c == '"':
            i += 1
            while True:
                if i >= n:
                    raise ShellParseError("unbalanced double quote")
                plain = _PLAIN_QUOTED.match(s, i)
                if plain:
                    value.append(plain.group())
                    i = plain.end()
                    continue
                c = s[i]
                if c == '"':
                    i += 1
                    break
                if c == "\\" and i + 1 < n:
                    value.append(s[i + 1] if s[i + 1] in '"\\$`\n' else s[i : i + 2])
                    i += 2
                    continue
                if s.startswith("$((", i):
                    body, i = _balanced(s, i + 1)
                    subs.extend(_arithmetic(body, depth + 1, work))
                    value.append(f"$({body})")
                    dynamic = True
                    continue
                if c == "$" and s.startswith("$(", i):
                    body, i = _balanced(s, i + 1)
                    subs.extend(split_command(body, depth + 1, work))
                    value.append(f"$({body})")
                    dynamic = True
                    continue
                if c == "`":
                    body, i = _backtick(s, i)
                    subs.extend(split_command(body, depth + 1, work))
                    value.append(f"`{body}`")
                    dynamic = True
                    continue
                if c == "$":
                    dynamic = True
                value.append(c)
                i += 1
            continue
        if c == "$" and s.startswith("$(", i) and not s.startswith("$((", i):
            body, i = _balanced(s, i + 1)
            subs.extend(split_command(body, depth + 1, work))
            value.append(f"$({body})")
            dynamic = True
            continue
        if c in "<>" and s.startswith("(", i + 1):  # process substitution
            body, i = _balanced(s, i + 1)
            subs.extend(split_command(body, depth + 1, work))
            value.append(f"{c}({body})")
            dynamic = True
            continue
        if c == "`":
            body, i = _backtick(s, i)
            subs.extend(split_command(body, depth + 1, work))
            value.append(f"`{body}`")
            dynamic = True
            continue
        if c == "$" and (s.startswith("${", i) or s.startswith("$((", i)):
            # `${x:-$(cmd)}` and `$(( $(cmd) + 1 ))` run the commands inside them: only those
            # are parts; the rest is an expansion.
            close = "}" if s[i + 1] == "{" else ")"
            body, i = _balanced(s, i + 1, "{" if close == "}" else "(")
            subs.extend(
                _substitutions(body, depth + 1, work)
                if close == "}"
                else _arithmetic(body, depth + 1, work)
            )
            value.append(f"${{{body}}}" if close == "}" else f"$({body})")
            dynamic = True
            continue
        if c in "$*?[":
            dynamic = True
        if c == "{":
            brace = True
        value.append(c)
        i += 1
    raw = s[start:i]
    # Unquoted braces expand (`{/etc/x,y}`), a leading `~name` is another user's home: both
    # make the word something other than what is written.
    if (brace and raw != "{") or (raw.startswith("~") and not re.match(r"~(/|$)", raw)):
        dynamic = True
    return Word("".join(value), raw, dynamic), i, subs


def _arithmetic(body: str, depth: int, work: _Work) -> list[Part]:
    """`$((body))`: the substitutions inside it, and (Safer reading) the body read as commands
    for deny and ask rules, since bash may take `$((cmd) ...)` as a command substitution."""
    parts = _substitutions(body, depth, work)
    try:
        extra = split_command(body, depth + 1, work)
    except TooComplex:
        raise
    except ShellParseError:
        extra = []
    for part in extra:
        part.deny_only = True
    return parts + extra


def _substitutions(body: str, depth: int, work: _Work) -> list[Part]:
    """The parts of every `$(...)` and `...` inside an expansion's body."""
    if depth > _MAX_DEPTH:
        raise ShellParseError("expansions nested too deep")
    work.spend(len(body))
    parts: list[Part] = []
    j = 0
    while j < len(body):
        c = body[j]
        if c == "\\":
            j += 2
        elif c == "'":
            k = body.find("'", j + 1)
            if k < 0:
                raise ShellParseError("unbalanced single quote")
            j = k + 1
        elif body.startswith("$((", j):
            inner, j = _balanced(body, j + 1)
            parts.extend(_arithmetic(inner, depth + 1, work))
        elif body.startswith("${", j):
            inner, j = _balanced(body, j + 1, "{")
            parts.extend(_substitutions(inner, depth + 1, work))
        elif body.startswith("$(", j):
            inner, j = _balanced(body, j + 1)
            parts.extend(split_command(inner, depth + 1, work))
        elif c == "`":
            inner, j = _backtick(body, j)
            parts.extend(split_command(inner, depth + 1, work))
        else:
            j += 1
    return parts


def _balanced(s: str, i: int, opener: str = "(") -> tuple[str, int]:
    """s[i] is `opener`; the text up to its match (quotes respected) and the index after it."""
    closer = ")" if opener == "(" else "}"
    depth, j, n = 0, i, len(s)
    while j < n:
        c = s[j]
        if c == "\\":
            j += 2
            continue
        if c == "'":
            k = s.find("'", j + 1)
            if k < 0:
                raise ShellParseError("unbalanced single quote")
            j = k + 1
            continue
        if c == '"':
            j += 1
            while j < n and s[j] != '"':
                j += 2 if s[j] == "\\" else 1
            if j >= n:
                raise ShellParseError("unbalanced double quote")
            j += 1
            continue
        if c == opener:
            depth += 1
        elif c == closer:
            depth -= 1
            if depth == 0:
                return s[i + 1 : j], j + 1
        j += 1
    raise ShellParseError("unbalanced parenthesis" if opener == "(" else "unbalanced ${")


def _backtick(s: str, i: int) -> tuple[str, int]:
    j = i + 1
    while j < len(s):
        if s[j] == "\\":
            j += 2
            continue
        if s[j] == "`":
            return s[i + 1 : j], j + 1
        j += 1
    raise ShellParseError("unbalanced backtick")
