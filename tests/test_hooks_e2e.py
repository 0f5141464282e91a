"""Tool and prompt hooks end to end: `durable-agent run` as a user runs it (a subprocess, the
real anthropic client against the replay server, a real Temporal dev server), with the hooks in
the workspace's `.claude/settings.json` written as Claude Code's hooks documentation writes them."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

from durable_agent.replay import ErrorReply, ReplayServer, Turn, text_turn, tool_turn
from tests.test_cli import cli_env
from tests.test_permissions_e2e import results_sent, run, text_of

# The "Bash command validator" of Claude Code's hooks reference (PreToolUse, exit 2 blocks the
# call and shows stderr to Claude), as a user copies it into .claude/hooks/.
DOCS_VALIDATOR = r"""#!/usr/bin/env python3
import json
import re
import sys

# Define validation rules as a list of (regex pattern, message) tuples
VALIDATION_RULES = [
    (
        r"\bgrep\b(?!.*\|)",
        "Use 'rg' (ripgrep) instead of 'grep' for better performance and features",
    ),
    (
        r"\bfind\s+\S+\s+-name\b",
        "Use 'rg --files | rg pattern' or 'rg --files -g pattern' instead of 'find -name' for better performance",
    ),
]


def validate_command(command: str) -> list[str]:
    issues = []
    for pattern, message in VALIDATION_RULES:
        if re.search(pattern, command):
            issues.append(message)
    return issues


try:
    input_data = json.load(sys.stdin)
except json.JSONDecodeError as e:
    print(f"Error: Invalid JSON input: {e}", file=sys.stderr)
    sys.exit(1)

tool_name = input_data.get("tool_name", "")
tool_input = input_data.get("tool_input", {})
command = tool_input.get("command", "")

if tool_name != "Bash" or not command:
    sys.exit(1)

# Validate the command
issues = validate_command(command)

if issues:
    for message in issues:
        print(f"• {message}", file=sys.stderr)
    # Exit code 2 blocks tool call and shows stderr to Claude
    sys.exit(2)
"""

REWRITE_WRITE = """import json, sys
data = json.load(sys.stdin)
out = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow",
       "permissionDecisionReason": "our writes are fine",
       "updatedInput": {**data["tool_input"], "content": "rewritten by the hook\\n"}}}
print(json.dumps(out))
"""

POST_BASH = """import json, sys
data = json.load(sys.stdin)
with open("post-stdin.jsonl", "a") as f:
    f.write(json.dumps(data) + "\\n")
