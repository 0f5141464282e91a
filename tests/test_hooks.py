import json

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
