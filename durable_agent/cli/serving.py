"""What a command that starts or serves a session sets up: its config, a Temporal client and,
unless --no-worker, a worker in this process. Only a worker imports the worker's modules
(durable_agent.wiring: workflows, activities, anthropic, temporalio.worker)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from temporalio.client import Client

from durable_agent import temporal_config, warm
from durable_agent.cli.args import build_config, controls_for, workspace_dir
from durable_agent.cli.connect import connect, require_api_key
from durable_agent.cli.console import Console
from durable_agent.cli.errors import CliError
from durable_agent.cli.following import follow_with
from durable_agent.cli.sessions import SessionPlace, api_endpoint, check_endpoint
from durable_agent.engine.state import Attachments, QueryConfig
from durable_agent.paths import state_home

WATCH_SECONDS = 1.0
"""How often a run served by the warm worker looks whether that worker still lives."""


@contextlib.asynccontextmanager
async def serving(
    client: Client, console: Console, session_id: str, place: SessionPlace, no_worker: bool
) -> AsyncIterator[None]:
    """A worker in this process on an existing session's queue (unless --no-worker), with this
    environment's ANTHROPIC_* settings."""
    task_queue = place.task_queue
    if no_worker:
        console.info(f"following session {session_id}; a worker on {task_queue!r} must serve it")
        yield
        return
    from durable_agent.wiring import build_worker

    check_endpoint(console, session_id, place)
    async with build_worker(client, task_queue) as worker:
        follow_with(client, worker)
        console.info(f"resuming session {session_id} on task queue {task_queue!r}")
        yield


async def warm_worker_for(args: argparse.Namespace) -> warm.WarmRecord | None:
    """The warm worker that can serve this command's new session: only on the embedded dev
    server, with a worker of this process's own kind (not --no-worker, --record or an explicit
    DURABLE_AGENT_TASK_QUEUE), and only one of this environment and code. One still starting
    (spawned by `server` or an earlier run moments ago) is waited for, up to
    WARM_START_PATIENCE: it is further along than a worker this process would start."""
    if not warm_eligible(args):
        return None
    home = state_home()
    found = warm.find(home)
    deadline = time.monotonic() + WARM_START_PATIENCE
    while found is None and time.monotonic() < deadline and warm.starting(home) is not None:
        await asyncio.sleep(0.05)
        found = warm.find(home)
    return found


WARM_START_PATIENCE = 15.0
"""Seconds a run waits for a starting warm worker before it starts a worker of its own."""


def warm_eligible(args: argparse.Namespace) -> bool:
    if args.no_worker or getattr(args, "record", None):
        return False
    return not (temporal_config.external() or os.environ.get("DURABLE_AGENT_TASK_QUEUE"))


@contextlib.asynccontextmanager
async def served_warm(
    client: Client, console: Console, found: warm.WarmRecord
) -> AsyncIterator[None]:
    """Follow a session the warm worker serves; if that worker dies meanwhile, this process
    starts a worker on its queue and takes the session over (same environment, same code)."""

    async def watch() -> None:
        while warm.is_warm_worker(found.pid):  # noqa: ASYNC110 — a process, no event to wait on
            await asyncio.sleep(WATCH_SECONDS)
        from durable_agent.wiring import build_worker

        console.info(f"the warm worker (pid {found.pid}) stopped; this process serves the session")
        async with build_worker(client, found.task_queue) as worker:
            follow_with(client, worker)
            await asyncio.Event().wait()

    console.info(f"served by the warm worker (pid {found.pid})")
    watcher = asyncio.create_task(watch())
    try:
        yield
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


