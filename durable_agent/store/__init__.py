"""Where sessions are kept: the embedded files under `$DURABLE_AGENT_HOME`, or the shared store
`DURABLE_AGENT_STORE=postgresql://…` names, which every worker and CLI of a fleet reach (DESIGN
§6).

Both are a `TranscriptStore` (activities/transcript.py: the interface, with the files backend);
`PostgresStore` (postgres.py) keeps the same things in PostgreSQL. `open_store` picks one, once
per process and place, so the entries a process has parsed are read once."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from durable_agent.paths import state_home

if TYPE_CHECKING:
    from activities.transcript import TranscriptStore

STORE_ENV = "DURABLE_AGENT_STORE"


class StoreConfigError(ValueError):
    """DURABLE_AGENT_STORE names no store this build can use."""


def store_url(env: Mapping[str, str] | None = None) -> str | None:
    """The shared store's URL, or None for the embedded files; a URL of another kind is an
    error that says what is accepted."""
    raw = (os.environ if env is None else env).get(STORE_ENV, "").strip()
    if not raw or raw in ("files", "file"):
        return None
    if raw.startswith(("postgresql://", "postgres://")):
        return raw
    raise StoreConfigError(
        f"{STORE_ENV}={redact(raw)} is not a store this build knows: "
        "give postgresql://user@host:port/database, or leave it unset for the files under "
        "DURABLE_AGENT_HOME"
    )


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    auth, _, host = rest.rpartition("@")
    user = auth.split(":", 1)[0]
    return f"{scheme}://{user}@{host}" if user else f"{scheme}://{host}"


def open_store(home: Path | None = None, env: Mapping[str, str] | None = None) -> TranscriptStore:
    """This process's store for `home` (default $DURABLE_AGENT_HOME) under `env`'s
    DURABLE_AGENT_STORE (default: this process's)."""
    return _open(str(home or state_home()), store_url(env))


@functools.cache
def _open(home: str, url: str | None) -> TranscriptStore:
    if url is None:
        from activities.transcript import TranscriptStore

        return TranscriptStore(Path(home))
    from durable_agent.store.postgres import PostgresStore

    return PostgresStore(Path(home), url)
