"""MCP servers (issue 25 item 2), without the loop: configuration (`.mcp.json`, `--mcp-config`,
settings, approval, `${VAR}`), a real server nobody on the project wrote (`mcp-server-time`,
a dev dependency) driven through the activities, the three transports, and the failures: a
server that crashes mid-call, one that is slow, one that cannot start, one that wants a login,
and one whose tool list changes."""

from __future__ import annotations

import asyncio
import json
import sys
import sysconfig
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import pytest_asyncio
import uvicorn
from temporalio.testing import ActivityEnvironment

from activities.mcp import McpActivities
from durable_agent.engine.messages import ImageBlock, TextBlock
from durable_agent.mcp.config import McpConfigError, McpServerSpec, load_servers, tool_name
from durable_agent.mcp.connections import McpConnections
from durable_agent.mcp.contracts import (
    CallMcpToolInput,
    CloseMcpInput,
    ConnectMcpInput,
    McpStatus,
    RefreshMcpToolsInput,
)
from durable_agent.mcp.results import map_result
from tests.mcp_servers.misbehaving import PIXEL, build

BIN = Path(sysconfig.get_path("scripts"))
MISBEHAVING = str(Path(__file__).parent / "mcp_servers" / "misbehaving.py")
TIME_SERVER = {"command": "${TIME_BIN}/mcp-server-time", "args": ["--local-timezone", "UTC"]}
ENV = {"TIME_BIN": str(BIN)}


def servers_json(**servers: Any) -> str:
    return json.dumps({"mcpServers": servers})


def write_project(workspace: Path, **servers: Any) -> None:
    (workspace / ".mcp.json").write_text(servers_json(**servers))


@pytest_asyncio.fixture
async def connections() -> AsyncIterator[McpConnections]:
    conns = McpConnections()
    try:
        yield conns
    finally:
        await conns.close_all()


def misbehaving() -> McpServerSpec:
    return McpServerSpec(name="bad", command=sys.executable, args=[MISBEHAVING])


def text_of(blocks: list[TextBlock | ImageBlock]) -> str:
    return "\n".join(b.text for b in blocks if isinstance(b, TextBlock))


# --- configuration ---


def test_project_servers_load_once_approved(tmp_path: Path) -> None:
    write_project(tmp_path, time=TIME_SERVER, other={"command": "other"})
    none = load_servers(tmp_path, [], False, {}, environ=ENV)
    assert none.servers == []
    assert {(o.name, o.source) for o in none.left_out} == {
        ("time", "project"),
        ("other", "project"),
    }
    assert all("enabledMcpjsonServers" in o.reason for o in none.left_out)

    one = load_servers(tmp_path, [], False, {"enabledMcpjsonServers": ["time"]}, environ=ENV)
    assert [(s.name, s.source, s.command) for s in one.servers] == [
        ("time", "project", f"{BIN}/mcp-server-time")
    ]
    settings = {"enableAllProjectMcpServers": True, "disabledMcpjsonServers": ["other"]}
    all_but = load_servers(tmp_path, [], False, settings, environ=ENV)
    assert [s.name for s in all_but.servers] == ["time"]
    assert [o.reason for o in all_but.left_out] == ["rejected in settings (disabledMcpjsonServers)"]


def test_precedence_flag_local_settings_project_user(tmp_path: Path) -> None:
    write_project(tmp_path, a={"command": "project-a"}, c={"command": "project-c"})
    claude_json = tmp_path / "claude.json"
    claude_json.write_text(
        json.dumps(
            {
                "mcpServers": {"c": {"command": "user-c"}, "d": {"command": "user-d"}},
                "projects": {str(tmp_path): {"mcpServers": {"b": {"command": "local-b"}}}},
            }
        )
    )
    settings = {
        "enableAllProjectMcpServers": True,
        "mcpServers": {"a": {"command": "settings-a"}, "b": {"command": "settings-b"}},
    }
    flag = servers_json(a={"command": "flag-a"})
    found = load_servers(tmp_path, [flag], False, settings, claude_json=claude_json, environ={})
    assert [(s.name, s.source, s.command) for s in found.servers] == [
        ("a", "flag", "flag-a"),
        ("b", "local", "local-b"),
        ("c", "project", "project-c"),
        ("d", "user", "user-d"),
    ]
    strict = load_servers(tmp_path, [flag], True, settings, claude_json=claude_json, environ={})
    assert [(s.name, s.source) for s in strict.servers] == [("a", "flag")]


