"""Workspace snapshots on real temporary trees: what is kept, what is read, what is written."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterable
from pathlib import Path

import pytest
from pydantic import ValidationError

from durable_agent.workspace import (
    CAP_ENV,
    DEFAULT_CAP,
    DirBlobs,
    FileEntry,
    Manifest,
    WorkspaceTooLarge,
    diff,
    load_manifest,
    manifest_id,
    materialise,
    snapshot,
    store_manifest,
    workspace_cap,
    write_back,
)


class RecordingBlobs(DirBlobs):
    """A real directory store that remembers its calls."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.missing_calls: list[set[str]] = []
        self.puts: list[str] = []

    def missing(self, digests: Iterable[str]) -> set[str]:
        asked = set(digests)
        self.missing_calls.append(asked)
        return super().missing(asked)

    def put(self, digest: str, data: bytes) -> None:
        self.puts.append(digest)
        super().put(digest, data)


def write(root: Path, rel: str, text: str, mode: int = 0o644) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def tree(root: Path) -> dict[str, tuple[str, str, int]]:
    """Every file and symlink under `root` (`.git` aside), read independently of the module."""
    found: dict[str, tuple[str, str, int]] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                found[rel] = ("link", os.readlink(path), 0)
            else:
                digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
                found[rel] = ("file", digest, os.stat(path).st_mode & 0o777)
    return found


@pytest.fixture
def blobs(tmp_path: Path) -> RecordingBlobs:
    return RecordingBlobs(tmp_path / "blobs")


