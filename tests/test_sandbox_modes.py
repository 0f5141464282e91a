"""The workflow sandbox's two modes (durable_agent/wiring.py): a worker passes the workflow
modules through (imported once per process, not once per workflow); DURABLE_AGENT_SANDBOX=strict
keeps them in the sandbox, which stops a workflow that calls something non-deterministic. The
rest of the suite runs strict (tests/conftest.py); here a session runs as a worker runs it."""

from __future__ import annotations

import importlib.machinery

import pytest

from durable_agent.replay import ReplayServer, text_turn, tool_turn
from durable_agent.wiring import WORKFLOW_MODULES, workflow_runner
from tests.helpers import run_session


def passed_through(monkeypatch: pytest.MonkeyPatch, mode: str | None) -> set[str]:
    if mode is None:
        monkeypatch.delenv("DURABLE_AGENT_SANDBOX", raising=False)
    else:
        monkeypatch.setenv("DURABLE_AGENT_SANDBOX", mode)
    return set(workflow_runner().restrictions.passthrough_modules)


def test_a_worker_passes_the_workflow_modules_through_unless_strict(monkeypatch):
    assert set(WORKFLOW_MODULES) <= passed_through(monkeypatch, None)
    assert set(WORKFLOW_MODULES) <= passed_through(monkeypatch, "")
    assert not set(WORKFLOW_MODULES) & passed_through(monkeypatch, "strict")
    assert not set(WORKFLOW_MODULES) & passed_through(monkeypatch, " Strict ")


async def test_a_session_runs_with_the_workflow_modules_passed_through(
    ts_env, store, workspace, task_queue, monkeypatch
):
    monkeypatch.delenv("DURABLE_AGENT_SANDBOX", raising=False)
    (workspace / "notes.txt").write_text("the answer is 42\n")
    imported: list[str] = []
    real_exec = importlib.machinery.SourceFileLoader.exec_module

    def counting(loader, module):  # the sandbox executes afresh a module it does not pass
        imported.append(module.__name__)
        return real_exec(loader, module)

    monkeypatch.setattr(importlib.machinery.SourceFileLoader, "exec_module", counting)
    script = [tool_turn([("r1", "Read", {"file_path": "notes.txt"})]), text_turn("it says 42")]
    with ReplayServer(script) as server:
        _, status = await run_session(
            ts_env.client, server, store, workspace, "read notes.txt", task_queue
        )
        results = [
            block
            for message in server.requests[1]["messages"]
            if isinstance(message["content"], list)
            for block in message["content"]
            if block.get("type") == "tool_result"
        ]
    assert status.last_result is not None and status.last_result.final_text == "it says 42"
    assert "the answer is 42" in str(results[0]["content"])
    assert not set(WORKFLOW_MODULES) & set(imported), imported
