"""The shared store: a session's transcript, tool results, overflow texts, stream events,
oversized payloads and workspace blobs in PostgreSQL, so that any worker can run any step and
any machine that reaches the database can list, show, follow and resume a session.

The schema is created and migrated when a process first uses the store (a versioned
`schema_migrations` table, under an advisory lock so that workers starting together migrate
once). Entries are idempotent by uuid (a retried activity never duplicates one) and read in the
order they were appended: appends of one session are serialised by an advisory lock held to
their commit, so their sequence numbers commit in order. Blobs are content-addressed (sha256)
and stored once.

The store's methods are blocking, as the files backend's are: activities call them from worker
threads (`off_loop`), so the pool is psycopg's threaded one. A database that cannot be reached
is a `StoreError` (the activity fails and is retried, the `status` line says why); nothing that
was received is dropped."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from activities.transcript import (
    _SAFE_ID,
    CACHED_TRANSCRIPTS,
    StoreError,
    TranscriptStore,
    write_file_atomic,
)
from durable_agent.engine.messages import TranscriptEntry
from durable_agent.names import agents_prefix
from durable_agent.store import redact

CONNECT_SECONDS = 3.0
"""How long a call waits for a connection before it fails (retryably) with a StoreError: under
the activities' heartbeat timeout (5 s), so that an outage fails the step with a StoreError
that `status` shows, not as a silent heartbeat timeout."""

MIGRATIONS: list[tuple[int, str]] = [
    (
        1,
        """
        CREATE TABLE entries (
            seq bigserial PRIMARY KEY,
            session_id text NOT NULL,
            uuid text NOT NULL,
            body text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            UNIQUE (session_id, uuid)
        );
        CREATE INDEX entries_by_session ON entries (session_id, seq);
        CREATE TABLE records (
            session_id text NOT NULL,
            kind text NOT NULL,
            key text NOT NULL,
            body text NOT NULL,
            PRIMARY KEY (session_id, kind, key)
        );
        CREATE TABLE stream_events (
            seq bigserial PRIMARY KEY,
            session_id text NOT NULL,
            line text NOT NULL
        );
        CREATE INDEX stream_events_by_session ON stream_events (session_id, seq);
        CREATE TABLE blobs (
            digest text PRIMARY KEY,
            data bytea NOT NULL
        );
        """,
    ),
]
"""(version, SQL), in order; a new version is appended, never an old one edited."""

_MIGRATION_LOCK = 0x6475726162  # "durab": one advisory lock id for every process


class Database:
    """A lazily opened connection pool with the schema migrated, errors as StoreError."""

    def __init__(self, url: str, max_size: int = 8) -> None:
        self.url = url
        self.name = redact(url)
        self._pool: ConnectionPool | None = None
        self._max_size = max_size
        self._lock = threading.Lock()

    def _ready(self) -> ConnectionPool:
        with self._lock:
            if self._pool is None:
                pool = ConnectionPool(
                    self.url,
                    min_size=1,
                    max_size=self._max_size,
                    kwargs={"connect_timeout": int(CONNECT_SECONDS)},
                    open=False,
                    name="durable-agent-store",
                    # A connection the server closed (a restart, a failover) is replaced when
                    # it is taken, not handed to a write that would fail on it.
                    check=ConnectionPool.check_connection,
                )
                pool.open(wait=False)
                try:
                    with pool.connection(timeout=CONNECT_SECONDS) as conn:
                        migrate(conn)
                except BaseException:
                    pool.close()
                    raise
                self._pool = pool
            return self._pool

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor in a transaction, committed when the block ends without an error."""
        try:
            with self._ready().connection(timeout=CONNECT_SECONDS) as conn:
                with conn.transaction(), conn.cursor() as cur:
                    yield cur
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"the store {self.name} failed: {_first_line(exc)}") from exc

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    if isinstance(exc, PoolTimeout):
        return f"it could not be reached (no connection within {CONNECT_SECONDS:g} s)"
    return text[0] if text else type(exc).__name__


def migrate(conn: psycopg.Connection[Any]) -> int:
    """Bring the schema up to the newest migration; its version. A schema newer than this build
    knows is refused (an older worker must not write to it)."""
    newest = MIGRATIONS[-1][0]
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        rows = conn.execute("SELECT version FROM schema_migrations").fetchall()
        done = {int(row[0]) for row in rows}
        if done and max(done) > newest:
            raise psycopg.errors.FeatureNotSupported(
                f"its schema is version {max(done)}, newer than this build's {newest}: "
                "upgrade durable-agent here"
            )
        for version, sql in MIGRATIONS:
            if version not in done:
                conn.execute(sql.encode())  # our own constant text
                conn.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (version,))
    return newest