@contextlib.asynccontextmanager
async def prepared(
    args: argparse.Namespace,
    console: Console,
    task_queue: str | None,
    record: Path | None = None,
) -> AsyncIterator[tuple[Client, QueryConfig]]:
    """Config from the options, a Temporal client, and (unless --no-worker) a worker in this
    process on `task_queue` for the duration (None: the client only, for the caller to find
    the queue)."""
    workspace = workspace_dir(args.workspace)
    config = build_config(args, workspace, controls_for(args, workspace))
    from durable_agent.engine.memory import memory_text
    from durable_agent.environment import gather, memory_files, memory_stamps

    environment = await asyncio.to_thread(gather, Path(config.workspace))
    files = await asyncio.to_thread(
        memory_files, Path(config.workspace), getattr(args, "setting_sources", None)
    )
    remembered = memory_text(files)
    stamps = await asyncio.to_thread(memory_stamps, Path(config.workspace), files)
    from durable_agent.skills import session_skills

    found = await asyncio.to_thread(
        session_skills, Path(config.workspace), getattr(args, "setting_sources", None)
    )
    for warning in found.warnings():
        console.info(warning)
    from durable_agent.agents import AgentsFlagError, session_agents

    try:
        agents = await asyncio.to_thread(
            session_agents,
            Path(config.workspace),
            getattr(args, "agents", None),
            getattr(args, "setting_sources", None),
        )
    except AgentsFlagError as exc:
        raise CliError(str(exc), "see durable-agent run --help for its shape") from None
    for warning in agents.warnings:
        console.info(warning)
    from durable_agent.mcp.config import load_servers

    servers = await asyncio.to_thread(
        load_servers,
        config.workspace,
        getattr(args, "mcp_config", None) or [],
        bool(getattr(args, "strict_mcp_config", False)),
        config.settings or {},
    )
    for left in servers.left_out:
        console.info(f"MCP server {left.name} ({left.source}) not loaded: {left.reason}")
    config = config.model_copy(update={"mcp_servers": servers.servers})
    config = config.model_copy(
        update={
            "call": config.call.model_copy(
                update={
                    "environment": environment,
                    "memory": remembered,
                    "skills": found.infos(),
                    "agents": agents.found,
                }
            )
        }
    )
    wanted = os.environ.get(SUMMARIES_ENV, "")
    summaries = wanted == "1" or (getattr(args, "command", None) == "chat" and wanted != "0")
    config = config.model_copy(
        update={"attachments": attachments(args, stamps), "tool_summaries": summaries}
    )
    if not args.no_worker:
        require_api_key()
    client = await connect(console)
    async with AsyncExitStack() as stack:
        if not args.no_worker and task_queue is not None:
            from activities.model import default_client
            from durable_agent.wiring import build_worker

            factory = default_client
            if record is not None:
                factory = _recording(stack, record, console)
            if warm_eligible(args):
                # none matched this environment and code (warm_worker_for): one starts beside
                # this run, so that the next run from this shell needs no worker of its own
                warm.spawn(state_home())
            worker = build_worker(client, task_queue, client_factory=factory)
            follow_with(client, await stack.enter_async_context(worker))
        yield client, config


def _recording(stack: AsyncExitStack, cassette: Path, console: Console) -> Any:
    """Send the model calls through a recording proxy (the run is on its own task queue, so
    no other worker, which would not record, takes it)."""
    from activities.model import ClientOptions, default_client
    from durable_agent.replay.record import RecordingProxy

    if cassette.exists():
        raise CliError(f"{cassette} exists already", "choose a new file for --record")
    proxy = RecordingProxy(cassette, api_endpoint()).start()
    stack.callback(proxy.stop)
    console.info(f"recording the model calls to {cassette}")

    def factory(opts: ClientOptions) -> Any:
        return default_client(dataclasses.replace(opts, base_url=proxy.base_url))

    return factory


SUMMARIES_ENV = "DURABLE_AGENT_TOOL_SUMMARIES"
"""`1`: one-line summaries of tool batches as progress lines outside `chat` too; `0`: not
even in `chat` (where they are on)."""


def attachments(args: argparse.Namespace, memory: dict[str, str]) -> Attachments:
    """What the loop adds between turns: a folder's CLAUDE.md when the project memory loads
    (`--setting-sources`), notes on files changed outside the agent (the memory files of the
    system prompt, `memory`, among them)."""
    from durable_agent.environment import setting_sources

    project = "project" in setting_sources(getattr(args, "setting_sources", None))
    return Attachments(nested_memory=project, changed_files=True, memory_stamps=memory)
