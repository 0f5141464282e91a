"""Claude Code settings: the shape of one settings file, and the merge of every layer (no I/O).

Sources, highest precedence first, as Claude Code's settings docs list them: managed policy,
command-line `--settings`, local project (`.claude/settings.local.json`), shared project
(`.claude/settings.json`), user (`~/.claude/settings.json`). `merge` ranks layers by their source,
so the order of its argument does not matter (two layers of one source: the earlier one wins).

Merging, key by key: objects merge recursively; arrays (`permissions.allow`/`ask`/`deny`,
`additionalDirectories`, each hook event's groups, ...) are concatenated across layers, the higher
layer's entries first, and de-duplicated; any other value comes from the highest layer setting it.
Unknown keys are kept (they reach `status`), only the keys this project reads are shape-checked.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from durable_agent.engine.hooks import MATCHER_FIELDS, matcher_problem
from durable_agent.engine.permissions import (
    PermissionContext,
    PermissionMode,
    PermissionRules,
    SandboxSpec,
    parse_rule,
)

Source = Literal["managed", "cliArg", "localSettings", "projectSettings", "userSettings"]
PRECEDENCE: tuple[Source, ...] = (
    "managed",
    "cliArg",
    "localSettings",
    "projectSettings",
    "userSettings",
)
"""Highest first."""

Behavior = Literal["deny", "ask", "allow"]
BEHAVIORS: tuple[Behavior, ...] = ("deny", "ask", "allow")


class SettingsError(ValueError):
    """A settings file (or `--settings` text) that cannot be used; one line naming it and the key."""


class _Open(BaseModel):
    """Strict about the keys it names, keeps every other key."""

    model_config = ConfigDict(strict=True, extra="allow", populate_by_name=True)


class SettingsLayer(BaseModel):
    source: Source
    path: str | None = None
    """The file it came from; None for inline `--settings` JSON."""
    root: str | None = None
    """The directory its `/path` permission patterns are relative to."""
    data: dict[str, Any] = Field(default_factory=dict)


class PermissionSettings(_Open):
    allow: list[str] = Field(default_factory=list)
    ask: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)
    default_mode: str | None = Field(default=None, alias="defaultMode")
    additional_directories: list[str] = Field(default_factory=list, alias="additionalDirectories")
    disable_bypass: str | None = Field(default=None, alias="disableBypassPermissionsMode")


class SandboxNetwork(_Open):
    allow_unix_sockets: list[str] = Field(default_factory=list, alias="allowUnixSockets")
    allow_all_unix_sockets: bool = Field(default=False, alias="allowAllUnixSockets")
    allow_local_binding: bool = Field(default=False, alias="allowLocalBinding")
    allowed_domains: list[str] = Field(default_factory=list, alias="allowedDomains")
    http_proxy_port: int | None = Field(default=None, alias="httpProxyPort")
    socks_proxy_port: int | None = Field(default=None, alias="socksProxyPort")


class SandboxFilesystem(_Open):
    allow_write: list[str] = Field(default_factory=list, alias="allowWrite")
    deny_write: list[str] = Field(default_factory=list, alias="denyWrite")
    deny_read: list[str] = Field(default_factory=list, alias="denyRead")


class SandboxSettings(_Open):
    enabled: bool = False
    auto_allow_bash_if_sandboxed: bool = Field(default=True, alias="autoAllowBashIfSandboxed")
    excluded_commands: list[str] = Field(default_factory=list, alias="excludedCommands")
    allow_unsandboxed_commands: bool = Field(default=True, alias="allowUnsandboxedCommands")
    fail_if_unavailable: bool = Field(default=False, alias="failIfUnavailable")
    enable_weaker_nested_sandbox: bool = Field(default=False, alias="enableWeakerNestedSandbox")
    network: SandboxNetwork = Field(default_factory=SandboxNetwork)
    filesystem: SandboxFilesystem = Field(default_factory=SandboxFilesystem)


class HookHandler(_Open):
    """One handler. `command` is required for `type: "command"`; other types are kept as given."""

    type: str
    command: str | None = None
    timeout: float | None = None


class HookGroup(_Open):
    matcher: str | None = None
    hooks: list[HookHandler]


class Settings(_Open):
    permissions: PermissionSettings = Field(default_factory=PermissionSettings)
    hooks: dict[str, list[HookGroup]] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    model: str | None = None
    api_key_helper: str | None = Field(default=None, alias="apiKeyHelper")

    def to_json(self) -> dict[str, Any]:
        """As a settings file would spell it (aliases, extra keys kept)."""
        return self.model_dump(by_alias=True, exclude_none=True)


class LayerSummary(BaseModel):
    source: Source
    path: str | None = None
    root: str | None = None


class RuleSource(BaseModel):
    """One permission rule and the layer it came from (highest layer first when it repeats)."""

    behavior: Behavior
    rule: str
    source: Source
    path: str | None = None
    root: str | None = None


class MergedSettings(BaseModel):
    settings: Settings = Field(default_factory=Settings)
    layers: list[LayerSummary] = Field(default_factory=list)
    """Every layer that contributed, highest precedence first."""
    rules_with_source: list[RuleSource] = Field(default_factory=list)

    def rules(self, behavior: Behavior) -> list[RuleSource]:
        return [r for r in self.rules_with_source if r.behavior == behavior]


def _dotted(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _describe(value: object) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def validate_layer(data: object, where: str) -> dict[str, Any]:
    """`data` (a parsed settings file) if its known keys have the documented shapes.

    Raises SettingsError("<where>: `<key>` <what is wrong> (got <value>)") otherwise."""
    if not isinstance(data, dict):
        raise SettingsError(f"{where}: settings must be a JSON object (got {_describe(data)})")
    try:
        settings = Settings.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = _dotted(tuple(first["loc"])) or "(top level)"
        msg = str(first["msg"]).rstrip(".").lower()
        if first["type"] == "missing":
            raise SettingsError(f"{where}: `{key}` is required") from None
        got = first.get("input")
        raise SettingsError(f"{where}: `{key}`: {msg} (got {_describe(got)})") from None
    for event, groups in settings.hooks.items():
        for g, group in enumerate(groups):
            _check_hook_group(group, f"hooks.{event}[{g}]", event in MATCHER_FIELDS, where)
    return data


def _check_hook_group(group: HookGroup, key: str, has_matcher: bool, where: str) -> None:
    """What the shape check lets through but would never work: a matcher that does not
    compile (it would match nothing), a command hook without a command, a timeout of zero or
    less."""
    problem = matcher_problem(group.matcher) if has_matcher else None
    if problem:
        raise SettingsError(f"{where}: `{key}.matcher`: {problem} (got {_describe(group.matcher)})")
    for h, handler in enumerate(group.hooks):
        if handler.type == "command" and not (handler.command or "").strip():
            raise SettingsError(
                f"{where}: `{key}.hooks[{h}].command` is required for a command hook"
            )
        if handler.timeout is not None and not handler.timeout > 0:
            raise SettingsError(
                f"{where}: `{key}.hooks[{h}].timeout`: must be a positive number of seconds "
                f"(got {handler.timeout:g})"
            )


def _key(value: object) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _dedupe(items: list[Any]) -> list[Any]:
    seen: set[str] = set()
    out = []
    for item in items:
        k = _key(item)
        if k not in seen:
            seen.add(k)
            out.append(item)
    return out


def _merge_into(high: dict[str, Any], low: dict[str, Any]) -> dict[str, Any]:
    """`high` over `low`: objects recursively, arrays concatenated (high first), else high."""
    out = dict(low)
    for key, value in high.items():
        below = out.get(key)
        if isinstance(value, dict) and isinstance(below, dict):
            out[key] = _merge_into(value, below)
        elif isinstance(value, list):
            out[key] = _dedupe([*value, *(below if isinstance(below, list) else [])])
        else:
            out[key] = value
    return out


def ranked(layers: list[SettingsLayer]) -> list[SettingsLayer]:
    """Highest precedence first (stable within one source)."""
    return sorted(layers, key=lambda layer: PRECEDENCE.index(layer.source))


def merge(layers: list[SettingsLayer]) -> MergedSettings:
    """The settings in effect: every layer merged in Claude Code's precedence (see the module doc).

    Each layer's data is validated (naming its file) before it is merged."""
    order = ranked(layers)
    merged: dict[str, Any] = {}
    for layer in reversed(order):
        data = validate_layer(layer.data, layer.path or "--settings")
        merged = _merge_into(data, merged)
    rules: list[RuleSource] = []
    seen: set[tuple[str, str, str | None]] = set()
    for layer in order:
        permissions = layer.data.get("permissions")
        if not isinstance(permissions, dict):
            continue
        for behavior in BEHAVIORS:
            for rule in permissions.get(behavior) or []:
                ident = (behavior, rule, layer.root)
                if ident in seen:
                    continue
                seen.add(ident)
                rules.append(
                    RuleSource(
                        behavior=behavior,
                        rule=rule,
                        source=layer.source,
                        path=layer.path,
                        root=layer.root,
                    )  # fmt: skip
                )
    return MergedSettings(
        settings=Settings.model_validate(merged),
        layers=[LayerSummary(source=x.source, path=x.path, root=x.root) for x in order],
        rules_with_source=rules,
    )


