"""The official Claude Agent SDK drives durable-agent as its `cli_path` (the drop-in front-end,
durable_agent/cli/claude.py), against the replay server and a real Temporal dev server: what
it sends is Claude Code's command line and stream-json, what it reads must parse."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import (
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    HookMatcher,
    PermissionResultDeny,
    ResultMessage,
    StreamEvent,
    SystemMessage,
    TextBlock,
    ToolUseBlock,
    UserMessage,
    query,
)
from temporalio.client import WorkflowExecutionStatus

from durable_agent.engine.contracts import SessionStatus
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from tests.helpers import record_histories
from tests.test_cli import ROOT, cli_env
from tests.test_compaction import Script


@pytest.fixture
def cli_path(tmp_path: Path) -> Path:
    """What `cli_path` names: durable-agent, run by this interpreter from this checkout."""
    script = tmp_path / "durable-agent"
    script.write_text(
        f'#!/bin/sh\ncd "$DA_WORKSPACE" && exec {sys.executable} -m durable_agent "$@"\n'
    )
    script.chmod(0o755)
    return script


def options(dev_env: Any, tmp_path: Path, cli_path: Path, server: ReplayServer, **kw: Any):
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "notes.txt").write_text("durable notes\n")
    env = cli_env(
        tmp_path,
        ANTHROPIC_API_KEY="dummy",
        ANTHROPIC_BASE_URL=server.base_url,
        TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
        DA_WORKSPACE=str(ws),
        PYTHONPATH=str(ROOT),
    )
    # The SDK merges `env` into its own environment: what must not leak in is blanked.
    for name in os.environ:
        if name.startswith(("ANTHROPIC_", "TEMPORAL_", "DURABLE_AGENT_")) and name not in env:
            env[name] = ""
    return ClaudeAgentOptions(cli_path=str(cli_path), cwd=str(ws), env=env, **kw)


async def collect(prompt: Any, opts: ClaudeAgentOptions) -> list[Any]:
    return [message async for message in query(prompt=prompt, options=opts)]


@pytest.fixture
def unknown_lines(caplog: pytest.LogCaptureFixture):
    """The SDK's parser skips a line of an unknown type with a debug log: none may be."""
    caplog.set_level(logging.DEBUG, logger="claude_agent_sdk")
    yield
    records = caplog.get_records("call")
    skipped = [r.getMessage() for r in records if "Skipping unknown" in r.getMessage()]
    assert skipped == []


async def test_query_with_a_tool_turn(dev_env, tmp_path, cli_path, unknown_lines):
    turns = [
        tool_turn([("r1", "Read", {"file_path": "notes.txt"})]),
        text_turn("They say durable."),
    ]
    with ReplayServer(turns) as server:
        messages = await collect(
            "what do my notes say?", options(dev_env, tmp_path, cli_path, server)
        )
    assert server.violations == []
    kinds = [type(m).__name__ for m in messages]
    assert kinds == [
        "SystemMessage", "AssistantMessage", "UserMessage", "AssistantMessage", "ResultMessage"
    ], kinds  # fmt: skip
    init, first, results, last, result = messages
    assert isinstance(init, SystemMessage) and init.subtype == "init"
    assert init.data["claude_code_version"] and "Read" in init.data["tools"]
    assert isinstance(first, AssistantMessage) and isinstance(first.content[0], ToolUseBlock)
    assert first.content[0].name == "Read"
    assert isinstance(results, UserMessage) and "durable notes" in str(results.content)
    assert isinstance(last, AssistantMessage) and isinstance(last.content[0], TextBlock)
    assert last.content[0].text == "They say durable."
    assert isinstance(result, ResultMessage) and result.subtype == "success" and not result.is_error
    assert result.result == "They say durable." and result.num_turns == 2
    assert result.session_id == init.data["session_id"] and (result.total_cost_usd or 0) > 0
    assert "system" not in server.requests[0]  # the SDK's default `--system-prompt ""`


