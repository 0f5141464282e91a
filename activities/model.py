"""call_model: one streaming Messages API call built from the transcript store.

Retries belong to Temporal: the client runs with max_retries=0, each failure is classified by
the engine and raised as an ApplicationError carrying the decision (type, non_retryable, delay).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import platform
import random
import ssl
import time
import zlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, get_args

import anthropic
import httpx2
from anthropic.lib._parse._response import ResponseFormatT
from anthropic.lib.streaming import AsyncMessageStreamManager
from anthropic.types import RawMessageStreamEvent
from anthropic.types.parsed_message import ParsedMessage
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from pydantic import ValidationError
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from activities.credentials import Credentials, CredentialsError
from activities.heartbeat import heartbeating
from activities.tools.links import resolved_check
from activities.tools.registry import IN_STEP_TOOLS, run_in_step
from activities.tools.schedule import scheduled_fields
from activities.transcript import (
    StoreError,
    TranscriptDamaged,
    TranscriptStore,
    chain_with_pending,
    off_loop,
    request_view,
)
from durable_agent import telemetry
from durable_agent.engine.contracts import (
    CallModelInput,
    CallModelOutput,
    RetryNotice,
    RunToolOutput,
    ToolCall,
    ToolReady,
    WithheldError,
)
from durable_agent.engine.errors import (
    TRANSCRIPT_DAMAGED,
    WITHHELD_KINDS,
    Action,
    ApiFailure,
    ErrorDecision,
    RetryContext,
    RetryMode,
    RetryTrack,
    classify,
)
from durable_agent.engine.hooks import callbacks_for, hooks_for
from durable_agent.engine.messages import (
    ContentBlock,
    Message,
    ServerToolUsage,
    ToolUseBlock,
    Usage,
)
from durable_agent.engine.permissions import Behavior, PermissionMode
from durable_agent.engine.prompt import SYSTEM_PROMPT, environment_block
from durable_agent.engine.request import build_request
from durable_agent.engine.state import TEXT_PREVIEW_CHARS, EagerTools, ModelCallConfig
from durable_agent.engine.tool_hooks import TOOL_EVENTS
from durable_agent.engine.tools import (
    TOOL_SPECS,
    AgentInput,
    TaskStopInput,
    TodoWriteInput,
    ToolName,
    encoded_tool,
    request_json,
)
from durable_agent.engine.web_search import server_tools
from durable_agent.names import Activities, Signals


@dataclass(frozen=True)
class ClientOptions:
    api_key: str | None = None
    """None: the SDK reads ANTHROPIC_API_KEY / ANTHROPIC_AUTH_TOKEN."""
    keepalive: bool = True
    base_url: str | None = None
    """None: the SDK reads ANTHROPIC_BASE_URL (default: the Anthropic API)."""


ClientFactory = Callable[[ClientOptions], anthropic.AsyncAnthropic]


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The TLS settings the SDK's HTTP client builds for itself (certificates loaded, SSL_CERT_FILE
    honoured), built once: 20-30 ms of CPU a client, and a worker has several (CLIENT_SHARDS)."""
    return httpx2.create_ssl_context()


def default_client(opts: ClientOptions) -> anthropic.AsyncAnthropic:
    """The SDK's client (ANTHROPIC_BASE_URL honoured); retries belong to Temporal."""
    if opts.keepalive:
        http = anthropic.DefaultAsyncHttpxClient(verify=_tls_context())
    else:
        http = anthropic.DefaultAsyncHttpxClient(
            verify=_tls_context(), limits=httpx2.Limits(max_keepalive_connections=0)
        )
    return anthropic.AsyncAnthropic(
        api_key=opts.api_key, base_url=opts.base_url, max_retries=0, http_client=http
    )


@dataclass(frozen=True)
class EncodedRequest:
    """A request (build_request's), with its body as the SDK's `messages.stream(**request)`
    would send it, encoded off the event loop, and its headers; no body when the SDK's own
    spans record (they read the request's fields): then the SDK's helper sends it."""

    params: dict[str, Any]
    body: bytes | None
    headers: dict[str, str]


STREAM_HELPER_HEADERS = {
    "Content-Type": "application/json",
    "X-Stainless-Helper-Method": "stream",
    "X-Stainless-Stream-Helper": "messages",
}
"""What the SDK's stream helper adds to each request (its own helper's headers)."""


def sdk_spans() -> bool:
    """Whether the SDK's own spans of a call would record (and send a `traceparent`): an
    OpenTelemetry tracer provider is installed (DURABLE_AGENT_OTEL, or the process's own)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def encode_request(request: dict[str, Any], spans: bool | None = None) -> EncodedRequest:
    """`request` (build_request's) with the bytes `messages.stream(**request)` sends: its
    fields, `stream`, then `extra_body` over them, in the SDK's JSON encoding (compact, UTF-8,
    no NaN); not encoded while the SDK's spans record (`spans`, default: `sdk_spans()`)."""
    headers = {**STREAM_HELPER_HEADERS, **request.get("extra_headers", {})}
    if sdk_spans() if spans is None else spans:
        return EncodedRequest(params=request, body=None, headers=headers)
    fields = {k: v for k, v in request.items() if k not in ("extra_headers", "extra_body")}
    body = {**fields, "stream": True, **request.get("extra_body", {})}
    return EncodedRequest(params=request, body=_encoded_body(body), headers=headers)


