"""Permission rules and modes, as Claude Code's public docs describe them: a pure matcher.

`check(tool_name, tool_input, ctx)` answers allow / ask / deny for one tool call, with the rule
(and its source) or the mode that decided, in one line the model and the user can read.
`headless(decision)` turns an ask into a deny for runs where nobody can answer.

Rules are `Tool` or `Tool(specifier)` (`parse_rule`). Evaluation order is deny, then ask, then
allow: the first list with a matching rule decides, and a more specific rule in a later list does
not change that. Nothing here touches the filesystem: paths are compared lexically after
normalising (`~` from `ctx.home`, relative paths from `ctx.cwd`, then `os.path.normpath`).
Symlinks are NOT resolved here: the activities resolve a file tool's path and call `check` on
both paths, the stricter answer winning (activities/tools/links.py); the Bash sandbox holds
against links a command follows.

Where the docs leave a detail open the SAFER reading is chosen; each such choice is marked
"Safer reading:" below.

Checking a Bash command takes time linear in its length: one longer than MAX_CHECKED_CHARS is not
parsed (`_eval_long_bash`), and one whose analysis would cost more than a fixed multiple of its
length (`_Work`) counts as unparseable.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

from durable_agent.engine.bash_safety import MAX_CHECKED_CHARS


class PermissionMode(StrEnum):
    DEFAULT = "default"
    ACCEPT_EDITS = "acceptEdits"
    PLAN = "plan"
    BYPASS = "bypassPermissions"
    DONT_ASK = "dontAsk"


class Behavior(StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


class Rule(BaseModel):
    """One rule as written, e.g. `Bash(git diff:*)`. `specifier` None: the whole tool."""

    text: str
    tool: str
    specifier: str | None
    source: str = ""
    """Where it came from ("userSettings", "projectSettings", "cliArg", "session", a path ...)."""
    root: str | None = None
    """The directory a `/path` pattern is relative to (the settings file's project root)."""


class PermissionRules(BaseModel):
    allow: list[Rule] = Field(default_factory=list)
    ask: list[Rule] = Field(default_factory=list)
    deny: list[Rule] = Field(default_factory=list)


class PermissionContext(BaseModel):
    mode: PermissionMode = PermissionMode.DEFAULT
    rules: PermissionRules = Field(default_factory=PermissionRules)
    cwd: str
    additional_directories: list[str] = Field(default_factory=list)
    home: str
    sandboxed: bool = False
    auto_allow_bash_if_sandboxed: bool = True


class SandboxSpec(BaseModel):
    """The Bash sandbox of a prompt (settings `sandbox`, `--sandbox`): Bash commands may write
    only in the working directories (cwd, additionalDirectories, --add-dir), `allow_write` and a
    private /tmp; nothing can read what a `Read(...)` deny rule or `deny_read` names; no network
    unless `allow_network`. The worker turns it into a bubblewrap command line."""

    allow_write: list[str] = Field(default_factory=list)
    """Absolute folders writable besides the working directories (filesystem.allowWrite)."""
    deny_read: list[str] = Field(default_factory=list)
    """Absolute paths unreadable besides those of Read deny rules (filesystem.denyRead)."""
    deny_write: list[str] = Field(default_factory=list)
    """Absolute paths read-only besides those of Edit deny rules (filesystem.denyWrite)."""
    allow_network: bool = False
    """All network (settings `network.allowedDomains: ["*"]`); a domain list is not built."""


class Decision(BaseModel):
    behavior: Behavior
    rule: str | None = None
    """The rule text that decided, if a rule did."""
    reason: str
    """One line for the model and the user: which rule (and its source) or which mode decided."""


# --------------------------------------------------------------------------- tools

# Docs ("Tools available to Claude"): these need no permission. Anything not listed (MCP tools,
# tools added later) needs permission: Safer reading for unknown tools.
READ_ONLY_TOOLS = frozenset(
    {"Read", "Grep", "Glob", "LS", "NotebookRead", "TodoWrite", "Task", "Agent", "BashOutput"}
)
# Tools that take a path the workspace boundary applies to, and the input key of that path.
READ_TOOLS = {"Read": "file_path", "Grep": "path", "Glob": "path", "LS": "path"}
EDIT_TOOLS = {"Edit": "file_path", "MultiEdit": "file_path", "Write": "file_path"}
EDIT_TOOLS["NotebookEdit"] = "notebook_path"
# Docs: `Read(...)` rules apply to every built-in tool that reads files (Read, Grep, Glob, LS);
# `Edit(...)` rules to every built-in tool that edits files (Edit, Write, NotebookEdit).
RULE_FAMILY = {"Read": frozenset(READ_TOOLS), "Edit": frozenset(EDIT_TOOLS)}
AGENT_TOOLS = frozenset({"Task", "Agent"})
# Docs (bypassPermissions / acceptEdits): writes to these directories still prompt, except the
# `.claude` folders Claude itself writes to.
PROTECTED_DIRS = frozenset({".git", ".claude", ".vscode", ".idea"})
PROTECTED_EXEMPT = (".claude/commands", ".claude/agents", ".claude/skills")

_TOOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*(\*)?$")
KNOWN_TOOLS = frozenset(
    {*READ_ONLY_TOOLS, *READ_TOOLS, *EDIT_TOOLS, "Bash", "WebFetch", "WebSearch", "KillShell"}
)


def parse_rule(text: str, source: str = "", root: str | None = None) -> Rule:
    """`Tool` or `Tool(specifier)`; ValueError (one line) for anything else.

    `Tool(*)` is the whole tool (docs: `Bash(*)` is equivalent to `Bash`). `Tool()` is rejected:
    the docs give it no meaning, and a deny rule silently read as "nothing" would be a hole
    (Safer reading: an error the settings loader reports, naming the file).
    """
    raw = text.strip()
    if not raw:
        raise ValueError("empty permission rule")
    tool, spec = raw, None
    if "(" in raw:
        if not raw.endswith(")"):
            raise ValueError(f"permission rule {text!r}: text after ')' or missing ')'")
        tool, spec = raw[: raw.index("(")], raw[raw.index("(") + 1 : -1]
        if spec.strip() == "":
            raise ValueError(f"permission rule {text!r}: empty '()'; write {tool} or {tool}(*)")
    elif ")" in raw:
        raise ValueError(f"permission rule {text!r}: ')' without '('")
    m = _TOOL_NAME.match(tool)
    if not m or (m.group(1) and not tool.startswith("mcp__")):
        raise ValueError(f"permission rule {text!r}: {tool!r} is not a tool name")
    known = {t.lower(): t for t in KNOWN_TOOLS}
    if tool not in KNOWN_TOOLS and tool.lower() in known:
        # Safer reading: `bash(rm:*)` would never match the Bash tool; a silent no-op deny rule
        # is a hole, so it is an error.
        raise ValueError(
            f"permission rule {text!r}: unknown tool {tool!r}, did you mean {known[tool.lower()]!r}?"
        )
    if spec is not None:
        spec = spec.strip()
        if spec == "*":
            spec = None
    if tool.startswith("mcp__") and spec is not None:
        raise ValueError(f"permission rule {text!r}: MCP rules take no '(...)'")
    if tool == "WebFetch" and spec is not None and not spec.startswith("domain:"):
        raise ValueError(f"permission rule {text!r}: WebFetch rules are WebFetch(domain:host)")
    if tool == "Bash" and spec is not None and spec.endswith(":*") and not spec[:-2].strip():
        raise ValueError(f"permission rule {text!r}: empty prefix before ':*'")
    return Rule(text=raw, tool=tool, specifier=spec, source=source, root=root)


# --------------------------------------------------------------------------- shell parsing


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
_SAFE_SINKS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})
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


