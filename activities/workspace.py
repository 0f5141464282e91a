"""Travelling workspaces (a shared store): a worker hosts a session's workspace as a copy under
its own `$DURABLE_AGENT_HOME`, made from a checkpoint of the store; the session's tools run in
that copy, on the host's own task queue; after a tool batch that may have changed files the
host records a checkpoint (the changed blobs and a manifest). When the host is lost, another
worker claims the session and materialises its last checkpoint (DESIGN §6).

The model keeps seeing the submitter's path: a tool's input is mapped from it to the host's
copy, its output back."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

from temporalio import activity

from activities.heartbeat import heartbeating
from activities.transcript import _SAFE_ID, TranscriptStore, off_loop, write_file_atomic
from durable_agent.engine.contracts import (
    CheckpointInput,
    CheckpointOutput,
    ClaimHostInput,
    ClaimHostOutput,
)
from durable_agent.names import Activities, agents_prefix, owning_session
from durable_agent.workspace import (
    Blobs,
    Manifest,
    diff,
    load_manifest,
    materialise,
    snapshot,
    store_manifest,
)


def host_queue_of(task_queue: str) -> str:
    """A new worker's own task queue: where the tools of the workspaces it hosts go."""
    return f"{task_queue}/host-{uuid.uuid4().hex[:12]}"


