"""Durable approval in `chat`: a tool call the rules ask about waits for the person at the
terminal (allow once / always for this session / deny with a message); `approve` answers from
another process and `status` shows what waits. Real CLI subprocesses, the replay server and a
real Temporal dev server. (A worker killed during the wait: tests/faults/test_approval_kill.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from durable_agent.cli.approving import reply
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from tests.test_cli import ROOT, cli_env
from tests.test_compaction import Script
from tests.test_permissions_e2e import results_sent, text_of

APPEND = "echo one >> marker"
NOTIFY = "cat >> notified.jsonl; echo >> notified.jsonl"


def chat(env: dict[str, str], ws: Path, lines: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_agent", "chat", "--workspace", str(ws)],
        env=env, cwd=ROOT, input=lines, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_chat_asks_and_always_holds_for_the_session_and_deny_tells_claude(dev_env, tmp_path):
    ws = tmp_path / "ws"
    (ws / ".claude").mkdir(parents=True)
    notify = {"matcher": "permission_prompt", "hooks": [{"type": "command", "command": NOTIFY}]}
    (ws / ".claude" / "settings.json").write_text(json.dumps({"hooks": {"Notification": [notify]}}))
    env = cli_env(
        tmp_path,
        ANTHROPIC_API_KEY="dummy",
        TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
    )
    turns = [
        tool_turn([("b1", "Bash", {"command": APPEND})]),
        text_turn("appended"),
        tool_turn([("b2", "Bash", {"command": APPEND}), ("b3", "Bash", {"command": "rm marker"})]),
        text_turn("kept it"),
    ]
    with ReplayServer(turns) as server:
        env["ANTHROPIC_BASE_URL"] = server.base_url
        # prompt 1, its approval ("always"), prompt 2 (b2 is not asked about), b3's denial
        proc = chat(env, ws, "append one\na\nagain, then clean up\nn keep the marker file\n")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert server.violations == [], server.violations
    assert proc.stderr.count("Claude wants to run") == 2, proc.stderr  # b1 and b3, not b2
    assert "always would allow: Bash: echo one >> marker (this exact call)" in proc.stderr
    assert (ws / "marker").read_text() == "one\none\n"  # b1 once, b2 by the session's grant
    first, second = results_sent(server, 1), results_sent(server, 3)
    assert not first["b1"].get("is_error") and not second["b2"].get("is_error")
    assert second["b3"]["is_error"]
    assert "The user denied this call: keep the marker file" in text_of(second["b3"])
    # A Notification hook (notification_type permission_prompt) ran for each wait.
    notified = [json.loads(line) for line in (ws / "notified.jsonl").read_text().splitlines()]
    assert [n["message"] for n in notified] == ["Claude needs your permission to use Bash"] * 2
    assert {n["notification_type"] for n in notified} == {"permission_prompt"}


def test_answers_typed_in_the_terminal():
    once, yes, always, word = (reply(t, "t1") for t in ("y", "yes", "a", "always"))
    assert once is not None and once.behavior == "allow" and yes is not None and not yes.always
    assert always is not None and always.always and word is not None and word.behavior == "allow"
    denied = reply("n  not in prod ", "t1")
    assert denied is not None and denied.behavior == "deny" and denied.message == "not in prod"
    assert reply("maybe", "t1") is None  # asked again
    gone = reply(None, "t1")  # end of input: nobody is there to allow it
    assert gone is not None and gone.behavior == "deny"


def test_chat_slash_commands_are_commands_not_prompts(dev_env, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    env = cli_env(
        tmp_path,
        ANTHROPIC_API_KEY="dummy",
        TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
    )
    script = Script([text_turn("hello back")])
    with ReplayServer(script) as server:
        env["ANTHROPIC_BASE_URL"] = server.base_url
        lines = "/help\n/cost\nhello\n/cost\n/status\n/compact keep greetings\n/bogus\n"
        proc = chat(env, ws, lines)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    # Only "hello" reached Claude as a prompt; /compact asked for a summary of it.
    assert len(server.requests) == 2 and script.summary_requests == 1
    assert "keep greetings" in json.dumps(server.requests[1]["messages"][-1])
    err = proc.stderr
    assert "/status   the session" in err and "this chat: $0.0000" in err
    assert "this chat: $0.0006 (100 input, 20 output" in err  # after the prompt
    assert "1 prompt(s), permission mode default" in err
    assert "last prompt: completed after 1 turn(s)" in err
    assert "compacted the conversation (manual)" in err and "unknown command /bogus" in err