def test_mcp_config_takes_files_and_json_and_the_later_wins(tmp_path: Path) -> None:
    (tmp_path / "servers.json").write_text(servers_json(x={"command": "from-file"}))
    (tmp_path / ".mcp.json").write_text("not json at all")  # strict: never read
    later = servers_json(x={"type": "http", "url": "http://127.0.0.1:1/mcp"})
    found = load_servers(tmp_path, ["servers.json"], True, {}, cwd=tmp_path)
    assert found.servers[0].command == "from-file"
    found = load_servers(tmp_path, ["servers.json", later], True, {}, cwd=tmp_path)
    assert (found.servers[0].type, found.servers[0].url) == ("http", "http://127.0.0.1:1/mcp")


def test_variables_expand_in_every_field(tmp_path: Path) -> None:
    server = {
        "type": "sse",
        "url": "https://${HOST:-example.com}/${PATH_PART}",
        "headers": {"Authorization": "Bearer ${TOKEN}", "X-Empty": "${EMPTY:-fallback}"},
    }
    stdio = {
        "command": "${TOOL}",
        "args": ["--dir", "${HOME_DIR:-/home/x}"],
        "env": {"KEY": "${TOKEN}"},
    }
    environ = {"PATH_PART": "sse", "TOKEN": "t0k", "EMPTY": "", "TOOL": "run-it"}
    flag = servers_json(remote=server, local=stdio)
    remote, local = load_servers(tmp_path, [flag], True, {}, environ=environ).servers
    assert remote.url == "https://example.com/sse"
    assert remote.headers == {"Authorization": "Bearer t0k", "X-Empty": "fallback"}
    assert (local.command, local.args, local.env) == (
        "run-it",
        ["--dir", "/home/x"],
        {"KEY": "t0k"},
    )

    with pytest.raises(McpConfigError) as missing:
        load_servers(tmp_path, [flag], True, {}, environ={"TOOL": "x"})
    assert "'remote'" in str(missing.value) and "${PATH_PART} is not set" in str(missing.value)
    secret = servers_json(s={"command": "x", "env": {"K": "${ANTHROPIC_API_KEY}"}})
    with pytest.raises(McpConfigError, match="own secrets"):
        load_servers(tmp_path, [secret], True, {}, environ={"ANTHROPIC_API_KEY": "sk"})


@pytest.mark.parametrize(
    ("flag", "says"),
    [
        ("{not json", "not JSON"),
        ("missing.json", "no such file"),
        ('["a list"]', "must be a JSON object"),
        (servers_json(s={"args": ["x"]}), "needs a command"),
        (servers_json(s={"url": "http://h/mcp"}), "has a url but no type"),
        (servers_json(s={"type": "ws", "url": "ws://h"}), "unknown type 'ws'"),
        (servers_json(s={"type": "http"}), "needs a url"),
        (servers_json(s={"type": "http", "url": "ftp://h"}), "is not http(s)"),
        (servers_json(s={"command": "x", "args": "--flag"}), "args must be a list"),
        (servers_json(s=["x"]), "must be an object"),
        (json.dumps({"mcpServers": ["x"]}), "mcpServers must be an object"),
    ],
)
def test_bad_configuration_is_one_line_with_a_hint(tmp_path: Path, flag: str, says: str) -> None:
    with pytest.raises(McpConfigError) as raised:
        load_servers(tmp_path, [flag], False, {}, cwd=tmp_path, environ={})
    assert says in str(raised.value)
    assert "\n" not in str(raised.value) and raised.value.hint


def test_names_normalise_for_tools_and_sdk_servers_are_left_out(tmp_path: Path) -> None:
    assert tool_name("my.server", "get time!") == "mcp__my_server__get_time_"
    flag = servers_json(
        **{
            "my.server": {"command": "a"},
            "my_server": {"command": "b"},
            "in-sdk": {"type": "sdk", "name": "in-sdk"},
        }
    )
    found = load_servers(tmp_path, [flag], True, {}, environ={})
    assert [s.name for s in found.servers] == ["my.server"]
    assert found.servers[0].tool_prefix == "mcp__my_server__"
    reasons = {o.name: o.reason for o in found.left_out}
    assert "'my.server'" in reasons["my_server"] and "SDK" in reasons["in-sdk"]


# --- results ---


