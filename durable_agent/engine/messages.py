"""Content blocks, messages and transcript entries (the Messages API shapes, as pydantic models)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Block(BaseModel):
    # Unknown fields from the API (citations, cache_control, …) survive a round trip.
    model_config = ConfigDict(extra="allow")


class TextBlock(_Block):
    """Text; an answer that cites web search results carries `citations` (kept as sent)."""

    type: Literal["text"] = "text"
    text: str


class ToolUseBlock(_Block):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ImageSource(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["base64", "url"] = "base64"
    media_type: str | None = None
    data: str | None = None
    url: str | None = None


class ImageBlock(_Block):
    type: Literal["image"] = "image"
    source: ImageSource


class ToolResultBlock(_Block):
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str | list[TextBlock | ImageBlock] = ""
    is_error: bool = False

    def text(self) -> str:
        """The result as text (images are left out)."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(b.text for b in self.content if isinstance(b, TextBlock))


class ThinkingBlock(_Block):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str = ""


class RedactedThinkingBlock(_Block):
    type: Literal["redacted_thinking"] = "redacted_thinking"
    data: str


class ServerToolUseBlock(_Block):
    """A search the API ran itself (web search): never a tool call of ours to run."""

    type: Literal["server_tool_use"] = "server_tool_use"
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class WebSearchToolResultBlock(_Block):
    """The API's results of a search: a list of `web_search_result` items (their
    `encrypted_content` must go back unchanged) or an error object, kept as sent."""

    type: Literal["web_search_tool_result"] = "web_search_tool_result"
    tool_use_id: str
    content: list[dict[str, Any]] | dict[str, Any]


ContentBlock = Annotated[
    TextBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | ImageBlock
    | ServerToolUseBlock
    | WebSearchToolResultBlock,
    Field(discriminator="type"),
]


class ServerToolUsage(BaseModel):
    """What the API's own tools did for a call (billed apart from tokens)."""

    web_search_requests: int = 0


class Usage(BaseModel):
    """Token usage of one model call, cache tokens included."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    server_tool_use: ServerToolUsage = Field(default_factory=ServerToolUsage)

    def __add__(self, other: Usage) -> Usage:
        searches = self.server_tool_use.web_search_requests
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_creation_input_tokens=self.cache_creation_input_tokens
            + other.cache_creation_input_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens + other.cache_read_input_tokens,
            server_tool_use=ServerToolUsage(
                web_search_requests=searches + other.server_tool_use.web_search_requests
            ),
        )


class Message(BaseModel):
    role: Literal["user", "assistant"]
    content: list[ContentBlock]
    id: str | None = None
    """An assistant message's id, model, stop_reason and usage as the API gave them (for the
    transcript and the stream-json front-end; never sent back to the API)."""
    model: str | None = None
    stop_reason: str | None = None
    usage: Usage | None = None

    def tool_uses(self) -> list[ToolUseBlock]:
        return [b for b in self.content if isinstance(b, ToolUseBlock)]

    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))


class CompactMetadata(BaseModel):
    trigger: Literal["auto", "reactive", "manual"]
    pre_tokens: int


class TranscriptEntry(BaseModel):
    """One line of a session's JSONL transcript; `parentUuid` links it to the one before.

    A `system` entry with subtype `compact_boundary` ends the view a request is built from: the
    model sees only what follows it (the summary and after); the file keeps everything."""

    model_config = ConfigDict(populate_by_name=True)

    uuid: str
    parent_uuid: str | None = Field(default=None, alias="parentUuid")
    type: Literal["user", "assistant", "system"]
    message: Message | None = None
    timestamp: str = ""
    session_id: str = Field(default="", alias="sessionId")
    subtype: str | None = None
    compact_metadata: CompactMetadata | None = Field(default=None, alias="compactMetadata")
    is_compact_summary: bool = Field(default=False, alias="isCompactSummary")

    @property
    def is_compact_boundary(self) -> bool:
        return self.type == "system" and self.subtype == "compact_boundary"


def to_api_messages(chain: list[TranscriptEntry]) -> list[dict[str, Any]]:
    """The request's `messages` for a transcript chain: consecutive same-role entries merged."""
    out: list[dict[str, Any]] = []
    for entry in chain:
        if entry.message is None:
            continue
        blocks = [b.model_dump(exclude_none=True) for b in entry.message.content]
        if out and out[-1]["role"] == entry.message.role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": entry.message.role, "content": blocks})
    return out