print(json.dumps({"decision": "block", "reason": "lint: 3 warnings after " + data["tool_input"]["command"]}))
"""


def hook(command: str, matcher: str | None = None) -> dict[str, Any]:
    group: dict[str, Any] = {"hooks": [{"type": "command", "command": command}]}
    if matcher is not None:
        group["matcher"] = matcher
    return group


def hooked_workspace(tmp_path: Path, hooks: dict[str, Any], scripts: dict[str, str]) -> Path:
    ws = tmp_path / "ws"
    (ws / ".claude" / "hooks").mkdir(parents=True)
    for name, text in scripts.items():
        script = ws / ".claude" / "hooks" / name
        script.write_text(text)
        script.chmod(0o755)
    (ws / ".claude" / "settings.json").write_text(json.dumps({"hooks": hooks}))
    return ws


def sent_text(server: Any, index: int) -> str:
    """The text blocks of request `index`'s last (user) message."""
    content = server.requests[index]["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content if b.get("type") == "text")


def test_pre_and_post_tool_hooks_block_rewrite_and_talk_to_claude(dev_env, tmp_path):
    hooks = {
        "PreToolUse": [
            hook('"$CLAUDE_PROJECT_DIR"/.claude/hooks/bash_validator.py', "Bash"),
            hook('python3 "$CLAUDE_PROJECT_DIR"/.claude/hooks/rewrite.py', "Write|Edit"),
        ],
        "PostToolUse": [hook('python3 "$CLAUDE_PROJECT_DIR"/.claude/hooks/post.py', "Bash")],
        "UserPromptSubmit": [hook("echo 'current branch: feature/hooks'")],
        "SessionStart": [hook("echo 'session context: ticket 42'", "startup")],
        "Stop": [hook("cat > stop-stdin.json")],
        "SessionEnd": [hook("cat > session-end-stdin.json")],
    }
    scripts = {
        "bash_validator.py": DOCS_VALIDATOR,
        "rewrite.py": REWRITE_WRITE,
        "post.py": POST_BASH,
    }
    ws = hooked_workspace(tmp_path, hooks, scripts)
    turns = [
        tool_turn(
            [
                ("b1", "Bash", {"command": "grep -r TODO . > found.txt"}),
                ("b2", "Bash", {"command": "echo fine | tee -a log.txt"}),
                ("w1", "Write", {"file_path": "out.txt", "content": "original\n"}),
            ]
        ),
        text_turn("Done."),
    ]
    # Bash is allowed by the flag; Write is not (headless default mode would deny it), so it
    # runs only because the PreToolUse hook allows it.
    result, server, stderr = run(dev_env, tmp_path, ws, turns, "--allowedTools", "Bash")
    assert result["terminal"] == "completed", (result, stderr)
    first = sent_text(server, 0)
    assert "current branch: feature/hooks" in first  # UserPromptSubmit context
    assert "session context: ticket 42" in first  # SessionStart (startup) context
    sent = results_sent(server, 1)
    # The docs' validator blocked grep: its stderr is Claude's result; the command never ran.
    assert sent["b1"]["is_error"] and "Use 'rg' (ripgrep)" in text_of(sent["b1"])
    assert not (ws / "found.txt").exists()
    # The sibling ran, and its PostToolUse hook's block reason reached Claude after the results.
    assert "fine" in text_of(sent["b2"]) and (ws / "log.txt").read_text() == "fine\n"
    assert "lint: 3 warnings after echo fine | tee -a log.txt" in sent_text(server, 1)
    post = [json.loads(line) for line in (ws / "post-stdin.jsonl").read_text().splitlines()]
    assert [p["tool_use_id"] for p in post] == ["b2"]  # a blocked call has no PostToolUse
    assert post[0]["hook_event_name"] == "PostToolUse" and post[0]["cwd"] == str(ws)
    assert "fine" in post[0]["tool_response"] and post[0]["tool_name"] == "Bash"
    # updatedInput changed what the Write wrote.
    assert (ws / "out.txt").read_text() == "rewritten by the hook\n"
    assert not sent["w1"].get("is_error")
    assert [d["tool_use_id"] for d in result["permission_denials"]] == ["b1"]
    stop = json.loads((ws / "stop-stdin.json").read_text())
    assert stop["hook_event_name"] == "Stop" and stop["last_assistant_message"] == "Done."
    assert stop["stop_hook_active"] is False and stop["permission_mode"] == "default"
    assert stop["session_id"] == result["session_id"]
    end = json.loads((ws / "session-end-stdin.json").read_text())
    assert end["hook_event_name"] == "SessionEnd" and end["reason"] == "other"


def test_continue_false_in_a_pre_tool_hook_ends_the_prompt_hook_stopped(dev_env, tmp_path):
    stop = """echo '{"continue": false, "stopReason": "nightly budget exhausted"}'"""
    ws = hooked_workspace(tmp_path, {"PreToolUse": [hook(stop, "Bash")]}, {})
    turns = [tool_turn([("b1", "Bash", {"command": "touch ran.txt"})]), text_turn("never")]
    result, server, stderr = run(dev_env, tmp_path, ws, turns, "--allowedTools", "Bash")
    assert result["terminal"] == "hook_stopped", (result, stderr)
    assert "nightly budget exhausted" in result["message"]
    assert not (ws / "ran.txt").exists()
    assert len(server.requests) == 1  # Claude is not called again


def test_a_failed_model_call_runs_the_stop_failure_hooks(dev_env, tmp_path):
    ws = hooked_workspace(tmp_path, {"StopFailure": [hook("cat > failure-stdin.json")]}, {})
    refused = Turn(error=ErrorReply(status=400, type="invalid_request_error", message="bad"))
    result, server, stderr = run(dev_env, tmp_path, ws, [refused])
    assert result["terminal"] == "model_error", (result, stderr)
    failure = json.loads((ws / "failure-stdin.json").read_text())
    assert failure["hook_event_name"] == "StopFailure" and failure["error_type"]
    assert "bad" in failure["error"]


def test_a_user_prompt_submit_block_erases_the_prompt(dev_env, tmp_path):
    block = "echo 'prompts are frozen during the release' >&2; exit 2"
    ws = hooked_workspace(tmp_path, {"UserPromptSubmit": [hook(block)]}, {})
    result, server, stderr = run(dev_env, tmp_path, ws, [text_turn("never")])
    assert result["terminal"] == "hook_stopped", (result, stderr)
    assert "prompts are frozen during the release" in result["message"]
    assert server.requests == []  # the prompt never reached Claude


SUMMARY = "<summary>1. Request and intent: list files. 7. Next step: finish.</summary>"


def test_session_start_runs_again_after_a_compaction_with_source_compact(dev_env, tmp_path):
    again = hook("cat > compact-stdin.json; echo 'reloaded: coding rules v3'", "compact")
    ws = hooked_workspace(tmp_path, {"SessionStart": [again]}, {})
    turns = [
        tool_turn([("g1", "Glob", {"pattern": "*"})], input_tokens=170_000),  # over the threshold
        text_turn(SUMMARY),
        text_turn("done"),
    ]
    result, server, stderr = run(dev_env, tmp_path, ws, turns)
    assert result["terminal"] == "completed" and result["compactions"] == 1, (result, stderr)
    assert "reloaded: coding rules v3" not in json.dumps(server.requests[:2])
    assert "reloaded: coding rules v3" in sent_text(server, 2)  # right after the summary
    assert json.loads((ws / "compact-stdin.json").read_text())["source"] == "compact"


async def test_session_start_resume_when_a_chat_comes_back_to_its_session(dev_env, tmp_path):
    from durable_agent.cli.args import controls_for
    from durable_agent.cli.args import parser as cli_parser
    from durable_agent.engine.contracts import SessionInput
    from durable_agent.engine.state import ModelCallConfig, QueryConfig
    from tests.test_sessions_queue import _chat
    from workflows.session import SessionWorkflow

    resumed = hook("cat > resume-stdin.json; echo 'welcome back'", "resume")
    ws = hooked_workspace(tmp_path, {"SessionStart": [resumed]}, {})
    controls = controls_for(cli_parser().parse_args(["chat", "--workspace", str(ws)]), ws)
    config = QueryConfig(
        workspace=str(ws), settings=controls.settings, call=ModelCallConfig(tool_hooks=None)
    )
    sid = f"resume-{uuid.uuid4().hex[:8]}"
    queue = f"durable-agent-session-{sid}"  # as `chat` names it
    await dev_env.client.start_workflow(
        SessionWorkflow.run,
        SessionInput(session_id=sid, config=config, initial_prompt="zero"),
        id=sid,
        task_queue=queue,
        memo={"task_queue": queue, "base_url": "http://recorded.invalid", "command": "chat"},
    )
    env = cli_env(
        tmp_path,
        ANTHROPIC_API_KEY="dummy",
        TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
    )
    # Prompt 1 ("zero") is the session's startup (no hook matches); the chat that comes back
    # to it sends "one" with source resume, and "two" with none.
    turns = [text_turn("first"), text_turn("again"), text_turn("third")]
    with ReplayServer(turns) as api:
        env["ANTHROPIC_BASE_URL"] = api.base_url
        proc = await asyncio.to_thread(_chat, env, ["--session", sid], "one\ntwo\n")
    assert proc.returncode == 0, proc.stderr
    said = [sent_text(api, i) for i in range(3)]
    assert ["welcome back" in text for text in said] == [False, True, False], said
    assert json.loads((ws / "resume-stdin.json").read_text())["source"] == "resume"