def test_results_map_to_tool_result_blocks() -> None:
    blob = types.BlobResourceContents(uri="file:///p.png", mime_type="image/png", blob=PIXEL)
    result = types.CallToolResult(
        content=[
            types.TextContent(text="hello"),
            types.ImageContent(data=PIXEL, mime_type="image/png"),
            types.ImageContent(data=PIXEL, mime_type="image/bmp"),
            types.AudioContent(data=PIXEL, mime_type="audio/wav"),
            types.EmbeddedResource(
                resource=types.TextResourceContents(uri="file:///a.txt", text="inside")
            ),
            types.EmbeddedResource(resource=blob),
            types.ResourceLink(uri="file:///b.txt", name="b.txt", description="a file"),
        ],
        structured_content={"ignored": "there is text"},
        is_error=True,
    )
    blocks, is_error = map_result(result)
    assert is_error
    images = [b for b in blocks if isinstance(b, ImageBlock)]
    assert [(i.source.type, i.source.media_type, i.source.data) for i in images] == [
        ("base64", "image/png", PIXEL)
    ] * 2
    text = text_of(blocks)
    assert "hello" in text and "[resource file:///a.txt]\ninside" in text
    assert "image (image/bmp) not shown" in text and "audio (audio/wav" in text
    assert "[resource link b.txt file:///b.txt: a file]" in text and "ignored" not in text

    structured = types.CallToolResult(content=[], structured_content={"n": 1})
    assert map_result(structured) == ([TextBlock(text='{\n  "n": 1\n}')], False)
    long = types.CallToolResult(content=[types.TextContent(text="x" * 500)])
    cut, _ = map_result(long, max_output_tokens=10)
    assert cut[0] == TextBlock(text="x" * 40) and "output cut" in text_of(cut[1:])
    big = types.ImageContent(data="A" * 600_000, mime_type="image/png")
    two, _ = map_result(types.CallToolResult(content=[big, big]))
    assert [b.type for b in two] == ["image", "text"] and "too large" in text_of(two)


# --- a real server from PyPI, through the activities ---


async def test_a_pypi_server_through_mcp_json_and_mcp_config(
    tmp_path: Path, connections: McpConnections
) -> None:
    write_project(tmp_path, time=TIME_SERVER)
    approved = {"enabledMcpjsonServers": ["time"]}
    (project,) = load_servers(tmp_path, [], False, approved, environ=ENV).servers
    flag = servers_json(clock=TIME_SERVER)
    (flagged,) = load_servers(tmp_path, [flag], True, {}, environ=ENV).servers
    acts = McpActivities(connections)
    env = ActivityEnvironment()
    ws = str(tmp_path)

    for session, spec in (("s1", project), ("s2", flagged)):
        connect = ConnectMcpInput(session_id=session, servers=[spec], workspace=ws)
        (state,) = (await env.run(acts.connect_mcp_servers, connect)).servers
        assert state.status == McpStatus.CONNECTED, state.error
        prefix = spec.tool_prefix
        names = {t.name: t for t in state.tools}
        assert {f"{prefix}get_current_time", f"{prefix}convert_time"} <= set(names)
        schema = names[f"{prefix}convert_time"].input_schema
        assert schema["type"] == "object" and "target_timezone" in schema["properties"]

    args = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
    call = CallMcpToolInput(
        session_id="s1", server=project, tool="convert_time", arguments=args, workspace=ws
    )
    out = await env.run(acts.call_mcp_tool, call)
    assert not out.is_error and out.status is None
    converted = json.loads(text_of(out.content))
    assert converted["target"]["datetime"].startswith(converted["source"]["datetime"][:10])
    assert "T21:00:00+09:00" in converted["target"]["datetime"]

    now = call.model_copy(
        update={"session_id": "s2", "server": flagged, "tool": "get_current_time"}
    )
    now.arguments = {"timezone": "UTC"}
    assert (
        json.loads(text_of((await env.run(acts.call_mcp_tool, now)).content))["timezone"] == "UTC"
    )
    bad = now.model_copy(update={"arguments": {"timezone": "Nowhere/Land"}})
    assert (await env.run(acts.call_mcp_tool, bad)).is_error

    closed = await env.run(acts.close_mcp_session, CloseMcpInput(session_id="s1"))
    assert closed.closed == 1 and connections.changed("s1") == []


# --- transports and failures, with a server of ours ---


async def test_a_crash_mid_call_is_an_error_and_the_next_call_reopens(
    connections: McpConnections,
) -> None:
    spec = misbehaving()
    crashed = await connections.call_tool("s", spec, "crash", {}, 10, ".")
    assert crashed.is_error and crashed.notice and "crashed" in crashed.notice
    assert crashed.status is not None and crashed.status.status == McpStatus.FAILED
    assert "crashing on purpose" in (crashed.status.error or "")
    again = await connections.call_tool("s", spec, "echo", {"text": "back"}, 10, ".")
    assert (text_of(again.content), again.is_error) == ("back", False)
    assert again.status is not None and again.status.status == McpStatus.CONNECTED


