"""WebFetch (issue 24, item 3): a real page on a loopback HTTP server, turned into markdown and
read by the small model (the fake Messages API), a 15-minute cache, redirects, clear errors,
and the `WebFetch(domain:…)` rules."""

from __future__ import annotations

import json
import socket
from collections import Counter
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import anthropic
import pytest

from activities.model import ClientOptions
from activities.tools import execute_tool
from activities.tools.base import ToolOutput
from activities.tools.web_fetch import (
    PAGE_CACHE,
    Page,
    PageCache,
    html_to_markdown,
    same_site,
    upgraded,
)
from durable_agent.engine.contracts import SessionStatus
from durable_agent.engine.permissions import (
    Behavior,
    PermissionContext,
    PermissionMode,
    PermissionRules,
    check,
    parse_rule,
)
from durable_agent.engine.state import Terminal
from durable_agent.engine.tools import TOOL_SPECS, ToolName
from durable_agent.replay import ErrorReply, ReplayServer, Turn, text_turn, tool_turn
from durable_agent.replay.server import LoopbackServer
from tests.helpers import replay_client_factory, run_session

PAGE = b"""<!DOCTYPE html>
<html>
<head>
  <meta charset="utf-8">
  <title>The Kettle Handbook</title>
  <style>body { color: SECRET-STYLE; }</style>
  <script>var token = "SECRET-SCRIPT";</script>
</head>
<body>
  <h1>Boiling water</h1>
  <p>Water boils at <strong>100 \xc2\xb0C</strong> at sea level.</p>
  <h2>Further reading</h2>
  <p>See <a href="/altitude">boiling at altitude</a>.</p>
  <script>document.write("SECRET-INLINE")</script>
</body>
</html>
"""
ANSWER = "Water boils at 100 °C at sea level."


