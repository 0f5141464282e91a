"""`durable-agent rewind SESSION --to N`: the workspace's files as they were before prompt N,
from the checkpoints of a travelling workspace (a shared store).

Prompt N's starting checkpoint is in its QueryWorkflow's input (the first run's, when it
continued as new), so nothing beyond the history and the store's blobs is needed; a prompt
older than the namespace's retention can no longer be rewound to, and says so."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from temporalio.client import Client
from temporalio.service import RPCError

from durable_agent.cli.connect import connect
from durable_agent.cli.console import Console
from durable_agent.cli.errors import CliError
from durable_agent.cli.sessions import query_workflow_id
from durable_agent.cli.travel import require_shared_store
from durable_agent.engine.contracts import QueryInput
from durable_agent.store import open_store


async def prompt_checkpoint(client: Client, session_id: str, number: int) -> str:
    """The checkpoint prompt `number` of the session started from."""
    qid = query_workflow_id(session_id, number)
    try:
        desc = await client.get_workflow_handle(qid).describe()
    except RPCError as exc:
        raise CliError(
            f"session {session_id} has no prompt {number} on the server: {exc.message}",
            f"durable-agent status {session_id} shows how many prompts it ran",
        ) from exc
    first = desc.raw_description.workflow_execution_info.first_run_id or desc.run_id
    history = client.get_workflow_handle(qid, run_id=first).fetch_history_events()
    async for event in history:
        started = event.workflow_execution_started_event_attributes
        values = await client.data_converter.decode_wrapper(started.input, [QueryInput])
        inp: QueryInput = values[0]
        if inp.workspace is None:
            raise CliError(
                f"prompt {number} of session {session_id} ran its tools in the workspace in "
                "place: it has no checkpoint to rewind to",
                "rewind needs a session run with a shared store (DURABLE_AGENT_STORE)",
            )
        return inp.workspace.checkpoint_id
    raise CliError(f"prompt {number} of session {session_id} has no history left")


def restore(checkpoint_id: str, local: Path) -> str:
    """Make `local` hold exactly the checkpoint's files (ignored files and .git are left);
    one line saying what changed (blocking)."""
    from durable_agent.workspace import diff, load_manifest, materialise, snapshot

    blobs = open_store().blobs()
    wanted = load_manifest(checkpoint_id, blobs)
    before = snapshot(local, blobs, max_bytes=1 << 62)  # what is here, to say what changes
    materialise(wanted, blobs, local, previous=before)
    changes = diff(before, wanted)
    return (
        f"{len(changes.added)} files put back, {len(changes.changed)} changed back, "
        f"{len(changes.deleted)} removed"
    )


async def cmd_rewind(args: argparse.Namespace) -> int:
    require_shared_store("rewind", "restores files from the checkpoints")
    console = Console()
    client = await connect(console, start_server=False)
    checkpoint = await prompt_checkpoint(client, args.session_id, args.to)
    local = args.workspace
    if local is None:
        desc = await client.get_workflow_handle(args.session_id).describe()
        local = (await desc.memo()).get("workspace")
        if not local:
            raise CliError(
                f"session {args.session_id} does not say its workspace",
                "name it: --workspace DIR",
            )
    target = Path(local)
    if not await asyncio.to_thread(target.is_dir):
        raise CliError(f"{target} is not a directory", "name the workspace: --workspace DIR")
    summary = await asyncio.to_thread(restore, checkpoint, target)
    print(f"{target}: as before prompt {args.to} of {args.session_id}: {summary}")
    return 0