def _encoded_body(body: dict[str, Any]) -> bytes:
    """`request_json(body)`, as UTF-8, with each shared `tools` entry's JSON taken as encoded
    once (a third of a typical body, half of its encoding time: its schemas' many small
    dicts) rather than encoded again."""
    parts = []
    for key, value in body.items():
        if key == "tools":
            text = "[" + ",".join(encoded_tool(t) or request_json(t) for t in value) + "]"
        else:
            text = request_json(value)
        parts.append(f"{request_json(key)}:{text}")
    return ("{" + ",".join(parts) + "}").encode()


def stream_encoded(
    client: anthropic.AsyncAnthropic, request: EncodedRequest
) -> AsyncMessageStreamManager[Any]:
    """`client.messages.stream(**request)`; for a body encoded beforehand, the same request sent
    as those bytes: the SDK neither deep-copies nor encodes the 20-200 KB of it again on the
    event loop (~1 ms a call)."""
    if request.body is None:
        return client.messages.stream(**request.params)
    return AsyncMessageStreamManager(
        client.post(
            "/v1/messages",
            cast_to=anthropic.types.Message,
            content=request.body,
            options={"headers": request.headers},
            stream=True,
            stream_cls=anthropic.AsyncStream[RawMessageStreamEvent],
        )
    )


def _import_stream_path() -> None:
    import importlib

    for name in STREAM_PATH_MODULES:
        importlib.import_module(name)


STREAM_PATH_MODULES = (
    "anthropic.lib.streaming",
    "anyio._backends._asyncio",
    "anyio.streams.memory",
    "anyio.streams.stapled",
    "concurrent.futures.thread",
    "opentelemetry.propagate",
    "opentelemetry.trace.propagation.tracecontext",
)
"""What the first streamed request imports lazily once this module is loaded (found by
diffing `sys.modules` around a first call; tests/test_model_client.py checks each imports)."""

STREAM_SNAPSHOT_MODEL = ParsedMessage[ResponseFormatT]
"""Held so that it is built once. The SDK's stream helper names `ParsedMessage[ResponseFormatT]`
at each stream's first event, and pydantic keeps parametrized models only while something
references them (a weak cache): unheld, the class was built again on most calls, 1-2 ms of
event-loop CPU a model call."""


def system_prompt(config: ModelCallConfig, workspace: str, model: str = "") -> str:
    """Ours with the environment block (or `--system-prompt`'s, which replaces both), the
    plan-mode note, then the text of `--append-system-prompt`."""
    if config.environment is not None:
        parts = [SYSTEM_PROMPT, environment_block(config.environment, model)]
    else:  # a session started before the environment was gathered, or by a test
        parts = [
            SYSTEM_PROMPT,
            f"# Environment\nWorking directory: {workspace}\nPlatform: {platform.system().lower()}",
        ]
    if config.base_system_prompt is not None:
        parts = [config.base_system_prompt] if config.base_system_prompt else []
    if config.memory:  # Claude Code gives it whatever the system prompt (not replaced by it)
        parts.append(config.memory)
    if config.permissions is not None and config.permissions.mode == PermissionMode.PLAN:
        parts.append(PLAN_MODE_PROMPT)
    if config.system_prompt:
        parts.append(config.system_prompt)
    return "\n\n".join(parts)


PLAN_MODE_PROMPT = (
    "Plan mode is active: you may read and search (Read, Grep, Glob) but must not change "
    "anything; tools that edit files or run commands will be refused. Study the code, then "
    "answer with a concrete, step-by-step plan for the user to approve."
)


class StreamIncomplete(Exception):
    """The SSE stream stalled (nothing arrived for the idle time)."""


class MalformedResponse(Exception):
    """The API answered 200 with something the client cannot read: a malformed or cut-short
    stream, a tool_use whose input is not JSON, a body that is not an event stream. The message
    is one line naming what was sent."""


PREVIEW_CHARS = 80
KEPT_ANSWERS = 64
"""Answers a worker keeps for a retry after the store refused them: the oldest go first (a
retry that comes elsewhere, or never, must not hold them forever; one that finds its answer
gone calls the API again)."""
RAW_EVENT_TYPES = frozenset(
    {
        "message_start", "message_delta", "message_stop",
        "content_block_start", "content_block_delta", "content_block_stop",
    }
)  # fmt: skip
"""The SSE events the API sends (pings aside); the SDK adds its own (`text`, `input_json`…)."""
KNOWN_BLOCK_TYPES = frozenset(
    cls.model_fields["type"].default for cls in get_args(get_args(ContentBlock)[0])
)
"""Content block types the transcript can hold; others are left out of the stored answer."""


