"""Recorded workflow histories must replay against the current workflow code (determinism).

They are histories of tests/test_streaming_tools.py and of tests that run whole sessions
(tests/helpers.run_session), recorded with `RECORD_HISTORIES=1 uv run pytest <tests>`. A change to workflow logic
that breaks one must go behind `workflow.patched`, not be fixed by re-recording.
"""

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from durable_agent.wiring import WORKFLOWS
from tests.helpers import runner_of

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def test_histories_are_committed():
    assert len(HISTORIES) >= 10


@pytest.mark.parametrize("runner", ["sandbox", "passthrough", "worker"])
@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_history_replays(path, runner, monkeypatch):
    """Under the SDK's full sandbox, with the workflow modules passed through it, and as a
    worker runs them by default (no sandbox; durable_agent/wiring.py `workflow_runner`)."""
    history = WorkflowHistory.from_json(path.stem.split(".")[0], json.loads(path.read_text()))
    if runner != "sandbox":
        replayer = Replayer(
            workflows=WORKFLOWS,
            data_converter=pydantic_data_converter,
            workflow_runner=runner_of(monkeypatch, None if runner == "worker" else runner),
        )
    else:
        replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None
