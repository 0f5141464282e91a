"""What a newcomer meets in a first hour with the CLI (issue 22, item 6): usage errors that
say what went wrong in one line, a --help that shows the drop-in use and hides internals, a
missing bubblewrap named by the CLI, and `list`/`tail` that make sense of the demo's session."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

from tests.system_tools import path_without
from tests.test_cli import ROOT, cli_env, durable_agent


def one_line_error(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 2 and lines[1].startswith("hint: "), stderr
    assert "usage:" not in stderr and "Traceback" not in stderr, stderr
    return stderr


def test_a_rule_flag_that_swallows_the_prompt_says_so(tmp_path):
    proc = durable_agent(["run", "--allowedTools", "Edit", "fix it"], cli_env(tmp_path))
    assert proc.returncode == 2
    err = one_line_error(proc.stderr)
    assert "--allowedTools took the prompt as one more rule" in err, err
    assert "--allowedTools=Edit" in err and "put the prompt first" in err, err


def test_an_unknown_flag_is_run_s_error_in_one_line(tmp_path):
    for args in (["run", "--wrong-flag"], ["run", "hi", "--wrong-flag"]):
        proc = durable_agent(args, cli_env(tmp_path))
        assert proc.returncode == 2
        err = one_line_error(proc.stderr)
        assert "durable-agent run: error: unrecognized arguments: --wrong-flag" in err, err
        assert "durable-agent run --help" in err, err


def test_an_unknown_command_does_not_list_internal_ones(tmp_path):
    proc = durable_agent(["bogus"], cli_env(tmp_path))
    err = one_line_error(proc.stderr)
    assert "invalid choice: 'bogus'" in err and "warm-worker" not in err, err


def test_help_shows_the_drop_in_use_and_hides_the_warm_worker(tmp_path):
    proc = durable_agent(["--help"], cli_env(tmp_path))
    assert proc.returncode == 0
    assert 'durable-agent -p "PROMPT"' in proc.stdout and "durable-agent -p --help" in proc.stdout
    assert "warm-worker" not in proc.stdout, proc.stdout
    claude_help = durable_agent(["-p", "--help"], cli_env(tmp_path))
    assert claude_help.returncode == 0 and "--output-format" in claude_help.stdout


def test_a_sandbox_without_bubblewrap_is_named_by_the_cli(tmp_path):
    env = cli_env(tmp_path, ANTHROPIC_API_KEY="k", TEMPORAL_ADDRESS="127.0.0.1:1")
    env["PATH"] = path_without(tmp_path, "bwrap")
    proc = durable_agent(["run", "hi", "--sandbox", "--workspace", str(tmp_path)], env)
    assert proc.returncode == 2
    err = one_line_error(proc.stderr)
    assert "the Bash sandbox is on" in err and "bubblewrap is not installed" in err, err
    assert "apt-get install bubblewrap" in err, err


DEV_MODULES = ("pytest", "_pytest", "pytest_asyncio", "pytest_timeout", "claude_agent_sdk", "mypy")
WITHOUT_DEV = f"""
import sys
for name in {DEV_MODULES!r}:
    sys.modules[name] = None  # importing it raises ImportError, as without the dev group
from durable_agent.cli import main
main(sys.argv[1:])
"""


def test_the_demo_is_listed_with_its_workspace_and_tail_shows_how_it_ended(dev_env, tmp_path):
    """The demo runs without the dev dependency group (`uv run --no-dev durable-agent demo`)."""
    env = cli_env(tmp_path, TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host)
    demo = subprocess.run(  # as `uv run --no-dev durable-agent demo` runs it: no dev group
        [sys.executable, "-c", WITHOUT_DEV, "demo", "--output-format", "json"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stderr
    session_id = json.loads(demo.stdout.strip().splitlines()[-1])["session_id"]
    listed = durable_agent(["list", "--json", "--limit", "200"], env)
    row = next(r for r in json.loads(listed.stdout) if r["session_id"] == session_id)
    assert row["workspace"] and "durable-agent-demo-" in row["workspace"], row
    assert row["command"] == "demo", row
    tail = durable_agent(["tail", session_id], env, timeout=60)
    assert tail.returncode == 0, tail.stderr
    assert f"session {session_id} has ended (completed)" in tail.stderr, tail.stderr
    assert "completed after 5 turn(s)" in tail.stderr, tail.stderr
    assert "All 3 tests pass now." in tail.stdout, tail.stdout
    assert "cannot read session" not in tail.stderr


def test_a_refused_api_connection_shows_its_hint_with_the_first_retry(dev_env, tmp_path):
    """Not after the minutes of retries the final error comes at: with the first notice."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = cli_env(
        tmp_path,
        ANTHROPIC_API_KEY="k",
        ANTHROPIC_BASE_URL=f"http://127.0.0.1:{port}",
        TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "durable_agent", "run", "hi", "--workspace", str(tmp_path)],
        env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any("hint:" in line for line in lines):
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
    finally:
        proc.send_signal(signal.SIGINT)  # interrupt the prompt; the CLI then ends
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
    retries = [i for i, line in enumerate(lines) if "ConnectionError (attempt" in line]
    assert retries and "(attempt 1)" in lines[retries[0]], lines
    assert f"127.0.0.1:{port}): connection refused" in lines[retries[0]], lines
    hint = lines[retries[0] + 1]
    assert "hint: check ANTHROPIC_BASE_URL, the network and any proxy settings" in hint, lines
