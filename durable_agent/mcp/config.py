"""Which MCP servers a session uses: `load_servers` reads them the way Claude Code's MCP docs
describe, and expands `${VAR}` / `${VAR:-default}` in them.

Where servers come from, highest precedence first (a name defined twice is taken from the
first source that has it; the others' definitions of it are ignored whole, never merged):

1. `flag`: `--mcp-config FILE|JSON`, repeatable; a later flag overrides an earlier one's
   server of the same name. With `--strict-mcp-config` these are the only servers.
2. `local`: `~/.claude.json` `projects[<workspace>].mcpServers` (Claude Code's local scope,
   what `claude mcp add` writes), read only when `claude_json` is given.
3. `settings`: `mcpServers` in the merged settings files.
4. `project`: `.mcp.json` at the workspace's root (Claude Code's project scope). A project
   server is shared through the repository, so it loads only once approved: settings
   `enableAllProjectMcpServers: true`, or its name in `enabledMcpjsonServers`; a name in
   `disabledMcpjsonServers` is never loaded. The others are returned in `left_out`, with why.
5. `user`: `~/.claude.json` top-level `mcpServers` (Claude Code's user scope).

Our reading of the docs: they rank local over project over user; `--mcp-config` is what this
one session was started with, so it ranks first; our settings files' `mcpServers` are the
user's own configuration, like the local scope, so they rank just below it.

A server's tools are named `mcp__<server>__<tool>`. The Messages API allows only
`[A-Za-z0-9_-]` in a tool name, so every other character of the server's (and the tool's)
name becomes `_` there and in permission rules (`mcp__my_server` for a server named
`my.server`); the server keeps its own name everywhere else (`system/init`, `/mcp`). Two
servers whose names normalise alike would share tool names: the lower-ranked one is left out.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from durable_agent.cli.errors import CliError
from durable_agent.secrets import is_private

ServerType = Literal["stdio", "http", "sse"]
Source = Literal["flag", "local", "settings", "project", "user"]
PROJECT_FILE = ".mcp.json"
TYPES: tuple[ServerType, ...] = ("stdio", "http", "sse")
NOT_SUPPORTED = {"sdk": "an SDK server runs inside the SDK's own process; not supported yet"}
"""Types Claude Code knows that we do not run: such a server is left out, the session goes on."""
FLAG_HINT = 'pass a file\'s path or the JSON itself: {"mcpServers": {"name": {...}}}'
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_NOT_IN_TOOL_NAMES = re.compile(r"[^A-Za-z0-9_-]")


class McpConfigError(CliError):
    """MCP configuration that cannot be used: one line naming where, and a hint."""


class McpServerSpec(BaseModel):
    """One server, its `${VAR}`s expanded: what the worker needs to start or reach it."""

    model_config = ConfigDict(frozen=True)

    name: str
    """As configured (`system/init` shows it); tool names use `normalize_name(name)`."""
    type: ServerType = "stdio"
    command: str | None = None
    """stdio: the program to start (looked up on PATH)."""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    """stdio: added to the few variables the SDK passes on (HOME, PATH, USER, ...), so none of
    the worker's own secrets reach a third-party server."""
    url: str | None = None
    """http and sse: the endpoint."""
    headers: dict[str, str] = Field(default_factory=dict)
    source: Source = "flag"

    @property
    def tool_prefix(self) -> str:
        return f"mcp__{normalize_name(self.name)}__"


class LeftOut(BaseModel):
    """A configured server that does not load, and why (one line)."""

    name: str
    source: Source
    reason: str


class McpServers(BaseModel):
    servers: list[McpServerSpec] = Field(default_factory=list)
    """The servers in effect, highest precedence first."""
    left_out: list[LeftOut] = Field(default_factory=list)


def normalize_name(name: str) -> str:
    return _NOT_IN_TOOL_NAMES.sub("_", name)


def tool_name(server: str, tool: str) -> str:
    """The model's name for a server's tool: `mcp__<server>__<tool>`, both normalised."""
    return f"mcp__{normalize_name(server)}__{normalize_name(tool)}"