async def test_can_use_tool_denies_a_bash_call(dev_env, tmp_path, cli_path, unknown_lines):
    asked: list[tuple[str, dict[str, Any]]] = []

    async def can_use_tool(name: str, tool_input: dict[str, Any], context: Any):
        asked.append((name, tool_input))
        return PermissionResultDeny(message="no shell in this job")

    turns = [tool_turn([("b1", "Bash", {"command": "touch ran.txt"})]), text_turn("Understood.")]
    with ReplayServer(turns) as server:
        opts = options(dev_env, tmp_path, cli_path, server, can_use_tool=can_use_tool)
        messages = await collect(_stream("make a file"), opts)
    assert asked == [("Bash", {"command": "touch ran.txt"})]
    assert not (tmp_path / "ws" / "ran.txt").exists()
    denied = server.requests[1]["messages"][-1]["content"][0]
    assert denied["is_error"] and "no shell in this job" in str(denied["content"])
    result = messages[-1]
    assert isinstance(result, ResultMessage) and result.subtype == "success"
    assert [d["tool_use_id"] for d in result.permission_denials or []] == ["b1"]


async def _stream(text: str):
    yield {"type": "user", "message": {"role": "user", "content": text}, "parent_tool_use_id": None}


async def test_a_client_session_with_two_prompts_and_a_compact_then_resume_from_a_new_process(
    dev_env, tmp_path, cli_path, unknown_lines
):
    turns = [text_turn("Noted: blue."), text_turn("You said blue."), text_turn("Still blue.")]
    script = Script(turns, summaries=[text_turn("<summary>Their colour: blue.</summary>")])
    with ReplayServer(script) as server:
        opts = options(dev_env, tmp_path, cli_path, server)
        async with ClaudeSDKClient(opts) as client:
            await client.query("remember: my colour is blue")
            first = [m async for m in client.receive_response()]
            await client.set_model("claude-haiku-4-5")  # for the prompts that follow
            await client.query("what is my colour?")
            second = [m async for m in client.receive_response()]
            await client.query("/compact keep the colour")  # a command, as in Claude Code
            compacted = [m async for m in client.receive_response()]
        done = first[-1]
        assert isinstance(done, ResultMessage) and done.result == "Noted: blue."
        assert isinstance(second[-1], ResultMessage) and second[-1].result == "You said blue."
        assert second[-1].session_id == done.session_id  # one session
        # The second prompt's request carries the first exchange.
        assert "remember: my colour is blue" in str(server.requests[1]["messages"])
        models = [r["model"] for r in server.requests]
        assert models == ["claude-sonnet-4-5", "claude-haiku-4-5", "claude-haiku-4-5"]
        boundary, summarised = compacted[0], compacted[-1]
        assert isinstance(boundary, SystemMessage) and boundary.subtype == "compact_boundary"
        assert boundary.data["compact_metadata"]["trigger"] == "manual"
        assert boundary.data["compact_metadata"]["pre_tokens"] > 0
        assert isinstance(summarised, ResultMessage) and summarised.subtype == "success"
        assert script.summary_requests == 1 and "keep the colour" in str(server.requests[2])
        # The first process has exited (its session ended); a new one resumes it.
        resumed = await collect("and now?", replace(opts, resume=done.session_id))
    result = resumed[-1]
    assert isinstance(result, ResultMessage) and result.result == "Still blue."
    assert result.session_id == done.session_id
    # It goes on from the summary /compact left, not from the exchanges before it.
    history = str(server.requests[3]["messages"])
    assert "Their colour: blue." in history and "You said blue." not in history