@dataclass
class _Seen:
    seq: int = 0
    entries: dict[str, TranscriptEntry] = field(default_factory=dict)


class PostgresStore(TranscriptStore):
    """A TranscriptStore whose data is in PostgreSQL. `root` ($DURABLE_AGENT_HOME) still holds
    what must be a file on this machine: the JSONL copy hooks read, overflow files the Read
    tool opens, hook ledgers."""

    shared = True
    where = "in the store"

    def __init__(self, root: Path, url: str) -> None:
        super().__init__(root)
        self.db = Database(url)
        self._seen: OrderedDict[str, _Seen] = OrderedDict()

    def forget(self, session_id: str) -> None:
        super().forget(session_id)
        agents = agents_prefix(session_id)
        with self._cache_lock:
            for cached in [k for k in self._seen if k == session_id or k.startswith(agents)]:
                del self._seen[cached]

    def location(self, session_id: str) -> str:
        return f"{self.db.name} (session {session_id})"

    def has_transcript(self, session_id: str) -> bool:
        with self.db.transaction() as cur:
            cur.execute("SELECT 1 FROM entries WHERE session_id = %s LIMIT 1", (session_id,))
            return cur.fetchone() is not None

    def entries(self, session_id: str) -> dict[str, TranscriptEntry]:
        with self._cache_lock:
            return dict(self._read(session_id))

    def entry(self, session_id: str, uuid: str) -> TranscriptEntry | None:
        with self._cache_lock:
            return self._read(session_id).get(uuid)

    def _read(self, session_id: str) -> dict[str, TranscriptEntry]:
        """The cached map of the session's entries, read up to its last (under the lock)."""
        seen = self._seen.setdefault(session_id, _Seen())
        self._seen.move_to_end(session_id)
        while len(self._seen) > CACHED_TRANSCRIPTS:
            self._seen.popitem(last=False)
        with self.db.transaction() as cur:
            cur.execute(
                "SELECT seq, body FROM entries WHERE session_id = %s AND seq > %s ORDER BY seq",
                (session_id, seen.seq),
            )
            rows = cur.fetchall()
        for seq, body in rows:
            entry = TranscriptEntry.model_validate_json(body)
            seen.entries.setdefault(entry.uuid, entry)
            seen.seq = seq
        return seen.entries

    def append_entry(
        self, session_id: str, entry: TranscriptEntry, sync: bool = True
    ) -> TranscriptEntry:
        """Each append is its own committed transaction: durable whatever `sync` says."""
        from datetime import UTC, datetime

        with self.db.transaction() as cur:
            _lock_session(cur, session_id)
            cur.execute(
                "SELECT body FROM entries WHERE session_id = %s AND uuid = %s",
                (session_id, entry.uuid),
            )
            row = cur.fetchone()
            if row is not None:
                return TranscriptEntry.model_validate_json(row[0])
            entry = entry.model_copy(
                update={"timestamp": datetime.now(UTC).isoformat(), "session_id": session_id}
            )
            cur.execute(
                "INSERT INTO entries (session_id, uuid, body) VALUES (%s, %s, %s)",
                (session_id, entry.uuid, entry.model_dump_json(by_alias=True)),
            )
            return entry

    def torn_files(self, session_id: str) -> list[Path]:
        return []

    def local_transcript(self, session_id: str) -> Path:
        path = self.transcript_path(session_id)
        lines = [e.model_dump_json(by_alias=True) + "\n" for e in self.entries(session_id).values()]
        write_file_atomic(path, "".join(lines))
        return path

    def _put_record(self, session_id: str, kind: str, key: str, text: str) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO records (session_id, kind, key, body) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (session_id, kind, key) DO UPDATE SET body = excluded.body",
                (session_id, kind, key, text),
            )

    def _get_record(self, session_id: str, kind: str, key: str) -> str | None:
        with self.db.transaction() as cur:
            cur.execute(
                "SELECT body FROM records WHERE session_id = %s AND kind = %s AND key = %s",
                (session_id, kind, key),
            )
            row = cur.fetchone()
            return None if row is None else str(row[0])

    def _drop_records(self, session_id: str, kind: str, keys: list[str]) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                "DELETE FROM records WHERE session_id = %s AND kind = %s AND key = ANY(%s)",
                (session_id, kind, keys),
            )

    def _keep_overflow(self, session_id: str, tool_use_id: str, text: str) -> None:
        """In the store, for the other machines (`fetch_overflow`), and as the file here."""
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO records (session_id, kind, key, body)"
                " VALUES (%s, 'overflow', %s, %s) ON CONFLICT DO NOTHING",
                (session_id, _SAFE_ID.sub("_", tool_use_id), text),
            )
        super()._keep_overflow(session_id, tool_use_id, text)

    def fetch_overflow(self, session_id: str) -> None:
        folder = self.overflow_dir(session_id)
        here = {p.stem for p in folder.glob("*.txt")} if folder.exists() else set()
        with self.db.transaction() as cur:
            cur.execute(
                "SELECT key FROM records WHERE session_id = %s AND kind = 'overflow'",
                (session_id,),
            )
            missing = [str(row[0]) for row in cur.fetchall() if row[0] not in here]
        for key in missing:
            text = self._get_record(session_id, "overflow", key)
            if text is not None:
                write_file_atomic(folder / f"{key}.txt", text)

    def append_stream_events(self, session_id: str, lines: list[str]) -> None:
        with self.db.transaction() as cur:
            _lock_session(cur, "stream:" + session_id)
            cur.executemany(
                "INSERT INTO stream_events (session_id, line) VALUES (%s, %s)",
                [(session_id, line.rstrip("\n")) for line in lines],
            )

    def stream_since(self, session_id: str, offset: int | None) -> tuple[list[str], int]:
        with self.db.transaction() as cur:
            if offset is None:
                cur.execute(
                    "SELECT coalesce(max(seq), 0) FROM stream_events WHERE session_id = %s",
                    (session_id,),
                )
                row = cur.fetchone()
                return [], int(row[0]) if row else 0
            cur.execute(
                "SELECT seq, line FROM stream_events WHERE session_id = %s AND seq > %s"
                " ORDER BY seq",
                (session_id, offset),
            )
            rows = cur.fetchall()
        return [str(line) for _, line in rows], (int(rows[-1][0]) if rows else offset)

    def blobs(self) -> PostgresBlobs:
        return PostgresBlobs(self.db)

    def hook_records(self, session_id: str) -> StoreLedger:
        return StoreLedger(self, session_id)


