"""One open MCP connection: the task that holds a server's transport and `ClientSession`.

The SDK's transports and session are async context managers whose cancel scopes belong to
the task that entered them, so each connection has its own task that enters them, holds them
until the connection is closed or the server's stream ends, and exits them. Requests are sent
from the caller's task (an activity's): the session's request/response matching works from
any task, and a caller's timeout or cancellation then stays the caller's.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from mcp import types
from mcp.client.session import ClientSession, IncomingMessage

from durable_agent.mcp.config import McpServerSpec, tool_name
from durable_agent.mcp.contracts import (  # noqa: F401 — re-exported
    CONNECT_TIMEOUT_SECONDS,
    REASON_CHARS,
    ConnectFailed,
    McpStatus,
    McpTool,
    one_line,
)
from durable_agent.mcp.transports import StderrTail, WatchedStream, open_transport

LIST_TIMEOUT_SECONDS = 30.0
CLOSE_TIMEOUT_SECONDS = 10.0
CALL_GRACE_SECONDS = 5.0
"""Past the call's own timeout (the SDK's, which tells the server to stop): the safety net."""
MAX_DESCRIPTION_CHARS = 2048
"""A tool's description is cut here: every tool list goes into every model request."""
MAX_TOOL_PAGES = 100
log = logging.getLogger(__name__)


@functools.cache
def _client_info() -> types.Implementation:
    try:
        ours = version("durable-agent")
    except PackageNotFoundError:
        ours = "0"
    return types.Implementation(name="durable-agent", version=ours)


class Connection:
    """One server for one session: its holding task, its session, whether it lives."""

    def __init__(
        self, spec: McpServerSpec, cwd: str | None, tag: Mapping[str, str] | None = None
    ) -> None:
        self.spec = spec
        self.tag = tag
        """Added to a stdio server's environment: the session's MCP run tag."""
        self.cwd = cwd if cwd and os.path.isdir(cwd) else None
        """Where a stdio server starts: the workspace, when this worker has it."""
        self.session: ClientSession | None = None
        self.tools_changed = asyncio.Event()
        """Set when the server sends `notifications/tools/list_changed`; cleared as its tools
        are listed."""
        self._wake = asyncio.Event()
        self._ended = False
        self._unauthorized = False
        self.forgotten = False
        """An HTTP server answered 404 to our session: it restarted and no longer knows it."""
        self._stderr = StderrTail() if spec.type == "stdio" else None
        self._task: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return self.session is not None and not self._ended and not self.forgotten

    def _end(self) -> None:
        self._ended = True
        self._wake.set()

    def _saw_status(self, status: int) -> None:
        if status == 401:
            self._unauthorized = True
        elif status == 404 and self.session is not None:
            self.forgotten = True

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.tools_changed.set()
        elif isinstance(message, Exception):
            log.debug("mcp server %s: %s", self.spec.name, one_line(message))

    async def open(self, within_seconds: float) -> None:
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ready.add_done_callback(_retrieved)  # nobody waits for it after a timeout
        self._task = asyncio.create_task(self._hold(ready), name=f"mcp {self.spec.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), within_seconds)
        except TimeoutError:
            await self.close()
            reason = f"no answer within {within_seconds:g} s"
            raise ConnectFailed(McpStatus.FAILED, reason) from None
        except BaseException:
            await self.close()
            raise

    async def _hold(self, ready: asyncio.Future[None]) -> None:
        """Enter the transport and the session, initialize, then hold them until woken."""
        try:
            async with open_transport(
                self.spec, self.cwd, self._stderr, self._saw_status, self.tag
            ) as (
                read,
                write,
            ):
                async with ClientSession(
                    WatchedStream(read, self._end),
                    write,
                    message_handler=self._on_message,
                    client_info=_client_info(),
                ) as session:
                    await session.initialize()
                    self.session = session
                    ready.set_result(None)
                    await self._wake.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(await self._failure(exc))
            else:
                log.debug("mcp server %s ended: %s", self.spec.name, one_line(exc))
        finally:
            self.session = None
            self._end()
            if not ready.done():
                ready.set_exception(ConnectFailed(McpStatus.FAILED, "closed while connecting"))
            if self._stderr is not None:
                self._stderr.spawned()

    async def _failure(self, exc: BaseException) -> ConnectFailed:
        if self._unauthorized:
            return ConnectFailed(
                McpStatus.NEEDS_AUTH,
                "the server asks for authorization (HTTP 401); pass a token in its headers",
            )
        return ConnectFailed(McpStatus.FAILED, await self.explained(one_line(exc)))

    async def explained(self, reason: str) -> str:
        """`reason`, with the last line a stdio server wrote to its stderr (why it died)."""
        said = await asyncio.to_thread(self._stderr.last) if self._stderr is not None else None
        return f"{reason}; it said: {said}"[:REASON_CHARS] if said else reason

    async def close(self) -> None:
        """Exit the session and the transport (in their own task), ending a stdio server."""
        self._wake.set()
        task = self._task
        if task is None or task.done():
            return
        if self.session is None:  # still connecting: nothing to wind down politely
            task.cancel()
        done, _ = await asyncio.wait({task}, timeout=CLOSE_TIMEOUT_SECONDS)
        if not done:
            task.cancel()
            await asyncio.wait({task}, timeout=CLOSE_TIMEOUT_SECONDS)

    async def call(
        self, tool: str, arguments: dict[str, Any], timeout_seconds: float
    ) -> types.CallToolResult:
        assert self.session is not None
        async with asyncio.timeout(timeout_seconds + CALL_GRACE_SECONDS):
            return await self.session.call_tool(
                tool, arguments, read_timeout_seconds=timeout_seconds
            )

    async def list_tools(self) -> list[McpTool]:
        assert self.session is not None
        self.tools_changed.clear()  # a change announced while listing sets it again
        found: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_TOOL_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            async with asyncio.timeout(LIST_TIMEOUT_SECONDS):
                page = await self.session.list_tools(params=params)
            found.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return [
            McpTool(
                name=tool_name(self.spec.name, t.name),
                server=self.spec.name,
                tool=t.name,
                description=(t.description or "")[:MAX_DESCRIPTION_CHARS],
                input_schema=t.input_schema,
            )
            for t in found
        ]


def _retrieved(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()
