"""Answering tool calls that wait for a person: `chat` asks in its terminal, `approve` answers
from any other one. The wait itself is the prompt's workflow state (the `approvals` query lists
it, the `approve_tool` Update answers it), so it outlives workers and CLIs alike."""

from __future__ import annotations

import asyncio
import getpass
import socket
from typing import Any

from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.service import RPCError

from durable_agent.cli.console import Console
from durable_agent.cli.errors import CliError
from durable_agent.engine.contracts import ApprovalAnswer, ApprovalRequest, SessionStatus
from durable_agent.names import Queries, Updates

CHOICES = "[y] allow once, [a] always for this session, [n] deny (n <message> tells Claude why)"


def answerer() -> str:
    """Who answered, for the record (user@host)."""
    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except (KeyError, OSError):
        return socket.gethostname()


def reply(line: str | None, request_id: str) -> ApprovalAnswer | None:
    """An answer from what the user typed; None: not an answer (ask again). End of input
    denies (nobody is there to allow it)."""
    if line is None:
        return ApprovalAnswer(request_id=request_id, behavior="deny", message="no answer")
    word, _, rest = line.strip().partition(" ")
    word = word.lower()
    if word in ("y", "yes", "allow"):
        return ApprovalAnswer(request_id=request_id, behavior="allow", by=answerer())
    if word in ("a", "always"):
        return ApprovalAnswer(request_id=request_id, behavior="allow", always=True, by=answerer())
    if word in ("n", "no", "deny"):
        return ApprovalAnswer(
            request_id=request_id, behavior="deny", message=rest.strip(), by=answerer()
        )
    return None


def describe(request: ApprovalRequest) -> list[str]:
    return [
        f"Claude wants to run {request.summary} (request {request.request_id})",
        f"  why it asks: {request.reason}",
        f"  always would allow: {request.always}",
    ]


async def waiting(child: WorkflowHandle[Any, Any]) -> list[ApprovalRequest]:
    """The prompt's calls that wait for an answer (none when it is not running)."""
    try:
        return await asyncio.wait_for(
            child.query(Queries.APPROVALS, result_type=list[ApprovalRequest]), 10
        )
    except (RPCError, TimeoutError):
        return []


async def send(child: WorkflowHandle[Any, Any], answer: ApprovalAnswer) -> str | None:
    """The workflow's acknowledgement; None when the request is no longer waiting (answered
    from another terminal, or the prompt was interrupted)."""
    try:
        return await child.execute_update(Updates.APPROVE_TOOL, answer, result_type=str)
    except WorkflowUpdateFailedError:
        return None


async def ask_in_terminal(
    child: WorkflowHandle[Any, Any], console: Console, read_line: Any
) -> None:
    """Ask about every call that waits, one by one, in this terminal."""
    for request in await waiting(child):
        for line in describe(request):
            console.info(line)
        answer = None
        for _ in range(3):
            answer = reply(await read_line(f"{CHOICES}: "), request.request_id)
            if answer is not None:
                break
            console.info(f"please answer {CHOICES}")
        if answer is None:
            answer = ApprovalAnswer(request_id=request.request_id, behavior="deny", message="")
        ack = await send(child, answer)
        console.info(ack if ack is not None else "already answered elsewhere")


async def running_prompt(client: Client, session_id: str) -> WorkflowHandle[Any, Any]:
    """The handle of the prompt running in the session (CliError when none runs)."""
    handle = client.get_workflow_handle(session_id, result_type=SessionStatus)
    try:
        status = await asyncio.wait_for(handle.query(Queries.STATUS, result_type=SessionStatus), 10)
    except (RPCError, TimeoutError) as exc:
        raise CliError(
            f"cannot read session {session_id}", "durable-agent status shows why"
        ) from exc
    if status.running_query_id is None:
        raise CliError(f"session {session_id} runs no prompt now: nothing waits for approval")
    return client.get_workflow_handle(status.running_query_id)


def pick(requests: list[ApprovalRequest], request_id: str | None, session_id: str) -> str:
    """The request to answer: the one named, or the only one waiting."""
    ids = [r.request_id for r in requests]
    if request_id is not None:
        if request_id not in ids:
            raise CliError(
                f"no tool call {request_id!r} waits for approval in {session_id}",
                f"waiting: {', '.join(ids) or 'none'}",
            )
        return request_id
    if not ids:
        raise CliError(f"nothing waits for approval in {session_id}")
    if len(ids) > 1:
        raise CliError(
            f"{len(ids)} tool calls wait for approval in {session_id}",
            f"name one with --id ({', '.join(ids)})",
        )
    return ids[0]