@dataclass
class StoreLedger:
    """A session's hook ledger (activities.hooks.HookLedger) as records of the store."""

    store: PostgresStore
    session_id: str

    def outcome(self, name: str) -> str | None:
        return self.store._get_record(self.session_id, "hook", name)

    def started(self, name: str) -> bool:
        return self.store._get_record(self.session_id, "hook-started", name) is not None

    def start(self, name: str, command: str) -> None:
        self.store._put_record(self.session_id, "hook-started", name, command)

    def finish(self, name: str, outcome: str) -> None:
        self.store._put_record(self.session_id, "hook", name, outcome)


def _lock_session(cur: psycopg.Cursor[Any], key: str) -> None:
    """Serialise this transaction with the session's other appends until it commits."""
    cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (key,))


class PostgresBlobs:
    """Content-addressed blobs (sha256 hex), each stored once: the Blobs of workspace
    snapshots and the bytes of oversized payloads."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def missing(self, digests: Iterable[str]) -> set[str]:
        wanted = sorted(set(digests))
        if not wanted:
            return set()
        with self.db.transaction() as cur:
            cur.execute("SELECT digest FROM blobs WHERE digest = ANY(%s)", (wanted,))
            return set(wanted) - {str(row[0]) for row in cur.fetchall()}

    def put(self, digest: str, data: bytes) -> None:
        if hashlib.sha256(data).hexdigest() != digest:
            raise ValueError(f"blob {digest} does not hash to its name")
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO blobs (digest, data) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (digest, data),
            )

    def get(self, digest: str) -> bytes:
        with self.db.transaction() as cur:
            cur.execute("SELECT data FROM blobs WHERE digest = %s", (digest,))
            row = cur.fetchone()
        if row is None:
            raise KeyError(digest)
        data = bytes(row[0])
        if hashlib.sha256(data).hexdigest() != digest:
            raise StoreError(f"blob {digest} in the store {self.db.name} is corrupt")
        return data

    def get_many(self, digests: Sequence[str]) -> dict[str, bytes]:
        """Several blobs in one round trip (a workspace materialised)."""
        with self.db.transaction() as cur:
            cur.execute("SELECT digest, data FROM blobs WHERE digest = ANY(%s)", (list(digests),))
            return {str(d): bytes(b) for d, b in cur.fetchall()}
