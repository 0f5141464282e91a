"""Workspaces as content-addressed snapshots, independent of where the blobs are kept.

`snapshot` reads a tree into a `Manifest` (uploading new contents to a `Blobs` store),
`materialise` makes a directory hold one, `write_back` carries a run's changes onto the
submitter's directory without overwriting what changed there meanwhile, `diff` compares two.
"""

from durable_agent.workspace.snapshot import (
    CAP_ENV,
    DEFAULT_CAP,
    Blobs,
    Diff,
    DirBlobs,
    FileEntry,
    Manifest,
    WorkspaceTooLarge,
    WriteBack,
    diff,
    load_manifest,
    manifest_id,
    materialise,
    snapshot,
    store_manifest,
    workspace_cap,
    write_back,
)

__all__ = [
    "CAP_ENV",
    "DEFAULT_CAP",
    "Blobs",
    "Diff",
    "DirBlobs",
    "FileEntry",
    "Manifest",
    "WorkspaceTooLarge",
    "WriteBack",
    "diff",
    "load_manifest",
    "manifest_id",
    "materialise",
    "snapshot",
    "store_manifest",
    "workspace_cap",
    "write_back",
]