async def test_interrupt_ends_the_running_prompt(dev_env, tmp_path, cli_path, unknown_lines):
    slow = text_turn("a very long answer " * 40)
    slow.event_delay = 0.3  # a stream of many seconds
    with ReplayServer([slow, text_turn("after")]) as server:
        async with ClaudeSDKClient(options(dev_env, tmp_path, cli_path, server)) as client:
            await client.query("write a lot")
            for _ in range(600):  # until the model call streams (a request has come)
                if server.requests:
                    break
                await asyncio.sleep(0.05)
            await client.interrupt()
            interrupted = [m async for m in client.receive_response()][-1]
            await client.query("and then?")
            after = [m async for m in client.receive_response()][-1]
    assert isinstance(interrupted, ResultMessage) and interrupted.is_error
    assert interrupted.subtype == "error_during_execution"
    assert interrupted.terminal_reason == "aborted_streaming"
    assert isinstance(after, ResultMessage) and after.result == "after"  # the session goes on


async def test_a_pre_tool_use_hook_callback_of_the_sdk(dev_env, tmp_path, cli_path, unknown_lines):
    seen: list[dict[str, Any]] = []

    async def no_rm(input_data: Any, tool_use_id: str | None, context: Any) -> Any:
        seen.append(input_data)
        if input_data["tool_input"]["command"].startswith("rm "):
            decision = {"permissionDecision": "deny", "permissionDecisionReason": "no rm here"}
            return {"hookSpecificOutput": {"hookEventName": "PreToolUse", **decision}}
        return {}

    turns = [
        tool_turn(
            [("b1", "Bash", {"command": "rm notes.txt"}), ("b2", "Bash", {"command": "echo ok"})]
        ),
        text_turn("Kept the notes."),
    ]
    after: list[dict[str, Any]] = []

    async def record(input_data: Any, tool_use_id: str | None, context: Any) -> Any:
        after.append(input_data)
        return {}

    hooks: Any = {
        "PreToolUse": [HookMatcher(matcher="Bash", hooks=[no_rm])],
        "PostToolUse": [HookMatcher(matcher="Bash", hooks=[record])],
    }
    with ReplayServer(turns) as server:
        opts = options(dev_env, tmp_path, cli_path, server, hooks=hooks, allowed_tools=["Bash"])
        messages = await collect(_stream("tidy up"), opts)
    assert [(s["hook_event_name"], s["tool_use_id"]) for s in seen] == [
        ("PreToolUse", "b1"), ("PreToolUse", "b2")
    ]  # fmt: skip
    assert seen[0]["tool_name"] == "Bash" and seen[0]["tool_input"] == {"command": "rm notes.txt"}
    assert (tmp_path / "ws" / "notes.txt").exists()
    # PostToolUse for the call that ran, with its output (read from where the tool stored it).
    assert [(a["hook_event_name"], a["tool_use_id"]) for a in after] == [("PostToolUse", "b2")]
    assert after[0]["tool_response"].strip() == "ok"
    sent = {b["tool_use_id"]: b for b in server.requests[1]["messages"][-1]["content"]}
    assert sent["b1"]["is_error"] and "no rm here" in str(sent["b1"]["content"])
    assert "ok" in str(sent["b2"]["content"]) and not sent["b2"].get("is_error")
    result = messages[-1]
    assert isinstance(result, ResultMessage) and result.result == "Kept the notes."


async def test_messages_arrive_while_the_prompt_runs(dev_env, tmp_path, cli_path, unknown_lines):
    slow = text_turn("done at last")
    slow.pause_before = {0: 3.0}  # the second answer starts 3 s after its request
    turns = [tool_turn([("r1", "Read", {"file_path": "notes.txt"})]), slow]
    with ReplayServer(turns) as server:
        arrived: list[tuple[str, float]] = []
        async for message in query(
            prompt="read", options=options(dev_env, tmp_path, cli_path, server)
        ):
            arrived.append((type(message).__name__, time.monotonic()))
    kinds = [k for k, _ in arrived]
    assert kinds == ["SystemMessage", "AssistantMessage", "UserMessage", "AssistantMessage",
                     "ResultMessage"], kinds  # fmt: skip
    tool_use_at, result_at = arrived[1][1], arrived[-1][1]
    assert result_at - tool_use_at > 2.0  # the tool_use was shown before the slow answer came


