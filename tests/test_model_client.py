"""What the model activity's client costs per call: a warm worker's first streamed call imports
nothing more (the prewarm's module list is current), no call rebuilds the stream helper's
pydantic model, a request encoded off the event loop goes out as the SDK's stream helper
sends it, and many calls in flight are spread over several clients."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import anthropic
import httpx2

import activities.model as model
from durable_agent.replay import ReplayServer, text_turn
from tests.test_cli import ROOT

FIRST_CALL = """
import asyncio, json, sys
import activities.model as model
from durable_agent.replay import ReplayServer, text_turn

REQUEST = {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]}

async def main():
    with ReplayServer([text_turn("hi"), text_turn("again")]) as server:
        client = model.default_client(model.ClientOptions(api_key="k", base_url=server.base_url))
        if sys.argv[1] == "prewarmed":
            model._import_stream_path()
        before = set(sys.modules)
        for _ in range(2):
            async with model.stream_encoded(client, model.encode_request(REQUEST)) as stream:
                await stream.get_final_message()
        await client.close()
        return sorted(set(sys.modules) - before)

print(json.dumps(asyncio.run(main())))
"""


def probe(code: str, *args: str) -> str:
    """What `code`, run in an interpreter of its own, prints last."""
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def imported_by_the_first_call(mode: str) -> list[str]:
    return json.loads(probe(FIRST_CALL, mode))


def test_the_prewarm_imports_what_the_first_streamed_call_would():
    assert imported_by_the_first_call("cold"), "the first call imports nothing lazily any more"
    assert imported_by_the_first_call("prewarmed") == []


STREAMS = """
import asyncio, gc
import pydantic._internal._generics as generics
import activities.model as model
from durable_agent.replay import ReplayServer, text_turn

REQUEST = {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]}
built = []
real = generics.create_generic_submodel
generics.create_generic_submodel = lambda *a: built.append(a[0]) or real(*a)

async def main():
    with ReplayServer([text_turn(str(i)) for i in range(3)]) as server:
        client = model.default_client(model.ClientOptions(api_key="k", base_url=server.base_url))
        for _ in range(3):
            async with model.stream_encoded(client, model.encode_request(REQUEST)) as stream:
                await stream.get_final_message()
            gc.collect()
        await client.close()