def _preview(text: str) -> str:
    """The first PREVIEW_CHARS characters of `text`, on one line, quoted."""
    flat = " ".join(text.split())
    return repr(flat[:PREVIEW_CHARS] + ("…" if len(flat) > PREVIEW_CHARS else ""))


async def read_stream(
    manager: Any, idle: float, on_event: Callable[[Any], Awaitable[None]] | None = None
) -> anthropic.types.Message:
    """The final message of a `messages.stream(...)`, or the failure named in one line: a body
    that is not SSE, an event the SDK cannot parse, an `error` event that is no API error, a
    stream that ends without message_stop (MalformedResponse), nothing for `idle` seconds
    (StreamIncomplete; leaving the stream closes the stalled connection)."""
    async with manager as stream:
        if "text/event-stream" not in stream.response.headers.get("content-type", ""):
            raise await non_sse_body(stream.response)
        stopped = False
        received = 0
        events = stream.__aiter__()
        while True:
            try:
                async with asyncio.timeout(idle):  # no task per event, unlike wait_for
                    event = await anext(events)
            except StopAsyncIteration:
                break
            except TimeoutError:
                raise StreamIncomplete(f"the API sent nothing for {idle:g}s") from None
            except (ValueError, TypeError, RuntimeError, AttributeError, KeyError) as exc:
                # The SDK could not parse what arrived (its parser's text, not ours).
                raise unreadable_event(exc, _snapshot(stream), received) from None
            except anthropic.APIStatusError as exc:
                if exc.status_code == 200 and _body_error_type(exc.body) is None:
                    raise MalformedResponse(
                        f"the API sent an `error` event after {received} events that is "
                        f"not an API error: {_preview(str(exc.body))}"
                    ) from None
                raise
            received += event.type in RAW_EVENT_TYPES
            stopped = stopped or event.type == "message_stop"
            if on_event is not None:
                await on_event(event)
        if not stopped:
            if received == 0:
                raise MalformedResponse("the API answered 200 but sent no SSE events")
            raise MalformedResponse(
                f"the API's stream ended after {received} events, without message_stop"
            )
        return await stream.get_final_message()


