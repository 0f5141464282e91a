"""Hook events: which handlers run (`hooks_for`), what they decide together (`aggregate`), and the
`run_hooks` activity that runs them (parallel, own timeouts, once per event across retries).

Cases follow the examples of Claude Code's hooks reference, then adversarial ones."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from datetime import timedelta

import pytest
from temporalio.testing import ActivityEnvironment

from activities.hooks import HookActivities
from activities.transcript import write_file_atomic
from durable_agent.engine.hooks import (
    MAX_TEXT_CHARS,
    HookCommandSpec,
    HookEventInput,
    HookRun,
    aggregate,
    hooks_for,
    matcher_target,
)
from durable_agent.engine.settings import Settings


def group(matcher, *commands, timeout=None):
    hooks = [{"type": "command", "command": c} for c in commands]
    if timeout is not None:
        for h in hooks:
            h["timeout"] = timeout
    return {"hooks": hooks} if matcher is None else {"matcher": matcher, "hooks": hooks}


def commands(hooks, event, target):
    return [c.command for c in hooks_for(hooks, event, target)]


# --- hooks_for: matchers -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("matcher", "target", "runs"),
    [
        ("Write", "Write", True),
        ("Write", "WriteFile", False),  # exact names match exactly
        ("Bash", "BashOutput", False),
        ("Edit|Write", "Edit", True),
        ("Edit|Write", "Write", True),
        ("Edit|Write", "MultiEdit", False),
        ("Notebook.*", "NotebookEdit", True),
        ("Notebook.*", "Write", False),
        ("mcp__memory__.*", "mcp__memory__create_entities", True),
        ("mcp__memory__.*", "mcp__filesystem__read_file", False),
        ("mcp__.*__write.*", "mcp__filesystem__write_file", True),
        ("mcp__memory", "mcp__memory__create_entities", False),  # letters and _ only: exact
        ("^Write$", "Write", True),
        ("^Write$", "NotebookWrite", False),
        ("*", "Anything", True),
        ("", "Anything", True),
        (None, "Anything", True),
        ("Bash", None, False),  # a specific matcher never accepts an unknown target
        ("*", None, True),
        ("(", "(", True),  # does not compile: compared as an exact string
        ("(", "Bash", False),
    ],
)
def test_tool_matchers(matcher, target, runs):
    hooks = {"PreToolUse": [group(matcher, "check")]}
    assert commands(hooks, "PreToolUse", target) == (["check"] if runs else [])


def test_events_match_on_their_own_field():
    hooks = {
        "SessionStart": [group("startup|resume", "fresh"), group("compact", "after-compact")],
        "PreCompact": [group("auto", "auto-only"), group("manual", "manual-only")],
        "Notification": [group("permission_prompt", "ping")],
        "SessionEnd": [group("logout", "bye")],
    }
    assert commands(hooks, "SessionStart", "resume") == ["fresh"]
    assert commands(hooks, "SessionStart", "compact") == ["after-compact"]
    assert commands(hooks, "PreCompact", "auto") == ["auto-only"]
    assert commands(hooks, "Notification", "idle_prompt") == []
    assert commands(hooks, "Notification", "permission_prompt") == ["ping"]
    assert commands(hooks, "SessionEnd", "logout") == ["bye"]
    payload = {"tool_name": "Bash", "source": "startup", "trigger": "manual", "reason": "clear"}
    assert matcher_target("PreToolUse", payload) == "Bash"
    assert matcher_target("PostToolUseFailure", payload) == "Bash"
    assert matcher_target("SessionStart", payload) == "startup"
    assert matcher_target("PreCompact", payload) == "manual"
    assert matcher_target("SessionEnd", payload) == "clear"
    assert matcher_target("Notification", {"notification_type": "idle_prompt"}) == "idle_prompt"
    assert matcher_target("UserPromptSubmit", payload) is None


def test_events_without_matchers_ignore_the_matcher():
    hooks = {
        "Stop": [group("Bash", "stop-check")],
        "UserPromptSubmit": [group("nothing-like-this", "prompt-check")],
    }
    assert commands(hooks, "Stop", None) == ["stop-check"]
    assert commands(hooks, "UserPromptSubmit", "") == ["prompt-check"]


def test_identical_commands_run_once_with_the_larger_timeout():
    hooks = {
        "PostToolUse": [
            group("Edit|Write", "fmt", "lint", timeout=5),
            group("Write", "fmt", timeout=30),
            group(None, "lint", "log"),
        ]
    }
    found = hooks_for(hooks, "PostToolUse", "Write")
    assert [(c.command, c.timeout) for c in found] == [("fmt", 30), ("lint", 60), ("log", 60)]
    assert [c.command for c in hooks_for(hooks, "PostToolUse", "Edit")] == ["fmt", "lint", "log"]


def test_models_and_plain_json_are_read_alike():
    raw = {
        "PreToolUse": [
            {
                "matcher": "Bash",
                "hooks": [
                    {"type": "command", "command": "a", "timeout": 5},
                    {"type": "prompt", "prompt": "is this safe?"},  # not a command: not run here
                    {"type": "command", "command": ""},
                    {"type": "command", "command": "b", "timeout": -1},
                ],
            }
        ]
    }
    models = Settings.model_validate({"hooks": raw}).hooks
    for hooks in (raw, models, json.loads(json.dumps(raw))):
        found = hooks_for(hooks, "PreToolUse", "Bash")
        assert [(c.command, c.timeout) for c in found] == [("a", 5), ("b", 60)]
    assert hooks_for(None, "PreToolUse", "Bash") == []
    assert hooks_for({"PreToolUse": "not a list"}, "PreToolUse", "Bash") == []
    assert hooks_for({"PreToolUse": [{"matcher": "Bash"}]}, "PreToolUse", "Bash") == []


# --- aggregate: the docs' examples ---------------------------------------------------------


def ok(stdout, command="hook"):
    text = stdout if isinstance(stdout, str) else json.dumps(stdout)
    return HookRun(command=command, exit_code=0, stdout=text)


def pre(decision, reason="", **more):
    out = {"hookEventName": "PreToolUse", "permissionDecision": decision, **more}
    if reason:
        out["permissionDecisionReason"] = reason
    return ok({"hookSpecificOutput": out})


def test_pretooluse_deny_blocks_with_its_reason_to_claude():
    r = aggregate("PreToolUse", [pre("deny", "Destructive command blocked by hook")])
    assert r.blocked and r.permission_decision == "deny"
    assert r.reason == r.permission_reason == "Destructive command blocked by hook"
    assert r.ran == 1 and r.notes == []


def test_pretooluse_allow_and_ask():
    allow = aggregate("PreToolUse", [pre("allow", "Documentation file auto-approved")])
    assert not allow.blocked and allow.permission_decision == "allow"
    ask = aggregate("PreToolUse", [pre("ask", "This touches production config")])
    assert not ask.blocked and ask.permission_decision == "ask"
    assert ask.permission_reason == "This touches production config" and ask.reason == ""
    none = aggregate("PreToolUse", [ok(""), ok("plain text is ignored here")])
    assert none.permission_decision is None and not none.blocked and none.additional_context == []


def test_pretooluse_updated_input_and_context():
    r = aggregate(
        "PreToolUse",
        [pre("allow", "rewritten", updatedInput={"command": "rg foo"}, additionalContext="note")],
    )
    assert r.updated_input == {"command": "rg foo"} and r.additional_context == ["note"]


def test_pretooluse_exit_2_blocks_with_stderr_and_ignores_stdout():
    run = HookRun(
        command="validate.py",
        exit_code=2,
        stdout=json.dumps({"hookSpecificOutput": {"permissionDecision": "allow"}}),
        stderr="• Use 'rg' instead of 'grep' for better performance and features\n",
    )
    r = aggregate("PreToolUse", [run])
    assert r.blocked and r.permission_decision == "deny"
    assert r.reason == "• Use 'rg' instead of 'grep' for better performance and features"
    silent = aggregate("PreToolUse", [HookRun(command="x", exit_code=2)])
    assert silent.blocked and "`x`" in silent.reason


def test_deprecated_pretooluse_decisions_map_to_allow_and_deny():
    approve = aggregate("PreToolUse", [ok({"decision": "approve", "reason": "fine"})])
    assert approve.permission_decision == "allow" and not approve.blocked
    block = aggregate("PreToolUse", [ok({"decision": "block", "reason": "no"})])
    assert block.permission_decision == "deny" and block.blocked and block.reason == "no"
    both = ok(
        {"decision": "block", "hookSpecificOutput": {"permissionDecision": "allow"}}
    )  # the new field wins within one handler
    assert aggregate("PreToolUse", [both]).permission_decision == "allow"


def test_several_handlers_deny_beats_ask_beats_allow():
    r = aggregate("PreToolUse", [pre("allow", "a"), pre("ask", "b"), pre("deny", "c")])
    assert r.permission_decision == "deny" and r.blocked and r.reason == "c"
    r = aggregate("PreToolUse", [pre("allow", "a"), pre("ask", "b"), pre("ask", "b2")])
    assert r.permission_decision == "ask" and r.permission_reason == "b\nb2" and not r.blocked
    exit2 = HookRun(command="v", exit_code=2, stderr="no grep")
    r = aggregate("PreToolUse", [pre("allow", "a", updatedInput={"x": 1}), exit2])
    assert r.permission_decision == "deny" and r.reason == "no grep" and r.updated_input is None
    r = aggregate("PreToolUse", [pre("deny")])  # a deny without a reason still blocks
    assert r.blocked and "denied" in r.reason


def test_posttooluse_block_and_exit_2_reach_claude():
    lint = ok({"decision": "block", "reason": "Lint failed: 3 errors"})
    r = aggregate("PostToolUse", [lint])
    assert r.blocked and r.reason == "Lint failed: 3 errors" and r.permission_decision is None
    r = aggregate("PostToolUse", [HookRun(command="t", exit_code=2, stderr="tests fail")])
    assert r.blocked and r.reason == "tests fail"
    ctx = ok({"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "fmt"}})
    r = aggregate("PostToolUseFailure", [ok({"decision": "block", "reason": "r"})])
    assert r.blocked and r.reason == "r"
    assert aggregate("PostToolUse", [ctx]).additional_context == ["fmt"]


def test_userpromptsubmit_block_erases_the_prompt():
    r = aggregate(
        "UserPromptSubmit",
        [ok("today is Tuesday"), ok({"decision": "block", "reason": "Prompt contains a secret"})],
    )
    assert r.blocked and r.reason == "Prompt contains a secret" and r.additional_context == []
    r = aggregate("UserPromptSubmit", [HookRun(command="p", exit_code=2, stderr="not allowed")])
    assert r.blocked and r.reason == "not allowed"


def test_userpromptsubmit_and_sessionstart_context():
    specific = {"hookEventName": "UserPromptSubmit", "additionalContext": "branch: main"}
    r = aggregate(
        "UserPromptSubmit", [ok("Current time: 10:00\n"), ok({"hookSpecificOutput": specific})]
    )
    assert not r.blocked and r.additional_context == ["Current time: 10:00", "branch: main"]
    start = {"hookEventName": "SessionStart", "additionalContext": "open tickets: 3"}
    r = aggregate("SessionStart", [ok("sprint goal: ship"), ok({"hookSpecificOutput": start})])
    assert r.additional_context == ["sprint goal: ship", "open tickets: 3"]
    assert aggregate("Stop", [ok("plain stdout")]).additional_context == []


def test_continue_false_wins_with_its_stop_reason():
    r = aggregate(
        "PostToolUse",
        [
            ok({"decision": "block", "reason": "r"}),
            ok({"continue": False}),
            ok({"continue": False, "stopReason": "Build failed, fix it first"}),
            ok({"continue": False, "stopReason": "second"}),
        ],
    )
    assert r.prevent_continuation and r.stop_reason == "Build failed, fix it first"
    r = aggregate("PreToolUse", [ok({"continue": "false"}), ok({"continue": True})])
    assert not r.prevent_continuation  # only the JSON value false stops


def test_stop_blocks_stopping():
    r = aggregate("Stop", [ok({"decision": "block", "reason": "run the tests"})])
    assert r.blocked and r.reason == "run the tests"
    r = aggregate("SubagentStop", [HookRun(command="s", exit_code=2, stderr="keep going")])
    assert r.blocked and r.reason == "keep going"


def test_system_messages_and_notes_for_other_exits():
    r = aggregate(
        "PreToolUse",
        [
            ok({"systemMessage": "Careful: this is prod"}),
            HookRun(command="flaky", exit_code=1, stderr="boom"),
            HookRun(command="slow", exit_code=None, stderr="timed out after 5s", timed_out=True),
        ],
    )
    assert not r.blocked and r.permission_decision is None
    assert r.system_messages == ["Careful: this is prod"]
    assert r.notes == [
        "PreToolUse hook `flaky` exited 1: boom",
        "PreToolUse hook `slow` timed out after 5s",
    ]


@pytest.mark.parametrize("event", ["SessionStart", "SessionEnd", "Notification", "PreCompact"])
def test_exit_2_where_nothing_can_be_blocked_is_shown_to_the_user(event):
    r = aggregate(event, [HookRun(command="h", exit_code=2, stderr="oops")])
    assert not r.blocked and r.notes == [f"{event} hook `h` exited 2: oops"]


# --- aggregate: adversarial ----------------------------------------------------------------


def test_stdout_that_is_not_a_json_object():
    assert aggregate("PreToolUse", [ok("deny")]).permission_decision is None
    broken = aggregate("PreToolUse", [ok('{"hookSpecificOutput": {"permissionDecision": "deny"')])
    assert not broken.blocked and "not valid JSON" in broken.notes[0]
    array = json.dumps([{"decision": "block", "reason": "x"}])
    assert not aggregate("PostToolUse", [ok(array)]).blocked
    assert aggregate("UserPromptSubmit", [ok(array)]).additional_context == [array]
    assert aggregate("PreToolUse", [ok("null"), ok("42"), ok('"deny"')]).notes == []


def test_huge_output_is_capped():
    big = "x" * (MAX_TEXT_CHARS * 5)
    specific = {"hookEventName": "SessionStart", "additionalContext": big}
    r = aggregate("SessionStart", [ok({"hookSpecificOutput": specific}), ok(big)])
    assert all(len(c) < MAX_TEXT_CHARS + 100 for c in r.additional_context)
    assert r.additional_context[0].startswith("x" * MAX_TEXT_CHARS)
    assert "more characters cut" in r.additional_context[0]
    r = aggregate("PreToolUse", [HookRun(command="h", exit_code=2, stderr=big)])
    assert r.blocked and len(r.reason) < MAX_TEXT_CHARS + 100


def test_specific_output_for_another_event_is_ignored():
    wrong = {"hookEventName": "PostToolUse", "permissionDecision": "allow"}
    r = aggregate("PreToolUse", [ok({"hookSpecificOutput": wrong})])
    assert r.permission_decision is None and "'PostToolUse'" in r.notes[0]
    weird = {"permissionDecision": "defer", "updatedInput": "rm -rf /"}
    r = aggregate("PreToolUse", [ok({"hookSpecificOutput": weird})])
    assert r.permission_decision is None and r.updated_input is None
    assert "not an object" in r.notes[0]


def test_conflicting_updated_inputs_the_last_configured_wins_and_is_noted():
    r = aggregate(
        "PreToolUse",
        [pre("allow", updatedInput={"command": "a"}), pre("allow", updatedInput={"command": "b"})],
    )
    assert r.updated_input == {"command": "b"} and "different updatedInput" in r.notes[0]


def test_an_interrupted_gate_denies_other_events_only_note():
    lost = HookRun(command="v", exit_code=None, stderr="interrupted", interrupted=True)
    r = aggregate("PreToolUse", [pre("allow"), lost])
    assert r.blocked and r.permission_decision == "deny" and "interrupted" in r.reason
    r = aggregate("PostToolUse", [lost])
    assert not r.blocked and r.notes == ["PostToolUse hook `v` interrupted"]


def test_permission_request_decision():
    allow = {"behavior": "allow", "updatedInput": {"command": "ls"}}
    out = {"hookEventName": "PermissionRequest", "decision": allow}
    r = aggregate("PermissionRequest", [ok({"hookSpecificOutput": out})])
    assert r.permission_decision == "allow" and r.updated_input == {"command": "ls"}
    deny = {"behavior": "deny", "message": "not on prod", "interrupt": True}
    out = {"hookEventName": "PermissionRequest", "decision": deny}
    r = aggregate("PermissionRequest", [ok({"hookSpecificOutput": out})])
    assert r.blocked and r.reason == "not on prod" and r.prevent_continuation


def test_stopfailure_output_is_ignored():
    runs = [ok({"continue": False}), HookRun(command="h", exit_code=1, stderr="x")]
    r = aggregate("StopFailure", runs)
    assert r.ran == 2 and not r.prevent_continuation and r.notes == []


# --- the run_hooks activity ----------------------------------------------------------------


def activity_env(activity_id="1"):
    """Calls with one activity id are attempts of one activity (they share its hook ledger)."""
    env = ActivityEnvironment()
    info = dataclasses.replace(env.info, activity_id=activity_id)
    env.info = dataclasses.replace(info, heartbeat_timeout=timedelta(seconds=1))
    return env


def request(ws, event="PreToolUse", *cmds, payload=None, timeout=60.0):
    return HookEventInput(
        session_id="s1",
        workspace=str(ws),
        event=event,
        target="Bash",
        payload=payload or {},
        commands=[HookCommandSpec(command=c, timeout=timeout) for c in cmds],
        heartbeat_seconds=1,
    )


@pytest.fixture
def hooks(store):
    return HookActivities(store.transcript_path, store.hook_ledger)


async def test_handlers_run_in_parallel(hooks, workspace):
    req = request(workspace, "PostToolUse", "sleep 1; echo a >> a.txt", "sleep 1; echo b >> b.txt")
    started = time.monotonic()
    result = await activity_env().run(hooks.run_hooks, req)
    elapsed = time.monotonic() - started
    assert result.ran == 2 and (workspace / "a.txt").exists() and (workspace / "b.txt").exists()
    assert elapsed < 1.8, f"two 1 s handlers took {elapsed:.2f} s: not in parallel"


def ended(pid: int) -> bool:
    """Gone, or a zombie (dead, waiting for its new parent to reap it), within 2 s."""
    for _ in range(40):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


async def test_a_handler_past_its_timeout_is_ended_and_reported(hooks, workspace):
    cmd = "sleep 30 & echo $! > pid.txt; wait"  # what it started is ended with it
    req = request(workspace, "PreToolUse", cmd, timeout=0.5)
    started = time.monotonic()
    result = await activity_env().run(hooks.run_hooks, req)
    assert time.monotonic() - started < 10
    assert not result.blocked and result.notes == [f"PreToolUse hook `{cmd}` timed out after 0.5s"]
    assert ended(int((workspace / "pid.txt").read_text()))


async def test_identical_commands_run_once(hooks, workspace):
    req = request(workspace, "PostToolUse", "echo ran >> runs.txt", "echo ran >> runs.txt")
    result = await activity_env().run(hooks.run_hooks, req)
    assert result.ran == 1 and (workspace / "runs.txt").read_text() == "ran\n"


async def test_stdin_has_the_common_fields_and_the_payload(hooks, store, workspace):
    payload = {"tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "toolu_1",
               "permission_mode": "default", "hook_event_name": "spoofed"}  # fmt: skip
    req = request(workspace, "PreToolUse", "cat > stdin.json", payload=payload)
    await activity_env().run(hooks.run_hooks, req)
    seen = json.loads((workspace / "stdin.json").read_text())
    assert seen == {
        "session_id": "s1",
        "transcript_path": str(store.transcript_path("s1")),
        "cwd": str(workspace),
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
        "tool_use_id": "toolu_1",
        "permission_mode": "default",
    }


async def test_hooks_find_claude_project_dir_and_no_secrets(hooks, workspace, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    req = request(workspace, "SessionStart", 'echo "$CLAUDE_PROJECT_DIR"; env > env.txt')
    result = await activity_env().run(hooks.run_hooks, req)
    assert result.additional_context == [str(workspace)]
    assert "sk-ant-secret" not in (workspace / "env.txt").read_text()


async def test_the_docs_bash_validator_blocks_grep(hooks, workspace):
    script = workspace / "validate.py"
    script.write_text(
        "import json, re, sys\n"
        "d = json.load(sys.stdin)\n"
        "if re.search(r'\\bgrep\\b(?!.*\\|)', d['tool_input'].get('command', '')):\n"
        "    print(\"• Use 'rg' instead of 'grep'\", file=sys.stderr)\n"
        "    sys.exit(2)\n"
    )
    cmd = 'python3 "$CLAUDE_PROJECT_DIR"/validate.py'
    payload = {"tool_name": "Bash", "tool_input": {"command": "grep -r foo ."}}
    result = await activity_env().run(
        hooks.run_hooks, request(workspace, "PreToolUse", cmd, payload=payload)
    )
    assert result.blocked and result.reason == "• Use 'rg' instead of 'grep'"
    payload["tool_input"] = {"command": "rg foo"}
    result = await activity_env("2").run(
        hooks.run_hooks, request(workspace, "PreToolUse", cmd, payload=payload)
    )
    assert not result.blocked and result.notes == []


async def test_non_utf8_output(hooks, workspace):
    deny = (
        '{"hookSpecificOutput": {"permissionDecision": "deny", "permissionDecisionReason": "%b"}}'
    )
    cmd = f"printf '{deny}' 'bad \\377 byte'"
    result = await activity_env().run(hooks.run_hooks, request(workspace, "PreToolUse", cmd))
    assert result.blocked and result.reason == "bad \ufffd byte"
    cmd = "printf 'no \\376\\377' >&2; exit 1"
    result = await activity_env("2").run(hooks.run_hooks, request(workspace, "PreToolUse", cmd))
    assert result.notes == [f"PreToolUse hook `{cmd}` exited 1: no \ufffd\ufffd"]


async def test_huge_output_neither_hangs_nor_fills_memory(hooks, workspace):
    flood = "head -c 50000000 /dev/zero | tr '\\0' x"  # 50 MB of stdout, no JSON
    big = f"printf '{{\"systemMessage\": \"'; {flood}; printf '\"}}'"  # a 50 MB JSON object
    started = time.monotonic()
    result = await activity_env().run(hooks.run_hooks, request(workspace, "SessionStart", big))
    assert time.monotonic() - started < 20
    assert result.system_messages == [] and "not valid JSON" in result.notes[0]
    result = await activity_env("2").run(hooks.run_hooks, request(workspace, "SessionStart", flood))
    assert len(result.additional_context[0]) < MAX_TEXT_CHARS + 100


def ledger_key(env, event):
    info = env.info
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{info.workflow_run_id}-{info.activity_id}-{event}")


async def test_a_handler_an_earlier_attempt_started_is_not_run_again(hooks, store, workspace):
    req = request(workspace, "PreToolUse", "echo a >> a.txt", "echo b >> b.txt")
    env = activity_env()
    started = store.hook_ledger("s1") / f"{ledger_key(env, 'PreToolUse')}-1.started"
    write_file_atomic(started, "echo b >> b.txt")  # as a lost attempt leaves it
    result = await env.run(hooks.run_hooks, req)
    assert (workspace / "a.txt").read_text() == "a\n" and not (workspace / "b.txt").exists()
    assert result.blocked and "interrupted" in result.reason  # its verdict is unknown: denied
    again = await activity_env().run(hooks.run_hooks, req)  # same activity id: a retry
    assert (workspace / "a.txt").read_text() == "a\n" and again == result
