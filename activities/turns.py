"""`between_turns`: what the model is told about the workspace between turns (issue 24 item 4,
the reference's attachments). After a batch of file tools it notes the files' stamps (size
and mtime) and gives the CLAUDE.md of a folder below the workspace the first time a file
under it is read; as a prompt starts it compares the stamps with the files and notes each
one that changed outside the agent since, with its current text.

Only stat calls and a few small reads, where the tools run (a travelling workspace's host
looks at its copy, the paths mapped as for a tool). Its output is recorded in the workflow's
history: a replay never looks at the files again."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from temporalio import activity

from activities.transcript import TranscriptError, TranscriptStore, off_loop
from activities.workspace import WorkspaceHosts, map_paths
from durable_agent.engine.contracts import BetweenTurnsInput, BetweenTurnsOutput
from durable_agent.engine.memory import nested
from durable_agent.engine.state import MAX_SEEN_FILES, SeenFiles
from durable_agent.names import Activities
from durable_agent.stamps import stamp

FILE_TOOLS = {"Read": "file_path", "Write": "file_path", "Edit": "file_path"}
"""The tools whose file the loop watches, by the input field naming it."""
NOTEBOOK_TOOL = ("NotebookEdit", "notebook_path")
NOTICE_LINES = 200
NOTICE_CHARS = 8_000
"""A changed file's text in its notice is cut here (the model can Read the rest)."""


def watched_path(name: str, tool_input: Mapping[str, object]) -> str | None:
    field = FILE_TOOLS.get(name) or (NOTEBOOK_TOOL[1] if name == NOTEBOOK_TOOL[0] else None)
    value = tool_input.get(field) if field else None
    return value if isinstance(value, str) and value and "\x00" not in value else None


def changed_notice(shown: str, local: Path) -> str:
    """The note for a file that changed since the agent last read or wrote it."""
    if stamp(local) is None:
        return (
            f"Note: {shown}, which you read or wrote earlier in this session, no longer exists "
            "(it was deleted or moved outside this session). Do not assume it is still there."
        )
    head = (
        f"Note: {shown} was changed outside this session since you last read or wrote it (by "
        "the user, an editor or another program). The change was intentional: take it into "
        "account and do not undo it unless asked."
    )
    try:
        with local.open("rb") as f:
            raw = f.read(NOTICE_CHARS + 1)
    except OSError:
        return head
    if b"\x00" in raw:
        return head + " It is a binary file."
    text = raw.decode("utf-8", errors="replace")
    lines = text[:NOTICE_CHARS].splitlines()[:NOTICE_LINES]
    numbered = "\n".join(f"{i:6}\t{line}" for i, line in enumerate(lines, 1))
    cut = len(raw) > NOTICE_CHARS or len(text.splitlines()) > NOTICE_LINES
    more = "\n(cut here: Read the file for the rest)" if cut else ""
    return f"{head} Its text now:\n{numbered}{more}"


def nested_memory_text(path: str, level_text: str) -> str:
    return (
        f"Contents of {path} (project memory for the folder of the file just read; follow it "
        f"for work in that folder):\n\n{level_text.strip()}"
    )


def look(
    req: BetweenTurnsInput,
    root: str,
    uses: Sequence[tuple[str, Mapping[str, object]]],
    home: Path,
) -> BetweenTurnsOutput:
    """The look itself (blocking). `root`: where the workspace is here (the host's copy, or
    `req.workspace`); `uses`: the batch's file tool calls (name, input)."""
    seen_ws = req.workspace

    def local(path: str) -> Path:
        absolute = path if os.path.isabs(path) else os.path.join(seen_ws, path)
        return Path(map_paths(os.path.normpath(absolute), seen_ws, root))

    def shown(path: str) -> str:
        absolute = path if os.path.isabs(path) else os.path.join(seen_ws, path)
        return os.path.normpath(absolute)

    stamps = dict(req.seen.stamps)
    attached = list(req.seen.attached)
    context: list[str] = []
    if req.check_changes:
        for path, was in list(stamps.items()):
            now = stamp(local(path))
            if now == was:
                continue
            context.append(changed_notice(path, local(path)))
            if now is None:
                del stamps[path]
            else:
                stamps[path] = now
    attached_here = {map_paths(a, seen_ws, root) for a in attached}
    for name, tool_input in uses:
        raw = watched_path(name, tool_input)
        if raw is None:
            continue
        path = shown(raw)
        now = stamp(local(raw))
        stamps.pop(path, None)  # the newest last
        if now is not None:
            stamps[path] = now
        if name == "Read" and req.nested_memory:
            for found in nested(local(raw), Path(root), home, attached_here):
                model_path = map_paths(found.path, root, seen_ws)
                attached.append(model_path)
                context.append(nested_memory_text(model_path, found.content))
                if (now := stamp(Path(found.path))) is not None:  # an edit of it is noted
                    stamps[model_path] = now
    while len(stamps) > MAX_SEEN_FILES:
        del stamps[next(iter(stamps))]
    return BetweenTurnsOutput(seen=SeenFiles(stamps=stamps, attached=attached), context=context)


class TurnActivities:
    def __init__(self, store: TranscriptStore, hosts: WorkspaceHosts | None = None) -> None:
        self.store = store
        self.hosts = hosts

    def _uses(self, req: BetweenTurnsInput) -> list[tuple[str, dict[str, object]]]:
        if req.assistant_uuid is None:
            return []
        uses = []
        for tool_use_id in req.tool_use_ids:
            try:
                block = self.store.tool_use(req.session_id, req.assistant_uuid, tool_use_id)
            except TranscriptError:  # a call that was never stored: nothing to look at
                continue
            uses.append((block.name, dict(block.input)))
        return uses

    def _between(self, req: BetweenTurnsInput) -> BetweenTurnsOutput:
        root = req.workspace
        if req.hosted is not None:
            if self.hosts is None:
                return BetweenTurnsOutput(seen=req.seen)
            with self.hosts.holding(req.session_id):
                tree, _ = self.hosts.ensure(req.session_id, req.hosted)
                return look(req, str(tree), self._uses(req), Path.home())
        return look(req, root, self._uses(req), Path.home())

    @activity.defn(name=Activities.BETWEEN_TURNS)
    async def between_turns(self, req: BetweenTurnsInput) -> BetweenTurnsOutput:
        return await off_loop(self._between, req)