def _body_error_type(body: object) -> str | None:
    """The error type of an API error body, {"type": "error", "error": {"type": …}}; None when
    the body is not one."""
    error = body.get("error") if isinstance(body, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    return kind if isinstance(kind, str) else None


def unreadable_event(exc: Exception, snapshot: Any, received: int) -> MalformedResponse:
    """What the SDK could not parse in the stream, as one line naming what the API sent."""
    if isinstance(exc, json.JSONDecodeError):
        return MalformedResponse(
            f"the API sent a malformed SSE event after {received} events: "
            f"data line is not JSON: {_preview(exc.doc)}"
        )
    text = str(exc)
    if isinstance(exc, ValueError) and "tool parameter JSON" in text:
        tools = [b for b in getattr(snapshot, "content", []) if b.type == "tool_use"]
        which = f"tool_use {tools[-1].id} ({tools[-1].name})" if tools else "a tool_use"
        sent = text.partition(". JSON: ")[2]
        return MalformedResponse(
            f"the API sent {which} whose input is not valid JSON ({exc.__cause__ or exc}): "
            f"{_preview(sent)}"
        )
    return MalformedResponse(
        f"the API sent an SSE event the client cannot read after {received} events: "
        f"{_preview(text)}"
    )


def _snapshot(stream: Any) -> Any:
    """The message accumulated so far, or None before message_start."""
    try:
        return stream.current_message_snapshot
    except AssertionError:
        return None


async def non_sse_body(response: httpx2.Response) -> MalformedResponse:
    """A 200 that is not an event stream (an HTML page from a proxy, say), named by its type."""
    ctype = response.headers.get("content-type") or "no content type"
    body = (await response.aread()).decode("utf-8", errors="replace")
    try:
        json.loads(body)
        what = "a JSON body instead of an event stream"
    except ValueError:
        what = "a non-JSON body"
    return MalformedResponse(f"the API answered 200 with {what} ({ctype}): {_preview(body)}")


def to_failure(exc: BaseException) -> ApiFailure:
    if isinstance(exc, anthropic.APIStatusError):
        return ApiFailure(
            status=exc.status_code,
            error_type=_error_type(exc),
            message=_message(exc),
            headers=dict(exc.response.headers),
        )
    text = f"{type(exc).__name__}: {exc}"
    request = getattr(exc, "request", None)
    url = getattr(request, "url", None) if isinstance(exc, anthropic.APIConnectionError) else None
    if url is not None:  # which endpoint, so that a wrong ANTHROPIC_BASE_URL shows
        text += f" (calling {url.scheme}://{url.host}{f':{url.port}' if url.port else ''})"
    chain = _causes(exc)
    if any(isinstance(e, ConnectionRefusedError) for e in chain):  # nothing listens there
        text += ": connection refused"
    reset = any(isinstance(e, ConnectionResetError | BrokenPipeError) for e in chain) or any(
        word in f"{type(e).__name__}: {e}".lower()
        for e in chain
        for word in ("reset", "broken pipe", "epipe", "incomplete", "closed")
    )
    return ApiFailure(status=None, message=text, connection_reset=reset)


def _causes(exc: BaseException) -> list[BaseException]:
    """`exc` and what it wraps: the SDK raises APIConnectionError from httpx's ReadError, itself
    raised from the OS's ConnectionResetError."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain and len(chain) < 20:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _error_type(exc: anthropic.APIStatusError) -> str | None:
    if (kind := _body_error_type(exc.body)) is not None:
        return kind
    value = getattr(exc, "type", None)
    return value if isinstance(value, str) else None


def _message(exc: anthropic.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        msg = body["error"].get("message")
        if isinstance(msg, str):
            return msg
    return str(exc)


def to_application_error(decision: ErrorDecision) -> ApplicationError:
    """The engine's decision, as the ApplicationError Temporal retries (or not)."""
    delay = decision.delay_seconds
    return ApplicationError(
        f"{decision.kind.value}: {decision.message}",
        decision.model_dump(mode="json"),
        type=decision.error_type,
        non_retryable=not decision.retryable,
        next_retry_delay=timedelta(seconds=delay) if delay is not None else None,
    )


CLIENT_SHARDS = 32
"""A worker's model calls go through up to CLIENT_SHARDS clients, a session's always the same
one (by a hash of its id): each client has a connection pool of its own, and the SDK's pool
checks every idle connection it holds (a poll() and a getpeername() each) whenever a request
starts or ends, so with one pool each call cost O(calls in flight): a ninth of a busy worker's
CPU at 50 concurrent calls (py-spy, bench/sessions_per_worker.py), five times the checks of
eight pools. Clients share one TLS context (`_tls_context`): a client is cheap to build."""


def client_shard(session_id: str) -> int:
    return zlib.crc32(session_id.encode()) % CLIENT_SHARDS


class ModelActivities:
    """The model activity; receives the store, a client factory, credentials and (optionally)
    the Temporal client it uses to tell its workflow about retries."""

    def __init__(
        self,
        store: TranscriptStore,
        client_factory: ClientFactory = default_client,
        credentials: Credentials | None = None,
        temporal: Client | None = None,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.store = store
        self.client_factory = client_factory
        self.credentials = credentials or Credentials()
        self.temporal = temporal
        self.jitter = jitter
        self._clients: dict[int, anthropic.AsyncAnthropic] = {}
        """The clients built, by shard (CLIENT_SHARDS); all dropped to refresh the key."""
        self._shard_locks: dict[int, asyncio.Lock] = {}
        """One build per shard at a time: concurrent calls share the client one of them built,
        and a shard being built holds up no other shard's calls."""
        self._key_lock = asyncio.Lock()
        """One key look-up at a time (an `apiKeyHelper` runs once, not once per shard)."""
        self._generation = 0
        """Counts the times the clients were all dropped: a build that began before the last
        drop (with the key or options dropped) is not kept, but built again."""
        self._keepalive = True
        self._received: OrderedDict[tuple[str, str], anthropic.types.Message] = OrderedDict()
        """Answers streamed but not yet stored: a retry stores them without calling the API
        (the last KEPT_ANSWERS)."""
        self._described: dict[tuple[str, str], ToolCall] = {}
        """Tool calls described for the early signal, reused for the answer (a few at most)."""

    async def client(self, refresh_key: bool = False, shard: int = 0) -> anthropic.AsyncAnthropic:
        """The client (of `shard`, see CLIENT_SHARDS), built off the event loop with the
        current key (settings read, `apiKeyHelper` run) when there is none yet or the key must
        be refreshed (which drops every shard's)."""
        if refresh_key:
            self._drop_clients()
        async with self._shard_locks.setdefault(shard, asyncio.Lock()):
            while True:
                client = self._clients.get(shard)
                if client is not None and not refresh_key:
                    return client
                async with self._key_lock:
                    key = await off_loop(self.credentials.api_key, refresh=refresh_key)
                    generation = self._generation
                # Off the loop too: a factory's client may load TLS certificates (tens of ms).
                options = ClientOptions(api_key=key, keepalive=self._keepalive)
                client = await off_loop(self.client_factory, options)
                if generation == self._generation:
                    self._clients[shard] = client
                    return client
                refresh_key = False  # dropped meanwhile (another shard's refresh): again

    def _drop_clients(self) -> None:
        self._generation += 1
        self._clients.clear()

    async def client_after(self, track: RetryTrack, shard: int = 0) -> anthropic.AsyncAnthropic:
        """The client for an attempt that follows `track`'s failures: with the key refreshed
        when one of them asked for it and no call has rebuilt the clients since."""
        refresh = track.credential_refreshes > 0 and not self._clients
        return await self.client(refresh_key=refresh, shard=shard)

    def after_failure(self, decision: ErrorDecision) -> None:
        """What a failed attempt leaves for the next: its track (the next attempt's heartbeat
        details), and no clients when the failure asks for new ones (a refreshed key, or no
        kept connections after a reset)."""
        activity.heartbeat(decision.track.model_dump(mode="json"))
        if decision.action in (Action.REFRESH_CREDENTIALS, Action.REBUILD_CLIENT):
            self._keepalive = self._keepalive and decision.action != Action.REBUILD_CLIENT
            self._drop_clients()

    async def prewarm(self) -> None:
        """Build the client and import what a first streamed call imports (httpx's transport,
        httpcore, the stream helpers): a warm worker does it once it polls, so that its first
        session does not pay ~1 s of it (more without a bytecode cache) before the request.
        Nothing is sent. Without a key yet (or a failing apiKeyHelper) the first call reads
        it as before."""
        try:
            await self.client()
            await off_loop(_import_stream_path)
        except Exception as exc:  # noqa: BLE001 — the first call will meet it and say so
            activity.logger.debug("prewarming the model client: %s", exc)

    @activity.defn(name=Activities.CALL_MODEL)
    async def call_model(self, req: CallModelInput) -> CallModelOutput:
        try:
            return await self._call_model(req)
        except StoreError as exc:
            attempt = activity.info().attempt
            raise ApplicationError(
                f"the session's transcript could not be written: {exc}",
                type="StoreError",
                next_retry_delay=timedelta(seconds=min(2**attempt, 30)),
            ) from exc
        except TranscriptDamaged as exc:  # a missing entry stays missing: no retry can help
            raise ApplicationError(str(exc), type=TRANSCRIPT_DAMAGED, non_retryable=True) from exc

    async def _call_model(self, req: CallModelInput) -> CallModelOutput:
        info = activity.info()
        track = RetryTrack()
        if info.heartbeat_details:
            track = RetryTrack.model_validate(info.heartbeat_details[0])
        parent, request, encoded, stored = await off_loop(self._prepare, req)
        if stored is not None:  # an earlier attempt stored its answer: that is the answer
            out = await self._output(req, stored, {}, time.monotonic())
        else:
            assert request is not None and encoded is not None
            with telemetry.tracer().start_as_current_span(
                f"chat {req.request.model}", kind=SpanKind.CLIENT
            ) as span:
                span.set_attributes(
                    {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.system": telemetry.SYSTEM,
                        "gen_ai.request.model": req.request.model,
                        "gen_ai.request.max_tokens": request["max_tokens"],
                        "durable_agent.session_id": req.session_id,
                        "durable_agent.attempt": info.attempt,
                    }
                )
                out = await self._call(req, encoded, parent, track, span)
        if out.withheld is not None and req.new_user is not None:
            # No answer was stored after the new user entry: sync it here, whoever wrote it
            # (an earlier attempt, on this worker or another one sharing the directory).
            await off_loop(self.store.sync, req.session_id, force=True)
        elif self.store.needs_sync(req.session_id):
            await off_loop(self.store.sync, req.session_id)
        return out

    def _prepare(
        self, req: CallModelInput
    ) -> tuple[str | None, dict[str, Any] | None, EncodedRequest | None, Message | None]:
        """Store the new user entry, read the chain, build the request and keep the whole text
        of results it shows cut short: the parent of the answer, the request and its encoding
        (blocking). Or, when an earlier attempt stored the answer already (its completion was
        lost: a worker or server that died after the append), that answer and no request: the
        API would answer anew, with other tool_use ids than the transcript holds."""
        sid, tools = req.session_id, req.config.tools
        # The new user entry is made durable by the answer's append (one fsync, not two).
        parent, chain = chain_with_pending(
            self.store, sid, req.parent_uuid, req.new_user, defer_sync=True
        )
        stored = self.store.entry(sid, req.assistant_uuid)
        if stored is not None and stored.message is not None:
            return parent, None, None, stored.message
        servers = server_tools(req.config.web_search, req.config.permissions)
        system = system_prompt(req.config, req.workspace, req.request.model)
        request = request_view(
            self.store,
            sid,
            chain,
            lambda paths: build_request(
                chain,
                system,
                tools,
                req.request,
                paths,
                req.config.skills,
                servers,
                req.config.agents,
                req.config.mcp_tools,
            ),
        )
        return parent, request, encode_request(request), None

    async def _call(
        self,
        req: CallModelInput,
        request: EncodedRequest,
        parent: str | None,
        track: RetryTrack,
        span: Span,
    ) -> CallModelOutput:
        in_step: dict[str, asyncio.Task[RunToolOutput]] = {}
        try:
            return await self._answer(req, request, parent, track, span, in_step)
        finally:
            for task in in_step.values():  # a failed attempt's tools stop with it
                task.cancel()

    async def _answer(
        self,
        req: CallModelInput,
        request: EncodedRequest,
        parent: str | None,
        track: RetryTrack,
        span: Span,
        in_step: dict[str, asyncio.Task[RunToolOutput]],
    ) -> CallModelOutput:
        """Stream the request; store and describe the answer, or classify the failure."""
        info = activity.info()
        key = (req.session_id, req.assistant_uuid)
        sent = time.monotonic()
        try:
            final = self._received.get(key) or await self._stream(request, track, req, in_step)
        except (
            anthropic.APIError,
            httpx2.HTTPError,
            OSError,
            StreamIncomplete,
            MalformedResponse,
            CredentialsError,
        ) as exc:
            decision = self._decide(exc, req, track)
            span.set_status(Status(StatusCode.ERROR, decision.error_type))
            span.set_attribute("error.type", decision.error_type)
            if decision.kind.value in WITHHELD_KINDS:
                return _withheld(req, decision)
            self.after_failure(decision)
            if decision.retryable:
                await self._notify(RetryNotice(
                    attempt=info.attempt, error_type=decision.error_type,
                    message=decision.message, delay_seconds=decision.delay_seconds,
                ))  # fmt: skip
            raise to_application_error(decision) from exc
        unknown = [b.type for b in final.content if b.type not in KNOWN_BLOCK_TYPES]
        if unknown:
            activity.logger.warning(
                "the API sent content blocks of unknown types %s; they are left out", unknown
            )
            span.add_event("unknown_content_blocks", {"types": unknown})
        server_use = final.usage.server_tool_use
        usage = Usage(
            input_tokens=final.usage.input_tokens,
            output_tokens=final.usage.output_tokens,
            cache_creation_input_tokens=final.usage.cache_creation_input_tokens or 0,
            cache_read_input_tokens=final.usage.cache_read_input_tokens or 0,
            server_tool_use=ServerToolUsage(
                web_search_requests=(server_use.web_search_requests or 0) if server_use else 0
            ),
        )
        message = Message.model_validate(
            {
                "role": "assistant",
                # As the API sent them, without the defaults the SDK's models add.
                "content": [
                    b.model_dump(exclude_unset=True)
                    for b in final.content
                    if b.type in KNOWN_BLOCK_TYPES
                ],
                "id": final.id,
                "model": final.model or req.request.model,
                "stop_reason": final.stop_reason,
                "usage": usage,
            }
        )
        self._received[key] = final
        self._received.move_to_end(key)
        while len(self._received) > KEPT_ANSWERS:
            self._received.popitem(last=False)
        try:
            entry = await off_loop(
                self.store.append, req.session_id, req.assistant_uuid, parent, message
            )
        except OSError as exc:
            raise StoreError(str(exc)) from exc
        self._received.pop(key, None)
        _record_usage(span, final)
        # Another attempt's answer stored first (one still running when this one began) is
        # the answer: the transcript holds it, and its tool_use ids are the ones to answer.
        return await self._output(req, entry.message or message, in_step, sent)

    async def _output(
        self,
        req: CallModelInput,
        message: Message,
        in_step: dict[str, asyncio.Task[RunToolOutput]],
        sent: float,
    ) -> CallModelOutput:
        """What the workflow learns of the stored answer `message`: its tool calls described,
        the read-only ones this step runs itself run."""
        tool_results = await self._finish_in_step(req, message, in_step)
        tool_calls = [await self._describe(req, b, last=True) for b in message.tool_uses()]
        return CallModelOutput(
            assistant_uuid=req.assistant_uuid,
            stop_reason=message.stop_reason,
            usage=message.usage or Usage(),
            text=message.text()[:TEXT_PREVIEW_CHARS],
            tool_calls=tool_calls,
            model=message.model or req.request.model,
            attempt=activity.info().attempt,
            tool_results=tool_results,
            api_duration_ms=int((time.monotonic() - sent) * 1000),
        )

    async def _in_step(self, req: CallModelInput, block: ToolUseBlock) -> bool:
        """A read this step runs itself: only when the permission rules allow it (a denied
        read goes back to the workflow, which answers it with the denial). The decision is
        `_describe`'s, made off the loop: it resolves the path's links."""
        if not (
            req.run_read_only_tools
            and block.name in IN_STEP_TOOLS
            and block.name in req.config.tools
            and not _hooked(req, block.name)
        ):
            return False
        permission = (await self._describe(req, block)).permission
        return permission is None or permission.behavior == Behavior.ALLOW

    def _start_in_step(
        self,
        req: CallModelInput,
        block: ToolUseBlock,
        in_step: dict[str, asyncio.Task[RunToolOutput]],
    ) -> None:
        if block.id not in in_step:
            run_id = f"step{activity.info().attempt}"
            in_step[block.id] = asyncio.create_task(
                run_in_step(
                    self.store,
                    req.session_id,
                    block,
                    req.workspace,
                    run_id,
                    req.config.permissions,
                )
            )

    async def _finish_in_step(
        self,
        req: CallModelInput,
        message: Message,
        in_step: dict[str, asyncio.Task[RunToolOutput]],
    ) -> list[RunToolOutput]:
        """The read-only tools of the answer this step runs itself: those started while the
        stream ran, and the rest now (a retry that had the answer already streamed)."""
        blocks = [b for b in message.tool_uses() if await self._in_step(req, b)]
        for block in blocks:
            self._start_in_step(req, block, in_step)
        if not blocks:
            return []
        async with heartbeating():
            return [await in_step[b.id] for b in blocks]

    async def _tool_ready(self, req: CallModelInput, block: ToolUseBlock) -> None:
        """Tell the workflow a tool_use is complete, and wait until the signal is accepted so
        it precedes this activity's completion in history. Best effort: a signal Temporal
        does not take (the server down a while) leaves the tool to start with the complete
        answer (the final message is the truth: StreamingToolExecutor.reconcile), where it
        failed the attempt and had the model called again."""
        info = activity.info()
        if self.temporal is None or info.workflow_id is None:
            return
        await off_loop(self.store.put_early_tool_use, req.session_id, req.assistant_uuid, block)
        ready = ToolReady(
            call_id=req.assistant_uuid,
            attempt=info.attempt,
            call=await self._describe(req, block),
        )
        handle = self.temporal.get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)
        try:
            await handle.signal(Signals.TOOL_USE_READY, ready)
        except RPCError as exc:
            activity.logger.warning(
                "%s starts with the complete answer: the early signal failed (%s)", block.id, exc
            )

    async def _describe(
        self, req: CallModelInput, block: ToolUseBlock, last: bool = False
    ) -> ToolCall:
        """`_tool_call` once per tool_use, in a thread: checking a long Bash command against the
        permission rules is CPU work that the heartbeats and other sessions must not wait on."""
        key = (req.assistant_uuid, block.id)
        call = self._described.pop(key, None)
        if call is None:
            call = await off_loop(_tool_call, block.id, block.name, block.input, req)
        if not last:
            self._described[key] = call
            while len(self._described) > 64:  # those of attempts that failed before the answer
                del self._described[next(iter(self._described))]
        return call

    async def _stream(
        self,
        request: EncodedRequest,
        track: RetryTrack,
        req: CallModelInput,
        in_step: dict[str, asyncio.Task[RunToolOutput]],
    ) -> anthropic.types.Message:
        details = track.model_dump(mode="json")  # the attempt's own: its beats repeat them
        early = req.config.eager_tools != EagerTools.NONE
        idle = req.config.stream_idle_seconds

        shown = _StreamCopy(self.store, req) if req.config.stream_events else None

        async def on_event(event: Any) -> None:  # `heartbeating` beats meanwhile
            if shown is not None:
                await shown.add(event)
            if event.type == "content_block_stop" and event.content_block.type == "tool_use":
                raw = event.content_block
                block = ToolUseBlock(id=raw.id, name=raw.name, input=dict(raw.input))
                if await self._in_step(req, block):
                    self._start_in_step(req, block, in_step)
                elif early:
                    await self._tool_ready(req, block)

        async with heartbeating(details):
            client = await self.client_after(track, client_shard(req.session_id))
            body = stream_encoded(client, request)
            try:
                return await read_stream(body, idle, on_event)
            finally:
                if shown is not None:
                    await shown.flush()

    def _decide(self, exc: BaseException, req: CallModelInput, track: RetryTrack) -> ErrorDecision:
        cfg = req.config
        if isinstance(exc, CredentialsError):
            failure = ApiFailure(status=401, error_type="authentication_error", message=str(exc))
        elif isinstance(exc, MalformedResponse):
            failure = ApiFailure(status=200, message=str(exc), malformed=True)
        else:
            failure = to_failure(exc)
        return classify(
            failure,
            RetryContext(
                attempt=activity.info().attempt,
                query_source=cfg.query_source,
                mode=RetryMode.UNATTENDED if cfg.unattended else RetryMode.DEFAULT,
                track=track,
                has_fallback=cfg.fallback_model is not None
                and req.request.model != cfg.fallback_model,
                max_retries=cfg.max_retries,
                now=datetime.now(UTC),
                jitter=self.jitter(),
            ),
        )

    async def _notify(self, notice: RetryNotice) -> None:
        """Best effort: the workflow shows why it waits; a failed signal changes nothing."""
        info = activity.info()
        if self.temporal is None or info.workflow_id is None:
            return
        try:
            handle = self.temporal.get_workflow_handle(
                info.workflow_id, run_id=info.workflow_run_id
            )
            await handle.signal(Signals.MODEL_RETRY, notice)
        except Exception as exc:  # noqa: BLE001
            activity.logger.warning("could not tell the workflow about a retry: %s", exc)


def _record_usage(span: Span, final: anthropic.types.Message) -> None:
    usage = final.usage
    span.set_attributes(
        {
            "gen_ai.response.model": final.model,
            "gen_ai.response.id": final.id,
            "gen_ai.response.finish_reasons": [final.stop_reason or ""],
            "gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
            "gen_ai.usage.cache_read_input_tokens": usage.cache_read_input_tokens or 0,
            "gen_ai.usage.cache_creation_input_tokens": usage.cache_creation_input_tokens or 0,
        }
    )
    histogram = telemetry.token_usage()
    for kind, count in (("input", usage.input_tokens), ("output", usage.output_tokens)):
        histogram.record(count, {"gen_ai.token.type": kind, "gen_ai.response.model": final.model})


def _withheld(req: CallModelInput, decision: ErrorDecision) -> CallModelOutput:
    return CallModelOutput(
        assistant_uuid=req.assistant_uuid,
        stop_reason=None,
        usage=Usage(),
        model=req.request.model,
        withheld=WithheldError(
            kind=decision.kind,
            message=decision.message,
            prompt_tokens=decision.prompt_tokens,
            max_tokens=decision.max_tokens,
        ),
    )


RAW_STREAM_EVENTS = frozenset(
    {"message_start", "content_block_start", "content_block_delta", "content_block_stop",
     "message_delta", "message_stop"}
)  # fmt: skip


class _StreamCopy:
    """The raw events of one stream, appended to the session's stream file in small batches
    (off the event loop), each tagged with the answer it belongs to."""

    def __init__(self, store: TranscriptStore, req: CallModelInput) -> None:
        self.store, self.req = store, req
        self.attempt = activity.info().attempt if activity.in_activity() else 1
        self.lines: list[str] = []
        self.last = time.monotonic()

    async def add(self, event: Any) -> None:
        if event.type not in RAW_STREAM_EVENTS:
            return
        raw = event.model_dump(mode="json", exclude={"message_snapshot", "snapshot"})
        line = {"assistant_uuid": self.req.assistant_uuid, "attempt": self.attempt, "event": raw}
        self.lines.append(json.dumps(line) + "\n")
        if time.monotonic() - self.last > 0.05:
            await self.flush()

    async def flush(self) -> None:
        lines, self.lines, self.last = self.lines, [], time.monotonic()
        if lines:
            try:
                await off_loop(self.store.append_stream_events, self.req.session_id, lines)
            except OSError as exc:  # a view, not the answer: the call goes on without it
                activity.logger.warning("could not write stream events: %s", exc)


def _hooked(req: CallModelInput, name: str) -> bool:
    """Some PreToolUse / PostToolUse(Failure) hook matches this tool."""
    hooks = req.config.tool_hooks
    return hooks is not None and any(
        hooks_for(hooks, event, name) or callbacks_for(hooks, event, name) for event in TOOL_EVENTS
    )


def _tool_call(tool_id: str, name: str, raw: dict[str, Any], req: CallModelInput) -> ToolCall:
    """The call as the workflow sees it: how it may run and, with permissions configured, what
    the rules and mode decided (the input travels along only when the call is not allowed, or
    when hooks will be given it)."""
    ctx = req.config.permissions
    decision = None if ctx is None else resolved_check(name, raw, ctx)  # links followed
    permission_input = None
    if (decision is not None and decision.behavior != Behavior.ALLOW) or _hooked(req, name):
        permission_input = raw
    spec = TOOL_SPECS.get(name)
    if spec is None:
        return ToolCall(
            id=tool_id, name=name, concurrency_safe=False, read_only=False, summary=name,
            permission=decision, permission_input=permission_input,
        )  # fmt: skip
    todos = agent = None
    if name == ToolName.TODO_WRITE:
        with contextlib.suppress(ValidationError):  # invalid: the tool says why, no list kept
            todos = TodoWriteInput.model_validate(raw).todos
    if name == ToolName.AGENT:
        with contextlib.suppress(ValidationError):  # invalid: the tool says why
            agent = AgentInput.model_validate(raw)
    task_stop = None
    if name == ToolName.TASK_STOP:
        with contextlib.suppress(ValidationError):
            task_stop = TaskStopInput.model_validate(raw).task_id
    return ToolCall(
        id=tool_id,
        name=name,
        concurrency_safe=spec.is_concurrency_safe(raw),
        read_only=spec.is_read_only(raw),
        summary=spec.summary(raw),
        permission=decision,
        permission_input=permission_input,
        todos=todos,
        agent=agent,
        task_stop=task_stop,
        **scheduled_fields(tool_id, name, raw),
    )
