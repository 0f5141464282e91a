import json
import re

from activities.hooks import load_hooks, run_hooks


def settings(path, hooks):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"hooks": hooks}))


def test_hooks_come_from_user_and_project_settings_with_matchers(tmp_path, monkeypatch):
    user = tmp_path / "user.json"
    monkeypatch.setenv("DURABLE_AGENT_SETTINGS", str(user))
    settings(
        user,
        {"PreToolUse": [{"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "a"}]}]},
    )
    ws = tmp_path / "ws"
    settings(
        ws / ".claude" / "settings.json",
        {
            "PreToolUse": [
                {"matcher": "Bash", "hooks": [{"type": "command", "command": "b", "timeout": 5}]}
            ]
        },
    )
    settings(
        ws / ".claude" / "settings.local.json",
        {"PreToolUse": [{"hooks": [{"type": "command", "command": "c"}]}]},
    )
    assert [h.command for h in load_hooks("PreToolUse", "Write", ws)] == ["a", "c"]
    assert [(h.command, h.timeout) for h in load_hooks("PreToolUse", "Bash", ws)] == [
        ("b", 5),
        ("c", 60),
    ]
    assert load_hooks("Stop", "", ws) == []


async def test_hooks_get_json_on_stdin_and_report_exit_codes(tmp_path, monkeypatch):
    user = tmp_path / "user.json"
    monkeypatch.setenv("DURABLE_AGENT_SETTINGS", str(user))
    settings(user, {"Stop": [{"hooks": [
        {"type": "command", "command": "python3 -c 'import json,sys; print(json.load(sys.stdin)[\"x\"])'"},
        {"type": "command", "command": "echo no >&2; exit 2"},
        {"type": "command", "command": "sleep 5", "timeout": 0.2},
    ]}]})  # fmt: skip
    outcomes = await run_hooks("Stop", "", {"x": "hello"}, tmp_path)
    assert [(o.exit_code, o.stdout.strip()) for o in outcomes[:2]] == [(0, "hello"), (2, "")]
    assert outcomes[1].blocking and outcomes[1].stderr.strip() == "no"
    assert outcomes[2].exit_code is None and "timed out" in outcomes[2].stderr


def _stop_hook(ws, command):
    settings(ws / ".claude" / "settings.json", {"Stop": [{"hooks": [{"type": "command",
             "command": command}]}]})  # fmt: skip


def _activity_env(heartbeats=None):
    import dataclasses
    from datetime import timedelta

    from temporalio.testing import ActivityEnvironment

    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=0.2))
    if heartbeats is not None:
        env.on_heartbeat = lambda *details: heartbeats.append(details)
    return env


async def test_a_retried_hook_activity_never_runs_a_hook_twice(store, tmp_path):
    from activities.hooks import HookActivities
    from durable_agent.engine.contracts import StopHooksInput

    ws = tmp_path / "ws"
    _stop_hook(ws, "echo ran >> runs.txt; echo 'keep going' >&2; exit 2")
    hooks = HookActivities(store.transcript_path, store.hook_ledger)
    req = StopHooksInput(session_id="s", workspace=str(ws), stop_hook_active=False)
    first = await _activity_env().run(hooks.run_stop_hooks, req)
    again = await _activity_env().run(hooks.run_stop_hooks, req)  # same activity id: a retry
    assert (ws / "runs.txt").read_text() == "ran\n"
    assert first.blocking_errors == again.blocking_errors == ["keep going"]


async def test_a_hook_an_interrupted_attempt_started_is_not_rerun(store, tmp_path):
    from activities.hooks import HookActivities
    from durable_agent.engine.contracts import StopHooksInput

    ws = tmp_path / "ws"
    _stop_hook(ws, "echo ran >> runs.txt")
    hooks = HookActivities(store.transcript_path, store.hook_ledger)
    req = StopHooksInput(session_id="s", workspace=str(ws), stop_hook_active=False)
    env = _activity_env()
    info = env.info
    key = re.sub(r"[^A-Za-z0-9_-]", "_", f"{info.workflow_run_id}-{info.activity_id}-Stop")
    ledger = store.hook_ledger("s")
    ledger.mkdir(parents=True)
    (ledger / f"{key}-0.started").write_text("echo ran >> runs.txt")
    await env.run(hooks.run_stop_hooks, req)
    assert not (ws / "runs.txt").exists()


async def test_hooks_heartbeat_and_get_no_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
    monkeypatch.setenv("DURABLE_AGENT_HOME", str(tmp_path / "home"))
    ws = tmp_path / "ws"
    _stop_hook(ws, "sleep 1; env > env.txt")
    beats: list = []
    await _activity_env(beats).run(run_hooks, "Stop", "", {}, ws)
    env = dict(
        line.split("=", 1) for line in (ws / "env.txt").read_text().splitlines() if "=" in line
    )
    assert len(beats) >= 3
    assert env["CLAUDE_PROJECT_DIR"] == str(ws)
    assert not [k for k in env if k.startswith(("ANTHROPIC_API", "TEMPORAL_", "DURABLE_AGENT_"))]


def _tagged_sleeper(tag):
    import os
    import subprocess
    import time

    from activities.tools.environment import RUN_TAG_NAME, tagged_processes

    env = {**os.environ, RUN_TAG_NAME: tag}
    proc = subprocess.Popen(["sleep", "30"], env=env, start_new_session=True)
    for _ in range(100):  # in the middle of exec its environment reads empty for a moment
        if proc.pid in tagged_processes(tag):
            break
        time.sleep(0.02)
    return proc


async def test_a_retry_ends_the_hook_an_interrupted_attempt_left_running(store, tmp_path):
    from activities.hooks import HookActivities
    from activities.tools.environment import RUN_TAG_NAME, tagged_processes
    from durable_agent.engine.contracts import StopHooksInput

    ws = tmp_path / "ws"
    _stop_hook(ws, "env > env.txt")
    hooks = HookActivities(store.transcript_path, store.hook_ledger)
    req = StopHooksInput(session_id="s", workspace=str(ws), stop_hook_active=False)
    first = _activity_env()
    await first.run(hooks.run_stop_hooks, req)
    tags = [
        line for line in (ws / "env.txt").read_text().splitlines() if line.startswith(RUN_TAG_NAME)
    ]
    assert len(tags) == 1  # the hook's processes carry their run's tag
    tag = tags[0].split("=", 1)[1]
    ledger = store.hook_ledger("s")
    for done in ledger.glob("*.json"):
        done.unlink()  # as if the worker died while the hook ran: started, no outcome
    left = _tagged_sleeper(tag)  # what the lost attempt's hook still runs
    try:
        assert tagged_processes(tag) == [left.pid]
        await _activity_env().run(hooks.run_stop_hooks, req)  # the retry takes over
        assert left.wait(timeout=5) == -9
    finally:
        left.kill()
    assert tagged_processes(tag) == []


async def test_a_hook_retried_on_another_machine_is_not_run_twice(any_store, tmp_path):
    """The ledger is the store's: with a shared one, the retry's worker (another state dir)
    sees the outcome the first attempt recorded."""
    from activities.hooks import HookActivities
    from durable_agent.engine.contracts import StopHooksInput
    from tests.test_store import other_machine

    ws = tmp_path / "ws"
    _stop_hook(ws, "echo ran >> runs.txt; echo 'keep going' >&2; exit 2")
    req = StopHooksInput(session_id="s", workspace=str(ws), stop_hook_active=False)
    here = HookActivities(any_store.transcript_path, any_store.hook_records)
    first = await _activity_env().run(here.run_stop_hooks, req)
    elsewhere = other_machine(any_store, tmp_path)
    there = HookActivities(elsewhere.transcript_path, elsewhere.hook_records)
    again = await _activity_env().run(there.run_stop_hooks, req)  # the same activity's retry
    assert (ws / "runs.txt").read_text() == "ran\n"
    assert first.blocking_errors == again.blocking_errors == ["keep going"]