async def test_partial_messages_stream_before_the_message(
    dev_env, tmp_path, cli_path, unknown_lines
):
    with ReplayServer([text_turn("streamed answer")]) as server:
        opts = options(dev_env, tmp_path, cli_path, server, include_partial_messages=True)
        messages = await collect("stream it", opts)
    kinds = [type(m).__name__ for m in messages]
    assert kinds[0] == "SystemMessage" and kinds[-2:] == ["AssistantMessage", "ResultMessage"]
    events = [m.event for m in messages if isinstance(m, StreamEvent)]
    assert kinds.index("AssistantMessage") > kinds.index("StreamEvent")  # the stream came first
    types = [e["type"] for e in events]
    assert types[0] == "message_start" and types[-1] == "message_stop"
    text = "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
    assert text == "streamed answer"
    # the transcript holds the message, not its stream
    sessions = tmp_path / "home" / "sessions"
    (transcript,) = [p for p in sessions.glob("*.jsonl") if not p.name.endswith(".stream.jsonl")]
    assert "streamed answer" in transcript.read_text()
    assert "content_block_delta" not in transcript.read_text()
    assert "content_block_delta" in next(sessions.glob("*.stream.jsonl")).read_text()


async def test_partial_messages_a_tools_result_comes_before_the_next_messages_stream(
    dev_env, tmp_path, cli_path, unknown_lines
):
    """As Claude Code prints them: the tool_use message, its result, then the next message's
    stream. The result is stored as the next model call begins, and the stream's lines came
    first (the fault campaign's ordering finding)."""
    turns = [tool_turn([("r1", "Read", {"file_path": "notes.txt"})]), text_turn("read it")]
    with ReplayServer(turns) as server:
        opts = options(dev_env, tmp_path, cli_path, server, include_partial_messages=True)
        messages = await collect("read", opts)
    order = [
        m.event["type"] if isinstance(m, StreamEvent) else type(m).__name__
        for m in messages
        if not isinstance(m, StreamEvent) or m.event["type"] == "message_start"
    ]
    assert order == ["SystemMessage", "message_start", "AssistantMessage", "UserMessage",
                     "message_start", "AssistantMessage", "ResultMessage"], order  # fmt: skip


@pytest.mark.parametrize("shared", [False, True], ids=["files", "shared-store"])
async def test_rewind_files_puts_the_files_back_as_before_a_prompt(
    dev_env, tmp_path, cli_path, unknown_lines, request, shared
):
    """enable_file_checkpointing + rewind_files(uuid of a prompt's UserMessage): the workspace
    as it was before that prompt; with a shared store, the next prompt's tools see it too."""
    turns = [
        tool_turn([("w1", "Write", {"file_path": "new.txt", "content": "one\n"})]),
        text_turn("Wrote it."),
        tool_turn([("b1", "Bash", {"command": "rm notes.txt && echo two >> new.txt"})]),
        text_turn("Changed it."),
        tool_turn([("b2", "Bash", {"command": "ls"})]),
        text_turn("Listed."),
    ]
    with ReplayServer(turns) as server:
        opts = options(
            dev_env, tmp_path, cli_path, server, enable_file_checkpointing=True,
            extra_args={"replay-user-messages": None}, permission_mode="acceptEdits",
            allowed_tools=["Bash"],
        )  # fmt: skip
        if shared:
            opts.env["DURABLE_AGENT_STORE"] = request.getfixturevalue("pg_url")
        ws = Path(opts.cwd)
        async with ClaudeSDKClient(opts) as client:
            await client.query("write new.txt")
            first = [m async for m in client.receive_response()]
            await client.query("change things")
            second = [m async for m in client.receive_response()]
            prompts = [
                m
                for m in first + second
                if isinstance(m, UserMessage)
                and m.uuid
                and (isinstance(m.content, str) or all(isinstance(b, TextBlock) for b in m.content))
            ]
            assert len(prompts) == 2, prompts
            before_write, before_change = (str(m.uuid) for m in prompts)
            assert (ws / "new.txt").read_text() == "one\ntwo\n"
            assert not (ws / "notes.txt").exists()
            await client.rewind_files(before_change)
            assert (ws / "new.txt").read_text() == "one\n"
            assert (ws / "notes.txt").read_text() == "durable notes\n"
            await client.rewind_files(before_write)
            assert not (ws / "new.txt").exists()
            await client.query("list")
            third = [m async for m in client.receive_response()]
    assert isinstance(third[-1], ResultMessage) and third[-1].result == "Listed."
    listing = server.requests[5]["messages"][-1]["content"][0]["content"]
    assert "new.txt" not in listing and "notes.txt" in listing


