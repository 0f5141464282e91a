"""Sessions through the workflow paths that had no recorded history (issue 22 item 5): hooks of
every kind run from the settings snapshot (patches hook-events and stop-hooks-snapshot), a
durable approval answered by an Update, an SDK hook callback answered by an Update, and a
session closed with SessionEnd hooks. Each checks what it does; with RECORD_HISTORIES=1 it
also keeps its histories under tests/histories/, which test_replay_histories replays."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle

from activities.transcript import TranscriptStore
from durable_agent.engine.contracts import ApprovalAnswer, HookCallbackAnswer, SessionStatus
from durable_agent.engine.permissions import PermissionContext
from durable_agent.engine.state import Terminal
from durable_agent.engine.tool_hooks import tool_hook_settings
from durable_agent.names import Queries, Updates
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from durable_agent.wiring import build_worker
from tests.conftest import client_of
from tests.helpers import record_histories, replay_client_factory, start_session


def command(line: str) -> dict[str, Any]:
    return {"type": "command", "command": line}


def hooked(hooks: dict[str, Any], **config: Any) -> dict[str, Any]:
    """A prompt config carrying `hooks` as the CLI builds it: in the settings snapshot, and
    the tool events' part where the model step reads it."""
    return {
        "settings": {"hooks": hooks},
        "call": {"tool_hooks": tool_hook_settings(hooks)},
        **config,
    }


async def answered(
    client: Client,
    server: ReplayServer,
    store: TranscriptStore,
    workspace: Path,
    task_queue: str,
    config: dict[str, Any],
    answer: Any = None,
) -> tuple[str, SessionStatus]:
    """Run a one-prompt session; `answer(prompt_handle)` (if given) runs beside it, as a CLI
    or the SDK's front-end would. Histories are recorded under RECORD_HISTORIES=1."""
    async with build_worker(client, task_queue, store, replay_client_factory(server)):
        session_id, handle = await start_session(client, workspace, task_queue, config=config)
        if answer is not None:
            prompt = client.get_workflow_handle(f"{session_id}-q1")
            await asyncio.wait_for(answer(prompt), 60)
        status = await asyncio.wait_for(handle.result(), 60)
    await record_histories(client, session_id)
    return session_id, status


async def waiting(prompt: WorkflowHandle[Any, Any], query: str) -> list[dict[str, Any]]:
    """What the prompt waits for (its `query` answer), once it waits for something."""
    while True:
        try:
            found = await prompt.query(query)
        except Exception:  # noqa: BLE001 — not started yet
            found = []
        if found:
            return list(found)
        await asyncio.sleep(0.1)


async def test_settings_hooks_of_each_event_run_from_the_snapshot(
    dev_env, store, workspace, task_queue
):
    log = workspace / "events.txt"
    hooks = {
        event: [{"matcher": "Bash", "hooks": [command(f"echo {event} >> {log}")]}]
        for event in ("UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop")
    }
    turns = [tool_turn([("b1", "Bash", {"command": "echo ran > ran.txt"})]), text_turn("done")]
    with ReplayServer(turns) as server:
        _, status = await answered(
            client_of(dev_env), server, store, workspace, task_queue, hooked(hooks)
        )
    assert status.last_result is not None and status.last_result.terminal == Terminal.COMPLETED
    assert log.read_text().split() == ["UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"]
    assert (workspace / "ran.txt").read_text() == "ran\n"


async def test_a_durable_approval_is_answered_by_an_update(dev_env, store, workspace, task_queue):
    """A Bash that asks (default mode) waits for `approve_tool`; allowed, it runs once."""
    perms = PermissionContext(cwd=str(workspace), home=str(workspace))
    config = {"approvals": True, "call": {"permissions": perms.model_dump()}}

    async def approve(prompt: WorkflowHandle[Any, Any]) -> None:
        (request,) = await waiting(prompt, Queries.APPROVALS)
        assert request["tool_name"] == "Bash"
        answer = ApprovalAnswer(request_id=request["request_id"], behavior="allow", by="test")
        await prompt.execute_update(Updates.APPROVE_TOOL, answer)

    turns = [tool_turn([("b1", "Bash", {"command": "touch made.txt"})]), text_turn("done")]
    with ReplayServer(turns) as server:
        _, status = await answered(
            client_of(dev_env), server, store, workspace, task_queue, config, approve
        )
    assert status.last_result is not None and status.last_result.terminal == Terminal.COMPLETED
    assert (workspace / "made.txt").exists()
    (result,) = server.requests[1]["messages"][-1]["content"]
    assert not result.get("is_error"), result


async def test_an_sdk_hook_callback_is_answered_by_an_update(dev_env, store, workspace, task_queue):
    """A PreToolUse callback the SDK registered: the prompt waits for its answer, which
    denies the call; the model is told why and the command never runs."""
    hooks = {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "callback", "id": "cb-1"}]}]}

    async def deny(prompt: WorkflowHandle[Any, Any]) -> None:
        (request,) = await waiting(prompt, Queries.HOOK_REQUESTS)
        assert request["callback_ids"] == ["cb-1"] and request["event"] == "PreToolUse"
        verdict = {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": "not today",
            }
        }
        answer = HookCallbackAnswer(request_id=request["request_id"], outputs=[verdict])
        await prompt.execute_update(Updates.HOOK_CALLBACK_RESULT, answer)

    turns = [tool_turn([("b1", "Bash", {"command": "touch made.txt"})]), text_turn("done")]
    with ReplayServer(turns) as server:
        _, status = await answered(
            client_of(dev_env), server, store, workspace, task_queue, hooked(hooks), deny
        )
    assert status.last_result is not None and status.last_result.terminal == Terminal.COMPLETED
    assert not (workspace / "made.txt").exists()
    (result,) = server.requests[1]["messages"][-1]["content"]
    assert result.get("is_error") and "not today" in str(result["content"]), result


async def test_session_end_hooks_run_when_the_session_closes(dev_env, store, workspace, task_queue):
    log = workspace / "end.txt"
    hooks = {"SessionEnd": [{"hooks": [command(f"cat > {log}")]}]}
    with ReplayServer([text_turn("done")]) as server:
        session_id, status = await answered(
            client_of(dev_env), server, store, workspace, task_queue, hooked(hooks)
        )
    assert status.last_result is not None
    assert f'"session_id": "{session_id}"' in log.read_text().replace('":"', '": "')