# --------------------------------------------------------------------------- permissions


def split_tool_list(values: list[str] | None) -> list[str]:
    """`--allowedTools "Bash(git log:*)" Read,Edit`: each argument may hold several rules,
    separated by commas or spaces outside parentheses (a Bash pattern keeps its spaces)."""
    rules: list[str] = []
    for value in values or []:
        depth, word = 0, ""
        for ch in value:
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth = max(0, depth - 1)
            if depth == 0 and ch in ", \t\n":
                if word.strip():
                    rules.append(word.strip())
                word = ""
                continue
            word += ch
        if word.strip():
            rules.append(word.strip())
    return rules


def permission_context(
    merged: MergedSettings,
    *,
    cwd: str,
    home: str,
    mode: str | None = None,
    allowed: list[str] | None = None,
    disallowed: list[str] | None = None,
    add_dirs: list[str] | None = None,
    sandboxed: bool = False,
) -> PermissionContext:
    """The permission context of a prompt: the settings' rules (each naming its file) and the
    command line's `--allowedTools`/`--disallowedTools` (source cliArg, relative to cwd), the
    mode (`--permission-mode`, else `permissions.defaultMode`, else default) and the working
    directories (cwd, `additionalDirectories`, `--add-dir`).

    Raises SettingsError (one line, naming the file or flag) for a rule that does not parse, an
    unknown mode, or bypassPermissions when a settings layer disables it."""
    rules = PermissionRules()
    for src in merged.rules_with_source:
        try:
            rule = parse_rule(src.rule, source=src.source, root=src.root)
        except ValueError as exc:
            raise SettingsError(
                f"{src.path or '--settings'}: permissions.{src.behavior}: {exc}"
            ) from None
        getattr(rules, src.behavior).append(rule)
    for flag, behavior, values in (
        ("--disallowedTools", "deny", disallowed),
        ("--allowedTools", "allow", allowed),
    ):
        for text in split_tool_list(values):
            try:
                rule = parse_rule(text, source="cliArg", root=cwd)
            except ValueError as exc:
                raise SettingsError(f"{flag}: {exc}") from None
            getattr(rules, behavior).append(rule)
    perms = merged.settings.permissions
    chosen = mode or perms.default_mode or PermissionMode.DEFAULT.value
    try:
        resolved = PermissionMode(chosen)
    except ValueError:
        where = "--permission-mode" if mode else "permissions.defaultMode"
        names = ", ".join(m.value for m in PermissionMode)
        raise SettingsError(
            f"{where}: unknown permission mode {chosen!r} (one of {names})"
        ) from None
    if resolved == PermissionMode.BYPASS and perms.disable_bypass == "disable":
        raise SettingsError(
            "bypassPermissions mode is disabled by permissions.disableBypassPermissionsMode"
        )
    dirs: list[str] = []
    for raw in [*perms.additional_directories, *(add_dirs or [])]:
        path = _absolute(raw, cwd, home)
        if path not in dirs and path != cwd:
            dirs.append(path)
    return PermissionContext(
        mode=resolved,
        rules=rules,
        cwd=cwd,
        additional_directories=dirs,
        home=home,
        sandboxed=sandboxed,
        auto_allow_bash_if_sandboxed=merged.settings.sandbox.auto_allow_bash_if_sandboxed,
    )


