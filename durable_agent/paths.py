"""Where durable-agent keeps its state on disk."""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "DURABLE_AGENT_HOME"


def state_home() -> Path:
    """`$DURABLE_AGENT_HOME`, default `~/.local/state/durable-agent`."""
    raw = os.environ.get(HOME_ENV)
    return Path(raw).expanduser() if raw else Path.home() / ".local" / "state" / "durable-agent"
