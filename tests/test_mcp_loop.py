"""MCP tools in the loop (issue 25 item 2), through the drop-in CLI and the fake Messages API:
a real MCP server from PyPI (`mcp-server-time`) configured by `.mcp.json` (approved in the
settings) and by `--mcp-config`; `system/init` lists each server with its status; the tools
are in the request with the server's schema; an allowed call runs on the real server, one
without a rule is denied headless; a server that crashes mid-call is an error result and the
prompt goes on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from durable_agent.replay import ReplayServer, text_turn, tool_turn
from tests.test_claude_cli import env_for
from tests.test_claude_sdk import cli_path  # noqa: F401 (the fixture)

BIN = Path(sys.executable).parent
TIME = {"command": str(BIN / "mcp-server-time"), "args": ["--local-timezone", "UTC"]}
MISBEHAVING = Path(__file__).parent / "mcp_servers" / "misbehaving.py"


def run_p(env: dict[str, str], ws: Path, *flags: str) -> list[dict[str, Any]]:
    proc = subprocess.run(
        ["durable-agent", "-p", "what time is it in Tokyo?", "--output-format", "stream-json",
         "--verbose", *flags], cwd=ws, env=env, capture_output=True, text=True, timeout=180,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def test_a_project_server_and_a_flag_server_are_listed_called_and_denied(dev_env, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".mcp.json").write_text(json.dumps({"mcpServers": {
        "time": TIME, "broken": {"command": str(tmp_path / "no-such-server")},
    }}))  # fmt: skip
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"enableAllProjectMcpServers": True}))
    convert = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
    turns = [
        tool_turn([
            ("m1", "mcp__time__convert_time", convert),
            ("m2", "mcp__clock__get_current_time", {"timezone": "UTC"}),
        ]),
        text_turn("It is 21:00 in Tokyo."),
    ]  # fmt: skip
    with ReplayServer(turns) as server:
        env = env_for(dev_env, tmp_path, server)
        env["DURABLE_AGENT_SETTINGS"] = str(settings)
        flag = json.dumps({"mcpServers": {"clock": TIME}})
        lines = run_p(env, ws, "--mcp-config", flag, "--allowedTools", "mcp__time")
    init = lines[0]
    assert init["subtype"] == "init"
    listed = {s["name"]: s["status"] for s in init["mcp_servers"]}
    assert listed == {"time": "connected", "clock": "connected", "broken": "failed"}
    tools = {t["name"]: t for t in server.requests[0]["tools"]}
    assert "mcp__time__convert_time" in tools and "mcp__clock__get_current_time" in tools
    assert "target_timezone" in json.dumps(tools["mcp__time__convert_time"]["input_schema"])
    results = server.requests[1]["messages"][-1]["content"]
    allowed, denied = results
    assert allowed["tool_use_id"] == "m1" and not allowed.get("is_error")
    assert "21:00" in json.dumps(allowed)  # the real server's answer
    assert denied["tool_use_id"] == "m2" and denied["is_error"]  # no rule allows it: headless
    assert lines[-1]["type"] == "result" and lines[-1]["result"] == "It is 21:00 in Tokyo."


def test_a_server_that_crashes_mid_call_is_an_error_result_and_the_prompt_goes_on(
    dev_env, tmp_path
):
    ws = tmp_path / "ws"
    ws.mkdir()
    spec = {"command": sys.executable, "args": [str(MISBEHAVING)]}
    turns = [
        tool_turn([("c1", "mcp__odd__crash", {})]),
        text_turn("the server died"),
    ]
    with ReplayServer(turns, strict=False) as server:
        env = env_for(dev_env, tmp_path, server)
        flag = json.dumps({"mcpServers": {"odd": spec}})
        lines = run_p(env, ws, "--mcp-config", flag, "--allowedTools", "mcp__odd")
    assert {s["name"]: s["status"] for s in lines[0]["mcp_servers"]} == {"odd": "connected"}
    (result,) = server.requests[1]["messages"][-1]["content"]
    assert result["tool_use_id"] == "c1" and result["is_error"]
    assert lines[-1]["result"] == "the server died"


async def test_a_tool_list_changed_between_prompts_changes_the_next_request(
    dev_env,
    tmp_path,
    cli_path,  # noqa: F811
):
    from claude_agent_sdk import ClaudeSDKClient, ResultMessage

    from tests.test_claude_sdk import options

    spec = {"command": sys.executable, "args": [str(MISBEHAVING)]}
    turns = [tool_turn([("g1", "mcp__odd__grow", {})]), text_turn("grew"), text_turn("seen")]
    with ReplayServer(turns) as server:
        opts = options(
            dev_env, tmp_path, cli_path, server, allowed_tools=["mcp__odd"],
            mcp_servers={"odd": {"type": "stdio", **spec}},
        )  # fmt: skip
        async with ClaudeSDKClient(opts) as client:
            await client.query("grow a tool")
            first = [m async for m in client.receive_response()]
            await client.query("and now?")
            second = [m async for m in client.receive_response()]
    assert isinstance(first[-1], ResultMessage) and isinstance(second[-1], ResultMessage)
    before = [t["name"] for t in server.requests[0]["tools"]]
    after = [t["name"] for t in server.requests[2]["tools"]]
    assert "mcp__odd__grow" in before and "mcp__odd__grown" not in before
    assert "mcp__odd__grown" in after