async def test_a_slow_call_times_out_and_the_server_stays(connections: McpConnections) -> None:
    spec = misbehaving()
    slow = await connections.call_tool("s", spec, "slow", {"seconds": 30}, 0.5, ".")
    assert slow.is_error and "did not answer slow within 0.5 s" in text_of(slow.content)
    after = await connections.call_tool("s", spec, "echo", {"text": "still here"}, 10, ".")
    assert (text_of(after.content), after.status) == ("still here", None)
    refused = await connections.call_tool("s", spec, "refuse", {}, 10, ".")
    assert refused.is_error and "refused on purpose" in text_of(refused.content)


async def test_an_idle_connection_is_closed_and_the_next_call_reopens_it() -> None:
    """A connection no call used for idle_seconds ends its stdio server (a worker of a fleet on
    one disk would otherwise keep one per session until the session ends); a call in flight
    keeps it, however long; the session's next call opens it again, with no error."""
    import os

    conns = McpConnections(idle_seconds=0.6)
    spec = misbehaving()

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
            return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
        except (ProcessLookupError, FileNotFoundError):  # gone, or reaped meanwhile
            return False

    try:
        first = int(text_of((await conns.call_tool("s", spec, "pid", {}, 10, ".")).content))
        slow = await conns.call_tool("s", spec, "slow", {"seconds": 1.5}, 10, ".")
        assert text_of(slow.content) == "late"  # 2.5 idle spans long, not cut
        same = await conns.call_tool("s", spec, "pid", {}, 10, ".")
        assert int(text_of(same.content)) == first
        for _ in range(100):  # up to 10 s
            if not conns._open and not alive(first):
                break
            await asyncio.sleep(0.1)
        assert not conns._open and not alive(first)
        again = await conns.call_tool("s", spec, "pid", {}, 10, ".")
        assert (again.is_error, again.status, again.notice) == (False, None, None)
        assert int(text_of(again.content)) != first
    finally:
        await conns.close_all()
    never = McpConnections(idle_seconds=0)
    try:
        await never.call_tool("s", spec, "echo", {"text": "x"}, 10, ".")
        await asyncio.sleep(1.0)
        assert list(never._open) == [("s", "bad")]
    finally:
        await never.close_all()


async def test_tools_list_changed_marks_the_server_and_refresh_lists_it(
    connections: McpConnections,
) -> None:
    spec = misbehaving()
    acts = McpActivities(connections)
    env = ActivityEnvironment()
    connect = ConnectMcpInput(session_id="s", servers=[spec], workspace=".")
    (state,) = (await env.run(acts.connect_mcp_servers, connect)).servers
    assert "mcp__bad__grown" not in {t.name for t in state.tools}
    refresh = RefreshMcpToolsInput(session_id="s", servers=[spec], workspace=".")
    assert (await env.run(acts.refresh_mcp_tools, refresh)).servers == []

    grew = await connections.call_tool("s", spec, "grow", {}, 10, ".")
    assert text_of(grew.content) == "grew"
    async with asyncio.timeout(10):  # the notification is handled in a task of its own
        await connections.wait_changed("s", "bad")
    assert connections.changed("s") == ["bad"]
    (fresh,) = (await env.run(acts.refresh_mcp_tools, refresh)).servers
    assert "mcp__bad__grown" in {t.name for t in fresh.tools}
    assert (await env.run(acts.refresh_mcp_tools, refresh)).servers == []


async def test_servers_that_cannot_start_are_failed_with_a_reason() -> None:
    conns = McpConnections(connect_timeout=1.0)
    missing = McpServerSpec(name="missing", command="no-such-mcp-server-anywhere")
    dies = McpServerSpec(
        name="dies", command=sys.executable, args=["-c", "import sys; sys.exit('bad key: X')"]
    )
    mute = McpServerSpec(name="mute", command="sh", args=["-c", "cat >/dev/null"])
    try:
        states = await conns.connect("s", [missing, dies, mute], ".")
        by_name = {s.name: s for s in states}
        assert all(s.status == McpStatus.FAILED for s in states)
        assert "No such file or directory" in (by_name["missing"].error or "")
        assert "bad key: X" in (by_name["dies"].error or "")
        assert by_name["mute"].error == "no answer within 1 s"
        assert all("\n" not in (s.error or "") for s in states)
        call = await conns.call_tool("s", missing, "anything", {}, 5, ".")
        assert call.is_error and call.status is not None
        assert call.status.status == McpStatus.FAILED and "not connected" in text_of(call.content)
        # the session's end lets go of everything it had here, failed servers included
        assert await conns.close_session("s") == 0
        assert not conns._locks and not conns._open
    finally:
        await conns.close_all()


