"""The workflow sandbox's modes (durable_agent/wiring.py): by default a worker runs its
workflows without the sandbox; DURABLE_AGENT_SANDBOX=passthrough runs them in it with the
workflow modules passed through (imported once per process, not once per workflow); `strict`
keeps those modules in the sandbox, which stops a workflow that calls something
non-deterministic. The rest of the suite runs strict (tests/conftest.py); here a session runs
as a worker runs it, and with the modules passed through."""

from __future__ import annotations

import importlib.machinery

import pytest
from temporalio.worker import UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from durable_agent.replay import ReplayServer, text_turn, tool_turn
from durable_agent.wiring import WORKFLOW_MODULES, workflow_runner
from tests.helpers import run_session, runner_of


def passed_through(monkeypatch: pytest.MonkeyPatch, mode: str | None) -> set[str]:
    runner = runner_of(monkeypatch, mode)
    assert isinstance(runner, SandboxedWorkflowRunner)
    return set(runner.restrictions.passthrough_modules)


def test_the_sandbox_is_off_unless_asked_and_strict_unless_passthrough(monkeypatch):
    for mode in (None, "", " Off "):
        assert isinstance(runner_of(monkeypatch, mode), UnsandboxedWorkflowRunner), mode
    assert set(WORKFLOW_MODULES) <= passed_through(monkeypatch, "passthrough")
    assert set(WORKFLOW_MODULES) <= passed_through(monkeypatch, " PassThrough ")
    assert not set(WORKFLOW_MODULES) & passed_through(monkeypatch, "strict")
    assert not set(WORKFLOW_MODULES) & passed_through(monkeypatch, " Strict ")
    assert not set(WORKFLOW_MODULES) & passed_through(monkeypatch, "stirct")  # a typo: strict


async def test_a_session_runs_with_the_workflow_modules_passed_through(
    ts_env, store, workspace, task_queue, monkeypatch
):
    monkeypatch.setenv("DURABLE_AGENT_SANDBOX", "passthrough")
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


async def test_a_session_runs_without_a_sandbox_by_default(
    ts_env, store, workspace, task_queue, monkeypatch
):
    monkeypatch.delenv("DURABLE_AGENT_SANDBOX", raising=False)
    assert isinstance(workflow_runner(), UnsandboxedWorkflowRunner)
    (workspace / "notes.txt").write_text("the answer is 42\n")
    script = [tool_turn([("r1", "Read", {"file_path": "notes.txt"})]), text_turn("it says 42")]
    with ReplayServer(script) as server:
        _, status = await run_session(
            ts_env.client, server, store, workspace, "read notes.txt", task_queue
        )
    assert status.last_result is not None and status.last_result.final_text == "it says 42"
    assert "the answer is 42" in str(server.requests[1]["messages"])
