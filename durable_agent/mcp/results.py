"""An MCP tool call's result as the content of our tool_result: text blocks and base64 image
blocks, as the Messages API takes them.

What the model cannot take is described in a line of text instead of being dropped silently
(audio, binary resources, images of a type or size the API refuses), so it knows something
came back. `structuredContent` is sent as JSON text only when the result has no text: a server
that returns both puts the same data in its text (the spec asks it to).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import mcp_types as types

from durable_agent.engine.messages import ImageBlock, ImageSource, TextBlock
from durable_agent.mcp.contracts import MAX_OUTPUT_TOKENS

IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
"""The image types the Messages API accepts."""
MAX_IMAGE_CHARS = 1_000_000
"""A result's images in all, as base64 text; those past it are described instead: a result
travels in the workflow's history, whose payloads Temporal caps at 2 MB."""

ResultContent = list[TextBlock | ImageBlock]


def map_result(
    result: types.CallToolResult, max_output_tokens: int = MAX_OUTPUT_TOKENS
) -> tuple[ResultContent, bool]:
    """(content, is_error) for a tool_result."""
    blocks: ResultContent = []
    for item in result.content:
        blocks.extend(_blocks(item))
    if result.structured_content is not None and not any(isinstance(b, TextBlock) for b in blocks):
        text = json.dumps(result.structured_content, ensure_ascii=False, indent=2)
        blocks.insert(0, TextBlock(text=text))
    return _cut(blocks, max_output_tokens * 4), bool(result.is_error)


def _blocks(item: Any) -> ResultContent:
    match item:
        case types.TextContent(text=text):
            return [TextBlock(text=text)]
        case types.ImageContent(data=data, mime_type=mime):
            return [_image(data, mime, "image")]
        case types.AudioContent(mime_type=mime, data=data):
            return [TextBlock(text=f"[audio ({mime}, {_size(data)}) not shown: not supported]")]
        case types.EmbeddedResource(resource=types.TextResourceContents(uri=uri, text=text)):
            return [TextBlock(text=f"[resource {uri}]\n{text}")]
        case types.EmbeddedResource(resource=types.BlobResourceContents() as blob):
            mime = blob.mime_type or "application/octet-stream"
            if mime in IMAGE_TYPES:
                return [_image(blob.blob, mime, f"resource {blob.uri}")]
            return [TextBlock(text=f"[resource {blob.uri} ({mime}, {_size(blob.blob)}) not shown]")]
        case types.ResourceLink(uri=uri, name=name):
            about = f": {item.description}" if item.description else ""
            mime = f" ({item.mime_type})" if item.mime_type else ""
            return [TextBlock(text=f"[resource link {name}{mime} {uri}{about}]")]
    return [TextBlock(text=f"[{getattr(item, 'type', 'unknown')} content not shown]")]


def _image(data: str, mime: str, what: str) -> TextBlock | ImageBlock:
    if mime not in IMAGE_TYPES:
        return TextBlock(text=f"[{what} ({mime}) not shown: the model takes {_image_types()}]")
    return ImageBlock(source=ImageSource(type="base64", media_type=mime, data=data))


def _image_types() -> str:
    return ", ".join(sorted(t.removeprefix("image/") for t in IMAGE_TYPES))


def _size(data: str) -> str:
    try:
        count = len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        count = len(data) * 3 // 4
    return f"{count:,} bytes"


def _cut(blocks: ResultContent, max_chars: int) -> ResultContent:
    """The text blocks cut to `max_chars` in all, the images to MAX_IMAGE_CHARS."""
    total = sum(len(b.text) for b in blocks if isinstance(b, TextBlock))
    left, pictures = max_chars, MAX_IMAGE_CHARS
    cut: ResultContent = []
    for block in blocks:
        if isinstance(block, ImageBlock):
            data = block.source.data or ""
            pictures -= len(data)
            if pictures >= 0:
                cut.append(block)
            else:
                mime = block.source.media_type
                cut.append(TextBlock(text=f"[image ({mime}, {_size(data)}) not shown: too large]"))
        elif left > 0:
            cut.append(TextBlock(text=block.text[:left]))
            left -= len(block.text)
    if total <= max_chars:
        return cut
    note = (
        f"[output cut: {total:,} characters, above the limit of {max_chars // 4:,} tokens "
        "(MAX_MCP_OUTPUT_TOKENS); ask the tool for less]"
    )
    cut.append(TextBlock(text=note))
    return cut
