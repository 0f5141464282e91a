"""Opening a file for a tool without ever blocking: only regular files are read or written.

A FIFO without a writer, a terminal or a socket would block the worker thread in the kernel
for good (and `off_loop` waits for it even when cancelled), so anything else is refused from
its `stat`, which never blocks; the open itself is non-blocking and checked again by `fstat`,
so a FIFO swapped in meanwhile is refused too.

The path given is already resolved and judged (`Workspace.resolve`), so no link may be
followed on the way to it: its folder is opened and checked to be that very folder, then the
name is opened in it with `O_NOFOLLOW`. A link swapped into the path after it was judged
makes the call fail instead of leading elsewhere.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

from activities.tools.base import ToolError

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def kind(mode: int) -> str:
    """What a non-regular file is, for a message."""
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def check_regular(mode: int, shown: str) -> None:
    if stat.S_ISDIR(mode):
        raise ToolError(f"{shown} is a directory, not a file; use Glob or Bash ls")
    if not stat.S_ISREG(mode):
        raise ToolError(f"{shown} is {kind(mode)}, not a regular file; it cannot be opened")


def regular_stat(path: Path, shown: str) -> os.stat_result | None:
    """The file's status, or None when nothing is there; a ToolError when it is there but
    is not a regular file (follows links: `path` is already resolved)."""
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise ToolError(f"cannot open {shown}: {exc.strerror}") from exc
    check_regular(info.st_mode, shown)
    return info


@contextmanager
def open_regular(path: Path, shown: str, write: bool = False) -> Iterator[BinaryIO]:
    """`path` opened without blocking, refused unless it is a regular file. For writing it is
    created when missing and emptied only once known to be regular."""
    flags = os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    flags |= os.O_WRONLY | os.O_CREAT if write else os.O_RDONLY
    fd = _open_unlinked(path, shown, flags)
    with os.fdopen(fd, "wb" if write else "rb") as handle:
        check_regular(os.fstat(fd).st_mode, shown)
        if write:
            os.ftruncate(fd, 0)
        yield handle


_FOLDER_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC
"""O_PATH where there is one: a folder that may be searched but not listed still opens."""


def _open_unlinked(path: Path, shown: str, flags: int) -> int:
    """`path` opened with no symbolic link followed on the way (see the module docstring)."""
    moved = (
        f"{shown} changed while it was being opened (a symbolic link was put in its path); "
        "nothing was read or written"
    )
    try:
        folder = os.open(path.parent, _FOLDER_FLAGS)
    except OSError as exc:
        raise ToolError(f"cannot open {shown}: {exc.strerror}") from exc
    try:
        if not _is_folder(folder, path.parent):
            raise ToolError(moved)
        try:
            return os.open(path.name, flags, 0o666, dir_fd=folder)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ToolError(moved) from exc
            raise ToolError(f"cannot open {shown}: {exc.strerror}") from exc
    finally:
        os.close(folder)


def _is_folder(fd: int, expected: Path) -> bool:
    """Whether the open folder `fd` is `expected` (a path with no link in it)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == str(expected)
    except OSError:  # no /proc: the same inode is the next best answer
        try:
            return os.path.samestat(os.fstat(fd), os.stat(expected, follow_symlinks=False))
        except OSError:
            return False


def read_regular(path: Path, shown: str) -> bytes:
    with open_regular(path, shown) as handle:
        return handle.read()


