"""Which environment variables are the project's secrets: what no tool, hook or server we
start may see (the model's key, Temporal's and the store's credentials, what the operator
names)."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping

_SECRET_NAMES = frozenset({"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_CUSTOM_HEADERS"})
_PRIVATE_PREFIXES = ("TEMPORAL_", "DURABLE_AGENT_")

WITHHOLD_ENV = "DURABLE_AGENT_WITHHOLD_ENV"
"""More variables no tool or hook may see, named by the operator: comma- or space-separated
names; `NAME*` withholds every variable whose name starts with NAME (`PGPASSWORD,VAULT_*`)."""


@functools.cache
def _withheld(raw: str) -> tuple[frozenset[str], tuple[str, ...]]:
    """The names and the name prefixes a WITHHOLD_ENV value lists (a lone `*` is ignored: it
    would leave tools without PATH)."""
    entries = raw.replace(",", " ").split()
    exact = frozenset(e for e in entries if not e.endswith("*"))
    return exact, tuple(e[:-1] for e in entries if e.endswith("*") and len(e) > 1)


def is_private(name: str) -> bool:
    """A variable that stays with the worker: ours, or one the operator withholds."""
    if name in _SECRET_NAMES or name.startswith(_PRIVATE_PREFIXES):
        return True
    exact, prefixes = _withheld(os.environ.get(WITHHOLD_ENV, ""))
    return name in exact or name.startswith(prefixes)


def without_private(env: Mapping[str, str]) -> dict[str, str]:
    """`env` less every private variable: for a process we start that needs none of them."""
    return {name: value for name, value in env.items() if not is_private(name)}
