"""What a checkpoint of a travelling workspace costs after a tool batch that changed one file
of a 10,000-file repository, against copying the whole workspace, both measured in this run.

    uv run python bench/workspace_checkpoint.py [--files 10000] [--rounds 5]

The blobs go to a real PostgreSQL started for the run (tests/postgres.py) when its binaries
are installed, else to a directory. Printed: seconds and bytes per checkpoint (median of the
rounds) — the changed file's blob, the manifest bucket naming it and the manifest's root —
a full snapshot (no earlier manifest: every file read, hashed and sent) and a plain copy of
the tree (`shutil.copytree`), and the ratios."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from durable_agent.workspace import (  # noqa: E402
    Blobs,
    DirBlobs,
    Manifest,
    snapshot,
    store_manifest,
)


def make_repo(root: Path, files: int) -> int:
    """`files` source-like files of 0.5-2 KB in 100 folders; their total size."""
    total = 0
    for n in range(files):
        folder = root / f"pkg{n % 100:02d}"
        folder.mkdir(exist_ok=True)
        body = (f"def f{n}(x):\n    return x * {n}\n" * (12 + n % 40)).encode()
        (folder / f"mod{n}.py").write_bytes(body)
        total += len(body)
    return total


@contextlib.contextmanager
def blob_store(tmp: Path) -> Iterator[tuple[str, Blobs]]:
    from tests import postgres

    if postgres.available() is not None:
        yield "a directory (PostgreSQL not installed)", DirBlobs(tmp / "blobs")
        return
    from durable_agent.store.postgres import PostgresStore

    with postgres.postgres_server() as server:
        store = PostgresStore(tmp / "home", server.fresh_database())
        try:
            yield "PostgreSQL", store.blobs()
        finally:
            store.db.close()


class Counting:
    """Blobs that count the bytes put."""

    def __init__(self, inner: Blobs) -> None:
        self.inner, self.sent = inner, 0

    def missing(self, digests: object) -> set[str]:
        return self.inner.missing(digests)  # type: ignore[arg-type]

    def put(self, digest: str, data: bytes) -> None:
        self.sent += len(data)
        self.inner.put(digest, data)

    def get(self, digest: str) -> bytes:
        return self.inner.get(digest)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=5)
    opts = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="da-bench-ckpt-"))
    try:
        repo = tmp / "repo"
        repo.mkdir()
        size = make_repo(repo, opts.files)
        with blob_store(tmp) as (where, inner):
            blobs = Counting(inner)
            started = time.perf_counter()
            base: Manifest = snapshot(repo, blobs)
            store_manifest(base, blobs)
            full_seconds, full_bytes = time.perf_counter() - started, blobs.sent

            copies = []
            for n in range(opts.rounds):
                target = tmp / f"copy{n}"
                started = time.perf_counter()
                shutil.copytree(repo, target, symlinks=True)
                copies.append(time.perf_counter() - started)
                shutil.rmtree(target)

            times, sent = [], []
            previous = base
            for n in range(opts.rounds):
                changed = repo / "pkg07" / "mod7.py"
                changed.write_text(f"# edit {n}\n" + changed.read_text())
                os.utime(changed, ns=(time.time_ns(), time.time_ns()))
                blobs.sent = 0
                started = time.perf_counter()
                previous = snapshot(repo, blobs, previous=previous)
                store_manifest(previous, blobs)  # as the host's checkpoint does
                times.append(time.perf_counter() - started)
                sent.append(blobs.sent)
        checkpoint, copy = statistics.median(times), statistics.median(copies)
        print(f"workspace: {opts.files:,} files, {size / 1e6:.1f} MB; blobs in {where}")
        print(f"full snapshot (first upload):     {full_seconds:8.3f} s  {full_bytes:>12,} bytes")
        print(f"full copy (shutil.copytree):      {copy:8.3f} s  {size:>12,} bytes")
        print(
            f"checkpoint, one file changed:     {checkpoint:8.3f} s  "
            f"{int(statistics.median(sent)):>12,} bytes  (median of {opts.rounds})"
        )
        print(
            f"ratio checkpoint/full copy: time {checkpoint / copy:.3f}, "
            f"bytes {statistics.median(sent) / size:.5f}; "
            f"checkpoint/full snapshot: time {checkpoint / full_seconds:.3f}"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