asyncio.run(main())
print(len(built), sorted(set(built)))
"""


def test_no_stream_rebuilds_the_snapshot_model():
    """pydantic caches parametrized models weakly: the class the SDK's stream helper names at
    each stream's start is held by activities/model.py, so no stream builds one (without the
    hold, every stream did)."""
    built = probe(STREAMS)
    assert built.startswith("0 "), built


async def test_an_encoded_request_goes_out_as_the_sdks_stream_helper_sends_it():
    """`stream_encoded` (the body encoded in the model step's thread) against the SDK's own
    `messages.stream(**request)`: the same body (its fields in the request's order rather than
    the SDK's) and the same headers, for a request with every field build_request sets, extra
    headers and body included."""
    request: dict[str, Any] = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 2048,
        "system": [
            {"type": "text", "text": "be brief é ✓", "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "naïve \u2028 x"}]}],
        "tools": [{"name": "Read", "description": "r", "input_schema": {"type": "object"}}],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "extra_headers": {"anthropic-beta": "task-budgets-2026-03-13"},
        "extra_body": {"output_config": {"task_budget": {"type": "tokens", "total": 5000}}},
    }
    bodies: list[bytes] = []

    async def keep(request: httpx2.Request) -> None:
        bodies.append(request.content)

    with ReplayServer([text_turn("a"), text_turn("b")]) as server:
        http = httpx2.AsyncClient(event_hooks={"request": [keep]})
        client = anthropic.AsyncAnthropic(
            api_key="k", base_url=server.base_url, max_retries=0, http_client=http
        )
        for manager in (
            client.messages.stream(**request),
            model.stream_encoded(client, model.encode_request(request, spans=False)),
        ):
            async with manager as stream:
                assert (await stream.get_final_message()).stop_reason == "end_turn"
        await client.close()
    assert model.encode_request(request, spans=False).body is not None
    sdk, ours = bodies
    assert json.loads(ours) == json.loads(sdk)
    assert len(ours) == len(sdk)  # the same encoding: compact, UTF-8
    assert json.loads(ours)["output_config"]["task_budget"]["total"] == 5000
    varying = {"x-stainless-retry-count", "x-stainless-read-timeout", "traceparent"}
    first, second = ({k: v for k, v in h.items() if k not in varying} for h in server.headers)
    assert second == first
    assert first["anthropic-beta"] == "task-budgets-2026-03-13"
    assert first["x-stainless-helper-method"] == "stream"


SPANS = """
import asyncio, json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import activities.model as model
from durable_agent.replay import ReplayServer, text_turn

REQUEST = {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]}

async def main():
    seen = {"encoded_without_provider": model.encode_request(REQUEST).body is not None}
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    encoded = model.encode_request(REQUEST)
    seen["encoded_with_provider"] = encoded.body is not None
    with ReplayServer([text_turn("hi")]) as server:
        client = model.default_client(model.ClientOptions(api_key="k", base_url=server.base_url))
        async with model.stream_encoded(client, encoded) as stream:
            await stream.get_final_message()
        await client.close()
    seen["traceparent"] = "traceparent" in server.headers[0]
    seen["spans"] = [s.name for s in exporter.get_finished_spans()]
    return seen

print(json.dumps(asyncio.run(main())))
"""


def test_with_a_tracer_provider_the_sdks_own_span_and_traceparent_are_kept():
    """The SDK's call span reads the request's fields, so while spans record, the request goes
    through the SDK's own helper (encoded by it); without a provider, it is encoded beforehand."""
    seen = json.loads(probe(SPANS))
    assert seen["encoded_without_provider"] and not seen["encoded_with_provider"]
    assert seen["traceparent"] and "anthropic.messages.create" in seen["spans"]


async def test_sessions_are_spread_over_clients_a_session_keeps_to_one(tmp_path):
    """CLIENT_SHARDS: each client's connection pool checks all its idle connections at every
    request, so a worker's sessions are spread over several; a session's calls keep to one."""
    import asyncio

    from temporalio.testing import ActivityEnvironment

    from activities.transcript import TranscriptStore
    from tests.helpers import replay_client_factory
    from tests.test_event_loop import call_input

    sessions = [f"s{n}" for n in range(40)]
    with ReplayServer([text_turn("hi")] * (3 + len(sessions)), strict=False) as server:
        built: list[object] = []
        factory = replay_client_factory(server)

        def counting(opts: Any) -> Any:
            built.append(opts)
            return factory(opts)

        acts = model.ModelActivities(TranscriptStore(tmp_path / "state"), counting)

        def call(session: str, turn: int) -> Any:
            req = call_input(tmp_path, session, turn)
            return ActivityEnvironment().run(acts.call_model, req)

        for turn in (1, 2, 3):  # one session's calls, one after another
            assert (await call("one", turn)).text == "hi"
        assert len(built) == 1
        outs = await asyncio.gather(*(call(session, 1) for session in sessions))
        assert all(out.text == "hi" for out in outs)
        shards = {model.client_shard(s) for s in sessions} - {model.client_shard("one")}
        assert len(shards) > 10 and len(built) == 1 + len(shards), (len(built), len(shards))


async def test_a_key_refresh_meanwhile_is_not_undone_by_a_build_with_the_old_key(tmp_path):
    """A shard's client being built with the old key while another shard's call refreshes it:
    that build is not kept (it would meet the same 401 again) but made again with the new key."""
    import asyncio
    import threading

    from activities.credentials import Credentials
    from activities.transcript import TranscriptStore

    class Keys(Credentials):
        refreshed = False

        def api_key(self, refresh: bool = False) -> str:
            self.refreshed = self.refreshed or refresh
            return "new" if self.refreshed else "old"

    first_build, release = threading.Event(), threading.Event()
    built: list[str] = []

    def factory(opts: Any) -> Any:
        built.append(opts.api_key)
        if len(built) == 1:
            first_build.set()
            release.wait(10)
        return opts.api_key

    acts = model.ModelActivities(
        TranscriptStore(tmp_path), factory, credentials=Keys(tmp_path / "settings.json")
    )
    slow = asyncio.ensure_future(acts.client(shard=1))
    assert await asyncio.to_thread(first_build.wait, 10)
    assert await acts.client(refresh_key=True, shard=0) == "new"
    release.set()
    assert await slow == "new"
    assert built == ["old", "new", "new"]
    assert await acts.client(shard=1) == "new" and len(built) == 3  # kept


def test_a_body_with_every_tool_encodes_as_json_dumps_would():
    """The tools' entries are built and encoded once per process and spliced into each body:
    the bytes are those of encoding the whole body at once, and the shared entries stay as they
    were when a request changes its copy (the Skill and Agent tools' descriptions)."""
    from durable_agent.engine.agents import AgentDef
    from durable_agent.engine.request import ModelRequest, build_request
    from durable_agent.engine.skills import SkillInfo
    from durable_agent.engine.tools import TOOL_SPECS, request_json
    from durable_agent.mcp.contracts import McpTool

    skill = TOOL_SPECS["Skill"].api_tool()["description"]
    request, _ = build_request(
        [], "système ✓", tuple(TOOL_SPECS), ModelRequest(model="m", max_tokens=10),
        skills=[SkillInfo(name="pdf", description="PDFs — all of them", path="/s/pdf", source="user")],
        agents=[AgentDef(name="rev", description="reviews")],
        mcp_tools=[McpTool(name="mcp__a__b", server="a", tool="b", description="naïve")],
        server_tools=[{"type": "web_search_20250305", "name": "web_search"}],
    )  # fmt: skip
    body = {**request, "stream": True}
    assert model.encode_request(request, spans=False).body == request_json(body).encode()
    assert TOOL_SPECS["Skill"].api_tool()["description"] == skill
    assert "pdf" in next(t for t in request["tools"] if t["name"] == "Skill")["description"]
    assert TOOL_SPECS["Read"].api_tool() is TOOL_SPECS["Read"].api_tool()