def write_regular(path: Path, shown: str, data: bytes) -> None:
    """Give the file `data` as its content, whole or not at all, creating it and its folders
    when missing: `data` goes to a temporary file beside it, made durable, then renamed over
    it (its mode and owner kept), so a worker killed mid-write leaves the old content or the
    new, never a file cut short (a fault campaign emptied a 6 MB file 3 times in 3 with the
    in-place write). Where a rename would change what the file is — other hard links to it,
    an owner it cannot be given back, a folder it may not create files in — it is written in
    place as before (its inode, mode and links stay)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ToolError(f"cannot create the folder of {shown}: {exc.strerror}") from exc
    if not _replace(path, shown, data, create=True):
        _write_in_place(path, shown, data)


def _write_in_place(path: Path, shown: str, data: bytes) -> None:
    with open_regular(path, shown, write=True) as handle:
        try:
            handle.write(data)
            handle.flush()
        except OSError as exc:
            raise ToolError(f"could not write {shown}: {exc.strerror}") from exc


def replace_regular(path: Path, shown: str, data: bytes) -> None:
    """Replace an existing regular file whole or not at all (a notebook cut short is no
    longer JSON): as `write_regular`, but the file must exist and is never written in place."""
    _replace(path, shown, data, create=False, in_place_ok=False)


def _temp_file(folder: int, name: str, mode: int) -> tuple[int, bool]:
    """A file to write the new content to, in `folder`: unnamed where the system allows it
    (O_TMPFILE: a process killed while writing leaves nothing in the workspace; it is linked
    as `name` just before the rename), else created as `name`. The fd and whether it is named."""
    tmpfile = getattr(os, "O_TMPFILE", 0)
    if tmpfile and os.path.isdir("/proc/self/fd"):
        try:
            return os.open(".", tmpfile | os.O_WRONLY | os.O_CLOEXEC, mode, dir_fd=folder), False
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT):
                raise
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(name, flags, mode, dir_fd=folder), True


_IN_PLACE_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
"""A temporary file the folder does not allow: the file itself may still be writable."""


def _replace(path: Path, shown: str, data: bytes, create: bool, in_place_ok: bool = True) -> bool:
    """`data` to a temporary file beside `path` (with its mode and owner), made durable, then
    renamed over it, inside the very folder `open_regular` would open. False, having written
    nothing, when the file should be written in place instead (`in_place_ok`)."""
    moved = (
        f"{shown} changed while it was being opened (a symbolic link was put in its path); "
        "nothing was written"
    )
    try:
        folder = os.open(path.parent, _FOLDER_FLAGS)
    except OSError as exc:
        raise ToolError(f"cannot open {shown}: {exc.strerror}") from exc
    temp = f".{path.name}.{secrets.token_hex(4)}.tmp"
    made = False
    try:
        if not _is_folder(folder, path.parent):
            raise ToolError(moved)
        try:
            info: os.stat_result | None = os.stat(path.name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            if not create:
                raise ToolError(f"cannot open {shown}: no such file") from None
            info = None
        except OSError as exc:
            raise ToolError(f"cannot open {shown}: {exc.strerror}") from exc
        if info is not None:
            if stat.S_ISLNK(info.st_mode):
                raise ToolError(moved)
            check_regular(info.st_mode, shown)
            if info.st_nlink > 1 and in_place_ok:
                return False  # a rename would part this name from the file's other links
        try:
            # A new file gets what open(O_CREAT, 0o666) would give it (the umask applies).
            fd, named = _temp_file(folder, temp, 0o600 if info is not None else 0o666)
        except OSError as exc:
            if in_place_ok and exc.errno in _IN_PLACE_ERRNOS:
                return False
            raise ToolError(f"could not write {shown}: {exc.strerror}") from exc
        made = named
        try:
            with os.fdopen(fd, "wb") as handle:
                if info is not None:
                    if (info.st_uid, info.st_gid) != (os.geteuid(), os.getegid()):
                        try:
                            os.fchown(fd, info.st_uid, info.st_gid)
                        except PermissionError:
                            if in_place_ok:
                                return False  # renamed, it would change hands
                    os.fchmod(fd, stat.S_IMODE(info.st_mode))
                handle.write(data)
                handle.flush()
                os.fsync(fd)
                if not named:  # only now does it get a name, for the rename
                    os.link(f"/proc/self/fd/{fd}", temp, dst_dir_fd=folder)
                    made = True
            os.replace(temp, path.name, src_dir_fd=folder, dst_dir_fd=folder)
            made = False
        except OSError as exc:
            raise ToolError(f"could not write {shown}: {exc.strerror}") from exc
        return True
    finally:
        if made:
            with suppress(OSError):
                os.unlink(temp, dir_fd=folder)
        os.close(folder)


def encoded(text: str, field: str) -> bytes:
    """`text` as UTF-8, or a ToolError naming `field` (JSON may carry a lone surrogate)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(
            f"{field} is not valid Unicode (a lone surrogate at character {exc.start})"
        ) from exc
