"""Test helpers: run a session end to end against a replay server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import anthropic
from temporalio.client import Client, WorkflowHandle

from activities.model import ClientOptions, ModelActivities, default_client
from activities.transcript import TranscriptStore
from durable_agent.engine.contracts import SessionInput, SessionStatus
from durable_agent.engine.state import HostedWorkspace, QueryConfig
from durable_agent.wiring import build_worker, workflow_runner
from workflows.session import SessionWorkflow

if TYPE_CHECKING:
    import pytest
    from temporalio.worker import WorkflowRunner


class FakeApi(Protocol):
    """A fake Messages API: a ReplayServer in this process, or one in a process of its own
    (bench.common.ApiProcess)."""

    @property
    def base_url(self) -> str: ...


def replay_client_factory(server: FakeApi):
    """The product's client (`default_client`: one TLS context for all) against `server`."""

    def factory(opts: ClientOptions) -> anthropic.AsyncAnthropic:
        return default_client(
            ClientOptions(api_key=opts.api_key or "test-key", base_url=server.base_url)
        )

    return factory


async def run_session(
    client: Client,
    server: FakeApi,
    store: TranscriptStore,
    workspace: Path,
    prompt: str,
    task_queue: str,
    jitter: float | None = None,
    **config: object,
) -> tuple[str, SessionStatus]:
    factory = replay_client_factory(server)
    model = None
    if jitter is not None:
        model = ModelActivities(store, factory, temporal=client, jitter=lambda: jitter)
    async with build_worker(client, task_queue, store, factory, model=model):
        session_id, handle = await start_session(
            client, workspace, task_queue, prompt, config=config
        )
        status = await handle.result()
    await record_histories(client, session_id)
    return session_id, status


async def start_session(
    client: Client,
    workspace: Path,
    task_queue: str,
    prompt: str = "go",
    close_when_idle: bool = True,
    prefix: str = "test",
    config: Mapping[str, object] | None = None,
    checkpoint_id: str | None = None,
) -> tuple[str, WorkflowHandle[SessionWorkflow, SessionStatus]]:
    """A session for `workspace` on `task_queue`, started with `prompt`; with
    `close_when_idle` it ends once that prompt is answered; with `checkpoint_id` (a shared
    store's snapshot of it) its workspace travels."""
    session_id = f"{prefix}-{uuid.uuid4()}"
    handle = await client.start_workflow(
        SessionWorkflow.run,
        SessionInput(
            session_id=session_id,
            config=QueryConfig.model_validate({"workspace": str(workspace), **(config or {})}),
            initial_prompt=prompt,
            close_when_idle=close_when_idle,
            workspace=HostedWorkspace(checkpoint_id=checkpoint_id) if checkpoint_id else None,
        ),
        id=session_id,
        task_queue=task_queue,
    )
    return session_id, handle


HISTORIES = Path(__file__).parent / "histories"


async def record_histories(client: Client, session_id: str, query: int = 1) -> None:
    """With RECORD_HISTORIES=1, keep the session's and its `query`-th prompt's histories as
    replay fixtures, named after the running test."""
    if not os.environ.get("RECORD_HISTORIES"):
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "unknown").split("::")[-1].split(" ")[0]
    test = test.replace("[", "_").replace("]", "")  # a parametrized test's id, file-name safe
    kept = (("session", session_id), ("query", f"{session_id}-q{query}"))
    for suffix, workflow_id in kept:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        (HISTORIES / f"{test.removeprefix('test_')}.{suffix}.json").write_text(history.to_json())


def worker_env(
    base_url: str, home: Path, task_queue: str, address: str | None = None, **extra: str
) -> dict[str, str]:
    """The environment of a `python worker.py` under test: this one without ANTHROPIC_* and
    TEMPORAL_* (and DURABLE_AGENT_* settings a developer may have), the fake Messages API at
    `base_url`, its own state dir and queue, no settings files; TEMPORAL_ADDRESS when given."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANTHROPIC_", "TEMPORAL_", "DURABLE_AGENT_"))
    }
    env.update(
        ANTHROPIC_BASE_URL=base_url,
        ANTHROPIC_API_KEY="dummy",
        DURABLE_AGENT_HOME=str(home),
        DURABLE_AGENT_TASK_QUEUE=task_queue,
        DURABLE_AGENT_SETTINGS=str(home / "none.json"),
        DURABLE_AGENT_TOOL_SUMMARIES="0",
    )
    if address:
        env["TEMPORAL_ADDRESS"] = address
    env.update(extra)
    return env


def start_worker_logged(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`python worker.py` in `env`, its output appended to `log`."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "worker.py"], cwd=Path(__file__).parent.parent, env=env,
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


def free_port() -> int:
    """A loopback port nobody listens on (yet)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def runner_of(monkeypatch: pytest.MonkeyPatch, mode: str | None) -> WorkflowRunner:
    """The worker's workflow runner with DURABLE_AGENT_SANDBOX=`mode` (None: unset)."""
    if mode is None:
        monkeypatch.delenv("DURABLE_AGENT_SANDBOX", raising=False)
    else:
        monkeypatch.setenv("DURABLE_AGENT_SANDBOX", mode)
    return workflow_runner()


def wait_until(condition: Callable[[], bool], seconds: float, every: float = 0.02) -> bool:
    """Ask `condition` until it holds (True) or `seconds` have passed (then its last answer).
    For blocking tests; async ones use tests.faults.harness.wait_for."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every)
    return condition()
