"""TranscriptStore: one JSONL file per session, entries linked by uuid/parentUuid."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import glob
import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from temporalio import activity

from durable_agent.engine.contracts import AppendEntryInput, AppendEntryOutput
from durable_agent.engine.messages import (
    ContentBlock,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    TranscriptEntry,
)
from durable_agent.engine.state import PendingUser
from durable_agent.names import Activities, agents_prefix

if TYPE_CHECKING:
    from durable_agent.workspace import Blobs

_SAFE_ID = re.compile(r"[^A-Za-z0-9._-]")

P = ParamSpec("P")
T = TypeVar("T")


async def off_loop(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)`, a blocking step (the store's file I/O, a subprocess, /proc), run
    in a worker thread: the event loop, with the heartbeats and every other activity of this
    worker, goes on meanwhile.

    Like the synchronous call it replaces, the step is never cut short: a cancellation waits
    for it to end (a store write is whole before the activity ends), then propagates."""
    future = asyncio.ensure_future(asyncio.to_thread(fn, *args, **kwargs))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait([future])
        if not future.cancelled():
            future.exception()  # retrieved: the caller sees the cancellation
        raise


class TranscriptError(Exception):
    """The store cannot give what was asked (missing entry, broken chain)."""


class TranscriptDamaged(TranscriptError):
    """The session's transcript is here but its chain is broken: no retry can mend it."""


class StoreError(Exception):
    """The store could not write (disk full, a write cut short, permissions). Never an API
    error: what was received is kept and the write is retried."""


TORN_SUFFIX = ".torn-"
"""What a transcript's torn tail is kept aside as: `<session>.jsonl.torn-<UTC time>`."""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.EIO, "write made no progress")
        view = view[written:]


def _repair_tail(fd: int, path: Path) -> int:
    """Cut a torn last line (an earlier append that failed midway, or a file cut short by
    something else) off, keeping its bytes aside in a `.torn-<time>` file; return the size.

    Every complete entry ends in a newline, so whatever follows the last newline is a fragment
    no reader has taken (readers stop at the last newline)."""
    size = os.fstat(fd).st_size
    if size == 0:
        return 0
    window = min(size, 1 << 16)
    pos = size
    good = 0
    while pos > 0:
        start = max(0, pos - window)
        chunk = os.pread(fd, pos - start, start)
        if pos == size and chunk.endswith(b"\n"):
            return size
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            good = start + cut + 1
            break
        pos = start
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    torn = path.with_name(f"{path.name}{TORN_SUFFIX}{stamp}")
    _write_bytes_atomic(torn, os.pread(fd, size - good, good))  # StoreError: nothing is cut
    os.ftruncate(fd, good)
    return good


def write_file_atomic(target: Path, text: str) -> None:
    """Write a whole file or nothing (temp file, fsync, rename); StoreError when it fails."""
    _write_bytes_atomic(target, text.encode("utf-8"))