@pytest.fixture
def src(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    write(root, "README.md", "hello\n")
    write(root, "bin/run.sh", "#!/bin/sh\necho hi\n", 0o755)
    write(root, "pkg/mod.py", "x = 1\n")
    return root


def test_gitignore_root_nested_and_negation_are_honoured_and_git_is_skipped(
    src: Path, blobs: RecordingBlobs
) -> None:
    write(src, ".gitignore", "*.log\n!keep.log\nbuild/\n/top.txt\n")
    write(src, "a.log", "x")
    write(src, "keep.log", "x")
    write(src, "build/out.o", "x")
    write(src, "top.txt", "x")
    write(src, "pkg/top.txt", "x")  # /top.txt is anchored at the root
    write(src, "pkg/.gitignore", "*.tmp\n!important.log\n")
    write(src, "pkg/a.tmp", "x")
    write(src, "pkg/important.log", "x")  # the nested negation beats the root's *.log
    write(src, "other/a.tmp", "x")  # the nested rule holds only under pkg/
    write(src, ".git/config", "[core]\n")
    write(src, "vendor/.git", "gitdir: elsewhere\n")  # a submodule's .git file
    files = set(snapshot(src, blobs).files)
    assert files == {
        ".gitignore", "README.md", "bin/run.sh", "keep.log", "other/a.tmp",
        "pkg/.gitignore", "pkg/important.log", "pkg/mod.py", "pkg/top.txt",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("rules", "kept"),
    [
        # git ls-files --others --exclude-standard gives the same on these trees
        ("*\n!*/\n!*.py\n", {"pkg/mod.py", "a/b/c.py"}),
        ("a/**\n!a/keep\n", {"README.md", "bin/run.sh", "pkg/mod.py", "a/keep"}),
        ("a/\n!a/keep\n", {"README.md", "bin/run.sh", "pkg/mod.py"}),
        ("a/**/\n", {"README.md", "bin/run.sh", "pkg/mod.py", "a/keep", "a/x.txt"}),
    ],
)
def test_gitignore_folders_and_their_contents_read_as_git_does(
    src: Path, blobs: RecordingBlobs, rules: str, kept: set[str]
) -> None:
    write(src, ".gitignore", rules)
    for rel in ("a/keep", "a/x.txt", "a/b/c.py", "a/b/d.txt"):
        write(src, rel, "x")
    assert set(snapshot(src, blobs).files) - {".gitignore"} == kept


def test_modes_and_in_tree_symlinks_are_kept_out_of_tree_ones_skipped(
    src: Path, blobs: RecordingBlobs, tmp_path: Path
) -> None:
    write(tmp_path, "outside.txt", "secret")
    (src / "link.md").symlink_to("README.md")
    (src / "pkg/up").symlink_to("../bin/run.sh")
    (src / "abs").symlink_to(src / "pkg/mod.py")  # absolute, in the tree: made relative
    (src / "dirlink").symlink_to("pkg")  # kept as a link, never entered
    (src / "dangling").symlink_to("nowhere")
    (src / "escape").symlink_to(tmp_path / "outside.txt")
    (src / "escape2").symlink_to("../outside.txt")
    files = snapshot(src, blobs).files
    assert files["bin/run.sh"].mode == 0o755 and files["README.md"].mode == 0o644
    assert files["link.md"].target == "README.md"
    assert files["pkg/up"].target == "../bin/run.sh"
    assert files["abs"].target == "pkg/mod.py"
    assert files["dirlink"].kind == "symlink" and "dirlink/mod.py" not in files
    assert files["dangling"].target == "nowhere"
    assert "escape" not in files and "escape2" not in files


def test_a_fifo_is_skipped_without_being_opened(src: Path, blobs: RecordingBlobs) -> None:
    os.mkfifo(src / "pipe")
    result: list[Manifest] = []
    worker = threading.Thread(target=lambda: result.append(snapshot(src, blobs)), daemon=True)
    worker.start()
    worker.join(timeout=5)
    assert not worker.is_alive(), "snapshot blocked on a FIFO"
    assert "pipe" not in result[0].files and "README.md" in result[0].files


def test_the_size_cap_names_the_biggest_paths_before_reading(
    src: Path, blobs: RecordingBlobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(src, "data/big.bin", "x" * 5000)
    reads: list[str] = []
    with pytest.raises(WorkspaceTooLarge) as caught:
        snapshot(src, blobs, max_bytes=4096, on_read=reads.append)
    message = str(caught.value)
    assert "\n" not in message and "data/big.bin (4.9 KiB)" in message
    assert "4.0 KiB cap" in message and CAP_ENV in message and ".gitignore" in message
    assert reads == [] and blobs.puts == []
    monkeypatch.delenv(CAP_ENV, raising=False)
    assert workspace_cap() == DEFAULT_CAP == 512 * 1024 * 1024
    monkeypatch.setenv(CAP_ENV, "4096")
    with pytest.raises(WorkspaceTooLarge):
        snapshot(src, blobs)  # the default cap is the environment's
    monkeypatch.setenv(CAP_ENV, "lots")
    with pytest.raises(ValueError, match="not a byte count"):
        workspace_cap()


def test_a_second_snapshot_reads_and_uploads_only_the_changed_file(
    src: Path, blobs: RecordingBlobs
) -> None:
    first = snapshot(src, blobs)
    assert len(blobs.missing_calls) == 1 and len(blobs.puts) == 3
    blobs.missing_calls.clear()
    blobs.puts.clear()
    write(src, "pkg/mod.py", "x = 2\n")
    reads: list[str] = []
    second = snapshot(src, blobs, previous=first, on_read=reads.append)
    assert reads == ["pkg/mod.py"]
    new_digest = hashlib.sha256(b"x = 2\n").hexdigest()
    assert blobs.missing_calls == [{new_digest}] and blobs.puts == [new_digest]
    assert diff(first, second).changed == ["pkg/mod.py"]
    reads.clear()
    snapshot(src, blobs, previous=second, on_read=reads.append)
    assert reads == []


def test_manifest_id_ignores_stat_hints_and_round_trips_through_the_store(
    src: Path, blobs: RecordingBlobs
) -> None:
    manifest = snapshot(src, blobs)
    stripped = Manifest(files={p: FileEntry(**e.identity()) for p, e in manifest.files.items()})
    assert manifest_id(stripped) == manifest_id(manifest)
    chmod = dict(manifest.files)
    chmod["README.md"] = chmod["README.md"].model_copy(update={"mode": 0o600})
    assert manifest_id(Manifest(files=chmod)) != manifest_id(manifest)
    mid = store_manifest(manifest, blobs)
    assert mid == manifest_id(manifest)
    assert manifest_id(load_manifest(mid, blobs)) == mid
    with pytest.raises(KeyError):
        blobs.get("0" * 64)


def test_storing_a_checkpoint_that_changed_one_file_sends_one_bucket_and_the_root(
    tmp_path: Path, blobs: RecordingBlobs
) -> None:
    root = tmp_path / "many"
    for n in range(2_000):
        write(root, f"d{n % 20}/f{n}.txt", f"file {n}\n")
    first = snapshot(root, blobs)
    store_manifest(first, blobs)
    blobs.puts.clear()
    write(root, "d3/f3.txt", "changed\n")
    second = snapshot(root, blobs, previous=first)
    mid = store_manifest(second, blobs)
    # the file's blob, the bucket holding its path, the root: not 2,000 entries again
    assert len(blobs.puts) == 3 and mid in blobs.puts
    sent = sum((blobs.root / d[:2] / d).stat().st_size for d in blobs.puts)
    assert sent < 20_000
    assert load_manifest(mid, blobs).files.keys() == second.files.keys()
    assert diff(load_manifest(mid, blobs), second) == diff(second, second)


@pytest.mark.parametrize(
    "files",
    [
        {"../x": {"kind": "file", "digest": "0" * 64}},
        {"/etc/passwd": {"kind": "file", "digest": "0" * 64}},
        {".git/hooks/pre-commit": {"kind": "file", "digest": "0" * 64}},
        {"a/l": {"kind": "symlink", "target": "../../out"}},
        {"a": {"kind": "file", "digest": "0" * 64}, "a/b": {"kind": "file", "digest": "0" * 64}},
    ],
)
def test_a_manifest_cannot_name_a_path_outside_the_tree(files: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Manifest.model_validate({"files": files})


def test_materialise_round_trips_and_refreshes_the_stat_hints(
    src: Path, blobs: RecordingBlobs, tmp_path: Path
) -> None:
    (src / "link.md").symlink_to("README.md")
    (src / "dirlink").symlink_to("pkg")
    manifest = snapshot(src, blobs)
    target = tmp_path / "copy"
    placed = materialise(manifest, blobs, target)
    assert tree(target) == tree(src)
    assert manifest_id(placed) == manifest_id(manifest)
    reads: list[str] = []
    again = snapshot(target, blobs, previous=placed, on_read=reads.append)
    assert reads == [] and manifest_id(again) == manifest_id(manifest)


def test_materialise_with_previous_deletes_removed_files(
    src: Path, blobs: RecordingBlobs, tmp_path: Path
) -> None:
    first = snapshot(src, blobs)
    target = tmp_path / "copy"
    placed = materialise(first, blobs, target)
    (src / "pkg/mod.py").unlink()
    (src / "pkg").rmdir()
    write(src, "pkg", "now a file\n")  # a folder turned file
    write(src, "README.md", "changed\n")
    second = snapshot(src, blobs, previous=first)
    materialise(second, blobs, target, previous=placed)
    assert tree(target) == tree(src)


def test_materialise_without_previous_deletes_extras_but_keeps_ignored_and_git(
    src: Path, blobs: RecordingBlobs, tmp_path: Path
) -> None:
    write(src, ".gitignore", "*.log\n")
    manifest = snapshot(src, blobs)
    target = tmp_path / "copy"
    write(target, "stray/extra.py", "x")
    write(target, "debug.log", "x")
    write(target, ".git/HEAD", "ref: refs/heads/main\n")
    write(target, "README.md", "stale\n")
    materialise(manifest, blobs, target)
    log = ("file", hashlib.sha256(b"x").hexdigest(), 0o644)
    assert tree(target) == {**tree(src), "debug.log": log}  # tree() leaves .git aside
    assert (target / ".git/HEAD").exists()
    assert not (target / "stray").exists()  # an emptied folder goes too


def test_write_back_applies_the_run_and_leaves_local_changes_alone(
    src: Path, blobs: RecordingBlobs, tmp_path: Path
) -> None:
    write(src, "notes.txt", "mine\n")
    write(src, "old.txt", "bye\n")
    base = snapshot(src, blobs)
    sandbox = tmp_path / "sandbox"
    placed = materialise(base, blobs, sandbox)
    write(sandbox, "pkg/new.py", "new\n")  # added
    write(sandbox, "README.md", "hello from the run\n")  # changed
    (sandbox / "bin/run.sh").chmod(0o700)  # changed: mode only
    (sandbox / "old.txt").unlink()  # deleted
    write(sandbox, "notes.txt", "the run's\n")  # changed there and here
    final = snapshot(sandbox, blobs, previous=placed)
    write(src, "notes.txt", "mine, edited meanwhile\n")

    result = write_back(base, final, blobs, src)

    assert (result.added, result.changed, result.deleted) == (
        ["pkg/new.py"], ["README.md", "bin/run.sh"], ["old.txt"]
    )  # fmt: skip
    assert result.conflicts == ["notes.txt"]
    assert (src / "notes.txt").read_text() == "mine, edited meanwhile\n"
    assert (src / "pkg/new.py").read_text() == "new\n"
    assert (src / "README.md").read_text() == "hello from the run\n"
    assert (src / "bin/run.sh").stat().st_mode & 0o777 == 0o700
    assert not (src / "old.txt").exists()
    assert result.summary() == (
        "wrote back 4 files (1 added, 2 changed, 1 deleted); "
        "left 1 file changed here meanwhile: notes.txt"
    )
    again = write_back(base, final, blobs, src)  # already applied: nothing to do
    assert again.summary() == "nothing to write back; left 1 file changed here meanwhile: notes.txt"


def test_write_back_never_overwrites_a_file_created_here_meanwhile(
    src: Path, blobs: RecordingBlobs, tmp_path: Path
) -> None:
    base = snapshot(src, blobs)
    sandbox = tmp_path / "sandbox"
    placed = materialise(base, blobs, sandbox)
    write(sandbox, "new.txt", "the run's\n")
    write(sandbox, "gone/x.txt", "the run's\n")
    final = snapshot(sandbox, blobs, previous=placed)
    write(src, "new.txt", "mine\n")
    write(src, "gone", "a file where the run made a folder\n")
    result = write_back(base, final, blobs, src)
    assert result.conflicts == ["gone/x.txt", "new.txt"] and result.added == []
    assert (src / "new.txt").read_text() == "mine\n"


def test_a_hosts_copy_and_its_lock_go_when_the_session_ends(tmp_path: Path) -> None:
    """WorkspaceHosts keeps one lock per session it holds a copy for, until `drop`."""
    from activities.transcript import TranscriptStore
    from activities.workspace import WorkspaceHosts

    store = TranscriptStore(tmp_path / "state")
    source = tmp_path / "src"
    source.mkdir()
    (source / "a.txt").write_text("alpha\n")
    checkpoint = store_manifest(snapshot(source, store.blobs()), store.blobs())
    hosts = WorkspaceHosts(store, "q/host-1")
    tree, made = hosts.ensure("s", checkpoint)
    assert made and (tree / "a.txt").read_text() == "alpha\n"
    assert "s" in hosts._locks
    hosts.drop("s")
    assert not tree.exists() and "s" not in hosts._locks