# --------------------------------------------------------------------------- Bash matching

# Docs: for Bash rules Claude Code strips these process wrappers before matching, so an allow
# rule sees `timeout 30 npm test` as `npm test`. Only these see-through wrappers apply to ALLOW.
_ALLOW_WRAPPERS = frozenset({"timeout", "time", "nice", "nohup", "stdbuf"})
# Safer reading: deny and ask rules see through every program that runs another program, and
# through leading `VAR=value` assignments; allow rules do not (only the documented ones above).
_DENY_WRAPPERS = _ALLOW_WRAPPERS | frozenset(
    {
        "env", "sudo", "doas", "command", "builtin", "exec", "xargs", "nice", "ionice",
        "chrt", "taskset", "setsid", "unbuffer", "watch", "flock", "chroot", "runuser",
        "su", "strace", "ltrace", "nsenter", "unshare", "firejail", "caffeinate", "parallel",
        "systemd-run", "busybox", "script",
    }
)  # fmt: skip
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "fish", "ash", "mksh"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")


def _strip_allow_wrappers(words: list[Word]) -> list[Word] | None:
    """`words` without the documented wrappers in front (`timeout 5 `, `nice -n 5 `, ...);
    None when a wrapper's arguments are not the plain documented forms."""
    i, n = 0, len(words)
    while i < n and words[i].value in _ALLOW_WRAPPERS and not words[i].dynamic:
        name = words[i].value
        i += 1
        while i < n and words[i].value.startswith("-"):
            opt = words[i].value
            i += 1
            takes_arg = (name == "nice" and opt == "-n") or (
                name == "stdbuf" and opt in ("-i", "-o", "-e")
            )
            takes_arg = takes_arg or (name == "timeout" and opt in ("-s", "-k", "--signal"))
            if takes_arg:
                if i >= n:
                    return None
                i += 1
        if name == "timeout":
            if i >= n or not re.fullmatch(r"\d+(\.\d+)?[smhd]?", words[i].value):
                return None
            i += 1
        if i >= n:
            return None
    return words[i:] if i else None


