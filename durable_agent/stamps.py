"""A file's stamp: what says it changed (the between-turn notices, activities/turns.py).

By content (size and a hash) up to STAMP_HASH_BYTES, so that a travelling workspace's copy,
made again on another host with other mtimes, does not look changed; by size and mtime
above that. Never opens anything but a regular file (a FIFO would block)."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

STAMP_HASH_BYTES = 4 * 1024 * 1024


def stamp(path: Path) -> str | None:
    """The stamp of a regular file; None when there is none (missing, a folder, a FIFO)."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return None
        if st.st_size > STAMP_HASH_BYTES:
            return f"{st.st_size}:m{st.st_mtime_ns}"
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            digest = hashlib.sha256(f.read(STAMP_HASH_BYTES + 1)).hexdigest()[:20]
    except OSError:
        return None
    return f"{st.st_size}:{digest}"