class WorkspaceHosts:
    """The copies of travelling workspaces this worker holds, each with the manifest (stat
    hints included) and the checkpoint it was made from, so that a checkpoint reads only what
    changed and a copy already at the wanted checkpoint is used as it is."""

    def __init__(self, store: TranscriptStore, host_queue: str) -> None:
        self.store = store
        self.host_queue = host_queue
        self.root = store.root / "workspaces"
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._users: dict[str, int] = {}
        """Steps working in each copy now (`holding`): the sweep leaves such a copy alone."""
        self._dirty: set[str] = set()
        """Copies a tool may have changed since their last checkpoint: the sweep leaves them
        alone too (their changes are in no checkpoint yet); `checkpoint` clears the mark."""

    def blobs(self) -> Blobs:
        return self.store.blobs()

    def _dir(self, session_id: str) -> Path:
        return self.root / _SAFE_ID.sub("_", session_id)

    def tree(self, session_id: str) -> Path:
        """Where the session's files are on this host."""
        return self._dir(session_id) / "tree"

    def _lock(self, session_id: str) -> threading.Lock:
        """The lock of the session's copy (keyed by its folder's name: a name is its own)."""
        with self._guard:
            return self._locks.setdefault(self._dir(session_id).name, threading.Lock())

    def _record(self, session_id: str) -> tuple[str, Manifest] | None:
        path = self._dir(session_id) / "at.json"
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        at, _, manifest = raw.partition("\n")
        return at, Manifest.model_validate_json(manifest)

    def _save(self, session_id: str, at: str, manifest: Manifest) -> None:
        write_file_atomic(self._dir(session_id) / "at.json", f"{at}\n{manifest.model_dump_json()}")

    @contextlib.contextmanager
    def holding(self, session_id: str, changes: bool = False) -> Iterator[None]:
        """A step works in the session's copy meanwhile (make it with `ensure` inside): the
        sweep does not drop it under the step (a session resumed just as a sweep found it
        closed), and with `changes` (a tool that may change files) not afterwards either,
        until the next checkpoint holds what the step did."""
        name = self._dir(session_id).name
        with self._guard:
            self._users[name] = self._users.get(name, 0) + 1
        try:
            yield
        finally:
            with self._guard:
                if changes:
                    self._dirty.add(name)
                left = self._users.pop(name) - 1
                if left:
                    self._users[name] = left

    @contextlib.asynccontextmanager
    async def in_copy(
        self, session_id: str, checkpoint_id: str, changes: bool = False
    ) -> AsyncIterator[Path]:
        """The session's copy (`ensure`), held while the caller works in it (`holding`)."""
        with self.holding(session_id, changes):
            tree, _ = await off_loop(self.ensure, session_id, checkpoint_id)
            yield tree

    def ensure(self, session_id: str, checkpoint_id: str) -> tuple[Path, bool]:
        """The session's copy here, made to hold `checkpoint_id` unless it already comes from
        it (then it keeps the changes tools made since: they are this host's, not yet
        checkpointed); and whether it was made now (blocking)."""
        with self._lock(session_id):
            record = self._record(session_id)
            if record is not None and record[0] == checkpoint_id:
                with suppress(OSError):  # used now: `sweep` reads it as the last use
                    os.utime(self._dir(session_id) / "at.json")
                return self.tree(session_id), False
            blobs = self.blobs()
            wanted = load_manifest(checkpoint_id, blobs)
            tree = self.tree(session_id)
            if record is None and tree.exists():
                shutil.rmtree(tree)  # a copy whose record was lost: made again whole
            tree.mkdir(parents=True, exist_ok=True)
            if record is None:  # whose copy it is, for `sweep` (the folder's name is sanitised)
                (self._dir(session_id) / "session").write_text(session_id, encoding="utf-8")
            previous = record[1] if record is not None else None
            made = materialise(wanted, blobs, tree, previous=previous)
            self._save(session_id, checkpoint_id, made)
            with self._guard:  # what tools changed since is gone: it holds the checkpoint
                self._dirty.discard(self._dir(session_id).name)
            return tree, True

    def checkpoint(self, session_id: str, checkpoint_id: str) -> CheckpointOutput:
        """Record the copy's files as a new checkpoint: only new or changed files are read and
        uploaded (stat hints decide, as git's index does); blocking."""
        with self.holding(session_id):
            self.ensure(session_id, checkpoint_id)
            with self._lock(session_id):
                record = self._record(session_id)
                assert record is not None
                at, previous = record
                blobs = self.blobs()
                tree = self.tree(session_id)
                manifest = snapshot(tree, blobs, previous=previous, max_bytes=None)
                new_id = store_manifest(manifest, blobs)
                self._save(session_id, new_id, manifest)
                with self._guard:
                    self._dirty.discard(self._dir(session_id).name)
        changes = diff(previous, manifest)
        touched = [*changes.added, *changes.changed]
        return CheckpointOutput(
            checkpoint_id=new_id,
            changed_files=len(touched) + len(changes.deleted),
            uploaded_bytes=sum(manifest.files[p].size for p in touched),
        )

    def drop(self, session_id: str) -> None:
        """The session has ended: its copy and its sub-agents' (each worked in a copy of its
        own, `<session>.agent-<call>`, workflows/agents.py) go, with their locks."""
        agents = agents_prefix(self._dir(session_id).name)
        try:
            theirs = [p.name for p in self.root.iterdir() if p.name.startswith(agents)]
        except FileNotFoundError:
            theirs = []
        for name in [self._dir(session_id).name, *theirs]:
            self._remove(name, wait=True)

    def held(self) -> dict[str, str]:
        """The copies here: folder name → the session (or sub-agent) id it is a copy for."""
        try:
            folders = [p for p in self.root.iterdir() if p.is_dir()]
        except FileNotFoundError:
            return {}
        held = {}
        for folder in folders:
            try:
                held[folder.name] = (folder / "session").read_text(encoding="utf-8").strip()
            except FileNotFoundError:  # made before copies named their session
                held[folder.name] = folder.name
        return held

    def last_used(self, name: str) -> float:
        """When a step last used the copy in folder `name` (its record's mtime: `ensure`)."""
        folder = self.root / name
        for path in (folder / "at.json", folder):
            try:
                return path.stat().st_mtime
            except FileNotFoundError:
                continue
        return 0.0

    def drop_unused(self, name: str) -> bool:
        """Drop the copy in folder `name` unless a step is using it now or a tool changed it
        since its last checkpoint; True if dropped."""
        return self._remove(name, wait=False)

    def _remove(self, name: str, wait: bool) -> bool:
        """Remove the copy in folder `name` and its lock, under that lock (`wait`: for the lock,
        the session having ended; else not at all when the copy is locked, held by a step or
        changed since its checkpoint). True if removed."""
        lock = self._lock(name)
        if not lock.acquire(blocking=wait):
            return False
        try:
            with self._guard:
                if not wait and (self._users.get(name) or name in self._dirty):
                    return False
                self._dirty.discard(name)
            shutil.rmtree(self.root / name, ignore_errors=True)
        finally:
            lock.release()
        with self._guard:
            self._locks.pop(name, None)
        return True


