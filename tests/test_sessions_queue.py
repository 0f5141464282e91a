"""A session whose worker runs in its CLI has a task queue of its own: another CLI's worker never
runs it; `python worker.py` serves the shared queue on the dev server of $DURABLE_AGENT_HOME."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from durable_agent import wiring
from durable_agent.cli import CliError, commands, parser, watching
from durable_agent.devserver import DevServerInfo
from durable_agent.replay import ReplayServer, Turn, text_turn, tool_turn
from tests.faults.harness import wait_for
from workflows.session import query_workflow_id

ROOT = Path(__file__).resolve().parent.parent
QUEUE_HEADER = "x-test-worker-queue"


def _label(body: dict[str, Any]) -> str:
    first = json.dumps(body["messages"][0])
    return "alpha" if "alpha" in first else "beta" if "beta" in first else "?"


def _script(body: dict[str, Any], index: int) -> Turn:
    """Each session: a Bash turn (a little slow, so both sessions are in flight at once), then
    an answer."""
    label = _label(body)
    last = body["messages"][-1]["content"]
    if isinstance(last, list) and any(b.get("type") == "tool_result" for b in last):
        return text_turn(f"done {label}")
    turn = tool_turn([(f"b-{label}", "Bash", {"command": f"echo {label} >> marker"})])
    return turn.model_copy(update={"pause_before": {0: 0.5}})


@pytest.fixture
def cli_in_process(dev_env, tmp_path, monkeypatch) -> Iterator[ReplayServer]:
    """The CLI's environment in this process: the test dev server, a fake API, no explicit
    task queue; every worker the CLI builds tags its model calls with its task queue."""
    monkeypatch.setenv("TEMPORAL_ADDRESS", dev_env.client.service_client.config.target_host)
    monkeypatch.setenv("DURABLE_AGENT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DURABLE_AGENT_TASK_QUEUE", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "dummy")
    real_build_worker = wiring.build_worker

    def tagged_worker(client: Any, task_queue: str = "durable-agent", **kw: Any) -> Any:
        from activities.model import default_client

        factory = kw.pop("client_factory", default_client)

        def tagging(opts: Any) -> Any:
            return factory(opts).with_options(default_headers={QUEUE_HEADER: task_queue})

        return real_build_worker(client, task_queue, client_factory=tagging, **kw)

    monkeypatch.setattr(wiring, "build_worker", tagged_worker)
    with ReplayServer(_script) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        yield server


async def test_two_runs_each_have_their_own_queue_and_worker(
    cli_in_process, dev_env, tmp_path, monkeypatch
):
    issued: list[str] = []

    def next_id() -> str:
        issued.append(f"queue-test-{len(issued)}-{uuid.uuid4().hex[:8]}")
        return issued[-1]

    monkeypatch.setattr(commands, "new_session_id", next_id, raising=False)
    monkeypatch.setattr(watching, "new_session_id", next_id, raising=False)
    workspaces = {}
    for label in ("alpha", "beta"):
        workspaces[label] = tmp_path / label
        workspaces[label].mkdir()

    def run(label: str) -> Any:
        args = parser().parse_args(
            [
                "run",
                f"{label}: do it",
                "--workspace",
                str(workspaces[label]),
                "--allowedTools",
                "Bash",
            ]
        )
        return asyncio.ensure_future(commands.cmd_run(args))

    first = run("alpha")
    await wait_for(lambda: len(issued) == 1, 30, "the first session to be named")
    second = run("beta")
    assert await asyncio.wait_for(asyncio.gather(first, second), 120) == [0, 0]

    sessions = dict(zip(("alpha", "beta"), issued, strict=True))
    queues = {}
    for label, sid in sessions.items():
        desc = await dev_env.client.get_workflow_handle(sid).describe()
        queues[label] = desc.task_queue
        assert desc.task_queue == f"durable-agent-session-{sid}"
        child = await dev_env.client.get_workflow_handle(query_workflow_id(sid, 1)).describe()
        assert child.task_queue == desc.task_queue  # the prompt's workflow inherits it
        memo = await desc.memo()
        assert memo["task_queue"] == desc.task_queue
        assert memo["base_url"] == cli_in_process.base_url and "dummy" not in json.dumps(memo)
        assert (workspaces[label] / "marker").read_text() == f"{label}\n"
    assert queues["alpha"] != queues["beta"]
    # Every model call of a session was made by the worker of that session's queue.
    served = [(_label(b), h[QUEUE_HEADER]) for b, h in zip(
        cli_in_process.requests, cli_in_process.headers, strict=True
    )]  # fmt: skip
    assert sorted(served) == sorted([(label, queues[label]) for label in sessions for _ in "12"])

    # A finished session cannot be resumed; it says so.
    args = parser().parse_args(["resume", sessions["alpha"]])
    with pytest.raises(CliError, match="is completed; there is nothing to resume"):
        await commands.cmd_resume(args)
    with pytest.raises(CliError, match="no session nope-") as unknown:
        await commands.cmd_resume(parser().parse_args(["resume", f"nope-{uuid.uuid4()}"]))
    assert unknown.value.hint == "durable-agent list shows sessions"


def _chat(env: dict[str, str], args: list[str], stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_agent", "chat", *args], cwd=ROOT, env=env, input=stdin,
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip


async def test_chat_session_goes_on_on_its_own_queue(dev_env, tmp_path):
    """A chat whose CLI is gone: `chat --session` serves the session's own queue (with this
    environment's endpoint, and a warning that it is not the recorded one)."""
    from durable_agent.engine.contracts import SessionInput
    from durable_agent.engine.state import QueryConfig
    from workflows.session import SessionWorkflow

    sid = f"chat-{uuid.uuid4().hex[:8]}"
    queue = f"durable-agent-session-{sid}"  # as `chat` names it
    memo = {"task_queue": queue, "base_url": "http://recorded.invalid", "command": "chat"}
    await dev_env.client.start_workflow(
        SessionWorkflow.run,
        SessionInput(session_id=sid, config=QueryConfig(workspace=str(tmp_path))),
        id=sid,
        task_queue=queue,
        memo=memo,
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "DURABLE_AGENT"))}
    env.update(
        TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
        DURABLE_AGENT_HOME=str(tmp_path / "home"),
        DURABLE_AGENT_SETTINGS=str(tmp_path / "no-settings.json"),
        ANTHROPIC_API_KEY="dummy",
    )
    with ReplayServer([text_turn("hello back")]) as api:
        env["ANTHROPIC_BASE_URL"] = api.base_url
        proc = await asyncio.to_thread(_chat, env, ["--session", sid], "hello\n")
    assert proc.returncode == 0, proc.stderr
    assert "hello back" in proc.stdout and len(api.requests) == 1
    assert f"warning: session {sid} was started against http://recorded.invalid" in proc.stderr
    assert f"on task queue {queue!r}" in proc.stderr
    session = dev_env.client.get_workflow_handle_for(SessionWorkflow.run, sid)
    status = await asyncio.wait_for(session.result(), 30)  # closed at the end of the input
    assert status.last_result is not None and status.last_result.final_text == "hello back"


