"""Path rules (`Read(...)`, `Edit(...)`, ...), protected directories, the workspace boundary.

Nothing here touches the filesystem: paths are compared lexically after normalising (`~` from
`ctx.home`, relative paths from `ctx.cwd`, then `os.path.normpath`). Symlinks are NOT resolved
here: the activities resolve a file tool's path and call `check` on both paths, the stricter
answer winning (activities/tools/links.py); the Bash sandbox holds against links a command
follows.

Patterns are gitignore-style, anchored as the docs say (`_rooted`). `_eval_paths` applies the
rules to the paths of a file tool's call (`_read_paths` for the read tools); `read_denied` and
`read_deny_roots` tell the search tools and the sandbox what the deny rules hide.
"""

from __future__ import annotations

import functools
import posixpath
import re
from typing import Any

from pathspec.patterns.gitignore import GitIgnorePatternError
from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

from durable_agent.engine.permissions.rules import (
    EDIT_TOOLS,
    READ_TOOLS,
    PermissionContext,
    Rule,
    _Eval,
    _first,
    _rules_for,
)

# Docs (bypassPermissions / acceptEdits): writes to these directories still prompt, except the
# `.claude` folders Claude itself writes to.
PROTECTED_DIRS = frozenset({".git", ".claude", ".vscode", ".idea"})
PROTECTED_EXEMPT = (".claude/commands", ".claude/agents", ".claude/skills")


def normalize_path(path: str, ctx: PermissionContext, base: str | None = None) -> str:
    """Absolute, lexically normalised: `~` from ctx.home, relative from `base` (default cwd)."""
    if path == "~" or path.startswith("~/"):
        path = ctx.home + path[1:]
    if not path.startswith("/"):
        path = posixpath.join(base or ctx.cwd, path)
    path = posixpath.normpath(path)
    return "/" + path.lstrip("/")


@functools.lru_cache(maxsize=1024)
def _gitignore_regex(pattern: str) -> re.Pattern[str]:
    """The compiled regex of one gitignore pattern (pathspec's, as git reads it), matched
    against a path relative to the pattern's root. A pattern gitignore reads as no pattern or
    as a negation (a comment `#x`, `!x`, an unclosed `[`, a trailing backslash) names the path
    spelled so, literally: in a permission rule it is not a comment nor an exception."""
    try:
        regex, include = GitIgnoreSpecPattern.pattern_to_regex(pattern)
    except GitIgnorePatternError:
        regex, include = None, None
    if regex is None or not include:
        regex = "^" + re.escape(pattern.lstrip("/")) + "(?:/|$)"
    return re.compile(regex, re.DOTALL)


def _rooted(spec: str, rule: Rule, ctx: PermissionContext) -> tuple[str, str, bool]:
    """A spec split at its anchor, as the docs say: `//path` absolute, `~/path` from home,
    `/path` from the settings file's root, `path` or `./path` from the current directory; as in
    gitignore, a pattern with no slash (`*.env`, `.env`) matches at any depth below it. Returns
    the folder it is anchored at (a literal path, never a pattern: a workspace named `proj[1]`
    is no character class), the gitignore pattern relative to it (`..` climbs resolved into
    the folder), and whether the pattern matches at any depth below it."""
    if spec.startswith("//"):
        root, rest = "/", spec.lstrip("/")
    elif spec == "~" or spec.startswith("~/"):
        root, rest = ctx.home, spec[2:]
    elif spec.startswith("/"):
        root, rest = rule.root or ctx.cwd, spec[1:]
    else:
        root, rest = ctx.cwd, spec[2:] if spec.startswith("./") else spec
    anywhere = rest is spec and "/" not in spec.rstrip("/")  # a bare name, no slash
    root = "/" + posixpath.normpath(root).lstrip("/")
    rest = posixpath.normpath(rest) if rest else "."
    while rest == ".." or rest.startswith("../"):  # climbs out of its folder: a higher one
        root, rest = posixpath.dirname(root), rest[3:] or "."
    return root, "" if rest == "." else rest, anywhere


def _path_rule_matches(rule: Rule, path: str, ctx: PermissionContext) -> bool:
    """`path` is absolute and normalised. Patterns follow the gitignore specification (as the
    docs say), matched by pathspec: `*` and `?` stay within a name, `**` spans folders, `[...]`
    is a class; a pattern that matches a directory also matches everything inside it (an
    ignored directory's contents are ignored), and `dir/**` covers `dir` itself. A trailing
    `/` (gitignore: directories only) cannot be checked without the filesystem; it is dropped
    (normpath), which matches a file of that name too (the wider, safer-for-deny reading)."""
    if rule.specifier is None:
        return True
    root, pattern, anywhere = _rooted(rule.specifier, rule, ctx)
    if not _inside(path, root):
        return False
    if not pattern:  # the folder itself, and everything in it
        return True
    if path == root:
        return False
    relative = path[len(root.rstrip("/")) + 1 :]
    regex = _gitignore_regex(pattern if anywhere else "/" + pattern)
    if regex.match(relative) is not None:
        return True
    return pattern.endswith("/**") and regex.match(relative + "/") is not None


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
        root, pattern, anywhere = _rooted(rule.specifier, rule, ctx)
        absolute = posixpath.join(root, pattern) if pattern else root
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