UNKNOWN_SESSION_COPY_SECONDS = 7 * 24 * 3600.0
"""A copy of a session Temporal does not know is dropped once unused this long."""


async def sweep(
    hosts: WorkspaceHosts,
    session_open: Callable[[str], Awaitable[bool | None]],
    unknown_after: float = UNKNOWN_SESSION_COPY_SECONDS,
) -> int:
    """Drop the copies of sessions that have ended: a session's end drops its copies on the
    host it has then, so a former host (the session moved away while it lived: a worker that
    stalled or restarted past HOST_START_TIMEOUT) or a host that was down when the session
    ended keeps them. `session_open(id)`: True (running), False (closed), None (Temporal does
    not know it: started under another id, or past retention) — False drops, and None drops a
    copy unused for `unknown_after` seconds (at rest a copy holds its last checkpoint: the next
    step makes it again). A session Temporal does not answer for is left for the next sweep.
    The number dropped."""
    dropped = 0
    now = time.time()
    asked: dict[str, bool | None] = {}  # a session and its sub-agents' copies: asked once
    for name, copy_for in (await off_loop(hosts.held)).items():
        owner = owning_session(copy_for)
        if owner not in asked:
            try:
                asked[owner] = await session_open(owner)
            except Exception:  # noqa: BLE001 — no answer: nothing is decided about it
                continue
        running = asked[owner]
        if running is None and now - await off_loop(hosts.last_used, name) < unknown_after:
            continue
        if running is not True and await off_loop(hosts.drop_unused, name):
            dropped += 1
    return dropped


class WorkspaceActivities:
    """`claim_workspace_host` runs on the shared queue (any worker may become the host);
    `checkpoint_workspace` on the host's own queue."""

    def __init__(self, hosts: WorkspaceHosts) -> None:
        self.hosts = hosts

    @activity.defn(name=Activities.CLAIM_HOST)
    async def claim_host(self, req: ClaimHostInput) -> ClaimHostOutput:
        async with heartbeating():
            await off_loop(self.hosts.ensure, req.session_id, req.checkpoint_id)
        return ClaimHostOutput(host_queue=self.hosts.host_queue)

    @activity.defn(name=Activities.CHECKPOINT_WORKSPACE)
    async def checkpoint_workspace(self, req: CheckpointInput) -> CheckpointOutput:
        async with heartbeating():
            return await off_loop(self.hosts.checkpoint, req.session_id, req.checkpoint_id)


def _pattern(path: str) -> re.Pattern[str]:
    return re.compile(re.escape(path.rstrip("/")) + r"(?=/|$|[^\w.\-])")


def map_paths(value: Any, src: str, dst: str) -> Any:
    """`value` (a tool's input: strings, lists, dicts) with every mention of the path `src`
    (whole path components only) turned into `dst`."""
    if src.rstrip("/") == dst.rstrip("/"):
        return value
    pattern, replacement = _pattern(src), dst.rstrip("/")
    return _mapped(value, pattern, replacement)


def _mapped(value: Any, pattern: re.Pattern[str], replacement: str) -> Any:
    if isinstance(value, str):
        return pattern.sub(lambda _: replacement, value)
    if isinstance(value, list):
        return [_mapped(v, pattern, replacement) for v in value]
    if isinstance(value, dict):
        return {k: _mapped(v, pattern, replacement) for k, v in value.items()}
    return value
