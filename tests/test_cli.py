"""The `durable-agent` command as a user runs it: a subprocess, real HTTP, real Temporal."""

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from durable_agent.devserver import ensure_dev_server, running, stop_dev_server
from durable_agent.replay import ReplayServer, text_turn, tool_turn

ROOT = Path(__file__).resolve().parent.parent


def cli_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "TEMPORAL_"))}
    env.update(
        DURABLE_AGENT_HOME=str(tmp_path / "home"),
        DURABLE_AGENT_TASK_QUEUE=f"cli-{uuid.uuid4()}",
        DURABLE_AGENT_WARM_WORKER="0",  # no worker left behind (tests/test_warm_worker.py)
        # The cassettes script the loop's own calls; chat's tool summaries (a small-model call
        # beside each) are tested in tests/test_tool_summaries.py.
        DURABLE_AGENT_TOOL_SUMMARIES="0",
        # This machine's own Claude Code settings must not decide what a test's tools may do.
        DURABLE_AGENT_SETTINGS=str(tmp_path / "no-user-settings.json"),
        DURABLE_AGENT_MANAGED_SETTINGS=str(tmp_path / "no-managed-settings.json"),
    )
    env.update(extra)
    return env


def durable_agent(
    args: list[str], env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_agent", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def assert_clean_error(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode == 2, proc
    assert "Traceback" not in proc.stderr
    assert f"durable-agent: error: {needle}" in proc.stderr and "hint:" in proc.stderr


def test_help_explains_commands(tmp_path):
    proc = durable_agent(["--help"], cli_env(tmp_path))
    assert proc.returncode == 0
    for command in ("run", "demo", "server", "status", "interrupt", "list"):
        assert command in proc.stdout
    run_help = durable_agent(["run", "--help"], cli_env(tmp_path))
    assert "--max-turns" in run_help.stdout and "--output-format" in run_help.stdout


def test_bad_workspace_is_one_clear_line(tmp_path):
    proc = durable_agent(
        ["run", "hi", "--workspace", str(tmp_path / "nope")],
        cli_env(tmp_path, ANTHROPIC_API_KEY="k"),
    )
    assert_clean_error(proc, "workspace")


def test_missing_api_key_is_one_clear_line(tmp_path):
    proc = durable_agent(["run", "hi", "--workspace", str(tmp_path)], cli_env(tmp_path))
    assert_clean_error(proc, "ANTHROPIC_API_KEY is not set")


def test_unreachable_temporal_is_one_clear_line(tmp_path):
    env = cli_env(
        tmp_path,
        ANTHROPIC_API_KEY="k",
        TEMPORAL_ADDRESS="127.0.0.1:1",
        DURABLE_AGENT_CONNECT_SECONDS="4",
    )
    started = time.monotonic()
    proc = durable_agent(["run", "hi", "--workspace", str(tmp_path)], env)
    assert_clean_error(proc, "cannot reach Temporal at 127.0.0.1:1")
    # It kept trying for the configured time (a restarting server), and said so.
    assert "retrying for 4s" in proc.stderr and time.monotonic() - started >= 4


def test_bad_max_turns_is_a_usage_error(tmp_path):
    proc = durable_agent(["run", "hi", "--max-turns", "0"], cli_env(tmp_path))
    assert (
        proc.returncode == 2
        and "must be at least 1" in proc.stderr
        and "Traceback" not in proc.stderr
    )


def test_run_against_a_compatible_server(dev_env, tmp_path):
    """ANTHROPIC_BASE_URL + a dummy key: a multi-turn Read → Edit → Bash session completes."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "greet.py").write_text("print('helo')\n")
    turns = [
        tool_turn([("r1", "Read", {"file_path": "greet.py"})], "Reading."),
        tool_turn(
            [("e1", "Edit", {"file_path": "greet.py", "old_string": "helo", "new_string": "hello"})]
        ),
        tool_turn(
            [("b1", "Bash", {"command": "python3 greet.py"}), ("b2", "Bash", {"command": "exit 4"})]
        ),
        text_turn("It prints hello now."),
    ]
    env = cli_env(
        tmp_path,
        ANTHROPIC_API_KEY="dummy",
        TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
    )
    with ReplayServer(turns) as server:
        env["ANTHROPIC_BASE_URL"] = server.base_url
        proc = durable_agent(
            [
                "run", "fix the typo", "--workspace", str(ws), "--output-format", "json",
                "--permission-mode", "acceptEdits", "--allowedTools", "Bash",
            ],
            env,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert server.violations == [] and len(server.requests) == 4
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["terminal"] == "completed" and result["turn_count"] == 4
    assert (ws / "greet.py").read_text() == "print('hello')\n"
    answered = server.requests[3]["messages"][-1]["content"]
    assert [b["tool_use_id"] for b in answered] == ["b1", "b2"]
    assert answered[0]["content"] == "hello" and answered[1]["is_error"]


def test_json_output_and_status_show_the_recoveries(dev_env, tmp_path):
    from durable_agent.replay import ErrorReply, Turn
    from durable_agent.replay.cassette import message

    env = cli_env(
        tmp_path,
        ANTHROPIC_API_KEY="dummy",
        TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
    )
    turns = [
        Turn(
            error=ErrorReply(
                status=529, type="overloaded_error", message="busy", headers={"retry-after": "0"}
            )
        ),
        Turn(response=message([{"type": "text", "text": "cut"}], "max_tokens")),
        text_turn("whole"),
    ]
    with ReplayServer(turns) as server:
        env["ANTHROPIC_BASE_URL"] = server.base_url
        proc = durable_agent(
            ["run", "go", "--workspace", str(tmp_path), "--output-format", "json"], env
        )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["transitions"] == ["max_output_tokens_escalate"]
    assert result["retries"] == {"Overloaded": 1}
    status = durable_agent(["status", result["session_id"]], env)
    assert status.returncode == 0, status.stderr
    assert (
        "completed" in status.stdout and "transitions: max_output_tokens_escalate" in status.stdout
    )
    assert "retried: Overloaded ×1" in status.stdout


def test_run_stops_with_max_turns_and_names_it(dev_env, tmp_path):
    env = cli_env(
        tmp_path,
        ANTHROPIC_API_KEY="dummy",
        TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
    )
    turns = [tool_turn([(f"g{i}", "Glob", {"pattern": "*"})]) for i in range(3)]
    with ReplayServer(turns) as server:
        env["ANTHROPIC_BASE_URL"] = server.base_url
        proc = durable_agent(["run", "loop", "--workspace", str(tmp_path), "--max-turns", "2"], env)
    assert proc.returncode == 1
    assert "stopped: max_turns after 2 turn(s)" in proc.stderr
    assert len(server.requests) == 2


def test_demo(dev_env, tmp_path):
    env = cli_env(tmp_path, TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host)
    proc = durable_agent(["demo"], env)
    assert proc.returncode == 0, proc.stderr
    assert "completed after 5 turn(s)" in proc.stderr
    assert "+    return sum(values) / len(values)" in proc.stderr
    assert "All 3 tests pass now." in proc.stdout


def test_dev_server_is_started_once_and_reused(tmp_path):
    home = tmp_path / "home"
    try:
        info, started = ensure_dev_server(home)
        assert started and Path(info.db_path).parent == home
        again, started_again = ensure_dev_server(home)
        assert not started_again and again.pid == info.pid
    finally:
        stopped = stop_dev_server(home)
    assert stopped and running(home) is None


@pytest.mark.parametrize("args", [["status", "nope"], ["list"]])
def test_commands_without_a_server_explain(tmp_path, args):
    proc = durable_agent(args, cli_env(tmp_path))
    assert_clean_error(proc, "no Temporal dev server is running")


def test_tool_concurrency_comes_from_the_environment(tmp_path, monkeypatch):
    from durable_agent.cli.args import build_config, parser
    from durable_agent.cli.errors import CliError

    args = parser().parse_args(["run", "x"])
    monkeypatch.setenv("DURABLE_AGENT_MAX_TOOL_USE_CONCURRENCY", "3")
    assert build_config(args, tmp_path).tool_concurrency == 3
    monkeypatch.setenv("DURABLE_AGENT_MAX_TOOL_USE_CONCURRENCY", "lots")
    with pytest.raises(CliError, match="not a positive integer"):
        build_config(args, tmp_path)
    monkeypatch.delenv("DURABLE_AGENT_MAX_TOOL_USE_CONCURRENCY")
    assert build_config(args, tmp_path).tool_concurrency == 10


def test_every_run_option_reaches_the_config(tmp_path):
    from durable_agent.cli.args import build_config, parser

    args = parser().parse_args([
        "run", "x", "--model", "m", "--max-turns", "3", "--fallback-model", "f", "--unattended",
        "--unattended-hours", "2", "--thinking-budget", "2048", "--no-prompt-caching",
        "--context-window", "500000", "--no-autocompact", "--task-budget", "9000",
        "--append-system-prompt", "be brief", "--eager-tools", "all", "--no-streaming-tools",
    ])  # fmt: skip
    cfg = build_config(args, tmp_path)
    call = cfg.call
    assert (cfg.model, cfg.max_turns, call.fallback_model, call.unattended) == ("m", 3, "f", True)
    assert cfg.activity.unattended_max_seconds == 7200 and cfg.thinking_budget == 2048
    assert not cfg.prompt_caching and cfg.context_window == 500_000 and not cfg.autocompact
    assert cfg.task_budget == 9000 and call.system_prompt == "be brief"
    assert call.eager_tools == "none"  # --no-streaming-tools wins over --eager-tools
    defaults = build_config(parser().parse_args(["run", "x"]), tmp_path)
    assert defaults.autocompact and defaults.prompt_caching and defaults.context_window is None
    assert defaults.call.eager_tools == "safe"


def test_no_worker_hint_then_ctrl_c_twice_detaches(dev_env, tmp_path):
    import signal
    import time

    env = cli_env(
        tmp_path,
        TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
        DURABLE_AGENT_IDLE_HINT_SECONDS="1",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "durable_agent", "run", "hello", "--no-worker", "--workspace", str(tmp_path)],
        env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        lines.append(line)
        if "is a worker running on task queue" in line:
            break
    assert "is a worker running on task queue" in lines[-1], lines
    proc.send_signal(signal.SIGINT)
    while "interrupting" not in lines[-1] and time.monotonic() < deadline:  # the first is seen
        lines.append(proc.stderr.readline())
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "detached; the session goes on: durable-agent tail session-" in rest
    assert "Traceback" not in rest


def test_run_records_a_cassette_that_replays(dev_env, tmp_path):
    from durable_agent.replay import load_cassette

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("remember the milk\n")
    cassette = tmp_path / "session.jsonl"
    turns = [tool_turn([("r1", "Read", {"file_path": "notes.txt"})]), text_turn("It says: milk.")]
    env = cli_env(
        tmp_path,
        ANTHROPIC_API_KEY="dummy",
        TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
    )
    with ReplayServer(turns) as upstream:  # stands in for the real API
        env["ANTHROPIC_BASE_URL"] = upstream.base_url
        proc = durable_agent(
            ["run", "read my notes", "--workspace", str(ws), "--record", str(cassette)], env
        )
    assert proc.returncode == 0, proc.stderr
    recorded = load_cassette(cassette)
    assert [t.response["stop_reason"] for t in recorded if t.response] == ["tool_use", "end_turn"]
    again = durable_agent(
        ["run", "read my notes", "--workspace", str(ws), "--record", str(cassette)], env
    )
    assert again.returncode == 2 and "exists already" in again.stderr
    with ReplayServer(recorded) as replay:  # the recording serves the same session again
        env["ANTHROPIC_BASE_URL"] = replay.base_url
        proc = durable_agent(["run", "read my notes", "--workspace", str(ws)], env)
    assert proc.returncode == 0, proc.stderr
    assert replay.violations == [] and "It says: milk." in proc.stdout


def test_chat_keeps_one_conversation_across_prompts(dev_env, tmp_path):
    env = cli_env(
        tmp_path,
        ANTHROPIC_API_KEY="dummy",
        TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
    )
    turns = [text_turn("Hello! First answer."), text_turn("Second answer, same conversation.")]
    with ReplayServer(turns) as server:
        env["ANTHROPIC_BASE_URL"] = server.base_url
        proc = subprocess.run(
            [sys.executable, "-m", "durable_agent", "chat", "--workspace", str(tmp_path)],
            env=env, cwd=ROOT, input="first question\n\n   \nsecond question\n/exit\n",
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "First answer." in proc.stdout and "Second answer" in proc.stdout
    assert len(server.requests) == 2
    second = server.requests[1]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert second[0]["content"][0]["text"] == "first question"
    assert second[2]["content"][-1]["text"] == "second question"
    assert proc.stderr.count("completed after 1 turn(s)") == 2


async def test_tail_follows_a_running_prompt(dev_env, store, tmp_path, task_queue):
    import asyncio

    from durable_agent.engine.contracts import SessionInput
    from durable_agent.engine.state import QueryConfig
    from durable_agent.wiring import build_worker
    from tests.helpers import replay_client_factory
    from workflows.session import SessionWorkflow

    gate = tmp_path / "go"
    wait = f"python3 -c \"import os, time\nwhile not os.path.exists('{gate}'): time.sleep(0.05)\""
    turns = [tool_turn([("w1", "Bash", {"command": wait})]), text_turn("waited well")]
    env = cli_env(tmp_path, TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host)
    sid = f"tail-{uuid.uuid4()}"
    config = QueryConfig(workspace=str(tmp_path))
    with ReplayServer(turns) as server:
        async with build_worker(dev_env.client, task_queue, store, replay_client_factory(server)):
            handle = await dev_env.client.start_workflow(
                SessionWorkflow.run,
                SessionInput(
                    session_id=sid, config=config, initial_prompt="wait", close_when_idle=True
                ),
                id=sid,
                task_queue=task_queue,
            )
            for _ in range(100):
                if (await handle.query(SessionWorkflow.status)).running_query_id:
                    break
                await asyncio.sleep(0.05)
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "durable_agent", "tail", sid, env=env, cwd=ROOT,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            assert proc.stderr is not None
            seen = b""
            while b"Bash:" not in seen:  # tail is attached and showing the running tool
                seen += await asyncio.wait_for(proc.stderr.readline(), 30)
            gate.write_text("go")
            out, err = await asyncio.wait_for(proc.communicate(), 60)
            await handle.result()
    assert proc.returncode == 0, err.decode()
    assert "waited well" in out.decode()
    assert "completed after 2 turn(s)" in err.decode()


def test_a_value_out_of_range_is_one_line_naming_the_flag(tmp_path):
    proc = durable_agent(["run", "x", "--context-window", "10"], cli_env(tmp_path))
    assert_clean_error(proc, "--context-window: input should be greater than or equal to 50000")


@pytest.mark.parametrize("command", [["run", "x"], ["-p", "x"]], ids=["run", "claude"])
def test_an_empty_model_is_refused_in_one_line(tmp_path, command):
    for flag in ("--model", "--fallback-model"):
        proc = durable_agent([*command, flag, " "], cli_env(tmp_path))
        assert_clean_error(proc, f"{flag} is empty")


@pytest.mark.parametrize(
    ("hooks", "key"),
    [
        ({"PreToolUse": [{"matcher": "Bash(", "hooks": [{"type": "command", "command": "x"}]}]},
         "`hooks.PreToolUse[0].matcher`: not a valid regular expression"),
        ({"Stop": [{"hooks": [{"type": "command", "command": "x", "timeout": -5}]}]},
         "`hooks.Stop[0].hooks[0].timeout`: must be a positive number of seconds (got -5)"),
    ],
    ids=["matcher", "timeout"],
)  # fmt: skip
def test_a_hook_that_could_never_work_is_refused_naming_the_file(tmp_path, hooks, key):
    settings = tmp_path / "ws" / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"hooks": hooks}))
    proc = durable_agent(["run", "x", "--workspace", str(settings.parents[1])], cli_env(tmp_path))
    assert_clean_error(proc, f"{settings}: {key}")


def test_no_traceback_for_a_closed_pipe_or_a_bug(capsys, monkeypatch):
    from durable_agent.cli import _guarded

    def closed() -> int:
        raise BrokenPipeError

    def bug() -> int:
        raise KeyError("boom")

    monkeypatch.setattr("durable_agent.cli._silence_stdout", lambda: None)
    assert _guarded(closed) == 0  # `| head` went away: quietly done
    monkeypatch.delenv("DURABLE_AGENT_DEBUG", raising=False)
    assert _guarded(bug) == 2
    err = capsys.readouterr().err
    assert "unexpected KeyError: 'boom'" in err and "DURABLE_AGENT_DEBUG=1" in err
    assert "Traceback" not in err
    monkeypatch.setenv("DURABLE_AGENT_DEBUG", "1")
    with pytest.raises(KeyError):
        _guarded(bug)


def test_an_sdk_error_log_is_one_line_naming_a_full_disk(capsys, monkeypatch, tmp_path):
    """A worker's failed completion, logged by the SDK with its chain of causes, is one line
    (it was three chained tracebacks when the disk filled)."""
    import errno
    import logging

    from durable_agent.cli import sdk_log

    monkeypatch.delenv("DURABLE_AGENT_DEBUG", raising=False)
    monkeypatch.setenv("DURABLE_AGENT_HOME", str(tmp_path))
    monkeypatch.setattr(sdk_log, "full_disk", lambda home, said: f"the disk of {home} is full")
    for name in sdk_log.LOGGERS:  # put back as they were after the test
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "handlers", list(logger.handlers))
        monkeypatch.setattr(logger, "propagate", logger.propagate)
    sdk_log.one_line()
    try:
        try:
            try:
                raise OSError(errno.ENOSPC, "No space left on device")
            except OSError as exc:
                raise RuntimeError("cannot store the payload") from exc
        except RuntimeError:
            raise ValueError("Failed encoding") from None
    except ValueError:
        logging.getLogger("temporalio.worker._activity").exception("Failed completing activity")
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "durable-agent: Failed completing activity: OSError: [Errno 28] No space left on device "
        f"(the disk of {tmp_path} is full)"
    ]
