"""Content-addressed workspace snapshots: manifests, materialisation and write-back.

A `Manifest` names every file of a tree by content digest; the bytes live in a `Blobs` store
(any store: a directory here, PostgreSQL elsewhere). `snapshot` reads a tree into a manifest,
reading and uploading only what changed since `previous`; `materialise` makes a directory hold a
manifest; `write_back` carries a run's changes onto the submitter's directory without ever
overwriting a file the submitter changed meanwhile.

Stat hints (size, mtime_ns, ino, dev) decide whether a file is re-read, as git's index does; a
file rewritten within the filesystem's timestamp granularity with the same size and inode is
not noticed (git's "racily clean" case), which a tool run seconds later does not hit.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import posixpath
import re
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Literal, NamedTuple, Protocol

from pathspec.patterns.gitignore import GitIgnorePatternError
from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern
from pydantic import BaseModel, ConfigDict, model_validator

DEFAULT_CAP = 512 * 1024 * 1024
CAP_ENV = "DURABLE_AGENT_WORKSPACE_MAX_BYTES"
LINK_MODE = 0o777  # a symlink's own mode means nothing on Linux; recorded as this
_BATCH_BYTES = 32 * 1024 * 1024  # read-ahead per `missing` call: bounds memory, not calls
_BATCH_FILES = 512
_DIGEST = re.compile(r"[0-9a-f]{64}")


class Blobs(Protocol):
    """Where file contents (and stored manifests) live, keyed by their sha256 hex digest."""

    def missing(self, digests: Iterable[str]) -> set[str]:
        """The digests among `digests` not stored yet."""
        ...

    def put(self, digest: str, data: bytes) -> None:
        """Store `data` under `digest`; storing it twice is harmless."""
        ...

    def get(self, digest: str) -> bytes:
        """The bytes under `digest`; KeyError when absent."""
        ...


class DirBlobs:
    """Blobs as files `root/ab/<digest>`, written whole (temp file, fsync, rename): a crash
    never leaves a truncated blob under a digest that `missing` would then call present."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, digest: str) -> Path:
        if not _DIGEST.fullmatch(digest):
            raise ValueError(f"not a sha256 hex digest: {digest!r}")
        return self.root / digest[:2] / digest

    def missing(self, digests: Iterable[str]) -> set[str]:
        return {d for d in digests if not self._path(d).exists()}

    def put(self, digest: str, data: bytes) -> None:
        path = self._path(digest)
        if path.exists():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{digest}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        try:
            with open(tmp, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    def get(self, digest: str) -> bytes:
        try:
            return self._path(digest).read_bytes()
        except FileNotFoundError:
            raise KeyError(digest) from None


class FileEntry(BaseModel):
    """One file or symlink. `digest`/`target`/`mode` are its identity; `size`, `mtime_ns`,
    `ino`, `dev` are local stat hints (0 when unknown) that only spare re-reading it."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["file", "symlink"]
    digest: str | None = None
    target: str | None = None
    mode: int = 0o644
    size: int = 0
    mtime_ns: int = 0
    ino: int = 0
    dev: int = 0

    def identity(self) -> dict[str, str | int | None]:
        """The fields that make two entries the same file anywhere."""
        if self.kind == "file":
            return {"kind": "file", "digest": self.digest, "mode": self.mode}
        return {"kind": "symlink", "target": self.target, "mode": self.mode}

    def hints(self) -> tuple[int, int, int, int, int]:
        return (self.size, self.mtime_ns, self.ino, self.dev, self.mode)

    @model_validator(mode="after")
    def _check(self) -> FileEntry:
        if not 0 <= self.mode <= 0o777:
            raise ValueError(f"mode {self.mode:#o} is not permission bits (0..0o777)")
        if self.kind == "file" and (self.digest is None or not _DIGEST.fullmatch(self.digest)):
            raise ValueError(f"a file needs a sha256 hex digest, got {self.digest!r}")
        if self.kind == "symlink" and not self.target:
            raise ValueError("a symlink needs a target")
        return self


class Manifest(BaseModel):
    """A tree's files keyed by POSIX path relative to its root. Directories are implied by
    their files: empty directories are not recorded (and not recreated). Compare manifests with
    `manifest_id`: `==` also compares the stat hints."""

    model_config = ConfigDict(frozen=True)

    files: dict[str, FileEntry] = {}

    @model_validator(mode="after")
    def _check(self) -> Manifest:
        for path, entry in self.files.items():
            _check_path(path)
            parent = posixpath.dirname(path)
            while parent:
                if parent in self.files:
                    raise ValueError(f"{path!r} lies under {parent!r}, which is a file")
                parent = posixpath.dirname(parent)
            if entry.kind == "symlink":
                _check_link(path, entry.target or "")
        return self


def _check_path(path: str) -> None:
    """Refuse a path that could land outside the tree or in `.git` (manifests come from a
    sandbox and are written onto the user's disk)."""
    parts = path.split("/")
    if not path or "\0" in path or path.startswith("/") or {"", ".", "..", ".git"} & set(parts):
        raise ValueError(f"unsafe manifest path {path!r}: want a normalised relative path")


def _check_link(path: str, target: str) -> None:
    lexical = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if "\0" in target or target.startswith("/") or lexical == ".." or lexical.startswith("../"):
        raise ValueError(f"symlink {path!r} -> {target!r} points outside the tree")


class Diff(BaseModel):
    """Paths added, changed (content, mode, kind or target) and deleted from `a` to `b`."""

    added: list[str] = []
    changed: list[str] = []
    deleted: list[str] = []


def diff(a: Manifest, b: Manifest) -> Diff:
    """What turns tree `a` into tree `b`, each list sorted."""
    both = set(a.files) & set(b.files)
    return Diff(
        added=sorted(set(b.files) - set(a.files)),
        changed=sorted(p for p in both if a.files[p].identity() != b.files[p].identity()),
        deleted=sorted(set(a.files) - set(b.files)),
    )


# -- identity and storage -------------------------------------------------------------------


BUCKETS = 256
"""A stored manifest is a root naming up to this many buckets, each the entries of the paths
that hash into it: a checkpoint that changed k files stores at most k buckets and the root,
not the whole list (a 10,000-file tree's list is ~1.5 MB; a bucket ~6 KB, the root ~18 KB)."""


def _bucket_of(path: str) -> str:
    return hashlib.sha256(path.encode("utf-8")).hexdigest()[:2]


def _stored(manifest: Manifest) -> tuple[bytes, dict[str, bytes]]:
    """The root blob and the bucket blobs (by digest) that store `manifest`."""
    grouped: dict[str, dict[str, dict[str, str | int | None]]] = {}
    for path, entry in manifest.files.items():
        grouped.setdefault(_bucket_of(path), {})[path] = entry.identity()
    buckets: dict[str, bytes] = {}
    names: dict[str, str] = {}
    for name, files in grouped.items():
        data = _json({"files": files})
        digest = hashlib.sha256(data).hexdigest()
        buckets[digest] = data
        names[name] = digest
    return _json({"buckets": names}), buckets


def _json(value: object) -> bytes:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8")


def manifest_id(manifest: Manifest) -> str:
    """sha256 of the stored root: two manifests with the same paths, kinds, digests, targets
    and modes have the same id."""
    root, _ = _stored(manifest)
    return hashlib.sha256(root).hexdigest()


def store_manifest(manifest: Manifest, blobs: Blobs) -> str:
    """Store the manifest's identity (a root and its buckets; only those not stored yet are
    sent); returns its id (`manifest_id`)."""
    root, buckets = _stored(manifest)
    digest = hashlib.sha256(root).hexdigest()
    wanted = {digest: root, **buckets}
    for missing in sorted(blobs.missing(wanted)):
        blobs.put(missing, wanted[missing])
    return digest


def _verified(digest: str, data: bytes) -> dict[str, object]:
    if hashlib.sha256(data).hexdigest() != digest:
        raise ValueError(f"manifest blob {digest} is corrupt: its content has another digest")
    value = json.loads(data.decode("utf-8"))
    if not isinstance(value, dict):
        raise ValueError(f"manifest blob {digest} is not a manifest")
    return value


def load_manifest(id: str, blobs: Blobs) -> Manifest:
    """The manifest stored under `id`. Sizes and stat hints are local facts, not stored: they
    come back as 0, so a snapshot given this manifest as `previous` reads every file once."""
    root = _verified(id, blobs.get(id))
    names = root.get("buckets")
    if not isinstance(names, dict):
        raise ValueError(f"manifest blob {id} names no buckets")
    get_many = getattr(blobs, "get_many", None)
    digests = sorted(set(names.values()))
    found = get_many(digests) if get_many else {d: blobs.get(d) for d in digests}
    files: dict[str, FileEntry] = {}
    for digest in digests:
        if digest not in found:
            raise KeyError(digest)
        bucket = _verified(digest, found[digest])["files"]
        assert isinstance(bucket, dict)
        files.update({p: FileEntry(**e) for p, e in bucket.items()})
    return Manifest(files=files)


# -- walking --------------------------------------------------------------------------------

_DIR_MARK = "ps_d"  # pathspec's regex group for the "/" that marks a folder match


class _Pattern(NamedTuple):
    """One .gitignore line as pathspec reads it, ready for matching a path by itself."""

    include: bool  # True ignores, False (`!`) re-includes
    regex: re.Pattern[str]
    inside: bool  # `*`, `a/**`: matches what lies inside a folder, searched as is


_Patterns = tuple[_Pattern, ...]
_Rules = tuple[tuple[str, _Patterns], ...]  # (folder relative to root, its patterns)


def _decides(patterns: _Patterns, sub: str, is_dir: bool) -> bool | None:
    """Whether the last pattern matching `sub` ignores it (None: none matches). pathspec's
    regexes also match a path by its folders (a `ps_d` "/" ends the matched folder); git
    matches the path alone, so a match must end at the path's end, with that "/" for a folder
    (tried as `sub/`) and without it for a file."""
    decision: bool | None = None
    for pattern in patterns:
        if pattern.inside:
            hit = pattern.regex.search(sub) is not None
        else:
            m = pattern.regex.search(sub + "/" if is_dir else sub)
            hit = m is not None and (m.group(_DIR_MARK) is not None) == is_dir
        if hit:
            decision = pattern.include
    return decision


def _ignored(rules: _Rules, rel: str, is_dir: bool) -> bool:
    """git's reading: the deepest .gitignore with a matching pattern decides, its last
    matching pattern wins (`!` re-includes). Ignored folders are never entered, so nothing
    under one can be re-included, as in git."""
    for base, patterns in reversed(rules):
        decision = _decides(patterns, rel[len(base) + 1 :] if base else rel, is_dir)
        if decision is not None:
            return decision
    return False


def _read_gitignore(path: str) -> _Patterns:
    """The patterns of a .gitignore (none if absent); a line git would not read as a pattern
    is skipped."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return ()  # git does not follow a symlinked .gitignore
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return ()
    patterns = []
    for line in lines:
        if line.endswith("/**/"):  # git: the folders inside, not the folder (pathspec: both)
            line += "*/"
        try:
            parsed = GitIgnoreSpecPattern(line)
        except GitIgnorePatternError:
            continue
        if parsed.include is None or parsed.regex is None:
            continue
        regex: re.Pattern[str] = parsed.regex
        inside = _DIR_MARK not in regex.groupindex
        if not inside:
            regex = re.compile(f"(?:{regex.pattern})\\Z", regex.flags)
        patterns.append(_Pattern(parsed.include, regex, inside))
    return tuple(patterns)


def _walk(root: Path) -> Iterator[tuple[str, str, os.stat_result]]:
    """(relative path, absolute path, lstat) of every non-directory entry not ignored by the
    tree's .gitignore files, `.git` excluded; symlinks (to folders too) are yielded, never
    followed. Names that are not valid UTF-8 are skipped: a manifest cannot carry them."""
    stack: list[tuple[str, str, _Rules]] = [(str(root), "", ())]
    while stack:
        folder, rel_folder, rules = stack.pop()
        patterns = _read_gitignore(os.path.join(folder, ".gitignore"))
        if patterns:
            rules = (*rules, (rel_folder, patterns))
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name, reverse=True)
        for entry in entries:
            try:
                entry.name.encode("utf-8")
            except UnicodeEncodeError:
                continue
            if entry.name == ".git":
                continue
            rel = f"{rel_folder}/{entry.name}" if rel_folder else entry.name
            st = entry.stat(follow_symlinks=False)
            is_dir = stat.S_ISDIR(st.st_mode)
            if _ignored(rules, rel, is_dir):
                continue
            if is_dir:
                stack.append((entry.path, rel, rules))
            else:
                yield rel, entry.path, st


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _link_target(root_real: str, abs_path: str, rel: str) -> str | None:
    """The target to record for an in-tree symlink, relative (an absolute in-tree target is
    rewritten relative, so the link still works where the tree is materialised); None for a
    link whose resolved target lies outside the tree, which is skipped."""
    raw = os.readlink(abs_path)
    resolved = os.path.realpath(abs_path)
    if not _within(resolved, root_real):
        return None
    if not raw.startswith("/"):
        lexical = posixpath.normpath(posixpath.join(posixpath.dirname(rel), raw))
        if lexical != ".." and not lexical.startswith("../"):
            return raw
    return posixpath.relpath(resolved, posixpath.join(root_real, posixpath.dirname(rel)))


# -- snapshot -------------------------------------------------------------------------------


class WorkspaceTooLarge(Exception):
    """The files to snapshot add up to more than the cap."""

    def __init__(self, total: int, cap: int, biggest: list[tuple[str, int]]) -> None:
        self.total, self.cap, self.biggest = total, cap, biggest
        names = ", ".join(f"{p} ({_human(n)})" for p, n in biggest)
        super().__init__(
            f"workspace is {_human(total)}, over the {_human(cap)} cap; biggest: {names}; "
            f"hint: add them to .gitignore or raise {CAP_ENV}"
        )

    def __reduce__(self) -> tuple[type[WorkspaceTooLarge], tuple[int, int, list[tuple[str, int]]]]:
        return (WorkspaceTooLarge, (self.total, self.cap, self.biggest))


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def workspace_cap() -> int:
    """The snapshot size cap in bytes: $DURABLE_AGENT_WORKSPACE_MAX_BYTES, else 512 MiB."""
    raw = os.environ.get(CAP_ENV, "").strip()
    if not raw:
        return DEFAULT_CAP
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{CAP_ENV}={raw!r} is not a byte count; hint: e.g. 1073741824") from None


def _hints(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, st.st_mode & 0o777)


def _file_entry(digest: str, st: os.stat_result, size: int) -> FileEntry:
    return FileEntry(
        kind="file", digest=digest, mode=st.st_mode & 0o777, size=size,
        mtime_ns=st.st_mtime_ns, ino=st.st_ino, dev=st.st_dev,
    )  # fmt: skip


def _read(path: str) -> tuple[bytes, os.stat_result] | None:
    """The bytes of a regular file and its fstat; None if it is gone or no longer a regular
    file. O_NONBLOCK and O_NOFOLLOW: a FIFO or symlink swapped in since the walk never blocks
    nor redirects the read."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:  # a symlink now
            return None
        raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        return f.read(), st


def snapshot(
    root: Path,
    blobs: Blobs,
    *,
    previous: Manifest | None = None,
    max_bytes: int | None = None,
    on_read: Callable[[str], None] | None = None,
) -> Manifest:
    """The manifest of `root`, its new contents uploaded to `blobs`.

    Honours the tree's .gitignore files (not .git/info/exclude nor global excludes) and skips
    `.git`. Symlinks are kept as links when they resolve inside the tree, skipped otherwise;
    FIFOs, sockets and devices are skipped unopened. A file whose stat hints equal its entry in
    `previous` keeps that entry unread (`previous` must come from the same `blobs`); the rest
    are read (`on_read(path)` each) and only digests `blobs.missing` reports are put, one
    `missing` call per batch. Raises WorkspaceTooLarge, before reading anything, when the files
    total more than `max_bytes` (default `workspace_cap()`).
    """
    cap = workspace_cap() if max_bytes is None else max_bytes
    root_real = os.path.realpath(root)
    files: list[tuple[str, str, os.stat_result]] = []
    entries: dict[str, FileEntry] = {}
    for rel, path, st in _walk(root):
        if stat.S_ISREG(st.st_mode):
            files.append((rel, path, st))
        elif stat.S_ISLNK(st.st_mode):
            target = _link_target(root_real, path, rel)
            if target is not None:
                entries[rel] = FileEntry(kind="symlink", target=target, mode=LINK_MODE)
    total = sum(st.st_size for _, _, st in files)
    if total > cap:
        biggest = sorted(((r, st.st_size) for r, _, st in files), key=lambda x: -x[1])[:5]
        raise WorkspaceTooLarge(total, cap, biggest)
    old = previous.files if previous is not None else {}
    batch: list[tuple[str, bytes]] = []
    batch_bytes = 0
    for rel, path, st in files:
        prev = old.get(rel)
        if prev is not None and prev.kind == "file" and prev.hints() == _hints(st):
            entries[rel] = prev
            continue
        got = _read(path)
        if got is None:
            continue
        data, fst = got
        if on_read is not None:
            on_read(rel)
        digest = hashlib.sha256(data).hexdigest()
        entries[rel] = _file_entry(digest, fst, len(data))
        batch.append((digest, data))
        batch_bytes += len(data)
        if len(batch) >= _BATCH_FILES or batch_bytes >= _BATCH_BYTES:
            _upload(batch, blobs)
            batch, batch_bytes = [], 0
    _upload(batch, blobs)
    return Manifest(files=dict(sorted(entries.items())))


def _upload(batch: list[tuple[str, bytes]], blobs: Blobs) -> None:
    if not batch:
        return
    todo = blobs.missing({d for d, _ in batch})
    for digest, data in batch:
        if digest in todo:
            blobs.put(digest, data)
            todo.discard(digest)


# -- materialise and write-back ---------------------------------------------------------------


class _Blocked(Exception):
    """A file or symlink stands where a path needs a folder."""


def _parents_are_folders(root: Path, rel: str) -> bool:
    """Whether every existing folder above `rel` is a real folder: nothing is read, written or
    deleted through a symlink, which could lead out of the tree."""
    folder = root
    for part in rel.split("/")[:-1]:
        folder = folder / part
        try:
            if not stat.S_ISDIR(os.lstat(folder).st_mode):
                return False
        except FileNotFoundError:
            return True
    return True


def _make_parents(root: Path, rel: str, *, replace: bool) -> None:
    """Create the folders above `rel`. A file or symlink in the way is removed when `replace`
    (materialise owns its target), else _Blocked."""
    folder = root
    for part in rel.split("/")[:-1]:
        folder = folder / part
        try:
            st = os.lstat(folder)
        except FileNotFoundError:
            folder.mkdir()
            continue
        if stat.S_ISDIR(st.st_mode):
            continue
        if not replace:
            raise _Blocked(rel)
        folder.unlink()
        folder.mkdir()


def _holds(root: Path, rel: str, entry: FileEntry | None) -> bool:
    """Whether `root/rel` holds exactly `entry` (None: nothing). Read only when the stat hints
    differ from the entry's."""
    if not _parents_are_folders(root, rel):
        return False
    path = root / rel
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return entry is None
    if entry is None:
        return False
    if entry.kind == "symlink":
        return stat.S_ISLNK(st.st_mode) and os.readlink(path) == entry.target
    if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o777 != entry.mode:
        return False
    if entry.hints() == _hints(st):
        return True
    if entry.size and entry.size != st.st_size:
        return False
    got = _read(str(path))
    return got is not None and hashlib.sha256(got[0]).hexdigest() == entry.digest


def _place(root: Path, rel: str, entry: FileEntry, blobs: Blobs) -> None:
    """Put `entry` at `root/rel` whole: written beside it, then renamed over it."""
    dest = root / rel
    tmp = dest.with_name(f".durable-agent-{os.urandom(6).hex()}.tmp")
    try:
        if entry.kind == "symlink":
            os.symlink(entry.target or "", tmp)
        else:
            digest = entry.digest or ""
            data = blobs.get(digest)
            if hashlib.sha256(data).hexdigest() != digest:
                raise ValueError(f"blob {digest} is corrupt: its content has another digest")
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            with os.fdopen(os.open(tmp, flags, 0o600), "wb") as f:
                f.write(data)
                os.fchmod(f.fileno(), entry.mode)
        if dest.is_dir() and not dest.is_symlink():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def _remove(root: Path, rel: str) -> None:
    """Delete `root/rel`, then the folders above it it leaves empty."""
    if not _parents_are_folders(root, rel):
        return
    path = root / rel
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path)
        else:
            path.unlink()
    except (FileNotFoundError, NotADirectoryError):
        return
    parent = posixpath.dirname(rel)
    while parent:
        try:
            (root / parent).rmdir()
        except OSError:
            break
        parent = posixpath.dirname(parent)


def materialise(
    manifest: Manifest, blobs: Blobs, target: Path, *, previous: Manifest | None = None
) -> Manifest:
    """Make `target` hold exactly `manifest`'s files: those of `previous` (what `target` held)
    not in `manifest` are deleted; with no `previous`, every file a snapshot of `target` would
    see (not ignored, not in `.git`) and `manifest` lacks is. A file whose stat hints equal its
    `previous` entry is not touched; the rest are compared, rewritten whole when they differ.
    Returns `manifest` with stat hints of `target`, so a snapshot given it as `previous` reads
    nothing unchanged."""
    target.mkdir(parents=True, exist_ok=True)
    old = previous.files if previous is not None else {}
    for rel in sorted(set(old) - set(manifest.files)):
        _remove(target, rel)
    refreshed: dict[str, FileEntry] = {}
    for rel, entry in sorted(manifest.files.items()):
        _make_parents(target, rel, replace=True)
        prev = old.get(rel)
        st = os.lstat(target / rel) if os.path.lexists(target / rel) else None
        fresh = (
            prev is not None and st is not None
            and prev.identity() == entry.identity() and prev.hints() == _hints(st)
        )  # fmt: skip
        if not fresh and not _holds(target, rel, entry):
            _place(target, rel, entry, blobs)
        st = os.lstat(target / rel)
        refreshed[rel] = entry.model_copy(
            update={"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino,
                    "dev": st.st_dev}
        )  # fmt: skip
    if previous is None:
        for rel, _, _ in list(_walk(target)):
            if rel not in manifest.files:
                _remove(target, rel)
    return Manifest(files=refreshed)


class WriteBack(BaseModel):
    """What `write_back` did: paths written, and paths left alone because they changed locally
    since the upload."""

    added: list[str] = []
    changed: list[str] = []
    deleted: list[str] = []
    conflicts: list[str] = []

    def summary(self) -> str:
        """One line for the user."""
        done = len(self.added) + len(self.changed) + len(self.deleted)
        text = (
            f"wrote back {_files(done)} ({len(self.added)} added, {len(self.changed)} changed, "
            f"{len(self.deleted)} deleted)"
            if done
            else "nothing to write back"
        )
        if self.conflicts:
            names = ", ".join(self.conflicts[:5])
            if len(self.conflicts) > 5:
                names += f" and {len(self.conflicts) - 5} more"
            text += f"; left {_files(len(self.conflicts))} changed here meanwhile: {names}"
        return text


def _files(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def write_back(base: Manifest, final: Manifest, blobs: Blobs, local: Path) -> WriteBack:
    """Apply the changes from `base` (what was uploaded from `local`) to `final` (what the run
    left) onto `local`. A path the change touches is written only if `local` still holds it as
    in `base` (or lacks it, for an added one); otherwise it is left as it is and listed in
    `conflicts`. A path already as in `final` is neither written nor listed."""
    d = diff(base, final)
    result = WriteBack()
    for rel in d.deleted:
        if _holds(local, rel, None):
            continue
        if not _holds(local, rel, base.files[rel]):
            result.conflicts.append(rel)
            continue
        _remove(local, rel)
        result.deleted.append(rel)
    for rel in sorted(d.added + d.changed):
        want = final.files[rel]
        if _holds(local, rel, want):
            continue
        try:
            if not _holds(local, rel, base.files.get(rel)):
                raise _Blocked(rel)
            _make_parents(local, rel, replace=False)
        except _Blocked:
            result.conflicts.append(rel)
            continue
        _place(local, rel, want, blobs)
        (result.changed if rel in base.files else result.added).append(rel)
    result.conflicts.sort()
    return result
