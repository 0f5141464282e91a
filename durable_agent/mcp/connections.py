"""The worker's open MCP connections: per (session, server) one `ClientSession`, kept alive
across calls and turns, reopened once by the next call after the server died.

A connection no call or listing has used for `idle_seconds` (no call in flight) is closed, and
the session's next call opens it again: in a fleet of workers on one disk, a session's calls
land on any of them, and each would otherwise keep its own connection (a stdio server process)
until the session ends — which only one of them hears of.

Each connection is held by a task of its own (`connection.Connection`).

Nothing here raises for a server's misbehaviour: a server that cannot be reached is a status
(`failed` with the reason in one line, `needs-auth` after a 401), a call that fails is an error
result, each with a one-line notice for the status line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from durable_agent.engine.messages import ImageBlock, TextBlock
from durable_agent.mcp.config import McpServerSpec
from durable_agent.mcp.contracts import (
    CONNECT_TIMEOUT_SECONDS,
    MAX_OUTPUT_TOKENS,
    CallMcpToolOutput,
    ConnectFailed,
    McpServerState,
    McpStatus,
    one_line,
)
from durable_agent.names import owning_session
from durable_agent.operating import MCP_IDLE_SECONDS

if TYPE_CHECKING:
    from durable_agent.mcp.connection import Connection

# The `mcp` package (0.5 s to import) is imported by the first connection, not by every
# worker at start: most sessions configure no MCP server.


ENDED_CHECK_SECONDS = 60.0
"""How often a worker asks whether the sessions it holds MCP connections for have ended."""


class McpConnections:
    """One per worker process: the open connections of every session this worker serves.
    `idle_seconds` 0 keeps each until its session ends."""

    def __init__(
        self,
        connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
        idle_seconds: float = MCP_IDLE_SECONDS,
        tag: Callable[[str], Mapping[str, str]] | None = None,
        session_open: Callable[[str], Awaitable[bool | None]] | None = None,
        ended_check_seconds: float = ENDED_CHECK_SECONDS,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.idle_seconds = idle_seconds
        self.session_open = session_open
        """Whether a session still runs (False: it has ended): its connections here are closed
        at the next check. The session's end closes them only on the worker it ends on; in a
        fleet its calls may have opened servers on other workers, other machines."""
        self.ended_check_seconds = ended_check_seconds
        self.tag = tag
        """A session's variables for the environment of the stdio servers started for it (its
        run tag: the session's end, or the takeover of a call a dead worker was serving, finds
        the servers by it)."""
        self._open: dict[tuple[str, str], Connection] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._lost: set[tuple[str, str]] = set()
        """Connections that died or could not be reopened: their next success is a status."""
        self._used: dict[tuple[str, str], float] = {}
        """When each open connection was last used (the loop's clock)."""
        self._busy: dict[tuple[str, str], int] = {}
        """Calls and listings in flight on each."""
        self._sweeper: asyncio.Task[None] | None = None

    @contextmanager
    def _using(self, key: tuple[str, str]) -> Iterator[None]:
        """A call or listing on the connection: not idle meanwhile, used when it ends."""
        self._busy[key] = self._busy.get(key, 0) + 1
        try:
            yield
        finally:
            left = self._busy.pop(key) - 1
            if left:
                self._busy[key] = left
            if key in self._open:  # not closed meanwhile (its session ended)
                self._used[key] = asyncio.get_running_loop().time()
                self._sweep_later()

    def _sweep_later(self) -> None:
        sweeps = self.idle_seconds > 0 or self.session_open is not None
        if sweeps and (self._sweeper is None or self._sweeper.done()):
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def _sweep(self) -> None:
        """Close the connections idle for `idle_seconds` and those of sessions that have ended,
        while any is open."""
        loop = asyncio.get_running_loop()
        interval = min(self.idle_seconds / 2 if self.idle_seconds > 0 else 60.0, 60.0)
        if self.session_open is not None:
            interval = min(interval, self.ended_check_seconds)
        while self._open:
            await asyncio.sleep(max(0.05, interval))
            await self._close_ended()
            if self.idle_seconds <= 0:
                continue
            now = loop.time()
            idle = [
                key
                for key in self._open
                if not self._busy.get(key)
                and now - self._used.get(key, now) >= self.idle_seconds
                and not (key in self._locks and self._locks[key].locked())
            ]
            if idle:  # shielded: close_all cancelling this task lets the closes end
                await asyncio.shield(self._close(idle))

    async def _close_ended(self) -> None:
        """Close the connections of sessions that have ended (a sub-agent's with its session,
        whose id it starts with: `<session>.agent-<call>`)."""
        if self.session_open is None:
            return

        def busy(session_id: str) -> bool:
            return any(self._busy.get(key) for key in self._open if key[0] == session_id)

        held: dict[str, set[str]] = {}  # a session and its sub-agents' connections: asked once
        for session_id, _ in self._open:
            held.setdefault(owning_session(session_id), set()).add(session_id)
        for owner, session_ids in held.items():
            if all(busy(session_id) for session_id in session_ids):
                continue
            try:
                running = await self.session_open(owner)
            except Exception:  # noqa: BLE001 — Temporal did not answer: ask at the next check
                continue
            if running is not False:
                continue
            for session_id in session_ids:
                if not busy(session_id):  # no call began while Temporal was asked
                    await asyncio.shield(self.close_session(session_id))

    async def _connection(self, session_id: str, spec: McpServerSpec, cwd: str) -> Connection:
        """The live connection, opened (or reopened) if need be; raises ConnectFailed."""
        key = (session_id, spec.name)
        async with self._locks.setdefault(key, asyncio.Lock()):
            old = self._open.get(key)
            if old is not None and old.alive and old.spec == spec:
                return old
            if old is not None:
                del self._open[key]
                self._used.pop(key, None)
                await old.close()
            from durable_agent.mcp.connection import Connection

            conn = Connection(spec, cwd, self.tag(session_id) if self.tag else None)
            await conn.open(self.connect_timeout)
            conn.tools_changed.set()  # until listed: its tools may differ from those recorded
            self._open[key] = conn
            self._used[key] = asyncio.get_running_loop().time()
            self._sweep_later()
            return conn

    async def connect(
        self, session_id: str, specs: Iterable[McpServerSpec], cwd: str
    ) -> list[McpServerState]:
        """Each server's state and tools, all connected at once (bounded by the timeout)."""
        return list(await asyncio.gather(*(self._state(session_id, s, cwd) for s in specs)))

    async def _state(self, session_id: str, spec: McpServerSpec, cwd: str) -> McpServerState:
        try:
            conn = await self._connection(session_id, spec, cwd)
            with self._using((session_id, spec.name)):
                tools = await conn.list_tools()
        except ConnectFailed as exc:
            return McpServerState(name=spec.name, status=exc.status, error=exc.reason)
        except Exception as exc:  # the server's fault: a status, never a failed activity
            reason = f"tools/list failed: {one_line(exc) if str(exc) else 'no answer'}"
            return McpServerState(name=spec.name, status=McpStatus.FAILED, error=reason)
        return McpServerState(name=spec.name, status=McpStatus.CONNECTED, tools=tools)

    async def refresh(
        self, session_id: str, specs: Iterable[McpServerSpec], cwd: str
    ) -> list[McpServerState]:
        """The servers whose tools changed since they were listed (a `tools/list_changed`, or
        a reopen), listed again; the others are left out."""
        changed = []
        for spec in specs:
            conn = self._open.get((session_id, spec.name))
            if conn and conn.alive and conn.tools_changed.is_set() and conn.spec == spec:
                changed.append(spec)
        return await self.connect(session_id, changed, cwd)

    def changed(self, session_id: str) -> list[str]:
        """The names of the session's servers with a tool list change not yet refreshed."""
        return [
            name
            for (sid, name), conn in self._open.items()
            if sid == session_id and conn.tools_changed.is_set()
        ]

    async def wait_changed(self, session_id: str, name: str) -> None:
        """Until the open server announces a tool list change (one not yet refreshed)."""
        await self._open[(session_id, name)].tools_changed.wait()

    async def call_tool(
        self,
        session_id: str,
        spec: McpServerSpec,
        tool: str,
        arguments: dict[str, Any],
        timeout_seconds: float,
        cwd: str,
        max_output_tokens: int = MAX_OUTPUT_TOKENS,
    ) -> CallMcpToolOutput:
        """Call a tool; every failure is an error result, never an exception. An HTTP server
        that forgot the session (restarted: a 404) is reopened and asked again at once, since
        the call never reached the tool; a server that died during the call is not."""
        key = (session_id, spec.name)
        for attempt in (1, 2):
            was = self._open.get(key)
            try:
                conn = await self._connection(session_id, spec, cwd)
            except ConnectFailed as exc:
                self._lost.add(key)
                state = McpServerState(name=spec.name, status=exc.status, error=exc.reason)
                return _failed(f"MCP server {spec.name!r} is not connected: {exc.reason}", state)
            status = None
            if key in self._lost or (was is not None and conn is not was):
                status = McpServerState(name=spec.name, status=McpStatus.CONNECTED)
            self._lost.discard(key)
            try:
                with self._using(key):
                    result = await conn.call(tool, arguments, timeout_seconds)
            except Exception as exc:
                if conn.forgotten and attempt == 1:
                    await self._drop(key, conn)
                    continue
                return await self._call_failed(key, conn, tool, exc, timeout_seconds, status)
            from durable_agent.mcp.results import map_result

            content, is_error = map_result(result, max_output_tokens)
            return CallMcpToolOutput(content=content, is_error=is_error, status=status)
        raise AssertionError("unreachable: the second attempt returns")

    async def _call_failed(
        self,
        key: tuple[str, str],
        conn: Connection,
        tool: str,
        exc: Exception,
        timeout_seconds: float,
        status: McpServerState | None,
    ) -> CallMcpToolOutput:
        from mcp import types
        from mcp.shared.exceptions import MCPError

        code = exc.code if isinstance(exc, MCPError) else None
        name = conn.spec.name
        if isinstance(exc, TimeoutError) or code == types.REQUEST_TIMEOUT:
            return _failed(
                f"MCP server {name!r} did not answer {tool} within {timeout_seconds:g} s", status
            )
        if code == types.CONNECTION_CLOSED or not conn.alive:
            await self._drop(key, conn)
            reason = await conn.explained("the connection closed during a call")
            state = McpServerState(name=name, status=McpStatus.FAILED, error=reason)
            said = (
                f"MCP server {name!r} closed the connection while running {tool} (it may have "
                "crashed); it is restarted on the next call"
            )
            return _failed(said, state)
        said = f"MCP error {code}: {exc}" if code is not None else f"{tool} failed: {one_line(exc)}"
        return CallMcpToolOutput(content=_text(said), is_error=True, status=status)

    async def _drop(self, key: tuple[str, str], conn: Connection) -> None:
        if self._open.get(key) is conn:
            del self._open[key]
            self._used.pop(key, None)
        self._lost.add(key)
        await conn.close()

    async def close_session(self, session_id: str) -> int:
        """Close the session's connections (ending its stdio servers); how many there were."""
        self._lost = {key for key in self._lost if key[0] != session_id}
        for key in [key for key in self._locks if key[0] == session_id]:
            self._locks.pop(key)  # a server that never opened has a lock, not a connection
        return await self._close([key for key in self._open if key[0] == session_id])

    async def close_all(self) -> None:
        self._lost.clear()
        if self._sweeper is not None:
            self._sweeper.cancel()
        await self._close(list(self._open))

    async def _close(self, keys: list[tuple[str, str]]) -> int:
        conns = [self._open.pop(key) for key in keys]
        for key in keys:
            self._locks.pop(key, None)
            self._used.pop(key, None)
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)
        return len(conns)


def _text(text: str) -> list[TextBlock | ImageBlock]:
    return [TextBlock(text=text)]


def _failed(said: str, status: McpServerState | None) -> CallMcpToolOutput:
    return CallMcpToolOutput(content=_text(said), is_error=True, status=status, notice=said)
