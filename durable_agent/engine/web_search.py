"""WebSearch: the Messages API's server-side web search tool. The API runs the searches; the
answer carries them as `server_tool_use` and `web_search_tool_result` blocks, which go back to
the API exactly as they came. Nothing here runs a tool."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from durable_agent.engine.permissions import Behavior, PermissionContext, check

WEB_SEARCH = "WebSearch"
"""Its name in permission rules and `--tools` (Claude Code's); the API calls it `web_search`."""
WEB_SEARCH_TOOL_TYPE = "web_search_20250305"
DEFAULT_MAX_USES = 8
BOTH_LISTS = "allowed_domains and blocked_domains cannot be used together (the API takes one)"


class WebSearchConfig(BaseModel):
    """The server tool's options, sent with every request that offers it."""

    model_config = ConfigDict(frozen=True)

    allowed_domains: tuple[str, ...] = ()
    """Only results from these domains; empty: any domain (but the blocked ones)."""
    blocked_domains: tuple[str, ...] = ()
    """Never results from these domains."""
    max_uses: int = Field(default=DEFAULT_MAX_USES, ge=1)
    """Searches the API may run for one request."""

    @model_validator(mode="after")
    def _one_list(self) -> WebSearchConfig:
        if self.allowed_domains and self.blocked_domains:
            raise ValueError(BOTH_LISTS)
        return self

    def api_tool(self) -> dict[str, Any]:
        tool: dict[str, Any] = {
            "type": WEB_SEARCH_TOOL_TYPE,
            "name": "web_search",
            "max_uses": self.max_uses,
        }
        if self.allowed_domains:
            tool["allowed_domains"] = list(self.allowed_domains)
        if self.blocked_domains:
            tool["blocked_domains"] = list(self.blocked_domains)
        return tool


def offered(config: WebSearchConfig | None, permissions: PermissionContext | None) -> bool:
    """Whether requests offer the search: configured, and not denied (a `WebSearch` deny rule
    or `--disallowedTools WebSearch`; plan mode; dontAsk mode without an allow rule). The API
    runs it, so no call can be refused one by one: a denial keeps it out of the request. An
    ask does not: nobody could answer it, and a search touches nothing here."""
    if config is None:
        return False
    return permissions is None or check(WEB_SEARCH, {}, permissions).behavior != Behavior.DENY


def server_tools(
    config: WebSearchConfig | None, permissions: PermissionContext | None
) -> list[dict[str, Any]]:
    """The server tools of a request (after ours in `tools`)."""
    return [config.api_tool()] if config is not None and offered(config, permissions) else []