def _deny_views(words: list[Word], work: _Work, depth: int = 0) -> list[list[Word]]:
    """Every command a deny/ask rule should be tried against for this part: the part itself and,
    through assignments, wrappers (every later word may start the real command: over-matching a
    deny is the safer error), `sh -c SCRIPT`, `eval ...` and `find -exec`. The views' text is
    paid for from `work` (wrappers around many words would make it quadratic)."""
    work.spend(_chars(words))
    views: list[list[Word]] = [words]
    if depth > _MAX_DEPTH:
        return views
    seen: set[int] = set()

    def visit(i: int) -> None:
        if i in seen:
            return
        seen.add(i)
        while i < len(words) and _ASSIGNMENT.match(words[i].raw):
            i += 1
        if i >= len(words):
            return
        ws = words[i:]
        work.spend(_chars(ws))
        if i:
            views.append(ws)
        head = posixpath.basename(ws[0].value)
        if head != ws[0].value:
            views.append([Word(head, head, ws[0].dynamic), *ws[1:]])
        if head in _DENY_WRAPPERS:
            for k in range(i + 1, len(words)):
                visit(k)
        scripts: list[str] = []
        if head == "eval":
            scripts.append(" ".join(w.value for w in ws[1:]))
        if head in _SHELLS:
            for k, w in enumerate(ws[1:-1], start=1):
                if re.fullmatch(r"-[A-Za-z]*c[A-Za-z]*", w.value):
                    scripts.append(ws[k + 1].value)
        for script in scripts:
            try:
                for part in split_command(script, depth + 1, work):
                    views.extend(_deny_views(part.words, work, depth + 1))
            except TooComplex:
                raise
            except ShellParseError:
                views.append([Word("<unparseable>", "<unparseable>", True)])
        if head == "find":
            for k, w in enumerate(ws):
                if w.value in ("-exec", "-execdir", "-ok", "-okdir") and k + 1 < len(ws):
                    end = next(
                        (j for j in range(k + 1, len(ws)) if ws[j].value in (";", "+")), len(ws)
                    )
                    views.extend(_deny_views(ws[k + 1 : end], work, depth + 1))

    visit(0)
    return views


def _chars(words: list[Word]) -> int:
    return sum(len(w.raw) + 1 for w in words)


@dataclass(frozen=True)
class _BashPattern:
    """A Bash rule's specifier, matched in linear time (a regex of several `.*` backtracks
    without bound on a long command that does not match).

    Docs: `cmd:*` is a prefix that ends at a word boundary (`npm:*` matches `npm` and
    `npm test`, not `npmx`); `*` matches any run of characters, spaces included (`ls *` matches
    `ls -la` but not `lsof`; `ls*` matches both); a single trailing ` *` may also match nothing
    (`ls *` matches `ls`)."""

    pieces: tuple[str, ...]
    """The literal text between the `*`s (one piece: the whole text, literally)."""
    word_prefix: str | None = None
    """Set for `prefix:*` and `prefix *` (or `prefix` alone)."""
    prefix: str | None = None
    """Set for a prefix that ends in punctuation (`curl http://site.com/:*`)."""

    def fullmatch(self, text: str) -> bool:
        if self.word_prefix is not None:
            return text == self.word_prefix or text.startswith(self.word_prefix + " ")
        if self.prefix is not None:
            return text.startswith(self.prefix)
        if len(self.pieces) == 1:
            return text == self.pieces[0]
        first, *middle, last = self.pieces
        if len(text) < len(first) + len(last):
            return False
        if not (text.startswith(first) and text.endswith(last)):
            return False
        # The middle pieces in order, each as early as it can be: if any placement fits before
        # the last piece, the leftmost one does.
        at, stop = len(first), len(text) - len(last)
        for piece in middle:
            found = text.find(piece, at, stop)
            if found < 0:
                return False
            at = found + len(piece)
        return True


@functools.lru_cache(maxsize=128)
def _bash_pattern(spec: str) -> _BashPattern:
    spec = re.sub(r"\s+", " ", spec.strip())
    if spec.endswith(":*"):
        # The boundary applies after a word character (`npm:*` is not `npmx`); a prefix that
        # ends in punctuation is plain (docs: `curl http://site.com/:*` matches
        # `curl http://site.com/page`).
        prefix = spec[:-2]
        if re.search(r"\w$", prefix):
            return _BashPattern((), word_prefix=prefix)
        return _BashPattern((), prefix=prefix)
    pieces = spec.split("*")
    if len(pieces) == 2 and pieces[1] == "" and pieces[0].endswith(" "):
        return _BashPattern((), word_prefix=pieces[0][:-1])
    return _BashPattern(tuple(pieces))


def _view_texts(views: Iterable[list[Word]], for_allow: bool = False) -> list[str]:
    """The texts rules are matched against: the words as written and after quote removal
    (`"rm" x` is `rm x`). For an allow rule the unquoted form counts only when no word holds a
    space (`git "diff && rm"` is one word, and must not read as the text `git diff && rm`)."""
    texts: list[str] = []
    for words in views:
        if not words:
            continue
        texts.append(" ".join(w.raw for w in words))
        if not for_allow or not any(_SPACE.search(w.value) for w in words):
            texts.append(" ".join(w.value for w in words))
    return texts


_SPACE = re.compile(r"\s")


def _bash_rule_matches(rule: Rule, texts: list[str]) -> bool:
    """`texts` from _view_texts."""
    if rule.specifier is None:
        return True
    pattern = _bash_pattern(rule.specifier)
    return any(pattern.fullmatch(t) for t in texts)


# --------------------------------------------------------------------------- paths


def normalize_path(path: str, ctx: PermissionContext, base: str | None = None) -> str:
    """Absolute, lexically normalised: `~` from ctx.home, relative from `base` (default cwd)."""
    if path == "~" or path.startswith("~/"):
        path = ctx.home + path[1:]
    if not path.startswith("/"):
        path = posixpath.join(base or ctx.cwd, path)
    path = posixpath.normpath(path)
    return "/" + path.lstrip("/")


