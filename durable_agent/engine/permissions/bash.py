"""Bash commands against `Bash(...)` rules (and the Read/Write rules their redirections meet).

Deny and ask rules are tried against every command a part of the command line may run: through
`VAR=value` assignments, wrappers, `sh -c`, `eval` and `find -exec` (`_deny_views`). Allow rules
see the part as written, or without the documented wrappers (`timeout`, `nice`, ...). A rule's
specifier is matched in linear time (`_BashPattern`). acceptEdits' filesystem commands (mkdir,
touch, mv, cp inside the working directories) are recognised here (`_accept_edits_part`).

Checking a Bash command takes time linear in its length: one longer than MAX_CHECKED_CHARS is not
parsed (`_eval_long_bash`), and one whose analysis would cost more than a fixed multiple of its
length (shell.py's `_Work`) counts as unparseable.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass

from durable_agent.engine.bash_safety import MAX_CHECKED_CHARS
from durable_agent.engine.permissions.paths import (
    _in_workspace,
    _path_rule_matches,
    _protected,
    normalize_path,
)
from durable_agent.engine.permissions.rules import (
    PermissionContext,
    PermissionMode,
    Rule,
    _Eval,
    _first,
    _rules_for,
)
from durable_agent.engine.permissions.shell import (
    _MAX_DEPTH,
    Part,
    ShellParseError,
    TooComplex,
    Word,
    _Work,
    is_assignment,
    split_command,
)

_SAFE_SINKS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})


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
        "systemd-run", "busybox", "script", "coproc", "setarch", "linux32", "linux64",
        "i386", "x86_64", "prlimit", "setpriv", "sg", "fakeroot", "eatmydata", "pkexec",
        "gosu", "su-exec", "chpst", "numactl", "cgexec", "cpulimit", "faketime", "proot",
        "torsocks", "proxychains", "proxychains4", "xvfb-run", "dbus-launch",
        "systemd-inhibit", "valgrind", "catchsegv",
    }
)  # fmt: skip
_SHELLS = frozenset(
    {"sh", "bash", "zsh", "dash", "ksh", "fish", "ash", "mksh", "rbash", "yash", "posh",
     "csh", "tcsh", "ksh93", "lksh", "oksh", "loksh"}
)  # fmt: skip
_SOURCE = frozenset({".", "source"})
_DASH_C = frozenset({"script", "su", "runuser", "sg", "flock"})
"""Wrappers whose `-c COMMAND` may be attached to other options (`script -qc'rm x'`)."""
_COMPUTED = "<a script read at run time>"
_LATER = re.compile(r"(BASH_ENV|PROMPT_COMMAND)\+?=|PS[0124]\+?=.*(\$\(|`)", re.DOTALL)
"""Assignments whose value bash runs later: the file a non-interactive bash sources first, or a
prompt holding a substitution (`PS4='$(rm x)'; set -x`). Not `ENV` (interactive shells only)."""
_ARITHMETIC_NAMES = frozenset(
    {"test", "[", "let", "printf", "declare", "typeset", "local", "export", "readonly",
     "read", "unset", "mapfile", "readarray"}
)  # fmt: skip
"""Builtins that evaluate a `name[subscript]` as arithmetic, which runs a `$(…)` in it."""


def _subscripted(value: str) -> bool:
    """A subscript holding a substitution, which arithmetic evaluation would run."""
    return "[" in value and any(m in value for m in ("$(", "`", "$["))


def _runs_later(assignment: str) -> bool:
    """An assignment whose value bash runs later: a prompt or startup variable, or a
    `name[…]` with a substitution that a later arithmetic use (`$((x))`) evaluates."""
    return _LATER.match(assignment) is not None or _subscripted(assignment.partition("=")[2])


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
    if any("@P}" in w.raw for w in words):  # `${x@P}`: x is expanded as a prompt, runs `$(…)`
        views.append([Word(_COMPUTED, _COMPUTED, True)])
    if depth > _MAX_DEPTH:
        return views
    seen: set[int] = set()

    def visit(i: int) -> None:
        if i in seen:
            return
        seen.add(i)
        while i < len(words) and is_assignment(words[i]):
            if _runs_later(words[i].value):
                views.append([Word(_COMPUTED, _COMPUTED, True)])
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
            args = ws[2:] if len(ws) > 1 and ws[1].value == "--" else ws[1:]
            scripts.append(" ".join(w.value for w in args))
        if head in _SHELLS:
            # Options come first: the first operand is the script of `-c`, else a script file.
            dash_c, first = False, None
            for w in ws[1:]:
                if not _option(w.value):
                    first = w
                    break
                dash_c = dash_c or re.fullmatch(r"-[A-Za-z]*c[A-Za-z]*", w.value) is not None
            if dash_c and first is not None:
                scripts.append(first.value)
            elif not dash_c and (first is None or first.dynamic):
                # no script file (or a computed one, `bash <(…)`): it runs what its standard
                # input or that file holds, which is not on this command line
                views.append([Word(_COMPUTED, _COMPUTED, True)])
        if head in ("trap", "alias"):
            plain = [w for w in ws[1:] if not _option(w.value)]
            if head == "trap" and len(plain) >= 2 and plain[0].value != "-":
                scripts.append(plain[0].value)  # run when the signal comes
            if head == "alias":
                scripts.extend(w.value.partition("=")[2] for w in plain if "=" in w.value)
        if head in ("mapfile", "readarray"):
            for k, w in enumerate(ws[1:], start=1):
                if w.value == "-C" and k + 1 < len(ws):
                    scripts.append(ws[k + 1].value)
                elif w.value.startswith("-C") and len(w.value) > 2:
                    scripts.append(w.value[2:])
        if (head == "hash" and any(w.value.startswith("-p") for w in ws[1:])) or (
            head in _ARITHMETIC_NAMES and any(_subscripted(w.value) for w in ws[1:])
        ):
            views.append([Word(_COMPUTED, _COMPUTED, True)])
        if head in _SOURCE and (len(ws) < 2 or ws[1].dynamic):
            views.append([Word(_COMPUTED, _COMPUTED, True)])
        if head == "env":
            for k, w in enumerate(ws[1:], start=1):
                if w.value in ("-S", "--split-string") and k + 1 < len(ws):
                    scripts.append(ws[k + 1].value)
                elif w.value.startswith("--split-string="):
                    scripts.append(w.value.partition("=")[2])
                elif re.match(r"-[A-Za-z]*S", w.value) and not w.value.startswith("--"):
                    scripts.append(w.value[w.value.index("S") + 1 :])
        if head in _DASH_C:
            for w in ws[1:]:
                attached = re.fullmatch(r"-[A-Za-z]*c(.+)", w.value, re.DOTALL)
                if attached:
                    scripts.append(attached.group(1))
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


def _option(value: str) -> bool:
    """An option word of a shell's command line (`-e`, `+x`, `--`, `-o pipefail`'s `-o`)."""
    return value[:1] in ("-", "+") and value not in ("-", "+")


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
                ev.not_allowed = ev.not_allowed or f"{text} {target.redirect or '>'} {target.raw}"
                accept_all = False
                continue
            p = normalize_path(target.value, ctx)
            for lst, slot in ((rs.deny, "deny"), (rs.ask, "ask")):
                if getattr(ev, slot) is None:
                    r = _first(
                        _rules_for("Write", lst), lambda r, p=p: _path_rule_matches(r, p, ctx)
                    )
                    if r is not None:
                        setattr(ev, slot, (r, f"{text} {target.redirect or '>'} {target.value}"))
            r = _first(_rules_for("Write", rs.allow), lambda r, p=p: _path_rule_matches(r, p, ctx))
            if r is not None:
                allow_rules.append(r)
            elif whole_allow is not None:
                allow_rules.append(whole_allow)
            elif not (ctx.mode == PermissionMode.ACCEPT_EDITS and _in_workspace(p, ctx)) or (
                _protected(p, ctx)
            ):
                ev.not_allowed = ev.not_allowed or f"{text} {target.redirect or '>'} {target.value}"
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
        program_dynamic = any(v and v[0].dynamic and not is_assignment(v[0]) for v in views)
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
