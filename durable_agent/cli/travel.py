"""The submitter's side of a travelling workspace (a shared store, DESIGN §6): the workspace is
uploaded as the session's base snapshot when a CLI starts a session, and when a prompt ends
the files the model left are written back into it, never over a file changed here meanwhile.
Without a shared store nothing of this runs: tools work in the workspace in place."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from durable_agent.cli.console import Console
from durable_agent.cli.errors import CliError
from durable_agent.engine.state import HostedWorkspace
from durable_agent.store import open_store


def require_shared_store(command: str, reads: str) -> None:
    """A one-line error when a command that reads the shared store runs without one."""
    if not open_store().shared:
        raise CliError(
            f"{command} {reads} from a shared store, and none is set",
            "set DURABLE_AGENT_STORE=postgresql://… as for the workers that ran the session",
        )


@dataclass
class Travel:
    """What this CLI uploaded or last wrote back: the base of its next write-back."""

    local: Path
    base_id: str
    seen: Any = None
    """The local tree's last manifest (stat hints): the next snapshot reads what changed."""

    @property
    def hosted(self) -> HostedWorkspace:
        return HostedWorkspace(checkpoint_id=self.base_id)


def checkpoint_here(local: Path, previous: Any = None) -> tuple[str, Any]:
    """The files of `local` as a checkpoint in this machine's store (the shared one, or the
    blobs under DURABLE_AGENT_HOME): its id and the manifest (blocking)."""
    from durable_agent.workspace import WorkspaceTooLarge, snapshot, store_manifest

    blobs = open_store().blobs()
    try:
        manifest = snapshot(local, blobs, previous=previous)
    except WorkspaceTooLarge as exc:
        text = str(exc)
        message, _, hint = text.partition("; hint: ")
        raise CliError(
            f"the workspace {local} is too large to checkpoint: {message}",
            hint or "add what the agent does not need to .gitignore",
        ) from exc
    return store_manifest(manifest, blobs), manifest


async def upload(local: str | Path, console: Console) -> Travel | None:
    """With a shared store, the workspace's files as a checkpoint of it (None without one)."""
    if not open_store().shared:
        return None
    path = Path(local)
    base_id, seen = await asyncio.to_thread(checkpoint_here, path)
    console.info(f"workspace {path} sent to the shared store (checkpoint {base_id[:12]})")
    return Travel(local=path, base_id=base_id, seen=seen)


async def sync(travel: Travel) -> str | None:
    """Before a further prompt: the local files as a new checkpoint when they changed since
    the last upload or write-back (the user edited them, or rewound them), else None."""
    checkpoint, travel.seen = await asyncio.to_thread(checkpoint_here, travel.local, travel.seen)
    if checkpoint == travel.base_id:
        return None
    travel.base_id = checkpoint
    return checkpoint


def _write_back(base_id: str, final_id: str, local: Path) -> str:
    from durable_agent.workspace import load_manifest, write_back

    blobs = open_store().blobs()
    base, final = load_manifest(base_id, blobs), load_manifest(final_id, blobs)
    return write_back(base, final, blobs, local).summary()


async def bring_back(
    travel: Travel | None, final: HostedWorkspace | None, console: Console
) -> None:
    """Write the prompt's final files into the submitter's workspace; say what, in one line."""
    if travel is None or final is None or final.checkpoint_id == travel.base_id:
        return
    summary = await asyncio.to_thread(
        _write_back, travel.base_id, final.checkpoint_id, travel.local
    )
    console.info(f"{travel.local}: {summary}")
    travel.base_id = final.checkpoint_id


async def export(checkpoint_id: str, target: Path) -> str:
    """`durable-agent export`: a checkpoint's files into `target` (created, or written over
    where they differ; files of `target` that are not in it are left)."""
    from durable_agent.workspace import Manifest, load_manifest, write_back

    def run() -> str:
        blobs = open_store().blobs()
        final = load_manifest(checkpoint_id, blobs)
        target.mkdir(parents=True, exist_ok=True)
        return write_back(Manifest(files={}), final, blobs, target).summary()

    return await asyncio.to_thread(run)
