"""The environment a tool process or hook runs with: the worker's, minus our secrets and plumbing.

The model's credentials (`ANTHROPIC_API_KEY`, `ANTHROPIC_AUTH_TOKEN`), the Temporal connection
(`TEMPORAL_*`) and durable-agent's own settings (`DURABLE_AGENT_*`) are for the worker, never for
a command the model wrote or a hook a settings file names.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

_SECRET_NAMES = frozenset({"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"})
_PRIVATE_PREFIXES = ("TEMPORAL_", "DURABLE_AGENT_")


def is_private(name: str) -> bool:
    return name in _SECRET_NAMES or name.startswith(_PRIVATE_PREFIXES)


def tool_environment(
    workspace: Path | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """`base` (default: this process's environment) without private names; `CLAUDE_PROJECT_DIR`
    set to the workspace when one is given, as Claude Code does for hooks and tools."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not is_private(k)}
    if workspace is not None:
        env["CLAUDE_PROJECT_DIR"] = str(workspace)
    return env