async def test_a_prompt_sent_while_tools_run_reaches_the_model_with_their_results(
    dev_env, tmp_path, cli_path, unknown_lines
):
    """Claude Code's queued message: sent while the first prompt's Bash runs, it is not left
    waiting for the first to end but goes to the model after the tool's result, in the same
    user entry; both prompts get the one answer, the second's result costing nothing more."""
    marker = tmp_path / "started"
    slow = tool_turn([("b1", "Bash", {"command": f"touch {marker} && sleep 4 && echo slept"})])
    with ReplayServer([slow, text_turn("Slept, and noted the colour.")]) as server:
        opts = options(dev_env, tmp_path, cli_path, server, allowed_tools=["Bash"])
        async with ClaudeSDKClient(opts) as client:
            await client.query("sleep a while")
            for _ in range(600):  # until the command runs
                if marker.exists():
                    break
                await asyncio.sleep(0.05)
            assert marker.exists()
            await client.query("also: my colour is green")
            first = [m async for m in client.receive_response()]
            second = [m async for m in client.receive_response()]
    assert len(server.requests) == 2  # the second prompt took no model call of its own
    sent = server.requests[1]["messages"][-1]["content"]
    assert sent[0]["type"] == "tool_result" and "slept" in str(sent[0]["content"])
    assert sent[-1]["type"] == "text" and sent[-1]["text"] == "also: my colour is green"
    done, again = first[-1], second[-1]
    assert isinstance(done, ResultMessage) and done.result == "Slept, and noted the colour."
    assert isinstance(again, ResultMessage) and again.result == done.result
    assert again.session_id == done.session_id and again.num_turns == 0
    await record_histories(dev_env.client, done.session_id)


async def test_a_client_that_leaves_mid_tool_stops_its_session(
    dev_env, tmp_path, cli_path, unknown_lines
):
    """The SDK's disconnect (and its exit) closes the CLI's stdin, gives it 5 s, then SIGTERMs
    it: the session stops there, its tool ended, as Claude Code's agent does. Before, the CLI
    died and the session was left running (its worker gone with it, or going on elsewhere)."""
    marker = tmp_path / "started"
    command = f"touch {marker} && sleep 30 && echo slept"
    turns = [tool_turn([("b1", "Bash", {"command": command})]), text_turn("never reached")]
    with ReplayServer(turns) as server:
        client = ClaudeSDKClient(
            options(dev_env, tmp_path, cli_path, server, allowed_tools=["Bash"])
        )
        await client.connect()
        await client.query("sleep a while")
        session_id = ""
        async for message in client.receive_messages():
            if isinstance(message, SystemMessage) and message.subtype == "init":
                session_id = message.data["session_id"]
            if isinstance(message, AssistantMessage):
                break
        for _ in range(600):  # until the command runs
            if marker.exists():
                break
            await asyncio.sleep(0.05)
        assert session_id and marker.exists()
        left = time.monotonic()
        await client.disconnect()
        took = time.monotonic() - left
    handle = dev_env.client.get_workflow_handle(session_id, result_type=SessionStatus)
    assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED
    status = await handle.result()
    assert status.last_result is not None and status.last_result.terminal == "aborted_tools"
    assert len(server.requests) == 1
    assert took < 10  # the SDK's 5 s, then the stop
    await record_histories(dev_env.client, session_id)
