"""The model step checks the tool calls of an answer against the permission rules on a thread,
once each (issue 28): however long a check takes, the event loop (heartbeats, other sessions)
goes on. The check is made slow here, as a long Bash command's would be; a 10 ms ticker beside
the real activity shows any time the loop was held."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

import activities.tools.links as links_module
from activities.model import ModelActivities
from activities.transcript import TranscriptStore
from durable_agent.engine.permissions import Behavior, PermissionContext
from durable_agent.engine.state import ModelCallConfig
from durable_agent.replay import ReplayServer, tool_turn
from tests.helpers import replay_client_factory
from tests.test_event_loop import RESPONSIVE, call_input, largest_gap

SLOW = 0.5


async def test_checks_run_off_the_loop_once_per_call(
    store: TranscriptStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[str] = []
    check = links_module.check

    def slow_check(name: str, raw: dict[str, Any], ctx: PermissionContext) -> Any:
        checked.append(raw["command"])
        time.sleep(SLOW)
        return check(name, raw, ctx)

    monkeypatch.setattr(links_module, "check", slow_check)  # what the model step calls
    calls = [("b1", "Bash", {"command": "echo one"}), ("b2", "Bash", {"command": "rm two"})]
    ctx = PermissionContext(cwd=str(tmp_path), home=str(tmp_path))
    req = call_input(tmp_path).model_copy(update={"config": ModelCallConfig(permissions=ctx)})
    with ReplayServer([tool_turn(calls)]) as api:
        acts = ModelActivities(store, replay_client_factory(api))
        out, gap = await largest_gap(ActivityEnvironment().run(acts.call_model, req))
    assert gap < RESPONSIVE, f"the event loop stalled for {gap:.2f}s"
    assert checked == ["echo one", "rm two"]  # once each
    assert [c.id for c in out.tool_calls] == ["b1", "b2"]
    assert all(c.permission and c.permission.behavior == Behavior.ASK for c in out.tool_calls)