class PageServer(LoopbackServer):
    """A small web site on 127.0.0.1 that counts the requests to each path."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.agents: list[str] = []
        super().__init__()

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                site.hits[self.path] += 1
                site.agents.append(self.headers.get("user-agent", ""))
                if self.path == "/page":
                    self._send(200, "text/html; charset=utf-8", PAGE)
                elif self.path == "/notes.txt":
                    self._send(200, "text/plain", b"plain <b>text</b> as served\n")
                elif self.path == "/moved":
                    self._redirect(301, "/page")
                elif self.path == "/away":  # localhost is another host than 127.0.0.1
                    self._redirect(302, site.url("/page", host="localhost"))
                elif self.path == "/long.txt":
                    self._send(200, "text/plain", b"w" * 150_000 + b"THE-END")
                elif self.path == "/logo.png":
                    self._send(200, "image/png", b"\x89PNG\r\n\x1a\n" + bytes(64))
                elif self.path == "/blob":
                    self._send(200, "", b"\x00\x01\x02 not text")
                else:
                    self._send(404, "text/html", b"<h1>Not Found</h1>")

            def _redirect(self, status: int, location: str) -> None:
                self.send_response(status)
                self.send_header("location", location)
                self.send_header("content-length", "0")
                self.end_headers()

            def _send(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                if content_type:
                    self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    PAGE_CACHE.clear()
    monkeypatch.delenv("ANTHROPIC_SMALL_FAST_MODEL", raising=False)
    monkeypatch.delenv("ANTHROPIC_DEFAULT_HAIKU_MODEL", raising=False)


@pytest.fixture
def site():
    with PageServer() as server:
        yield server


def model_client(server: ReplayServer):
    factory = replay_client_factory(server)

    async def client() -> anthropic.AsyncAnthropic:
        return factory(ClientOptions())

    return client


async def web_fetch(
    server: ReplayServer,
    url: str,
    prompt: str = "At what temperature does water boil?",
    ws: Path | None = None,
    permissions: PermissionContext | None = None,
) -> ToolOutput:
    return await execute_tool(
        ToolName.WEB_FETCH,
        {"url": url, "prompt": prompt},
        str(ws or Path.cwd()),
        permissions=permissions,
        model_client=model_client(server),
    )


def user_text(request: dict[str, Any]) -> str:
    [message] = request["messages"]
    content = message["content"]
    return content if isinstance(content, str) else "".join(b["text"] for b in content)


async def test_the_small_model_reads_the_page_as_markdown_and_its_answer_is_the_result(
    site, monkeypatch
):
    monkeypatch.setenv("ANTHROPIC_SMALL_FAST_MODEL", "claude-small-test")
    with ReplayServer([text_turn(ANSWER)]) as api:
        out = await web_fetch(api, site.url("/page"))
    assert out == ToolOutput(ANSWER)
    [request] = api.requests
    assert request["model"] == "claude-small-test" and request["max_tokens"] == 1024
    sent = user_text(request)
    for needle in (
        "Title: The Kettle Handbook",
        "# Boiling water",
        "Water boils at **100 °C** at sea level.",
        f"[boiling at altitude]({site.url('/altitude')})",  # made absolute
        "At what temperature does water boil?",
    ):
        assert needle in sent, needle
    assert "SECRET" not in sent and "<script" not in sent
    assert site.agents and all(agent.startswith("durable-agent") for agent in site.agents)


async def test_the_model_defaults_to_haiku_and_reads_the_haiku_variable(site, monkeypatch):
    with ReplayServer([text_turn("a"), text_turn("b")]) as api:
        await web_fetch(api, site.url("/page"))
        monkeypatch.setenv("ANTHROPIC_DEFAULT_HAIKU_MODEL", "claude-haiku-custom")
        await web_fetch(api, site.url("/page"), "another question")
    assert [r["model"] for r in api.requests] == ["claude-haiku-4-5", "claude-haiku-custom"]


async def test_a_second_question_about_a_page_reads_it_from_the_cache(site):
    with ReplayServer([text_turn("first"), text_turn("second")]) as api:
        first = await web_fetch(api, site.url("/page"), "What boils?")
        second = await web_fetch(api, site.url("/page"), "What is further reading?")
    assert (first.content, second.content) == ("first", "second")
    assert site.hits["/page"] == 1  # the second answer came from the cached page
    assert "What is further reading?" in user_text(api.requests[1])
    assert "# Boiling water" in user_text(api.requests[1])


def test_the_cache_forgets_after_15_minutes_and_stays_bounded():
    now = [0.0]
    cache = PageCache(max_entries=2, max_chars=100, clock=lambda: now[0])
    cache.put("a", Page("a", "x" * 10))
    now[0] = 15 * 60 - 1
    assert cache.get("a") is not None
    now[0] = 15 * 60 + 1
    assert cache.get("a") is None
    for key in ("b", "c", "d"):
        cache.put(key, Page(key, "y"))
    assert [cache.get(k) is not None for k in "bcd"] == [False, True, True]
    cache.put("big", Page("big", "z" * 95))  # over 100 characters in all: the oldest go
    assert cache.get("c") is None and cache.get("big") is not None


async def test_a_redirect_to_another_host_is_reported_not_followed(site):
    with ReplayServer([]) as api:
        out = await web_fetch(api, site.url("/away"))
    assert not out.is_error
    assert f"Redirect URL: {site.url('/page', host='localhost')}" in out.content
    assert "call WebFetch again" in out.content
    assert site.hits["/page"] == 0 and api.requests == []


async def test_a_redirect_within_the_host_is_followed(site):
    with ReplayServer([text_turn(ANSWER)]) as api:
        out = await web_fetch(api, site.url("/moved"))
    assert out == ToolOutput(ANSWER)
    assert (site.hits["/moved"], site.hits["/page"]) == (1, 1)
    assert site.url("/page") in user_text(api.requests[0])


async def test_a_same_host_redirect_a_deny_rule_covers_is_refused(site, tmp_path):
    deny = rules_ctx(tmp_path, deny=["WebFetch(domain:127.0.0.1)"])
    with ReplayServer([]) as api:
        out = await web_fetch(api, site.url("/moved"), permissions=deny)
    assert out.is_error and "WebFetch(domain:127.0.0.1)" in out.content
    assert site.hits["/page"] == 0


def test_redirects_and_upgrades():
    assert same_site("https://example.com/a", "https://www.example.com/b")
    assert same_site("https://www.example.com/a", "https://example.com/b")
    assert same_site("http://example.com/a", "https://example.com/b")
    assert not same_site("https://example.com/a", "http://example.com/b")  # a downgrade
    assert not same_site("https://example.com/a", "https://evil.com/a")
    assert not same_site("https://example.com/a", "https://example.com.evil.com/a")
    assert not same_site("http://127.0.0.1:80/a", "http://127.0.0.1:81/a")
    assert not same_site("https://example.com/a", "https://user:pw@example.com/a")
    assert upgraded("http://example.com/x?q=1") == "https://example.com/x?q=1"
    for local in ("http://127.0.0.1:8000/", "http://localhost/", "http://[::1]:9/"):
        assert upgraded(local) == local


async def test_text_is_read_as_served(site):
    with ReplayServer([text_turn("ok")]) as api:
        out = await web_fetch(api, site.url("/notes.txt"))
    assert out == ToolOutput("ok")
    assert "plain <b>text</b> as served" in user_text(api.requests[0])


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("/missing", "answered HTTP 404 Not Found"),
        ("/logo.png", "image/png (binary)"),
        ("/blob", "(binary)"),
    ],
)
async def test_pages_that_cannot_be_read_are_clear_errors(site, path, words):
    with ReplayServer([]) as api:  # the model is never asked
        out = await web_fetch(api, site.url(path))
    assert out.is_error and words in out.content and site.url(path) in out.content
    assert api.requests == []


async def test_a_refused_connection_is_a_clear_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    with ReplayServer([]) as api:
        out = await web_fetch(api, f"http://127.0.0.1:{port}/page")
    assert out.is_error and "could not fetch" in out.content and "ConnectError" in out.content


@pytest.mark.parametrize(
    "url", ["ftp://example.com/file", "file:///etc/passwd", "example.com/page", "https://"]
)
async def test_a_url_that_is_not_http_is_refused_before_any_fetch(url):
    with ReplayServer([]) as api:
        out = await web_fetch(api, url)
    assert out.is_error and "InputValidationError" in out.content
    assert "full http:// or https:// URL" in out.content


async def test_a_model_failure_is_one_line_naming_it(site):
    error = ErrorReply(status=400, type="invalid_request_error", message="prompt is too long")
    with ReplayServer([Turn(error=error)]) as api:
        out = await web_fetch(api, site.url("/page"))
    assert out.is_error and "\n" not in out.content
    assert "claude-haiku-4-5" in out.content and "prompt is too long" in out.content


async def test_without_a_model_client_it_says_so():
    out = await execute_tool(ToolName.WEB_FETCH, {"url": "https://a.b/", "prompt": "p"}, ".")
    assert out.is_error and "no model client" in out.content


async def test_a_long_page_is_cut_before_the_model_reads_it(site):
    with ReplayServer([text_turn("ok")]) as api:
        await web_fetch(api, site.url("/long.txt"))
    sent = user_text(api.requests[0])
    assert "only its first 100000 characters" in sent and "THE-END" not in sent
    assert len(sent) < 101_000


def test_scripts_styles_and_comments_go_before_the_page_is_parsed():
    html = b"<p>a</p><SCRIPT>x = '</p>SECRET'</Script ><!-- SECRET --><style>SECRET</style><p>b"
    assert html_to_markdown(html) == "a\n\nb"
    assert html_to_markdown(b"<p>a</p><script>never closed SECRET") == "a"


def test_html_to_markdown_needs_no_url_and_drops_non_text():
    md = html_to_markdown(
        "<p>a <a href='/x'>x</a></p><svg><text>SVG</text></svg><noscript>n</noscript>"
    )
    assert md == "a [x](/x)"


def test_the_spec_is_read_only_and_safe_to_run_beside_others():
    spec = TOOL_SPECS[ToolName.WEB_FETCH]
    raw = {"url": "https://example.com", "prompt": "summarise"}
    assert spec.is_read_only(raw) and spec.is_concurrency_safe(raw)
    assert spec.summary(raw) == "WebFetch: https://example.com"
    schema = spec.json_schema()
    assert schema["required"] == ["url", "prompt"] and schema["additionalProperties"] is False
    assert "another host" in spec.description and "15 minutes" in spec.description


# --------------------------------------------------------------------------- permissions


def rules_ctx(
    ws: Path, allow: list[str] | None = None, deny: list[str] | None = None, **kw: Any
) -> PermissionContext:
    def parsed(texts: list[str] | None) -> list[Any]:
        return [parse_rule(text, "projectSettings") for text in texts or []]

    return PermissionContext(
        cwd=str(ws),
        home=str(ws.parent),
        rules=PermissionRules(allow=parsed(allow), deny=parsed(deny)),
        **kw,
    )


def test_domain_rules_decide_webfetch_and_without_one_it_asks(tmp_path):
    url = {"url": "http://127.0.0.1:8000/page", "prompt": "p"}
    sub = {"url": "https://docs.example.com/a", "prompt": "p"}
    deny = rules_ctx(tmp_path, deny=["WebFetch(domain:127.0.0.1)", "WebFetch(domain:example.com)"])
    assert check(ToolName.WEB_FETCH, url, deny).behavior == Behavior.DENY
    assert check(ToolName.WEB_FETCH, sub, deny).behavior == Behavior.DENY  # subdomains too
    bypass_denied = deny.model_copy(update={"mode": PermissionMode.BYPASS})
    assert check(ToolName.WEB_FETCH, url, bypass_denied).behavior == Behavior.DENY
    allow = rules_ctx(tmp_path, allow=["WebFetch(domain:127.0.0.1)"])
    assert check(ToolName.WEB_FETCH, url, allow).behavior == Behavior.ALLOW
    assert check(ToolName.WEB_FETCH, sub, allow).behavior == Behavior.ASK
    assert check(ToolName.WEB_FETCH, url, rules_ctx(tmp_path)).behavior == Behavior.ASK


# --------------------------------------------------------------------------- a session


def results_in(request: dict[str, Any]) -> dict[str, dict[str, Any]]:
    content = request["messages"][-1]["content"]
    return {b["tool_use_id"]: b for b in content if b.get("type") == "tool_result"}


def text_of(block: dict[str, Any]) -> str:
    content = block["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


async def test_a_session_fetches_a_page_and_the_model_reads_the_answer(
    dev_env, store, workspace, task_queue, site
):
    rules = rules_ctx(
        workspace, allow=["WebFetch(domain:127.0.0.1)"], deny=["WebFetch(domain:localhost)"]
    )
    calls = [
        ("w1", "WebFetch", {"url": site.url("/page"), "prompt": "When does water boil?"}),
        ("w2", "WebFetch", {"url": site.url("/page", host="localhost"), "prompt": "Again?"}),
    ]
    turns = [tool_turn(calls), text_turn(ANSWER), text_turn("It boils at 100 °C.")]
    with ReplayServer(turns) as api:
        _, status = await run_session(
            dev_env.client,
            api,
            store,
            workspace,
            "look it up",
            task_queue,
            call={"permissions": rules.model_dump()},
        )
    assert api.violations == []
    assert isinstance(status, SessionStatus) and status.last_result is not None
    assert status.last_result.terminal == Terminal.COMPLETED
    assert "When does water boil?" in user_text(api.requests[1])  # the small model's request
    results = results_in(api.requests[2])
    assert text_of(results["w1"]) == ANSWER and not results["w1"].get("is_error")
    assert results["w2"].get("is_error") and "WebFetch(domain:localhost)" in text_of(results["w2"])
    assert site.hits["/page"] == 1
    assert json.dumps(api.requests[0]["tools"]).count('"WebFetch"') == 1