def _absolute(raw: str, cwd: str, home: str) -> str:
    if raw == "~" or raw.startswith("~/"):
        raw = home + raw[1:]
    return posixpath.normpath(raw if raw.startswith("/") else posixpath.join(cwd, raw))


def sandbox_spec(
    merged: MergedSettings, *, enabled: bool = False, cwd: str, home: str
) -> SandboxSpec | None:
    """The Bash sandbox when `sandbox.enabled` (or `--sandbox`, `enabled`) turns it on, else
    None. `filesystem.allowWrite`/`denyRead` paths: `~/` from home, absolute (`/x` or `//x`),
    else relative to cwd. The network is off unless `network.allowedDomains` holds "*" (all of
    it): a list of domains would need a filtering proxy, which is not built, and the safer
    reading of a list is "not the rest"."""
    sandbox = merged.settings.sandbox
    if not (enabled or sandbox.enabled):
        return None
    fs = sandbox.filesystem
    return SandboxSpec(
        allow_write=[_absolute(p, cwd, home) for p in fs.allow_write],
        deny_read=[_absolute(p, cwd, home) for p in fs.deny_read],
        deny_write=[_absolute(p, cwd, home) for p in fs.deny_write],
        allow_network="*" in sandbox.network.allowed_domains,
    )


def snapshot(merged: MergedSettings) -> dict[str, Any]:
    """The merged settings as the prompt's config carries them: as a settings file would spell
    them (without `apiKeyHelper`), plus `layers` (source and file of each, highest precedence
    first)."""
    shown = merged.settings.to_json()
    # The worker runs apiKeyHelper from its own settings file; its command (which may carry a
    # credential) stays out of the prompt's config and so out of every history.
    shown.pop("apiKeyHelper", None)
    return {
        **shown,
        "layers": [layer.model_dump(exclude_none=True) for layer in merged.layers],
    }


WITHHELD_VALUE = "(set)"


def without_env_values(settings: dict[str, Any] | None) -> dict[str, Any] | None:
    """A settings snapshot as a query or the CLI may show it: the `env` key names its
    variables, never their values (they are for tools and hooks; a query answer is not
    encrypted at rest by anything but the caller)."""
    if not settings or not isinstance(settings.get("env"), dict):
        return settings
    return {**settings, "env": dict.fromkeys(settings["env"], WITHHELD_VALUE)}
