"""WebSearch (issue 24, item 3): the Messages API's server-side web search. Requests offer the
server tool with the configured domains unless the permissions deny it; the answer's
server_tool_use and web_search_tool_result blocks and its cited text pass through to the result,
the transcript, stream-json and, unchanged, the next request; a pause_turn goes back as it is."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from durable_agent.cli.args import build_config, parser
from durable_agent.cli.errors import CliError
from durable_agent.cli.watching import query_result
from durable_agent.engine.contracts import PromptRequest
from durable_agent.engine.messages import Message, TranscriptEntry
from durable_agent.engine.permissions import (
    PermissionContext,
    PermissionMode,
    PermissionRules,
    parse_rule,
)
from durable_agent.engine.request import ModelRequest, build_request
from durable_agent.engine.state import ModelCallConfig, QueryResult, Terminal
from durable_agent.engine.web_search import WebSearchConfig, server_tools
from durable_agent.replay import ReplayServer, Turn, text_turn
from durable_agent.replay.cassette import message
from durable_agent.wiring import build_worker
from tests.faults.harness import transcript_problems
from tests.helpers import replay_client_factory, run_session, start_session
from tests.test_claude_cli import env_for, workspace
from tests.test_cli import assert_clean_error, cli_env, durable_agent
from workflows.session import SessionWorkflow

SEARCH_ID = "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE"
RESULT = {
    "type": "web_search_result",
    "url": "https://docs.python.org/3/whatsnew/3.13.html",
    "title": "What's New In Python 3.13",
    "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1kNjNjNTk1ZWI3Y2MSDBm",
    "page_age": "October 7, 2024",
    "a_field_from_later": {"kept": True},  # unknown to us: it must go back too
}
CITATION = {
    "type": "web_search_result_location",
    "url": RESULT["url"],
    "title": RESULT["title"],
    "encrypted_index": "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lM2M5LTQ0",
    "cited_text": "Python 3.13 was released on October 7, 2024.",
}
UNDATED = {  # no page_age: none may be added on the way back
    "type": "web_search_result",
    "url": "https://peps.python.org/pep-0719/",
    "title": "PEP 719 – Python 3.13 Release Schedule",
    "encrypted_content": "Ep0CCioIARgBIiQ4ZDQ2YmQ5Ny05YjU5LTRiMzQtOGFkMy02ZmU4",
}
ANSWER = "Python 3.13 came out on 7 October 2024."


def searched(cited: bool = True) -> list[dict[str, Any]]:
    """The content of an answer that searched: text, the search, its results, cited text."""
    blocks: list[dict[str, Any]] = [
        {"type": "text", "text": "Let me look that up."},
        {
            "type": "server_tool_use",
            "id": SEARCH_ID,
            "name": "web_search",
            "input": {"query": "python 3.13 release date"},
        },
        {"type": "web_search_tool_result", "tool_use_id": SEARCH_ID, "content": [RESULT, UNDATED]},
    ]
    if cited:
        blocks.append({"type": "text", "text": ANSWER, "citations": [CITATION]})
    return blocks


def search_turn(stop_reason: str = "end_turn", cited: bool = True) -> Turn:
    return Turn(response=message(searched(cited=cited), stop_reason, web_search_requests=1))


def tool_of(request: dict[str, Any]) -> dict[str, Any] | None:
    return next((t for t in request["tools"] if t.get("name") == "web_search"), None)


def without_cache_control(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in b.items() if k != "cache_control"} for b in blocks]


# --- the tool in the request -------------------------------------------------------------


def perms(mode: str = "default", deny: tuple[str, ...] = (), allow: tuple[str, ...] = ()):
    rules = PermissionRules(
        deny=[parse_rule(r, "cliArg") for r in deny], allow=[parse_rule(r, "cliArg") for r in allow]
    )
    return PermissionContext(mode=PermissionMode(mode), rules=rules, cwd="/w", home="/h")


def test_the_server_tool_carries_one_domain_list_and_a_denial_removes_it():
    assert WebSearchConfig().api_tool() == {
        "type": "web_search_20250305",
        "name": "web_search",
        "max_uses": 8,
    }
    only = WebSearchConfig(allowed_domains=("docs.python.org",), max_uses=3)
    assert only.api_tool()["allowed_domains"] == ["docs.python.org"]
    assert "blocked_domains" not in only.api_tool()
    with pytest.raises(ValidationError, match="cannot be used together"):
        WebSearchConfig(allowed_domains=("a.com",), blocked_domains=("b.com",))
    assert server_tools(only, None) == [only.api_tool()]
    assert server_tools(only, perms()) == [only.api_tool()]  # it would ask: nobody can, it runs
    assert server_tools(None, perms()) == []
    for denied in (
        perms(deny=("WebSearch",)),  # a settings rule or --disallowedTools WebSearch
        perms("plan"),
        perms("dontAsk"),
    ):
        assert server_tools(only, denied) == [], denied
    assert server_tools(only, perms("dontAsk", allow=("WebSearch",))) == [only.api_tool()]


FAILED_SEARCH: list[dict[str, Any]] = [
    {"type": "server_tool_use", "id": "srvtoolu_02", "name": "web_search", "input": {"query": "q"}},
    {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_02",
        "content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"},
    },
    {"type": "text", "text": "I could not search further."},
]


def entry(
    uuid: str, parent: str | None, role: str, content: list[dict[str, Any]]
) -> TranscriptEntry:
    message = Message.model_validate({"role": role, "content": content})
    return TranscriptEntry(uuid=uuid, parent_uuid=parent, type=role, message=message)


def test_the_request_offers_it_after_our_tools_and_sends_the_blocks_back_exactly():
    chain = [
        entry("u1", None, "user", [{"type": "text", "text": "q"}]),
        entry("a1", "u1", "assistant", searched()),
        entry("u2", "a1", "user", [{"type": "text", "text": "more"}]),
        entry("a2", "u2", "assistant", FAILED_SEARCH),
    ]
    # Through the transcript's JSON line and back, as the store keeps them.
    chain = [TranscriptEntry.model_validate_json(e.model_dump_json(by_alias=True)) for e in chain]
    tool = WebSearchConfig(blocked_domains=("pinterest.com",)).api_tool()
    req, _ = build_request(
        chain, "S", ("Read",), ModelRequest(model="m", max_tokens=10), server_tools=[tool]
    )
    assert [t["name"] for t in req["tools"]] == ["Read", "web_search"] and req["tools"][1] == tool
    assert req["messages"][1]["content"] == searched()
    assert without_cache_control(req["messages"][3]["content"]) == FAILED_SEARCH


def config_of(*argv: str, tmp_path: Path) -> ModelCallConfig:
    return build_config(parser().parse_args(["run", "hi", *argv]), tmp_path).call


def test_flags_set_the_domains_and_tools_can_leave_it_out(tmp_path):
    assert config_of(tmp_path=tmp_path).web_search == WebSearchConfig()
    allowed = config_of(
        "--web-search-allowed-domains", "docs.python.org, pypi.org", tmp_path=tmp_path
    )
    assert allowed.web_search == WebSearchConfig(allowed_domains=("docs.python.org", "pypi.org"))
    blocked = config_of("--web-search-blocked-domains", "pinterest.com", tmp_path=tmp_path)
    assert blocked.web_search == WebSearchConfig(blocked_domains=("pinterest.com",))
    assert config_of("--tools", "Read,Grep", tmp_path=tmp_path).web_search is None
    only = config_of("--tools", "WebSearch", tmp_path=tmp_path)
    assert only.tools == () and only.web_search == WebSearchConfig()
    with pytest.raises(CliError, match="cannot be used together"):
        config_of(
            "--web-search-allowed-domains", "a.com", "--web-search-blocked-domains", "b.com",
            tmp_path=tmp_path,
        )  # fmt: skip


def test_a_config_from_before_web_search_loads_with_it_on():
    old = ModelCallConfig().model_dump(mode="json")
    del old["web_search"]
    assert ModelCallConfig.model_validate(old).web_search == WebSearchConfig()
    off = ModelCallConfig(web_search=None)
    assert ModelCallConfig.model_validate_json(off.model_dump_json()).web_search is None


# --- through the loop: the real client against the fake API -----------------------------


async def _prompt(client: Any, handle: Any, prompt: str) -> QueryResult:
    accepted = await handle.execute_update(
        SessionWorkflow.submit_prompt, PromptRequest(prompt=prompt), id=f"p-{uuid.uuid4()}"
    )
    child = client.get_workflow_handle(accepted.query_workflow_id, result_type=QueryResult)
    return await query_result(child)


async def test_a_search_passes_through_and_goes_back_unchanged(
    ts_env, store, workspace, task_queue
):
    call = {"web_search": {"allowed_domains": ["docs.python.org"]}}
    with ReplayServer([search_turn(), text_turn("You're welcome.")]) as server:
        async with build_worker(ts_env.client, task_queue, store, replay_client_factory(server)):
            sid, handle = await start_session(
                ts_env.client, workspace, task_queue, "when did 3.13 come out?",
                close_when_idle=False, config={"call": call},
            )  # fmt: skip
            await _prompt(ts_env.client, handle, "thanks")
            await handle.signal(SessionWorkflow.close)
            status = await handle.result()
    assert server.violations == []
    first, second = server.requests
    assert tool_of(first) == {
        "type": "web_search_20250305",
        "name": "web_search",
        "max_uses": 8,
        "allowed_domains": ["docs.python.org"],
    }
    # The second prompt's request carries the answer back exactly (encrypted_content, citations).
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert second["messages"][1]["content"] == searched()
    # The transcript holds the blocks as the API sent them, and stays a valid conversation.
    answers = [e for e in store.entries(sid).values() if e.type == "assistant"]
    stored = next(e for e in answers if e.message and e.message.stop_reason == "end_turn")
    assert stored.message is not None
    assert [b.model_dump(exclude_none=True) for b in stored.message.content] == searched()
    assert stored.message.usage is not None
    assert stored.message.usage.server_tool_use.web_search_requests == 1
    assert transcript_problems(store.transcript_path(sid)) == []
    assert status.last_result is not None and status.last_result.terminal == Terminal.COMPLETED


async def test_pause_turn_sends_the_paused_answer_back_with_no_new_user_turn(
    ts_env, store, workspace, task_queue
):
    finished = Turn(
        response=message([{"type": "text", "text": ANSWER, "citations": [CITATION]}], "end_turn")
    )
    turns = [search_turn("pause_turn", cited=False), finished]
    with ReplayServer(turns) as server:
        sid, status = await run_session(
            ts_env.client, server, store, workspace, "when did 3.13 come out?", task_queue
        )
    result = status.last_result
    assert server.violations == [] and result is not None
    assert result.terminal == Terminal.COMPLETED and result.final_text == ANSWER
    first, again = server.requests
    assert [m["role"] for m in again["messages"]] == ["user", "assistant"]
    assert without_cache_control(again["messages"][0]["content"]) == without_cache_control(
        first["messages"][0]["content"]
    )
    assert without_cache_control(again["messages"][1]["content"]) == searched(cited=False)
    assert tool_of(again) == tool_of(first) is not None  # the same tools, to go on with
    chain = store.chain(sid, result.head_uuid)
    assert [e.type for e in chain] == ["user", "assistant", "assistant"]
    assert result.usage.server_tool_use.web_search_requests == 1
    assert transcript_problems(store.transcript_path(sid)) == []


# --- the drop-in: stream-json, a deny rule, the flags ------------------------------------


def claude_p(env: dict[str, str], ws: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["durable-agent", "-p", "when did 3.13 come out?", *flags], cwd=ws, env=env,
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_stream_json_shows_the_blocks_as_the_api_sent_them(dev_env, tmp_path):
    with ReplayServer([search_turn()]) as server:
        env = env_for(dev_env, tmp_path, server)
        flags = ("--output-format", "stream-json", "--verbose")
        proc = claude_p(env, workspace(tmp_path), *flags, "--web-search-blocked-domains", "x.com")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    init = next(m for m in lines if m.get("subtype") == "init")
    assert "WebSearch" in init["tools"]
    (assistant,) = [m for m in lines if m["type"] == "assistant"]
    assert assistant["message"]["content"] == searched()
    result = lines[-1]
    assert result["type"] == "result" and result["result"] == "Let me look that up." + ANSWER
    assert result["usage"]["server_tool_use"] == {"web_search_requests": 1}
    assert tool_of(server.requests[0]) == {
        "type": "web_search_20250305",
        "name": "web_search",
        "max_uses": 8,
        "blocked_domains": ["x.com"],
    }


def test_a_deny_rule_or_disallowed_tools_keeps_it_out_of_the_request(dev_env, tmp_path):
    ws = workspace(tmp_path)
    with ReplayServer([text_turn("a"), text_turn("b")]) as server:
        env = env_for(dev_env, tmp_path, server)
        flag = claude_p(env, ws, "--disallowedTools", "WebSearch", "--output-format", "stream-json")
        (ws / ".claude").mkdir()
        (ws / ".claude" / "settings.json").write_text(
            json.dumps({"permissions": {"deny": ["WebSearch"]}})
        )
        rule = claude_p(env, ws)
    assert flag.returncode == 0, flag.stderr
    assert rule.returncode == 0, rule.stderr
    init = json.loads(flag.stdout.splitlines()[0])
    assert init["subtype"] == "init" and "WebSearch" not in init["tools"]
    assert [tool_of(r) for r in server.requests] == [None, None]
    assert all(r["tools"] for r in server.requests)  # our own tools are still offered


def test_both_domain_lists_are_one_line_error(tmp_path):
    proc = durable_agent(
        [
            "-p",
            "hi",
            "--web-search-allowed-domains",
            "a.com",
            "--web-search-blocked-domains",
            "b.com",
        ],
        cli_env(tmp_path, ANTHROPIC_API_KEY="dummy"),
    )
    assert_clean_error(proc, "--web-search-allowed-domains and --web-search-blocked-domains")
    assert len(proc.stderr.strip().splitlines()) == 2  # the error and its hint
