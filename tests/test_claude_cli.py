"""`durable-agent` with Claude Code's flags, as CI scripts call `claude -p`: a real shell
script reading the stream-json result with jq, a prompt on stdin, json output, and flags we do
not support refused in one line (never ignored)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from durable_agent.replay import ErrorReply, ReplayServer, Turn, text_turn, tool_turn
from tests.system_tools import needs
from tests.test_cli import ROOT, assert_clean_error, cli_env

CI_SCRIPT = """set -euo pipefail
out=$(durable-agent -p "list the files" --output-format stream-json --allowedTools "Bash(ls:*)")
result=$(printf '%s\\n' "$out" | jq -c 'select(.type == "result")')
echo "subtype=$(jq -r .subtype <<<"$result")"
echo "is_error=$(jq -r .is_error <<<"$result")"
echo "cost=$(jq -r .total_cost_usd <<<"$result")"
echo "session=$(jq -r .session_id <<<"$result")"
echo "lines=$(printf '%s\\n' "$out" | jq -r .type | tr '\\n' ' ')"
echo "retry=$(printf '%s\\n' "$out" | jq -r 'select(.subtype == "api_retry") | .message')"
"""


def env_for(dev_env: Any, tmp_path: Path, server: ReplayServer) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "durable-agent"  # as `uv tool install` or the venv puts it on PATH
    script.write_text(f'#!/bin/sh\nexec {sys.executable} -m durable_agent "$@"\n')
    script.chmod(0o755)
    env = cli_env(
        tmp_path,
        ANTHROPIC_API_KEY="dummy",
        ANTHROPIC_BASE_URL=server.base_url,
        TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
        PYTHONPATH=str(ROOT),
    )
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    return env


def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "a.txt").write_text("hello\n")
    return ws


@needs("jq")
def test_a_ci_script_reads_the_result_with_jq(dev_env, tmp_path):
    overloaded = Turn(error=ErrorReply(status=529, type="overloaded_error", message="busy"))
    turns = [overloaded, tool_turn([("b1", "Bash", {"command": "ls"})]), text_turn("One file.")]
    with ReplayServer(turns) as server:
        env = env_for(dev_env, tmp_path, server)
        proc = subprocess.run(
            ["bash", "-c", CI_SCRIPT], cwd=workspace(tmp_path), env=env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    got = dict(line.split("=", 1) for line in proc.stdout.splitlines())
    assert got["subtype"] == "success" and got["is_error"] == "false"
    assert float(got["cost"]) > 0 and len(got["session"]) == 36  # a UUID
    # init, the 529's api_retry line, then the conversation
    assert got["lines"].split() == ["system", "system", "assistant", "user", "assistant", "result"]
    assert got["retry"].startswith("Overloaded (attempt 1)")
    assert "a.txt" in json.dumps(server.requests[2]["messages"][-1])  # ls really ran


def test_a_prompt_on_stdin_and_json_output(dev_env, tmp_path):
    turns = [text_turn("It says hello."), text_turn("Still hello.")]
    with ReplayServer(turns) as server:
        env = env_for(dev_env, tmp_path, server)
        ws = workspace(tmp_path)
        text = subprocess.run(
            ["durable-agent", "-p"], input="what is in a.txt?", cwd=ws, env=env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        as_json = subprocess.run(
            ["durable-agent", "-p", "again", "--output-format", "json", "--max-turns", "3"],
            cwd=ws, env=env, capture_output=True, text=True, timeout=120,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    assert text.returncode == 0 and text.stdout == "It says hello.\n", text.stderr
    assert "what is in a.txt?" in json.dumps(server.requests[0]["messages"])
    assert as_json.returncode == 0, as_json.stderr
    result = json.loads(as_json.stdout)  # the result object alone
    assert result["type"] == "result" and result["result"] == "Still hello."
    assert result["subtype"] == "success" and result["terminal_reason"] == "completed"
    assert {"duration_ms", "duration_api_ms", "usage", "modelUsage", "uuid"} <= result.keys()
    # `list` shows how it ended, its prompt and workspace, newest first.
    listed = subprocess.run(
        ["durable-agent", "list", "--json", "--limit", "200"], env=env, capture_output=True,
        text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    (row,) = [r for r in rows if r["session_id"] == result["session_id"]]
    assert row["outcome"] == "completed" and row["prompt"] == "again"
    assert row["workspace"] == str(ws) and row["command"] == "claude"
    assert [r["started"] for r in rows] == sorted((r["started"] for r in rows), reverse=True)


def test_resume_and_fork_session(dev_env, tmp_path):
    turns = [text_turn("Noted."), text_turn("Forked."), text_turn("Original.")]
    with ReplayServer(turns) as server:
        env = env_for(dev_env, tmp_path, server)
        ws = workspace(tmp_path)

        def run(*flags: str) -> dict[str, Any]:
            proc = subprocess.run(
                ["durable-agent", "-p", *flags, "--output-format", "json"], cwd=ws, env=env,
                capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
            return json.loads(proc.stdout)

        first = run("remember: blue")
        fork = run("what colour? (fork)", "--resume", first["session_id"], "--fork-session")
        original = run("what colour? (original)", "--resume", first["session_id"])
        # Another machine (its own state dir, the same Temporal server) lacks the transcript:
        # it refuses in one line instead of going on without the conversation.
        elsewhere = subprocess.run(
            ["durable-agent", "-p", "and here?", "--resume", first["session_id"]], cwd=ws,
            env={**env, "DURABLE_AGENT_HOME": str(tmp_path / "other-machine")},
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    assert_clean_error(elsewhere, f"session {first['session_id']}'s transcript is not in this")
    assert len(server.requests) == 3
    assert fork["session_id"] != first["session_id"] == original["session_id"]
    forked, resumed = (str(r["messages"]) for r in server.requests[1:])
    assert "remember: blue" in forked and "remember: blue" in resumed
    assert "(fork)" not in resumed  # the original session did not see the fork's prompt


def test_max_budget_usd_stops_the_prompt(dev_env, tmp_path):
    # Each replayed call costs $0.0006 at Sonnet's prices (100 tokens in, 20 out).
    turns = [tool_turn([("b1", "Bash", {"command": "ls"})]), text_turn("never sent")]
    with ReplayServer(turns) as server:
        env = env_for(dev_env, tmp_path, server)
        proc = subprocess.run(
            ["durable-agent", "-p", "list", "--output-format", "json", "--max-budget-usd", "0.0005",
             "--allowedTools", "Bash"],
            cwd=workspace(tmp_path), env=env, capture_output=True, text=True, timeout=120,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    assert result["subtype"] == "error_max_budget_usd" and result["is_error"]
    assert result["terminal_reason"] == "max_budget" and len(server.requests) == 1
    assert result["total_cost_usd"] == pytest.approx(0.0006)


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--mcp-config", "servers.json"], "--mcp-config servers.json: no such file"),
        (["--json-schema", "{}"], "--json-schema is not supported"),
        (["--fork-session"], "--fork-session forks the session of --resume or --continue"),
        (["--frobnicate"], "unknown option --frobnicate"),
        (["--session-id", "nope"], "--session-id 'nope' is not a UUID"),
    ],
)
def test_unsupported_flags_are_refused_in_one_line(tmp_path, flags, needle):
    proc = subprocess.run(
        [sys.executable, "-m", "durable_agent", "-p", "hi", *flags], cwd=ROOT,
        env=cli_env(tmp_path), capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert_clean_error(proc, needle)