def _anchor(spec: str, rule: Rule, ctx: PermissionContext) -> tuple[str, bool]:
    """The absolute pattern for a gitignore-style spec, and whether it may match at any depth.

    Docs: `//path` absolute, `~/path` from home, `/path` relative to the settings file's root,
    `path` or `./path` relative to the current directory. As in gitignore, a pattern with no
    slash (`*.env`, `.env`) matches at any depth below its anchor.
    """
    if spec.startswith("//"):
        return "/" + spec.lstrip("/"), False
    if spec == "~" or spec.startswith("~/"):
        return ctx.home.rstrip("/") + spec[1:], False
    if spec.startswith("/"):
        return (rule.root or ctx.cwd).rstrip("/") + spec, False
    # `./name` is anchored at cwd; a bare `name` with no slash matches at any depth.
    anywhere = "/" not in spec.rstrip("/")
    rest = spec[2:] if spec.startswith("./") else spec
    return ctx.cwd.rstrip("/") + "/" + rest, anywhere


def _glob_regex(pattern: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("/**/", i):
            out.append("(?:/.*)?/")
            i += 4
        elif pattern.startswith("/**", i) and i + 3 == len(pattern):
            out.append("(?:/.*)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


def _path_rule_matches(rule: Rule, path: str, ctx: PermissionContext) -> bool:
    """`path` is absolute and normalised. A pattern that matches a directory also matches
    everything inside it (gitignore: an ignored directory's contents are ignored)."""
    if rule.specifier is None:
        return True
    absolute, anywhere = _anchor(rule.specifier, rule, ctx)
    # A trailing `/` (gitignore: directories only) cannot be checked without the filesystem;
    # it is dropped, which matches a file of that name too (the wider, safer-for-deny reading).
    absolute = "/" + posixpath.normpath(absolute).lstrip("/")
    if anywhere:
        head, _, tail = absolute.rpartition("/")
        regex = re.escape(head) + "(?:/.*)?/" + _glob_regex(tail)
    else:
        regex = _glob_regex(absolute)
    return re.fullmatch(regex + "(?:/.*)?", path, re.DOTALL) is not None


def read_denied(path: str, ctx: PermissionContext, family: str = "Read") -> bool:
    """Whether a `Read(...)` deny rule covers `path` (absolute, or relative to cwd): what the
    search tools leave out of their results and the sandbox makes unreadable. With family
    "Edit": whether an `Edit(...)` deny rule does (the sandbox makes it read-only)."""
    path = normalize_path(path, ctx)
    return any(_path_rule_matches(r, path, ctx) for r in _deny_family(family, ctx))


def read_deny_roots(ctx: PermissionContext, family: str = "Read") -> list[tuple[str, bool]]:
    """Where the `Read(...)` (or `Edit(...)`) deny rules can match, one entry per rule: an
    absolute path and whether it is exact (the rule names that path, or everything under it)
    or a folder to search for matches (the rule has wildcards, or matches at any depth). A rule
    on the whole tool (`Read`) gives ("/", False)."""
    roots: list[tuple[str, bool]] = []
    for rule in _deny_family(family, ctx):
        if rule.specifier is None:
            roots.append(("/", False))
            continue
        absolute, anywhere = _anchor(rule.specifier, rule, ctx)
        absolute = "/" + posixpath.normpath(absolute).lstrip("/")
        for suffix in ("/**", "/*"):  # a folder's contents: cover the folder
            if absolute.endswith(suffix) and not _wild(absolute[: -len(suffix)]):
                absolute = absolute[: -len(suffix)]
                break
        if anywhere or _wild(absolute):
            fixed = []
            for piece in absolute.split("/")[:-1] if anywhere else absolute.split("/"):
                if _wild(piece):
                    break
                fixed.append(piece)
            roots.append(("/".join(fixed) or "/", False))
        else:
            roots.append((absolute, True))
    return roots


def _deny_family(family: str, ctx: PermissionContext) -> list[Rule]:
    """The deny rules on reading ("Read": `Read(...)` rules) or on changing files ("Edit":
    the rules of every edit tool, `Edit(...)`, `Write(...)`, `NotebookEdit(...)`)."""
    if family != "Edit":
        return _rules_for(family, ctx.rules.deny)
    found: list[Rule] = []
    for tool in EDIT_TOOLS:
        found += [r for r in _rules_for(tool, ctx.rules.deny) if r not in found]
    return found


def _wild(text: str) -> bool:
    return any(ch in text for ch in "*?[")


def _inside(path: str, directory: str) -> bool:
    directory = directory.rstrip("/") or "/"
    return path == directory or path.startswith(directory if directory == "/" else directory + "/")


def _working_dirs(ctx: PermissionContext) -> list[str]:
    return [normalize_path(d, ctx) for d in [ctx.cwd, *ctx.additional_directories]]


def _in_workspace(path: str, ctx: PermissionContext) -> bool:
    return any(_inside(path, d) for d in _working_dirs(ctx))


def _protected(path: str, ctx: PermissionContext) -> bool:
    for d in _working_dirs(ctx):
        if _inside(path, d):
            rel = path[len(d.rstrip("/")) + 1 :]
            if any(rel == e or rel.startswith(e + "/") for e in PROTECTED_EXEMPT):
                return False
            return any(p in PROTECTED_DIRS for p in rel.split("/")[:-1]) or (rel in PROTECTED_DIRS)
    return any(p in PROTECTED_DIRS for p in path.split("/")[:-1])


# --------------------------------------------------------------------------- per-tool evaluation


@dataclass
class _Eval:
    """What the rules say about one call, before the mode is applied."""

    deny: tuple[Rule, str] | None = None
    ask: tuple[Rule, str] | None = None
    unsure: str | None = None
    """Why a deny/ask rule cannot be ruled out (an unparseable command, a dynamic program)."""
    allow: list[Rule] | None = None
    """The allow rules that cover every part, or None."""
    not_allowed: str | None = None
    """The first part no allow rule covers (for the reason)."""
    mode_allows: str | None = None
    """Set when the mode alone (acceptEdits, the sandbox) would allow it: the reason."""
    outside: str | None = None
    """A path outside the working directories (read-only tools ask for it)."""


def _rules_for(tool_name: str, rules: list[Rule]) -> list[Rule]:
    out: list[Rule] = []
    for r in rules:
        if r.tool == tool_name:
            out.append(r)
        elif r.tool in RULE_FAMILY and tool_name in RULE_FAMILY[r.tool]:
            out.append(r)
        elif r.tool in AGENT_TOOLS and tool_name in AGENT_TOOLS:
            out.append(r)
        elif r.tool.startswith("mcp__") and tool_name.startswith("mcp__"):
            server = r.tool[:-3] if r.tool.endswith("__*") else r.tool
            if tool_name == server or tool_name.startswith(server + "__"):
                out.append(r)
    return out


def _first(rules: list[Rule], pred: Any) -> Rule | None:
    return next((r for r in rules if pred(r)), None)


def _eval_paths(tool_name: str, paths: list[str], ctx: PermissionContext, ev: _Eval) -> None:
    """Deny/ask/allow for file tools: every path must be allowed; any path denied denies."""
    rs = ctx.rules
    allow_rules: list[Rule] = []
    for p in paths:
        for lst, slot in ((rs.deny, "deny"), (rs.ask, "ask")):
            if getattr(ev, slot) is None:
                r = _first(_rules_for(tool_name, lst), lambda r, p=p: _path_rule_matches(r, p, ctx))
                if r is not None:
                    setattr(ev, slot, (r, p))
        r = _first(_rules_for(tool_name, rs.allow), lambda r, p=p: _path_rule_matches(r, p, ctx))
        if r is None:
            ev.not_allowed = ev.not_allowed or p
        else:
            allow_rules.append(r)
        if not _in_workspace(p, ctx):
            ev.outside = ev.outside or p
    if ev.not_allowed is None:
        ev.allow = allow_rules


def _read_paths(tool_name: str, tool_input: dict[str, Any], ctx: PermissionContext) -> list[str]:
    key = READ_TOOLS[tool_name]
    raw = tool_input.get(key) or tool_input.get("path") or ctx.cwd
    base = normalize_path(str(raw), ctx)
    paths = [base]
    if tool_name == "Glob":
        # The search root CONTAINING a denied path is not denied here (the tools exclude denied
        # paths from their results); but a pattern that climbs out (`../x/*`, `/etc/*`) names
        # another root, and that root is checked.
        pattern = str(tool_input.get("pattern") or "")
        fixed = []
        for piece in pattern.split("/"):
            if any(ch in piece for ch in "*?[{"):
                break
            fixed.append(piece)
        if fixed and fixed != [""] * len(fixed):
            root = "/".join(fixed) or "/"
            paths.append(normalize_path(root, ctx, base))
    return paths


_ACCEPT_EDITS_BASH = frozenset({"mkdir", "touch", "mv", "cp"})
# Docs (permission modes): acceptEdits also auto-approves the common filesystem commands
# mkdir, touch, mv and cp inside the working directories. Safer reading: only these four,
# only with every argument a literal path inside the working directories, no wrappers.


def _accept_edits_part(part: Part, ctx: PermissionContext) -> bool:
    if not part.words or part.words[0].value not in _ACCEPT_EDITS_BASH:
        return False
    for w in part.words:
        if w.dynamic or w.raw.startswith("$"):
            return False
    for w in part.words[1:]:
        if w.value.startswith("-"):
            # Only bare flags: `--target-directory=/etc` or `-t/etc` carry a path of their own.
            if re.fullmatch(r"-[A-Za-z]+|--[a-z][a-z-]*", w.value):
                continue
            return False
        if w.value.startswith("~") and not re.match(r"~(/|$)", w.value):
            return False
        p = normalize_path(w.value, ctx)
        if not _in_workspace(p, ctx) or _protected(p, ctx):
            return False
    return True


def _eval_bash(command: str, ctx: PermissionContext, ev: _Eval) -> None:
    rs = ctx.rules
    deny = _rules_for("Bash", rs.deny)
    ask = _rules_for("Bash", rs.ask)
    allow = _rules_for("Bash", rs.allow)
    scoped_guard = any(r.specifier is not None for r in deny + ask)
    too_long = len(command) > MAX_CHECKED_CHARS
    shown = f"{command[:60]}… ({len(command):,} characters)" if too_long else command
    whole = _first(deny, lambda r: r.specifier is None)
    if whole:
        ev.deny = (whole, shown)
    whole = _first(ask, lambda r: r.specifier is None)
    if whole:
        ev.ask = (whole, shown)
    if too_long:
        _eval_long_bash(len(command), shown, ctx, ev, scoped_guard)
        return
    try:
        work = _Work(command)
        parts = split_command(command, work=work)
        # What deny and ask rules see of each part (only needed when there are such rules).
        deny_views = [_deny_views(p.words, work) if p.words and scoped_guard else [] for p in parts]
    except ShellParseError as e:
        # Unparseable: no scoped rule can be checked. Only a whole-tool `Bash` allow rule can
        # allow it, and only when no scoped deny/ask rule exists that it might have matched.
        w = _first(allow, lambda r: r.specifier is None)
        if w is not None and not scoped_guard:
            ev.allow = [w]
        else:
            ev.unsure = f"the command could not be parsed ({e})"
            ev.not_allowed = command
        return
    if not parts:
        w = _first(allow, lambda r: r.specifier is None)
        if w is not None:
            ev.allow = [w]
        else:
            ev.not_allowed = command
        return
    allow_rules: list[Rule] = []
    accept_all = ctx.mode == PermissionMode.ACCEPT_EDITS
    # A whole-tool `Bash` allow rule allows every command, its redirections included (deny and
    # ask rules on Write/Edit paths still apply); a scoped rule (`Bash(echo:*)`) does not allow
    # writing a file: that takes an Edit/Write rule, or acceptEdits inside the workspace.
    whole_allow = _first(allow, lambda r: r.specifier is None)
    for part, views in zip(parts, deny_views, strict=True):
        text = part.text() or command
        texts = _view_texts(views)
        for lst, slot in ((deny, "deny"), (ask, "ask")):
            if getattr(ev, slot) is None:
                r = _first(lst, lambda r, t=texts: r.specifier and _bash_rule_matches(r, t))
                if r is not None:
                    setattr(ev, slot, (r, text))
        # Redirections: `> file` writes (Edit rules), `< file` reads (Read rules).
        for target in part.writes:
            if target.value in _SAFE_SINKS or re.fullmatch(r"&?\d+", target.value):
                continue
            if target.dynamic:
                if _rules_for("Write", rs.deny) or _rules_for("Write", rs.ask):
                    ev.unsure = ev.unsure or f"`{text}` writes to a computed path {target.raw}"
                if whole_allow is not None:
                    allow_rules.append(whole_allow)
                    continue
                ev.not_allowed = ev.not_allowed or f"{text} > {target.raw}"
                accept_all = False
                continue
            p = normalize_path(target.value, ctx)
            for lst, slot in ((rs.deny, "deny"), (rs.ask, "ask")):
                if getattr(ev, slot) is None:
                    r = _first(
                        _rules_for("Write", lst), lambda r, p=p: _path_rule_matches(r, p, ctx)
                    )
                    if r is not None:
                        setattr(ev, slot, (r, f"{text} > {target.value}"))
            r = _first(_rules_for("Write", rs.allow), lambda r, p=p: _path_rule_matches(r, p, ctx))
            if r is not None:
                allow_rules.append(r)
            elif whole_allow is not None:
                allow_rules.append(whole_allow)
            elif not (ctx.mode == PermissionMode.ACCEPT_EDITS and _in_workspace(p, ctx)) or (
                _protected(p, ctx)
            ):
                ev.not_allowed = ev.not_allowed or f"{text} > {target.value}"
                accept_all = False
        for target in part.reads:
            if target.dynamic and (_rules_for("Read", rs.deny) or _rules_for("Read", rs.ask)):
                ev.unsure = ev.unsure or f"`{text}` reads a computed path {target.raw}"
            p = normalize_path(target.value, ctx) if not target.dynamic else ""
            for lst, slot in ((rs.deny, "deny"), (rs.ask, "ask")):
                if p and getattr(ev, slot) is None:
                    r = _first(
                        _rules_for("Read", lst), lambda r, p=p: _path_rule_matches(r, p, ctx)
                    )
                    if r is not None:
                        setattr(ev, slot, (r, f"{text} < {target.value}"))
        if not part.words or part.deny_only:
            continue
        program_dynamic = any(
            v and v[0].dynamic and not _ASSIGNMENT.match(v[0].value) for v in views
        )
        if program_dynamic and scoped_guard:
            ev.unsure = ev.unsure or f"the program of `{text}` is computed at run time"
        # Allow: the part as written, or without the documented wrappers (timeout, nice, ...).
        allow_views = [part.words]
        stripped = _strip_allow_wrappers(part.words)
        if stripped:
            allow_views.append(stripped)
        if part.words[0].dynamic:  # `$CMD args`: only a whole-tool `Bash` rule allows it
            r = _first(allow, lambda r: r.specifier is None)
        else:
            texts = _view_texts(allow_views, for_allow=True)
            r = _first(allow, lambda r, t=texts: _bash_rule_matches(r, t))
        if r is not None:
            allow_rules.append(r)
        elif accept_all and _accept_edits_part(part, ctx):
            pass
        else:
            ev.not_allowed = ev.not_allowed or text
            accept_all = False
    if ev.not_allowed is None:
        ev.allow = allow_rules
        if not allow_rules and accept_all:
            ev.allow = None
            ev.mode_allows = "acceptEdits mode allows mkdir, touch, mv and cp inside the workspace"
    elif ctx.sandboxed and ctx.auto_allow_bash_if_sandboxed:
        ev.mode_allows = "the sandbox is on and autoAllowBashIfSandboxed is set"
    if ev.allow is not None and not ev.allow and ev.mode_allows is None:
        ev.allow = None  # an empty command: nothing allowed it
        ev.not_allowed = command


def _eval_long_bash(
    length: int, shown: str, ctx: PermissionContext, ev: _Eval, scoped_guard: bool
) -> None:
    """A command longer than MAX_CHECKED_CHARS is not parsed, so no scoped rule can be tried on
    it. When a scoped Bash deny/ask rule (or a Read/Edit rule its redirections might meet) exists,
    it asks; otherwise only a whole-tool `Bash` allow rule, or the mode, allows it."""
    rs = ctx.rules
    if (
        scoped_guard
        or _rules_for("Write", rs.deny + rs.ask)
        or _rules_for("Read", rs.deny + rs.ask)
    ):
        ev.unsure = (
            f"the command is too long to check against the permission rules ({length:,} "
            f"characters; the limit is {MAX_CHECKED_CHARS:,})"
        )
        ev.not_allowed = shown
        return
    w = _first(_rules_for("Bash", rs.allow), lambda r: r.specifier is None)
    if w is not None:
        ev.allow = [w]
        return
    ev.not_allowed = shown
    if ctx.sandboxed and ctx.auto_allow_bash_if_sandboxed:
        ev.mode_allows = "the sandbox is on and autoAllowBashIfSandboxed is set"


def _host(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower().rstrip(".")
    except ValueError:
        return ""


def _domain_matches(rule: Rule, host: str, widen: bool) -> bool:
    if rule.specifier is None:
        return True
    domain = rule.specifier.removeprefix("domain:").strip().lower().rstrip(".")
    if domain.startswith("*."):
        return host.endswith(domain[1:])
    # Safer reading: deny/ask rules also cover subdomains; allow rules only the exact host.
    return host == domain or (widen and host.endswith("." + domain))


def _eval_generic(
    tool_name: str, tool_input: dict[str, Any], ctx: PermissionContext, ev: _Eval
) -> None:
    rs = ctx.rules
    if tool_name == "WebFetch":
        host = _host(str(tool_input.get("url", "")))

        def match(r: Rule, widen: bool) -> bool:
            return _domain_matches(r, host, widen) if host else r.specifier is None

    elif tool_name in AGENT_TOOLS:
        agent = str(tool_input.get("subagent_type", ""))

        def match(r: Rule, widen: bool) -> bool:
            return r.specifier is None or r.specifier == agent

    else:

        def match(r: Rule, widen: bool) -> bool:
            # Safer reading: a specifier this module does not understand makes a deny/ask rule
            # cover the whole tool, and never lets an allow rule allow anything.
            return r.specifier is None or widen

    r = _first(_rules_for(tool_name, rs.deny), lambda r: match(r, True))
    if r is not None:
        ev.deny = (r, "")
    r = _first(_rules_for(tool_name, rs.ask), lambda r: match(r, True))
    if r is not None:
        ev.ask = (r, "")
    r = _first(_rules_for(tool_name, rs.allow), lambda r: match(r, False))
    if r is not None:
        ev.allow = [r]


# --------------------------------------------------------------------------- decision


def _by(rule: Rule) -> str:
    return f"the rule {rule.text}" + (f" ({rule.source})" if rule.source else "")


def _detail(tool_name: str, what: str) -> str:
    if not what:
        return ""
    return f" for `{what}`" if tool_name == "Bash" else f" for {what}"


def check(tool_name: str, tool_input: dict[str, Any], ctx: PermissionContext) -> Decision:
    """Allow, ask or deny one tool call (see the module docstring for the order)."""
    ev = _Eval()
    if tool_name == "Bash":
        _eval_bash(str(tool_input.get("command", "")), ctx, ev)
    elif tool_name in READ_TOOLS:
        _eval_paths(tool_name, _read_paths(tool_name, tool_input, ctx), ctx, ev)
    elif tool_name in EDIT_TOOLS:
        raw = tool_input.get(EDIT_TOOLS[tool_name]) or tool_input.get("file_path") or ""
        path = normalize_path(str(raw), ctx) if raw else ""
        if path:
            _eval_paths(tool_name, [path], ctx, ev)
            if (
                ctx.mode == PermissionMode.ACCEPT_EDITS
                and ev.outside is None
                and not _protected(path, ctx)
            ):
                ev.mode_allows = "acceptEdits mode allows edits inside the working directories"
        else:
            _eval_generic(tool_name, tool_input, ctx, ev)
    else:
        _eval_generic(tool_name, tool_input, ctx, ev)

    mode = ctx.mode
    if ev.deny is not None:
        rule, what = ev.deny
        return Decision(
            behavior=Behavior.DENY,
            rule=rule.text,
            reason=f"Permission to use {tool_name} denied by {_by(rule)}"
            + _detail(tool_name, what),
        )
    read_only = tool_name in READ_ONLY_TOOLS
    if mode == PermissionMode.PLAN and not read_only:
        # Safer reading: plan mode runs only read-only tools, even when an allow rule matches.
        return Decision(
            behavior=Behavior.DENY,
            reason=f"Plan mode is on: {tool_name} is not allowed; only read-only tools "
            "(Read, Grep, Glob) can run until the plan is approved",
        )
    if ev.ask is not None:
        rule, what = ev.ask
        # Docs: an ask rule prompts whatever the mode; Safer reading: bypassPermissions too.
        return _ask(
            ctx,
            f"Permission to use {tool_name} requires approval by {_by(rule)}"
            + _detail(tool_name, what),
            rule.text,
        )
    if ev.unsure is not None:
        return _ask(ctx, f"Permission to use {tool_name} requires approval: {ev.unsure}")
    if ev.allow:
        texts = list(dict.fromkeys(r.text for r in ev.allow))
        first = next(r for r in ev.allow if r.text == texts[0])
        by = _by(first) if len(texts) == 1 else "the rules " + ", ".join(texts)
        return Decision(
            behavior=Behavior.ALLOW,
            rule=", ".join(texts),
            reason=f"Permission to use {tool_name} allowed by {by}",
        )
    if mode == PermissionMode.BYPASS:
        if tool_name in EDIT_TOOLS and ev.not_allowed and _protected(ev.not_allowed, ctx):
            return _ask(
                ctx,
                f"Permission to use {tool_name} requires approval: {ev.not_allowed} is in a "
                "protected directory (.git, .claude, .vscode, .idea), even in bypassPermissions mode",
            )
        return Decision(
            behavior=Behavior.ALLOW, reason=f"{tool_name} allowed in bypassPermissions mode"
        )
    if ev.mode_allows is not None:
        return Decision(behavior=Behavior.ALLOW, reason=f"{tool_name} allowed: {ev.mode_allows}")
    if read_only:
        if ev.outside is not None:
            return _ask(
                ctx,
                f"Permission to use {tool_name} requires approval: {ev.outside} is outside the "
                "working directories",
            )
        return Decision(
            behavior=Behavior.ALLOW,
            reason=f"{tool_name} is read-only: allowed without approval",
        )
    what = ev.not_allowed or ""
    if tool_name == "Bash" and what:
        msg = f"Permission to use Bash requires approval: no allow rule matches `{what}`"
    elif ev.outside is not None:
        msg = (
            f"Permission to use {tool_name} requires approval: {ev.outside} is outside the "
            "working directories"
        )
    elif (
        tool_name in EDIT_TOOLS
        and what
        and _protected(what, ctx)
        and (mode == PermissionMode.ACCEPT_EDITS)
    ):
        msg = (
            f"Permission to use {tool_name} requires approval: {what} is in a protected "
            "directory (.git, .claude, .vscode, .idea)"
        )
    else:
        msg = f"Permission to use {tool_name} requires approval" + _detail(tool_name, what)
    return _ask(ctx, msg)


def _ask(ctx: PermissionContext, reason: str, rule: str | None = None) -> Decision:
    if ctx.mode == PermissionMode.DONT_ASK:
        return Decision(
            behavior=Behavior.DENY,
            rule=rule,
            reason=reason.replace("requires approval", "denied in dontAsk mode (it would ask)", 1),
        )
    return Decision(behavior=Behavior.ASK, rule=rule, reason=reason)


class SessionGrant(BaseModel):
    """What an "always for this session" answer allows from then on: a rule (this file for the
    edit tools, `Edit(//abs/path)`), or this exact call (same tool, same input) when no narrow
    rule would allow it again (a Bash command with a redirection, say)."""

    rule: str | None = None
    tool_name: str = ""
    tool_input: dict[str, Any] | None = None

    def label(self) -> str:
        if self.rule is not None:
            return self.rule
        shown = self.tool_input or {}
        detail = shown.get("command") if self.tool_name == "Bash" else None
        return f"{self.tool_name}: {detail if isinstance(detail, str) else shown} (this exact call)"


def grant_for(tool_name: str, tool_input: dict[str, Any], ctx: PermissionContext) -> SessionGrant:
    """The grant of an "always" answer to this call: narrow on purpose (Safer reading: one
    answer never allows a whole tool or command family)."""
    rule = None
    if tool_name in EDIT_TOOLS:
        raw = tool_input.get(EDIT_TOOLS[tool_name]) or tool_input.get("file_path")
        if isinstance(raw, str) and raw and not set(raw) & set("()*?[]"):
            rule = f"Edit(/{normalize_path(raw, ctx)})"
    elif tool_name == "Bash":
        command = str(tool_input.get("command", "")).strip()
        if command and not set(command) & set("()*"):
            rule = f"Bash({command})"
    if rule is not None and granted(tool_name, tool_input, ctx, [SessionGrant(rule=rule)]):
        return SessionGrant(rule=rule)
    return SessionGrant(tool_name=tool_name, tool_input=tool_input)


def granted(
    tool_name: str,
    tool_input: dict[str, Any],
    ctx: PermissionContext,
    grants: Iterable[SessionGrant],
) -> Decision | None:
    """Allow, when one of the session's grants covers this call; None otherwise. Consulted
    only for a call that asks: a deny rule is never overridden."""
    grants = list(grants)
    for grant in grants:
        if grant.rule is None and grant.tool_name == tool_name and grant.tool_input == tool_input:
            return Decision(
                behavior=Behavior.ALLOW, reason="allowed for this session (your answer)"
            )
    rules = [parse_rule(g.rule, source="session") for g in grants if g.rule is not None]
    if not rules:
        return None
    widened = ctx.rules.model_copy(update={"allow": [*ctx.rules.allow, *rules]})
    decision = check(tool_name, tool_input, ctx.model_copy(update={"rules": widened}))
    return decision if decision.behavior == Behavior.ALLOW else None


def headless(decision: Decision) -> Decision:
    """In a run nobody can answer, an ask is a deny; the reason says why."""
    if decision.behavior != Behavior.ASK:
        return decision
    return Decision(
        behavior=Behavior.DENY,
        rule=decision.rule,
        reason=f"{decision.reason}; denied because no one can approve it in this "
        "non-interactive run",
    )
