"""What names a session and says where it runs: its id, its task queue, its memo."""

from __future__ import annotations

import argparse
import dataclasses
import os
import uuid
from datetime import datetime
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from durable_agent import fairness
from durable_agent.cli.console import Console
from durable_agent.cli.errors import CliError
from durable_agent.engine.contracts import PromptRequest
from durable_agent.engine.state import QueryConfig

SESSION_QUEUE_PREFIX = "durable-agent-session-"
DEFAULT_TASK_QUEUE = "durable-agent"
"""The shared queue `python worker.py` serves (durable_agent.wiring.DEFAULT_TASK_QUEUE)."""
DEFAULT_BASE_URL = "https://api.anthropic.com"


def new_session_id() -> str:
    return f"session-{datetime.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"


def query_workflow_id(session_id: str, index: int) -> str:
    """The id of a session's `index`-th prompt's QueryWorkflow, as workflows.session names it
    (the CLI does not import workflows/; tests/test_cli_imports.py checks the two agree)."""
    return f"{session_id}-q{index}"


def session_queue(session_id: str) -> str:
    """The task queue of a session whose worker runs in its CLI: no other worker polls it."""
    return f"{SESSION_QUEUE_PREFIX}{session_id}"


def shared_queue() -> str:
    """The queue `python worker.py` serves: $DURABLE_AGENT_TASK_QUEUE, default `durable-agent`."""
    return os.environ.get("DURABLE_AGENT_TASK_QUEUE") or DEFAULT_TASK_QUEUE


def new_session_queue(args: argparse.Namespace, session_id: str) -> str:
    """A session served by this process's worker gets a queue of its own, so that another
    CLI's worker (with its own API endpoint and key) never runs it, and this worker runs no
    other session. --no-worker, or DURABLE_AGENT_TASK_QUEUE set explicitly, puts it on the
    shared queue for `python worker.py`. A recording run is always on its own queue: other
    workers would not record."""
    if getattr(args, "record", None):
        return session_queue(session_id)
    if args.no_worker or os.environ.get("DURABLE_AGENT_TASK_QUEUE"):
        return shared_queue()
    return session_queue(session_id)


def api_endpoint() -> str:
    return os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL


def session_memo(task_queue: str, config: QueryConfig, command: str) -> dict[str, Any]:
    """Where a session runs, for `resume` and `chat --session` (never the API key). A memo, not
    workflow input: the workflow code and its histories do not see it."""
    memo = {
        "task_queue": task_queue,
        "base_url": api_endpoint(),
        "workspace": config.workspace,
        "command": command,
    }
    if (tenant := fairness.tenant()) is not None:
        memo[fairness.TENANT_MEMO] = tenant
    return memo


def fleet_start(config: QueryConfig, task_queue: str) -> tuple[QueryConfig, dict[str, Any]]:
    """The config a session on `task_queue` starts with (its model calls on the fleet's model
    queue, when it has one and the session is on the shared queue) and the keyword arguments of
    its `start_workflow` (its tenant's fairness key): durable_agent/fairness.py."""
    model_queue = fairness.model_queue(task_queue, shared_queue())
    if model_queue is not None:
        activity = config.activity.model_copy(update={"model_task_queue": model_queue})
        config = config.model_copy(update={"activity": activity})
    return config, fairness.start_options(fairness.tenant())


@dataclasses.dataclass
class SessionPlace:
    task_queue: str
    memo: dict[str, Any]


async def find_session(client: Client, session_id: str) -> SessionPlace:
    """A running session's task queue (as the server has it) and its memo; a clear error for
    an unknown or finished one."""
    handle = client.get_workflow_handle(session_id)
    try:
        desc = await handle.describe()
    except RPCError as exc:
        raise CliError(
            f"no session {session_id}: {exc.message}", "durable-agent list shows sessions"
        ) from exc
    if desc.status != WorkflowExecutionStatus.RUNNING:
        raise CliError(
            f"session {session_id} is {state_name(desc.status)}; there is nothing to resume",
            f"durable-agent status {session_id} shows how it ended",
        )
    try:
        memo = await desc.memo()
    except Exception:  # noqa: BLE001 — an unreadable memo only costs the endpoint check
        memo = {}
    return SessionPlace(task_queue=desc.task_queue, memo=dict(memo))


def check_endpoint(console: Console, session_id: str, place: SessionPlace) -> None:
    recorded = place.memo.get("base_url")
    if recorded and recorded != api_endpoint():
        console.info(
            f"warning: session {session_id} was started against {recorded}; "
            f"it goes on against {api_endpoint()} (ANTHROPIC_BASE_URL)"
        )


def worker_hint(session_id: str, task_queue: str) -> str:
    if task_queue.startswith(SESSION_QUEUE_PREFIX):
        return f"its CLI has gone; pick it up again: durable-agent resume {session_id}"
    return f"start a worker for task queue {task_queue!r}: uv run python worker.py"


def state_name(status: WorkflowExecutionStatus | None) -> str:
    return status.name.lower() if status else "unknown"


def compact_request(prompt: str) -> PromptRequest | None:
    """`/compact [instructions]` as the session's request; None when `prompt` is not one."""
    name, _, instructions = prompt.strip().partition(" ")
    if name.lower() != "/compact":
        return None
    return PromptRequest(prompt=instructions.strip(), compact=True)