async def test_run_with_an_explicit_queue_or_no_worker_uses_the_shared_queue(monkeypatch):
    args = parser().parse_args(["run", "x", "--no-worker"])
    monkeypatch.delenv("DURABLE_AGENT_TASK_QUEUE", raising=False)
    assert commands.new_session_queue(args, "s1") == "durable-agent"
    monkeypatch.setenv("DURABLE_AGENT_TASK_QUEUE", "team")
    assert commands.new_session_queue(args, "s1") == "team"
    assert commands.new_session_queue(parser().parse_args(["run", "x"]), "s1") == "team"
    monkeypatch.delenv("DURABLE_AGENT_TASK_QUEUE")
    assert (
        commands.new_session_queue(parser().parse_args(["run", "x"]), "s1")
        == "durable-agent-session-s1"
    )


def _first_line(env: dict[str, str]) -> str:
    proc = subprocess.Popen(
        [sys.executable, "worker.py"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        return proc.stdout.readline().strip()
    finally:
        proc.kill()
        proc.wait()


def test_worker_py_uses_the_dev_server_of_the_state_dir(dev_env, tmp_path):
    """No TEMPORAL_ADDRESS: the dev server recorded in $DURABLE_AGENT_HOME, not localhost:7233."""
    home = tmp_path / "home"
    home.mkdir()
    address = dev_env.client.service_client.config.target_host
    info = DevServerInfo(
        pid=os.getpid(), address=address, ui_url="-", db_path="-", log_path="-"
    )  # the pid only has to be alive
    (home / "devserver.json").write_text(info.model_dump_json())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "DURABLE_AGENT"))}
    queue = f"shared-{uuid.uuid4().hex[:8]}"
    env.update(DURABLE_AGENT_HOME=str(home), DURABLE_AGENT_TASK_QUEUE=queue)
    assert _first_line(env) == f"worker on task queue {queue!r} at {address}"


def test_worker_without_a_dev_server_says_where_it_goes(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("TEMPORAL_ADDRESS", raising=False)
    monkeypatch.setenv("DURABLE_AGENT_HOME", str(tmp_path / "empty"))
    assert wiring.worker_address() == "localhost:7233"
    out = capsys.readouterr().out
    assert "no dev server is running" in out and "durable-agent server" in out
