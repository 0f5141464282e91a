"""Read Claude Code's settings files (the merge itself is `durable_agent.engine.settings`).

- user: `settings_path()` (`$DURABLE_AGENT_SETTINGS`, default `~/.claude/settings.json`)
- project: `<workspace>/.claude/settings.json`; local: `<workspace>/.claude/settings.local.json`
- managed: `/etc/claude-code/managed-settings.json` (`$DURABLE_AGENT_MANAGED_SETTINGS` overrides)
- `--settings`: a JSON file's path, or the JSON object itself (text starting with `{`)

`sources` is `--setting-sources`: which of user, project and local load (all by default);
managed settings and `--settings` always apply. A missing file is skipped (except a `--settings`
file, which was asked for by name); a file that cannot be used raises SettingsError naming it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from activities.credentials import settings_path
from durable_agent.engine.settings import (
    MergedSettings,
    SettingsError,
    SettingsLayer,
    Source,
    merge,
    validate_layer,
)

MANAGED_ENV = "DURABLE_AGENT_MANAGED_SETTINGS"
MANAGED_DEFAULT = Path("/etc/claude-code/managed-settings.json")
SOURCE_NAMES: dict[str, Source] = {
    "user": "userSettings",
    "project": "projectSettings",
    "local": "localSettings",
}


def managed_settings_path() -> Path:
    raw = os.environ.get(MANAGED_ENV)
    return Path(raw).expanduser() if raw else MANAGED_DEFAULT


def parse_sources(sources: Sequence[str] | str | None) -> set[Source]:
    """`--setting-sources user,project` (a comma list or a sequence); None = all three."""
    if sources is None:
        return set(SOURCE_NAMES.values())
    names = sources.split(",") if isinstance(sources, str) else list(sources)
    chosen: set[Source] = set()
    for name in (n.strip() for n in names):
        if not name:
            continue
        if name not in SOURCE_NAMES:
            expected = ", ".join(SOURCE_NAMES)
            raise SettingsError(f"--setting-sources: unknown source {name!r} (expected {expected})")
        chosen.add(SOURCE_NAMES[name])
    return chosen


def parse_json(text: str, where: str) -> dict[str, Any]:
    """A settings document's text, checked; an empty file counts as `{}`."""
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SettingsError(
            f"{where}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    return validate_layer(data, where)


def read_file(path: Path, *, required: bool = False) -> dict[str, Any] | None:
    """The file's settings, or None when it does not exist (and is not `required`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if required:
            raise SettingsError(f"{path}: no such settings file") from None
        return None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SettingsError(f"{path}: cannot read settings: {reason}") from None
    return parse_json(text, str(path))


def _user_root(path: Path) -> Path:
    """`/path` rules are "relative to settings file": for `<dir>/.claude/settings.json`, `<dir>`."""
    parent = path.parent
    return parent.parent if parent.name == ".claude" else parent


def settings_layers(
    workspace: Path,
    extra: str | None = None,
    sources: Sequence[str] | str | None = None,
) -> list[SettingsLayer]:
    """Every settings layer that exists, highest precedence first."""
    workspace = workspace.expanduser().resolve()
    chosen = parse_sources(sources)
    layers: list[SettingsLayer] = []

    def add(source: Source, path: Path, root: Path, *, required: bool = False) -> None:
        if any(layer.path == str(path) for layer in layers):
            return  # one file in two roles (a workspace at ~): read once, as the higher one
        data = read_file(path, required=required)
        if data is not None:
            layers.append(SettingsLayer(source=source, path=str(path), root=str(root), data=data))

    add("managed", managed_settings_path(), workspace)
    if extra is not None and extra.strip():
        if extra.lstrip().startswith("{"):
            data = parse_json(extra, "--settings")
            layers.append(SettingsLayer(source="cliArg", path=None, root=str(workspace), data=data))
        else:
            add("cliArg", Path(extra).expanduser(), workspace, required=True)
    claude = workspace / ".claude"
    if "localSettings" in chosen:
        add("localSettings", claude / "settings.local.json", workspace)
    if "projectSettings" in chosen:
        add("projectSettings", claude / "settings.json", workspace)
    if "userSettings" in chosen:
        user = settings_path()
        add("userSettings", user, _user_root(user))
    return layers


def load_settings(
    workspace: Path,
    extra: str | None = None,
    sources: Sequence[str] | str | None = None,
) -> MergedSettings:
    """The settings in effect for `workspace` (raises SettingsError, one line, naming the file)."""
    return merge(settings_layers(workspace, extra, sources))
