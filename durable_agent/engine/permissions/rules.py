"""Permission rules as written, and what they are checked against.

Rules are `Tool` or `Tool(specifier)` (`parse_rule`). Evaluation order is deny, then ask, then
allow: the first list with a matching rule decides, and a more specific rule in a later list does
not change that (evaluate.py). `Read(...)` and `Edit(...)` rules apply to every tool of their
family, `Task(...)` to `Agent` too, `mcp__server` to every tool of that server (`_rules_for`).

Also here: the permission models a session carries (PermissionMode, PermissionRules,
PermissionContext, SandboxSpec), the built-in tool tables, and `_Eval`, what the rules say about
one call before the mode is applied (filled in by paths.py, bash.py and evaluate.py).

Where the docs leave a detail open the SAFER reading is chosen; each such choice is marked
"Safer reading:" (in every module of this package).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field


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


# --------------------------------------------------------------------------- tools

# Docs ("Tools available to Claude"): these need no permission. Anything not listed (MCP tools,
# tools added later) needs permission: Safer reading for unknown tools.
READ_ONLY_TOOLS = frozenset(
    {"Read", "Grep", "Glob", "LS", "NotebookRead", "TodoWrite", "Task", "Agent", "BashOutput"}
    | {"Skill"}  # our choice: it only loads instructions (a `Skill(name)` rule still decides)
    # Docs: the cron tools need no permission; ScheduleWakeup likewise (ours: it only queues a
    # prompt of this session for later, which runs under the session's rules then).
    | {"CronCreate", "CronList", "CronDelete", "ScheduleWakeup"}
    | {"TaskStop"}  # ours: it only stops a background agent this prompt started
)
# Tools that take a path the workspace boundary applies to, and the input key of that path.
READ_TOOLS = {"Read": "file_path", "Grep": "path", "Glob": "path", "LS": "path"}
EDIT_TOOLS = {"Edit": "file_path", "MultiEdit": "file_path", "Write": "file_path"}
EDIT_TOOLS["NotebookEdit"] = "notebook_path"
# Docs: `Read(...)` rules apply to every built-in tool that reads files (Read, Grep, Glob, LS);
# `Edit(...)` rules to every built-in tool that edits files (Edit, Write, NotebookEdit).
RULE_FAMILY = {"Read": frozenset(READ_TOOLS), "Edit": frozenset(EDIT_TOOLS)}
AGENT_TOOLS = frozenset({"Task", "Agent"})


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
