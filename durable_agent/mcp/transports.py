"""The SDK's three client transports opened from a `McpServerSpec`, plus what a connection
needs to tell why a server went away: the tail of a stdio server's stderr, a 401 seen on an
HTTP server, and the moment the server's stream ends."""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import httpx2
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from durable_agent.mcp.config import McpServerSpec

if TYPE_CHECKING:  # the SDK's own annotations of a transport's streams
    from mcp.shared._stream_protocols import ReadStream, WriteStream

HTTP_TIMEOUT_SECONDS = 30.0
STREAM_READ_TIMEOUT_SECONDS = 300.0
"""How long an SSE stream may stay silent (the SDK's default): a server may hold it open."""
STDERR_LINES = 20

Streams = tuple["ReadStream[SessionMessage | Exception]", "WriteStream[SessionMessage]"]


class StderrTail:
    """A stdio server's stderr, its last lines kept: a server that dies says why there. A pipe
    drained by a thread, since the SDK hands the child a file (it needs a real descriptor)."""

    def __init__(self) -> None:
        read_fd, write_fd = os.pipe()
        self.file: TextIO = os.fdopen(write_fd, "w")
        self._lines: deque[str] = deque(maxlen=STDERR_LINES)
        self._thread = threading.Thread(target=self._drain, args=(read_fd,), daemon=True)
        self._thread.start()

    def _drain(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as pipe:
            for raw in pipe:
                line = raw.decode("utf-8", errors="replace").strip()
                if line:
                    self._lines.append(line)

    def spawned(self) -> None:
        """The child holds its own copy now; ours must go for the pipe to end with the child."""
        if not self.file.closed:
            self.file.close()

    def last(self, wait: float = 1.0) -> str | None:
        """The last line written (blocking up to `wait` for a dead child's output to drain)."""
        self.spawned()
        self._thread.join(wait)
        return self._lines[-1] if self._lines else None


class WatchedStream:
    """The server's read stream, calling `on_end` once it ends: a crashed stdio server is known
    dead before the next call is sent to it, so that call reopens it instead of failing."""

    def __init__(
        self, inner: ReadStream[SessionMessage | Exception], on_end: Callable[[], None]
    ) -> None:
        self._inner = inner
        self._on_end = on_end

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> WatchedStream:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> WatchedStream:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        self._on_end()
        return await self._inner.__aexit__(exc_type, exc, tb)


@asynccontextmanager
async def open_transport(
    spec: McpServerSpec,
    cwd: str | None,
    stderr: StderrTail | None,
    on_status: Callable[[int], None],
    tag: Mapping[str, str] | None = None,
) -> AsyncIterator[Streams]:
    """The spec's transport, entered. `stderr`: where a stdio server writes its own;
    `on_status`: each HTTP status an HTTP server answers with (401: it wants a login; 404 on
    a session: it forgot it), which the SDK turns into less telling errors; `tag`: added to
    a stdio server's environment (the run tag that finds it again, activities/tools)."""

    async def seen(response: httpx2.Response) -> None:
        if response.status_code >= 400:
            on_status(response.status_code)

    def client(
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
    ) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            headers={**spec.headers, **(headers or {})},
            timeout=timeout
            or httpx2.Timeout(HTTP_TIMEOUT_SECONDS, read=STREAM_READ_TIMEOUT_SECONDS),
            auth=auth,
            event_hooks={"response": [seen]},
        )

    async with AsyncExitStack() as stack:
        if spec.type == "stdio":
            assert spec.command is not None
            params = StdioServerParameters(
                command=spec.command,
                args=spec.args,
                env={**spec.env, **tag} if tag else spec.env or None,
                cwd=cwd,
            )
            errlog = stderr.file if stderr is not None else None
            try:
                if errlog is None:
                    streams = await stack.enter_async_context(stdio_client(params))
                else:
                    streams = await stack.enter_async_context(stdio_client(params, errlog))
            finally:
                if stderr is not None:
                    stderr.spawned()
        elif spec.type == "http":
            assert spec.url is not None
            http = await stack.enter_async_context(client())
            streams = await stack.enter_async_context(
                streamable_http_client(spec.url, http_client=http)
            )
        else:
            assert spec.url is not None
            streams = await stack.enter_async_context(
                sse_client(
                    spec.url,
                    timeout=HTTP_TIMEOUT_SECONDS,
                    sse_read_timeout=STREAM_READ_TIMEOUT_SECONDS,
                    httpx_client_factory=client,
                )
            )
        yield streams
