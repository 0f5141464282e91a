"""An MCP server of ours for the transports and the failures (the SDK's own `MCPServer`): run
as `python misbehaving.py` it serves stdio; `build()` gives the app the tests serve over
streamable HTTP and SSE on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import os
import sys
import time

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent, TextContent

PIXEL = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360f8cfc0000003010100c9fe92ef0000000049454e44ae426082"
    )
).decode()
"""A 1x1 PNG."""


def build() -> MCPServer:
    server = MCPServer("misbehaving")

    @server.tool()
    def echo(text: str) -> str:
        """Say the text back."""
        return text

    @server.tool()
    def picture() -> list[TextContent | ImageContent]:
        """A caption and a 1x1 PNG."""
        return [
            TextContent(type="text", text="a pixel"),
            ImageContent(type="image", data=PIXEL, mime_type="image/png"),
        ]

    @server.tool()
    def refuse() -> str:
        """Always fails (isError)."""
        raise ToolError("refused on purpose")

    @server.tool()
    async def slow(seconds: float) -> str:
        """Answer after `seconds`."""
        await asyncio.sleep(seconds)
        return "late"

    @server.tool()
    def mark_slowly(path: str, seconds: float) -> str:
        """Append `start <pid>` to `path`, block for `seconds`, then append `end`: a side
        effect still under way when the worker that asked is killed."""
        with open(path, "a") as marker:
            marker.write(f"start {os.getpid()}\n")
        time.sleep(seconds)
        with open(path, "a") as marker:
            marker.write("end\n")
        return "marked"

    @server.tool()
    def pid() -> str:
        """This server's process id."""
        return str(os.getpid())

    @server.tool()
    def crash() -> str:
        """Exit the process mid-call, as a crashing server would."""
        print("crashing on purpose", file=sys.stderr, flush=True)
        os._exit(1)

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add the tool `grown` and announce that the tool list changed."""

        def grown() -> str:
            """Appeared at run time."""
            return "grown"

        server.add_tool(grown)
        await ctx.session.send_tool_list_changed()
        return "grew"

    return server


if __name__ == "__main__":
    build().run()