def expand(text: str, where: str, environ: Mapping[str, str]) -> str:
    """`${VAR}` and `${VAR:-default}` (the default when VAR is unset or empty, as in a shell).
    durable-agent's own secrets (the model's key, `TEMPORAL_*`, ...) count as unset: a server
    is never handed them through its configuration."""

    def value(match: re.Match[str]) -> str:
        var, default = match.group(1), match.group(2)
        found = None if is_private(var) else environ.get(var)
        if found is None or (found == "" and default is not None):
            if default is not None:
                return default
            if is_private(var):
                raise McpConfigError(
                    f"{where}: ${{{var}}} is one of durable-agent's own secrets, never given to "
                    "an MCP server",
                    hint=f"pass the server its own variable, or write ${{{var}:-default}}",
                )
            raise McpConfigError(
                f"{where}: ${{{var}}} is not set",
                hint=f"set {var} in the environment, or write ${{{var}:-default}}",
            )
        return found

    return _VAR.sub(value, text)


def load_servers(
    workspace: str | Path,
    flags: Sequence[str],
    strict: bool,
    settings: Mapping[str, Any],
    *,
    claude_json: Path | None = None,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> McpServers:
    """The servers in effect for a session in `workspace` (see the module's docstring).
    `flags`: the `--mcp-config` values, each a file's path (relative to `cwd`, default the
    current directory) or JSON text; `settings`: the merged settings; `environ`: where
    `${VAR}`s are looked up (default the process's environment)."""
    env = os.environ if environ is None else environ
    ranked: list[tuple[Source, dict[str, Any]]] = [("flag", _flag_servers(flags, cwd))]
    if not strict:
        user, local = _claude_json_servers(claude_json, Path(workspace))
        ranked += [
            ("local", local),
            ("settings", _servers_object(settings, "settings")),
            ("project", _project_servers(Path(workspace))),
            ("user", user),
        ]
    result = McpServers()
    seen: set[str] = set()  # a name is decided by its highest-ranked definition
    taken: dict[str, str] = {}  # normalised name -> name
    for source, servers in ranked:
        for name, raw in servers.items():
            if name in seen:
                continue
            seen.add(name)
            left = _left_out(name, source, raw, settings, taken)
            if left is not None:
                result.left_out.append(left)
                continue
            result.servers.append(parse_server(name, raw, source, env))
            taken[normalize_name(name)] = name
    return result


def _left_out(
    name: str, source: Source, raw: Any, settings: Mapping[str, Any], taken: Mapping[str, str]
) -> LeftOut | None:
    if source == "project" and (why := _unapproved(name, settings)) is not None:
        return LeftOut(name=name, source=source, reason=why)
    kind = raw.get("type") if isinstance(raw, dict) else None
    if isinstance(kind, str) and kind in NOT_SUPPORTED:
        return LeftOut(name=name, source=source, reason=NOT_SUPPORTED[kind])
    other = taken.get(normalize_name(name))
    if other is not None:
        reason = f"its tools would be named like those of server {other!r} ({tool_name(name, '')}…)"
        return LeftOut(name=name, source=source, reason=reason)
    return None


def _unapproved(name: str, settings: Mapping[str, Any]) -> str | None:
    if name in _names(settings, "disabledMcpjsonServers"):
        return "rejected in settings (disabledMcpjsonServers)"
    if settings.get("enableAllProjectMcpServers") is True:
        return None
    if name in _names(settings, "enabledMcpjsonServers"):
        return None
    return (
        "not approved: list it in enabledMcpjsonServers or set enableAllProjectMcpServers in "
        "settings"
    )


def _names(settings: Mapping[str, Any], key: str) -> list[str]:
    value = settings.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise McpConfigError(
            f"settings: {key} must be a list of server names", hint=f'"{key}": ["name", ...]'
        )
    return value


def parse_server(name: str, raw: Any, source: Source, environ: Mapping[str, str]) -> McpServerSpec:
    """One entry of an `mcpServers` object, checked and expanded."""
    where = f"mcp server {name!r} ({source})"
    if not name:
        raise McpConfigError(f"{where}: a server needs a name", hint='"mcpServers": {"name": {…}}')
    if not isinstance(raw, dict):
        raise McpConfigError(f"{where}: must be an object", hint='{"command": "…", "args": […]}')
    kind = raw.get("type", "stdio" if "command" in raw or "url" not in raw else None)
    if kind is None:
        raise McpConfigError(f"{where}: has a url but no type", hint='add "type": "http" or "sse"')
    if kind not in TYPES:
        raise McpConfigError(
            f"{where}: unknown type {kind!r}", hint=f"use one of {', '.join(TYPES)}"
        )

    def text(value: Any, field: str) -> str:
        if not isinstance(value, str):
            raise McpConfigError(f"{where}: {field} must be a string", hint=f'"{field}": "…"')
        return expand(value, f"{where} {field}", environ)

    def strings(field: str) -> dict[str, str]:
        value = raw.get(field) or {}
        if not isinstance(value, dict):
            raise McpConfigError(f"{where}: {field} must be an object", hint=f'"{field}": {{…}}')
        return {str(k): text(v, f"{field}.{k}") for k, v in value.items()}

    if kind == "stdio":
        command = raw.get("command")
        if not isinstance(command, str) or not command.strip():
            raise McpConfigError(f"{where}: a stdio server needs a command", hint=_STDIO_HINT)
        args = raw.get("args") or []
        if not isinstance(args, list):
            raise McpConfigError(f"{where}: args must be a list", hint='"args": ["--flag", "…"]')
        return McpServerSpec(
            name=name,
            type="stdio",
            command=text(command, "command"),
            args=[text(a, f"args[{i}]") for i, a in enumerate(args)],
            env=strings("env"),
            source=source,
        )
    url = raw.get("url")
    if url is None:
        raise McpConfigError(f"{where}: an {kind} server needs a url", hint=_URL_HINT)
    expanded = text(url, "url")
    if not expanded.startswith(("http://", "https://")):
        raise McpConfigError(f"{where}: url {expanded!r} is not http(s)", hint=_URL_HINT)
    return McpServerSpec(
        name=name, type=kind, url=expanded, headers=strings("headers"), source=source
    )


_STDIO_HINT = '"command": "uvx", "args": ["some-mcp-server"] (or "type": "http" with a "url")'
_URL_HINT = '"url": "https://host/mcp"'


def _servers_object(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise McpConfigError(f"{where}: must be a JSON object", hint=FLAG_HINT)
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise McpConfigError(f"{where}: mcpServers must be an object", hint=FLAG_HINT)
    return servers


def _read_json(path: Path, where: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise McpConfigError(f"{where}: no such file", hint=FLAG_HINT) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise McpConfigError(f"{where}: cannot be read ({exc})", hint=FLAG_HINT) from None
    return _parse_json(text, where)


def _parse_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise McpConfigError(
            f"{where}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
            hint=FLAG_HINT,
        ) from None


def _flag_servers(flags: Sequence[str], cwd: Path | None) -> dict[str, Any]:
    servers: dict[str, Any] = {}
    for flag in flags:
        if flag.lstrip().startswith(("{", "[")):
            where = "--mcp-config (JSON)"
            data = _parse_json(flag, where)
        else:
            path = Path(flag).expanduser()
            where = f"--mcp-config {flag}"
            data = _read_json(path if path.is_absolute() else (cwd or Path.cwd()) / path, where)
        servers.update(_servers_object(data, where))
    return servers


def _project_servers(workspace: Path) -> dict[str, Any]:
    path = workspace / PROJECT_FILE
    if not path.is_file():
        return {}
    return _servers_object(_read_json(path, str(path)), str(path))


def _claude_json_servers(
    path: Path | None, workspace: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(user, local) servers of Claude Code's `~/.claude.json`, when there is one."""
    if path is None or not path.is_file():
        return {}, {}
    data = _read_json(path, str(path))
    user = _servers_object(data, str(path))
    projects = data.get("projects") if isinstance(data, dict) else None
    entry = None
    if isinstance(projects, dict):
        entry = next(_matching(projects, workspace), None)
    local = _servers_object(entry, f"{path} projects[{workspace}]") if entry is not None else {}
    return user, local


def _matching(projects: dict[str, Any], workspace: Path) -> Iterator[Any]:
    for key in (str(workspace), str(workspace.resolve())):
        if key in projects:
            yield projects[key]
