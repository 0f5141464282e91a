"""The MCP activities: connect a session's servers, call a tool, refresh changed tool lists,
close the session's connections. They run on the worker that holds the session's connections
(`McpConnections`, one per worker process); what they return is recorded in the workflow's
history, so a replay never touches a server.

None raises for a server's misbehaviour: a server that cannot be reached is a status, a call
that fails is an error result. `call_mcp_tool` has side effects on the server's side: a retry
after a lost attempt runs the tool again, so its retry policy is the caller's choice.
"""

from __future__ import annotations

from temporalio import activity

from activities.heartbeat import heartbeating
from durable_agent.mcp.connections import McpConnections
from durable_agent.mcp.contracts import (
    CallMcpToolInput,
    CallMcpToolOutput,
    CloseMcpInput,
    CloseMcpOutput,
    ConnectMcpInput,
    McpServersOutput,
    RefreshMcpToolsInput,
)
from durable_agent.names import Activities


class McpActivities:
    """MCP activities; receives the worker's connections."""

    def __init__(self, connections: McpConnections) -> None:
        self.connections = connections

    @activity.defn(name=Activities.CONNECT_MCP_SERVERS)
    async def connect_mcp_servers(self, req: ConnectMcpInput) -> McpServersOutput:
        """Each server's status and tools (servers already open for the session are reused)."""
        async with heartbeating():
            states = await self.connections.connect(req.session_id, req.servers, req.workspace)
            if not req.keep:
                await self.connections.close_session(req.session_id)
        return McpServersOutput(servers=states)

    @activity.defn(name=Activities.CALL_MCP_TOOL)
    async def call_mcp_tool(self, req: CallMcpToolInput) -> CallMcpToolOutput:
        async with heartbeating():
            return await self.connections.call_tool(
                req.session_id,
                req.server,
                req.tool,
                req.arguments,
                req.timeout_seconds,
                req.workspace,
                req.max_output_tokens,
            )

    @activity.defn(name=Activities.REFRESH_MCP_TOOLS)
    async def refresh_mcp_tools(self, req: RefreshMcpToolsInput) -> McpServersOutput:
        """Only the servers whose tools changed (`tools/list_changed`, or reopened since they
        were listed), listed again; an empty list when none did."""
        async with heartbeating():
            states = await self.connections.refresh(req.session_id, req.servers, req.workspace)
        return McpServersOutput(servers=states)

    @activity.defn(name=Activities.CLOSE_MCP_SESSION)
    async def close_mcp_session(self, req: CloseMcpInput) -> CloseMcpOutput:
        async with heartbeating():
            closed = await self.connections.close_session(req.session_id)
        return CloseMcpOutput(closed=closed)
