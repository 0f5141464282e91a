"""The API key: from Claude Code's `apiKeyHelper` setting when configured, else the environment."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

SETTINGS_ENV = "DURABLE_AGENT_SETTINGS"
HELPER_TIMEOUT_SECONDS = 30


class CredentialsError(Exception):
    """The apiKeyHelper failed; the message says how."""


def settings_path() -> Path:
    raw = os.environ.get(SETTINGS_ENV)
    return Path(raw).expanduser() if raw else Path.home() / ".claude" / "settings.json"


class Credentials:
    """Re-read on demand, so a 401/403 can be retried with a fresh key."""

    def __init__(self, settings: Path | None = None) -> None:
        self.settings = settings or settings_path()
        self._cached: str | None = None

    def helper(self) -> str | None:
        try:
            data = json.loads(self.settings.read_text())
        except (OSError, ValueError):
            return None
        value = data.get("apiKeyHelper") if isinstance(data, dict) else None
        return value if isinstance(value, str) and value.strip() else None

    def api_key(self, refresh: bool = False) -> str | None:
        """None means: let the SDK read ANTHROPIC_API_KEY / ANTHROPIC_AUTH_TOKEN itself."""
        helper = self.helper()
        if helper is None:
            return os.environ.get("ANTHROPIC_API_KEY")
        if self._cached is None or refresh:
            try:
                proc = subprocess.run(
                    ["sh", "-c", helper], capture_output=True, text=True,
                    timeout=HELPER_TIMEOUT_SECONDS, stdin=subprocess.DEVNULL,
                )  # fmt: skip
            except subprocess.TimeoutExpired as exc:
                raise CredentialsError(f"apiKeyHelper timed out after {exc.timeout}s") from exc
            if proc.returncode != 0 or not proc.stdout.strip():
                raise CredentialsError(
                    f"apiKeyHelper exited {proc.returncode}: {proc.stderr.strip()[:200]}"
                )
            self._cached = proc.stdout.strip()
        return self._cached
