"""The MCP activities' inputs and outputs (activities/mcp.py), recorded in the workflow's history:
the tool lists a session works with come from here, so a replay never asks a server."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from durable_agent.engine.messages import ImageBlock, TextBlock
from durable_agent.mcp.config import McpServerSpec

MAX_OUTPUT_TOKENS = 25_000
"""Claude Code's default `MAX_MCP_OUTPUT_TOKENS`: a result's text beyond it (about 4 characters
a token) is cut, with a note saying so."""


class McpStatus(StrEnum):
    """A server's state as `system/init` and `/mcp` show it."""

    CONNECTED = "connected"
    FAILED = "failed"
    NEEDS_AUTH = "needs-auth"


class McpTool(BaseModel):
    name: str
    """The model's name for it: `mcp__<server>__<tool>`."""
    server: str
    tool: str
    """The server's own name for it (what `tools/call` sends)."""
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


class McpServerState(BaseModel):
    name: str
    status: McpStatus
    error: str | None = None
    """Why it is not connected, in one line."""
    tools: list[McpTool] = Field(default_factory=list)


class ConnectMcpInput(BaseModel):
    session_id: str
    servers: list[McpServerSpec]
    workspace: str
    """Where stdio servers start (their working directory)."""
    keep: bool = True
    """False: the connections are closed once listed (a travelling workspace's MCP calls run
    on its host, which opens its own: connections kept here would outlive the session)."""


class McpServersOutput(BaseModel):
    servers: list[McpServerState] = Field(default_factory=list)


class CallMcpToolInput(BaseModel):
    session_id: str
    server: McpServerSpec
    tool: str
    """The server's own name for the tool (`McpTool.tool`), not `mcp__…`."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    timeout_seconds: float = 600.0
    """How long the call may take; then it is an error result (the server stays connected)."""
    workspace: str
    """Where the server starts if the call has to reopen it."""
    max_output_tokens: int = MAX_OUTPUT_TOKENS
    """`MAX_MCP_OUTPUT_TOKENS`: longer text is cut, with a note."""


class CallMcpToolOutput(BaseModel):
    content: list[TextBlock | ImageBlock] = Field(default_factory=list)
    is_error: bool = False
    status: McpServerState | None = None
    """The server's state when the call changed it (it died, was reopened, or could not be);
    None when it is as it was. Its tools are not listed here: `refresh_mcp_tools` does that."""
    notice: str | None = None
    """One line for a `status` message when the server misbehaved (died, timed out)."""


class RefreshMcpToolsInput(BaseModel):
    session_id: str
    servers: list[McpServerSpec]
    workspace: str


class CloseMcpInput(BaseModel):
    session_id: str


class CloseMcpOutput(BaseModel):
    closed: int = 0


CONNECT_TIMEOUT_SECONDS = 30.0
REASON_CHARS = 300


class ConnectFailed(Exception):
    def __init__(self, status: McpStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def one_line(exc: BaseException) -> str:
    """The innermost error of an exception (group) as one short line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror + (f": {exc.filename}" if exc.filename else "")
    return text[:REASON_CHARS]