def _write_bytes_atomic(target: Path, data: bytes) -> None:
    tmp = target.with_suffix(target.suffix + ".tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except OSError as exc:
        with suppress(OSError):  # on a read-only store even unlinking nothing fails (EROFS)
            tmp.unlink(missing_ok=True)
        raise StoreError(f"could not write {target}: {exc.strerror or exc}") from exc


@dataclass
class _Parsed:
    inode: int
    offset: int = 0
    entries: dict[str, TranscriptEntry] = field(default_factory=dict)


CACHED_TRANSCRIPTS = 32
"""Transcripts whose parsed entries a worker keeps (a dropped one is parsed again if read)."""


class TranscriptStore:
    """Filesystem store. Appends are idempotent by uuid, so a retried activity never duplicates."""

    def __init__(self, root: Path) -> None:
        self.root = root
        # Parsed entries per transcript file, read on from where the last read stopped: the
        # file only grows, and a model call reads it several times. Activities call the store
        # from worker threads (`off_loop`), so the cache is read and updated under a lock.
        # Bounded (the least recently read dropped first) and emptied of a session when it
        # ends (`forget`): a worker serves sessions for weeks.
        self._cache: OrderedDict[Path, _Parsed] = OrderedDict()
        self._cache_lock = threading.Lock()
        # Transcripts this process appended to without an fsync (`sync=False`): the next synced
        # append or `sync` makes the line durable (one fsync covers every earlier write).
        self._unsynced: set[Path] = set()
        self._sync_lock = threading.Lock()

    def forget(self, session_id: str) -> None:
        """Drop what is cached of a session that ended (its sub-agents' transcripts too)."""
        path = self.transcript_path(session_id)
        agents = agents_prefix(path.stem)
        with self._cache_lock:
            for cached in [p for p in self._cache if p == path or p.name.startswith(agents)]:
                del self._cache[cached]

    def transcript_path(self, session_id: str) -> Path:
        return self.root / "sessions" / f"{_SAFE_ID.sub('_', session_id)}.jsonl"

    def _results_dir(self, session_id: str) -> Path:
        return self.root / "sessions" / f"{_SAFE_ID.sub('_', session_id)}.results"

    @contextmanager
    def _locked(self, session_id: str) -> Iterator[Path]:
        path = self.transcript_path(session_id)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            lock = open(path.with_suffix(".lock"), "a")  # noqa: SIM115
        except OSError as exc:
            raise StoreError(f"could not open the store at {path}: {exc.strerror or exc}") from exc
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield path
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def entries(self, session_id: str) -> dict[str, TranscriptEntry]:
        with self._cache_lock:
            return self._entries(self.transcript_path(session_id))

    def entry(self, session_id: str, uuid: str) -> TranscriptEntry | None:
        """One entry, without copying the session's whole map as `entries` does."""
        with self._cache_lock:
            return self._parsed(self.transcript_path(session_id)).get(uuid)

    def _entries(self, path: Path) -> dict[str, TranscriptEntry]:
        return dict(self._parsed(path))

    def _parsed(self, path: Path) -> dict[str, TranscriptEntry]:
        """The cached map of `path`'s entries, read up to its end (the cache's own: not to be
        changed or kept beyond the lock)."""
        try:
            stat = path.stat()
        except FileNotFoundError:
            return {}
        parsed = self._cache.get(path)
        if parsed is None or parsed.inode != stat.st_ino or stat.st_size < parsed.offset:
            parsed = self._cache[path] = _Parsed(inode=stat.st_ino)
        self._cache.move_to_end(path)
        while len(self._cache) > CACHED_TRANSCRIPTS:
            self._cache.popitem(last=False)
        if stat.st_size > parsed.offset:
            with open(path, "rb") as f:
                f.seek(parsed.offset)
                data = f.read()
            complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits
            for line in complete.decode("utf-8").splitlines():
                if line.strip():
                    entry = TranscriptEntry.model_validate_json(line)
                    parsed.entries.setdefault(entry.uuid, entry)
            parsed.offset += len(complete)
        return parsed.entries

    def append(
        self,
        session_id: str,
        uuid: str,
        parent_uuid: str | None,
        message: Message,
        *,
        sync: bool = True,
        **extra: Any,
    ) -> TranscriptEntry:
        """Append once: a second call with the same uuid returns the stored entry. With `sync`
        False the line is written but not yet made durable: the caller's next synced append
        or `sync` does (before anything depends on it outliving a crash of the machine)."""
        return self.append_entry(
            session_id,
            TranscriptEntry(
                uuid=uuid, parentUuid=parent_uuid, type=message.role, message=message, **extra
            ),
            sync=sync,
        )

    def append_entry(
        self, session_id: str, entry: TranscriptEntry, sync: bool = True
    ) -> TranscriptEntry:
        with self._locked(session_id) as path:
            existing = self.entry(session_id, entry.uuid)
            if existing is not None:
                if sync:  # an earlier attempt (maybe another process's) may have left it
                    self._sync_path(path, force=True)  # unsynced: rare, so always synced
                return existing
            entry = entry.model_copy(
                update={"timestamp": datetime.now(UTC).isoformat(), "session_id": session_id}
            )
            line = (entry.model_dump_json(by_alias=True) + "\n").encode("utf-8")
            self._append_line(path, line, sync)
            return entry

    def needs_sync(self, session_id: str) -> bool:
        """Whether this process appended to the session's transcript without an fsync since."""
        with self._sync_lock:
            return self.transcript_path(session_id) in self._unsynced

    def sync(self, session_id: str, force: bool = False) -> None:
        """Make every line appended to the session's transcript durable (blocking): those this
        process appended unsynced, or with `force` whatever any process wrote."""
        self._sync_path(self.transcript_path(session_id), force)

    def _sync_path(self, path: Path, force: bool = False) -> None:
        with self._sync_lock:
            if path not in self._unsynced and not (force and path.exists()):
                return
            # Cleared before the fsync: a write flagged after this is not taken as covered.
            self._unsynced.discard(path)
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            with self._sync_lock:
                self._unsynced.add(path)
            raise StoreError(f"could not sync {path}: {exc.strerror or exc}") from exc

    def fork(self, source: str, target: str, head: str | None) -> int:
        """A new session's transcript that starts as `source`'s chain up to `head` (`--fork-
        session`): the same entries, in order, under the new session id; how many."""
        chain = self.chain(source, head)
        for entry in chain:
            self.append_entry(target, entry)
        return len(chain)

    def _append_line(self, path: Path, line: bytes, sync: bool = True) -> None:
        """Append one whole line, durably (with `sync`; else flagged for the next sync), or
        leave the file as it was and raise StoreError.

        Readers never see half an entry: a torn tail left by an earlier failure is cut off
        first, and a write that fails midway is truncated back."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            raise StoreError(f"could not open {path}: {exc.strerror or exc}") from exc
        try:
            size = _repair_tail(fd, path)
            try:
                _write_all(fd, line)
                with self._sync_lock:  # a sync covers the unsynced writes before it
                    if sync:
                        self._unsynced.discard(path)
                    else:
                        self._unsynced.add(path)
                if sync:
                    os.fsync(fd)
            except OSError as exc:
                if sync:  # what was written before is no more durable than it was
                    with self._sync_lock:
                        self._unsynced.add(path)
                os.ftruncate(fd, size)
                raise StoreError(f"could not append to {path}: {exc.strerror or exc}") from exc
        except OSError as exc:  # the repair or the truncate-back itself failed
            raise StoreError(f"could not repair {path}: {exc.strerror or exc}") from exc
        finally:
            os.close(fd)

    def chain(
        self, session_id: str, head_uuid: str | None, since_boundary: bool = False
    ) -> list[TranscriptEntry]:
        """Entries from the root (or, with `since_boundary`, from after the last compact
        boundary) to `head_uuid`, in order."""
        if head_uuid is None:
            return []
        entries = self.entries(session_id)
        out: list[TranscriptEntry] = []
        cursor: str | None = head_uuid
        while cursor is not None:
            entry = entries.get(cursor)
            if entry is None and not self.has_transcript(session_id):
                raise TranscriptError(f"transcript {session_id} is not {self.where}")
            if entry is None:
                raise TranscriptDamaged(self.damaged(session_id, f"entry {cursor} is missing"))
            if since_boundary and entry.is_compact_boundary:
                break
            out.append(entry)
            cursor = entry.parent_uuid
            if len(out) > len(entries):
                raise TranscriptDamaged(self.damaged(session_id, "its parentUuid links loop"))
        out.reverse()
        return out

    shared = False
    """Whether other machines reach this store (then workspaces travel through it)."""

    where = "on this machine"
    """Where this store keeps transcripts, for a message: "on this machine", "in the store"."""

    def has_transcript(self, session_id: str) -> bool:
        return self.transcript_path(session_id).exists()

    def local_transcript(self, session_id: str) -> Path:
        """A JSONL file of the session's transcript on this machine, for hooks (their
        `transcript_path`) and tools to read (blocking)."""
        return self.transcript_path(session_id)

    def location(self, session_id: str) -> str:
        """Where the session's transcript is, for a message."""
        return str(self.transcript_path(session_id))

    def blobs(self) -> Blobs:
        """Content-addressed blobs (workspace snapshots): files under the state dir here."""
        from durable_agent.workspace import DirBlobs

        return DirBlobs(self.root / "blobs")

    def fetch_overflow(self, session_id: str) -> None:
        """Make the session's overflow files readable here (a shared store copies them in)."""

    def stream_since(self, session_id: str, offset: int | None) -> tuple[list[str], int]:
        """The stream event lines written after `offset` (None: from now on, nothing), and the
        offset to read on from."""
        path = self.stream_path(session_id)
        if offset is None:
            return [], path.stat().st_size if path.exists() else 0
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return [], offset
        whole = data[: data.rfind(b"\n") + 1]
        return whole.decode("utf-8", errors="replace").splitlines(), offset + len(whole)

    def torn_files(self, session_id: str) -> list[Path]:
        """The torn tails cut off this session's transcript, oldest first."""
        path = self.transcript_path(session_id)
        return sorted(path.parent.glob(f"{glob.escape(path.name)}{TORN_SUFFIX}*"))

    def damaged(self, session_id: str, what: str) -> str:
        """One line: the transcript is damaged, how, and where its cut-off bytes are."""
        text = f"the session's transcript {self.location(session_id)} is damaged: {what}"
        if torn := self.torn_files(session_id):
            text += f" (the bytes cut off its end are kept in {torn[-1]})"
        return text

    def _record_path(self, session_id: str, kind: str, key: str) -> Path:
        results = self._results_dir(session_id)
        if kind == "early":
            return results / "early" / f"{key}.json"
        if kind in ("started", "superseded"):
            return results / f"{key}.json.{kind}"
        return results / f"{key}.json"

    def _put_record(self, session_id: str, kind: str, key: str, text: str) -> None:
        """Keep `text` as the session's record `kind`/`key`, replacing one kept before."""
        write_file_atomic(self._record_path(session_id, kind, key), text)

    def _get_record(self, session_id: str, kind: str, key: str) -> str | None:
        try:
            return self._record_path(session_id, kind, key).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def put_early_tool_use(self, session_id: str, assistant_uuid: str, block: ToolUseBlock) -> None:
        """A tool_use complete in the stream, before its message is stored (for early starts)."""
        self._put_record(
            session_id, "early", _early_key(assistant_uuid, block.id), block.model_dump_json()
        )

    def tool_use(self, session_id: str, assistant_uuid: str, tool_use_id: str) -> ToolUseBlock:
        entry = self.entry(session_id, assistant_uuid)
        if entry is None:
            early = self._get_record(session_id, "early", _early_key(assistant_uuid, tool_use_id))
            if early is not None:
                return ToolUseBlock.model_validate_json(early)
            raise TranscriptError(f"assistant entry {assistant_uuid} is missing")
        for block in entry.message.tool_uses() if entry.message else []:
            if block.id == tool_use_id:
                return block
        raise TranscriptError(f"tool_use {tool_use_id} is not in entry {assistant_uuid}")

    def put_tool_result(self, session_id: str, block: ToolResultBlock, run_id: str = "") -> None:
        """Keep a finished tool's result until the next user entry takes it."""
        key = _result_key(block.tool_use_id, run_id)
        self._put_record(session_id, "result", key, block.model_dump_json())

    def take_tool_results(self, session_id: str, taken: list[tuple[str, str]]) -> None:
        """The user entry holding these results (tool_use id, run id) is stored: their records
        go, so that a result is kept once, in the transcript (`tool_result` finds it there).
        A crash before this leaves a record behind, never loses a result."""
        self._drop_records(session_id, "result", [_result_key(*ids) for ids in taken])

    def _drop_records(self, session_id: str, kind: str, keys: list[str]) -> None:
        for key in keys:
            with suppress(FileNotFoundError):
                self._record_path(session_id, kind, key).unlink()

    def mark_tool_started(
        self, session_id: str, tool_use_id: str, run_id: str, record: dict[str, Any]
    ) -> None:
        """Record that an execution of a side-effecting tool is about to run (DESIGN §3)."""
        key = _result_key(tool_use_id, run_id)
        self._put_record(session_id, "started", key, json.dumps(record))

    def tool_started(self, session_id: str, tool_use_id: str, run_id: str) -> dict[str, Any] | None:
        """The start record of this execution, if one was written."""
        text = self._get_record(session_id, "started", _result_key(tool_use_id, run_id))
        if text is None:
            return None
        try:
            value = json.loads(text)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    def mark_tool_superseded(
        self, session_id: str, tool_use_id: str, run_id: str, record: dict[str, Any]
    ) -> None:
        """A retry elsewhere has reported this execution interrupted (its start recorded, its
        worker not to be found): wherever it still runs, it is to be ended."""
        key = _result_key(tool_use_id, run_id)
        self._put_record(session_id, "superseded", key, json.dumps(record))

    def tool_superseded(self, session_id: str, tool_use_id: str, run_id: str) -> bool:
        key = _result_key(tool_use_id, run_id)
        return self._get_record(session_id, "superseded", key) is not None

    def hook_records(self, session_id: str) -> Any:
        """The session's hook ledger (activities.hooks.HookLedger): this store's directory of
        files here; a shared store's records, so a hook retried on another machine is not run
        twice either."""
        return self.hook_ledger(session_id)

    def hook_ledger(self, session_id: str) -> Path:
        """Where hook activities record each hook's start and outcome (never run twice)."""
        return self._results_dir(session_id) / "hooks"

    def stream_path(self, session_id: str) -> Path:
        """The raw stream events of the session's model calls, for a front-end that shows
        partial messages (`--include-partial-messages`): not history, not the transcript."""
        return self.root / "sessions" / f"{_SAFE_ID.sub('_', session_id)}.stream.jsonl"

    def append_stream_events(self, session_id: str, lines: list[str]) -> None:
        path = self.stream_path(session_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write("".join(lines))

    def overflow_dir(self, session_id: str) -> Path:
        """Where whole oversized tool results are kept as text, for the Read tool."""
        return self._results_dir(session_id) / "full"

    def overflow_path(self, session_id: str, tool_use_id: str) -> Path:
        return self.overflow_dir(session_id) / f"{_SAFE_ID.sub('_', tool_use_id)}.txt"

    def overflow_paths(self, session_id: str) -> Callable[[str], str]:
        """tool_use id → where its whole text is kept: the path a request view's preview of a
        cut-short result names."""
        return lambda tool_use_id: str(self.overflow_path(session_id, tool_use_id))

    def write_overflow(
        self, session_id: str, chain: list[TranscriptEntry], tool_use_ids: list[str]
    ) -> None:
        """Write the whole text of results the request view replaced by a preview (once)."""
        wanted = set(tool_use_ids)
        for entry in chain:
            for block in entry.message.content if entry.message else []:
                if isinstance(block, ToolResultBlock) and block.tool_use_id in wanted:
                    target = self.overflow_path(session_id, block.tool_use_id)
                    if not target.exists():
                        self._keep_overflow(session_id, block.tool_use_id, block.text())

    def _keep_overflow(self, session_id: str, tool_use_id: str, text: str) -> None:
        write_file_atomic(self.overflow_path(session_id, tool_use_id), text)

    def get_tool_result(
        self, session_id: str, tool_use_id: str, run_id: str = ""
    ) -> ToolResultBlock | None:
        """This execution's result while it waits for its user entry (its record)."""
        text = self._get_record(session_id, "result", _result_key(tool_use_id, run_id))
        return None if text is None else ToolResultBlock.model_validate_json(text)

    def tool_result(
        self, session_id: str, tool_use_id: str, run_id: str = ""
    ) -> ToolResultBlock | None:
        """A tool call's result wherever it is now: its record, or, once a user entry has taken
        it, that entry's block (for readers that may come late: summaries, hook callbacks)."""
        found = self.get_tool_result(session_id, tool_use_id, run_id)
        if found is not None:
            return found
        for entry in reversed(list(self.entries(session_id).values())):
            for block in entry.message.content if entry.message and entry.type == "user" else []:
                if isinstance(block, ToolResultBlock) and block.tool_use_id == tool_use_id:
                    return block
        return None


def _early_key(assistant_uuid: str, tool_use_id: str) -> str:
    return f"{_SAFE_ID.sub('_', assistant_uuid)}.{_SAFE_ID.sub('_', tool_use_id)}"


def _result_key(tool_use_id: str, run_id: str) -> str:
    suffix = f".{_SAFE_ID.sub('_', run_id)}" if run_id else ""
    return f"{_SAFE_ID.sub('_', tool_use_id)}{suffix}"


def user_message(store: TranscriptStore, session_id: str, pending: PendingUser) -> Message:
    """The user entry's message: the prompt, or tool results (stored or inline), in order."""
    content: list[ContentBlock] = []
    for ref in pending.results:
        block = ref.inline or store.get_tool_result(session_id, ref.tool_use_id, ref.run_id)
        if block is None:
            block = ToolResultBlock(
                tool_use_id=ref.tool_use_id,
                content="The result of this tool call was lost; it may or may not have run.",
                is_error=True,
            )
        content.append(block)
    if pending.prompt is not None:
        content.append(TextBlock(text=pending.prompt))
    content.extend(TextBlock(text=prompt) for prompt in pending.prompts)
    content.extend(
        TextBlock(text=f"<system-reminder>\n{text}\n</system-reminder>") for text in pending.context
    )
    return Message(role="user", content=content)


def append_pending(
    store: TranscriptStore, session_id: str, pending: PendingUser, defer_sync: bool = False
) -> TranscriptEntry:
    """Store the user entry (once), then let go of the result records it took. `defer_sync`:
    when it took none (everything it holds is in the caller's input, so a retry writes it
    again), the caller makes it durable later (the model step, with its answer's append)."""
    stored = [(ref.tool_use_id, ref.run_id) for ref in pending.results if ref.inline is None]
    entry = store.append(
        session_id,
        pending.uuid,
        pending.parent_uuid,
        user_message(store, session_id, pending),
        sync=not (defer_sync and not stored),  # a record goes only once the entry is durable
    )
    if stored:
        store.take_tool_results(session_id, stored)
    return entry


def chain_with_pending(
    store: TranscriptStore,
    session_id: str,
    parent_uuid: str | None,
    pending: PendingUser | None,
    defer_sync: bool = False,
) -> tuple[str | None, list[TranscriptEntry]]:
    """Store the pending user entry, if there is one (`defer_sync`: see append_pending), then
    read the conversation since the last compact boundary: the entry the store goes on from,
    and that chain (blocking)."""
    if pending is not None:
        parent_uuid = append_pending(store, session_id, pending, defer_sync).uuid
    return parent_uuid, store.chain(session_id, parent_uuid, since_boundary=True)


def request_view(
    store: TranscriptStore,
    session_id: str,
    chain: list[TranscriptEntry],
    render: Callable[[Callable[[str], str]], tuple[T, list[str]]],
) -> T:
    """What `render(overflow_paths)` makes of `chain` (a request, its messages), with the whole
    text of each result it cut short to a preview kept for the Read tool (blocking).

    `render` is `build_request` or `request_messages` over `chain`: it returns the view and the
    tool_use ids of the results it replaced by a preview naming their overflow path."""
    view, overflowed = render(store.overflow_paths(session_id))
    store.write_overflow(session_id, chain, overflowed)
    return view


class StoreActivities:
    """Small store operations the workflow needs outside a model call."""

    def __init__(self, store: TranscriptStore) -> None:
        self.store = store

    @activity.defn(name=Activities.APPEND_ENTRY)
    async def append_entry(self, req: AppendEntryInput) -> AppendEntryOutput:
        entry = await off_loop(append_pending, self.store, req.session_id, req.entry)
        return AppendEntryOutput(uuid=entry.uuid)

    @activity.defn(name=Activities.TRANSCRIPT_LOCATION)
    async def transcript_location(self, session_id: str) -> str:
        return self.store.location(session_id)
