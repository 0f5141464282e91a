"""Two CLIs at once: the session of a CLI killed mid-call is never run by another `run`'s worker
(which has its own API endpoint and key); `durable-agent resume` finishes it on its own endpoint."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from typing import Any

from durable_agent.replay import ReplayServer, Turn, text_turn, tool_turn
from tests.faults.harness import ROOT, process_env

PROMPT_A = "orphan: write the marker"
PROMPT_B = "second: take your time"


def _answered(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]["content"]
    return isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)


def _prompt(body: dict[str, Any]) -> str:
    return json.dumps(body["messages"][0])


def script_a(body: dict[str, Any], index: int) -> Turn:
    """Server A: a Bash turn that writes "A"; the first call is held open, so that CLI 1 dies
    with the model call in flight."""
    if _answered(body):
        return text_turn("done A")
    turn = tool_turn([("a1", "Bash", {"command": "echo A >> marker"})])
    return turn.model_copy(update={"pause_before": {0: 4.0}}) if index == 0 else turn


KILLED_AT: list[float] = []
"""time.monotonic() when CLI 1 was killed."""
RETRY_WINDOW = 12.0
"""The lost model call's heartbeat timeout (8 s) has passed and its retry is due by then."""


def script_b(body: dict[str, Any], index: int) -> Turn:
    """Server B: its own session runs a Bash until the orphan's lost model call is due for a
    retry (so CLI 2's worker is there to take it, if it served the orphan's queue); any other
    request would be someone else's."""
    if PROMPT_B not in _prompt(body):
        return text_turn("wrong server")
    if _answered(body):
        return text_turn("done B")
    wait = max(0.1, KILLED_AT[0] + RETRY_WINDOW - time.monotonic())
    return tool_turn([("b1", "Bash", {"command": f"sleep {wait:.1f}; echo B >> marker"})])


def _cli(args: list[str], env: dict[str, str], **popen: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "durable_agent", *args], cwd=ROOT, env=env,
        stdin=subprocess.DEVNULL, text=True, **popen,
    )  # fmt: skip


def _wait(predicate: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {seconds:g}s waiting for {what}"
        time.sleep(0.05)


def test_an_orphaned_session_waits_for_resume_on_its_own_endpoint(own_server, tmp_path):
    ws_a, ws_b = tmp_path / "ws-a", tmp_path / "ws-b"
    ws_a.mkdir()
    ws_b.mkdir()
    with ReplayServer(script_a) as api_a, ReplayServer(script_b) as api_b:
        # No DURABLE_AGENT_TASK_QUEUE: each CLI picks the queue itself, as a user's does.
        env_a = process_env(tmp_path, own_server.address, api_a.base_url, "")
        env_b = process_env(tmp_path, own_server.address, api_b.base_url, "")
        for env in (env_a, env_b):
            del env["DURABLE_AGENT_TASK_QUEUE"]
        env_b["ANTHROPIC_API_KEY"] = "sk-ant-other-key"

        log_a = tmp_path / "cli1.err"
        with open(log_a, "w") as err:
            cli1 = _cli(
                ["run", PROMPT_A, "--workspace", str(ws_a), "--allowedTools", "Bash"],
                env_a,
                stderr=err,
            )
        try:
            _wait(lambda: len(api_a.requests) == 1, 60, "CLI 1's model call")
            cli1.kill()  # SIGKILL: its in-process worker dies with the call in flight
            cli1.wait()
            KILLED_AT[:] = [time.monotonic()]
        finally:
            cli1.kill()
        found = re.search(r"session (\S+) \(Ctrl-C", log_a.read_text())
        assert found, log_a.read_text()
        orphan = found.group(1)

        second = subprocess.run(
            [sys.executable, "-m", "durable_agent", "run", PROMPT_B, "--workspace", str(ws_b),
             "--output-format", "json", "--allowedTools", "Bash"],
            cwd=ROOT, env=env_b, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=90,
        )  # fmt: skip
        assert second.returncode == 0, second.stderr
        assert json.loads(second.stdout.splitlines()[-1])["final_text"] == "done B"
        assert [PROMPT_B in _prompt(b) for b in api_b.requests] == [True, True]
        assert (ws_b / "marker").read_text() == "B\n"
        assert not (ws_a / "marker").exists()  # the orphan did not run meanwhile
        assert len(api_a.requests) == 1

        resumed = subprocess.run(
            [sys.executable, "-m", "durable_agent", "resume", orphan, "--output-format", "json"],
            cwd=ROOT, env=env_a, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=90,
        )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout.splitlines()[-1])
    assert result["session_id"] == orphan and result["final_text"] == "done A"
    assert "warning" not in resumed.stderr  # the same endpoint as it started with
    assert (ws_a / "marker").read_text() == "A\n"  # ran once, in its own workspace
    assert all(PROMPT_A in _prompt(b) for b in api_a.requests) and len(api_a.requests) == 3
    assert len(api_b.requests) == 2