@contextmanager
def serving(app: Any, port: int = 0) -> Iterator[str]:
    """An ASGI app on 127.0.0.1 (a free port by default), in a thread with its own event loop;
    stopped even while a client holds a stream open."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(1000):
            if server.started:
                break
            threading.Event().wait(0.01)
        assert server.started, "the test server did not start"
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.mark.parametrize(("kind", "path"), [("http", "/mcp"), ("sse", "/sse")])
async def test_http_and_sse_transports(connections: McpConnections, kind: str, path: str) -> None:
    server = build()
    app = server.streamable_http_app() if kind == "http" else server.sse_app()
    with serving(app) as base:
        spec = McpServerSpec(name=kind, type=kind, url=base + path, headers={"X-Test": "1"})
        (state,) = await connections.connect("s", [spec], ".")
        assert state.status == McpStatus.CONNECTED, state.error
        assert f"mcp__{kind}__picture" in {t.name for t in state.tools}
        echo = await connections.call_tool("s", spec, "echo", {"text": kind}, 10, ".")
        assert text_of(echo.content) == kind
        picture = await connections.call_tool("s", spec, "picture", {}, 10, ".")
        assert [b.type for b in picture.content] == ["text", "image"]
        await connections.close_session("s")


async def test_an_http_server_that_restarted_is_reopened(connections: McpConnections) -> None:
    with serving(build().streamable_http_app()) as base:
        spec = McpServerSpec(name="h", type="http", url=f"{base}/mcp")
        before = await connections.call_tool("s", spec, "echo", {"text": "before"}, 10, ".")
        assert (text_of(before.content), before.status) == ("before", None)
    port = int(base.rsplit(":", 1)[1])
    with serving(build().streamable_http_app(), port):  # a new process: our session unknown
        after = await connections.call_tool("s", spec, "echo", {"text": "after"}, 10, ".")
        assert (text_of(after.content), after.is_error) == ("after", False)
        assert after.status is not None and after.status.status == McpStatus.CONNECTED
        await connections.close_session("s")


class _Unauthorized(BaseHTTPRequestHandler):
    def _deny(self) -> None:
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Bearer realm="mcp"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_DELETE = _deny

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.mark.parametrize("kind", ["http", "sse"])
async def test_a_server_answering_401_needs_auth(connections: McpConnections, kind: str) -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Unauthorized)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/mcp"
        spec = McpServerSpec(name="locked", type=kind, url=url)
        (state,) = await connections.connect("s", [spec], ".")
        assert state.status == McpStatus.NEEDS_AUTH and "401" in (state.error or "")
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


async def test_the_connections_of_an_ended_session_are_closed_on_every_worker() -> None:
    """The session's end closes its connections on the worker it ends on; a fleet's other
    workers (other machines) ask Temporal whether the sessions they hold connections for still
    run, and close those of one that has ended (its sub-agents' too), keeping the rest."""
    import os

    ended: set[str] = set()
    asked: list[str] = []

    async def session_open(session_id: str) -> bool | None:
        asked.append(session_id)
        return session_id not in ended if session_id != "unknown" else None

    conns = McpConnections(idle_seconds=0, session_open=session_open, ended_check_seconds=0.2)
    spec = misbehaving()

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
            return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
        except (ProcessLookupError, FileNotFoundError):
            return False

    try:
        pids = {}
        for sid in ("a", "a.agent-x", "b", "unknown"):
            out = await conns.call_tool(sid, spec, "pid", {}, 10, ".")
            pids[sid] = int(text_of(out.content))
        await asyncio.sleep(0.5)
        assert all(alive(pid) for pid in pids.values())  # every session still runs
        ended.add("a")
        for _ in range(100):
            if not alive(pids["a"]) and not alive(pids["a.agent-x"]):
                break
            await asyncio.sleep(0.1)
        assert not alive(pids["a"]) and not alive(pids["a.agent-x"])
        assert alive(pids["b"]) and alive(pids["unknown"])
        assert sorted({key[0] for key in conns._open}) == ["b", "unknown"]
        assert "a" in asked and "a.agent-x" not in asked  # a sub-agent is asked as its session
    finally:
        await conns.close_all()
