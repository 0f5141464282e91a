"""call_model: one streaming Messages API call built from the transcript store."""

from __future__ import annotations

import platform
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import anthropic
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.transcript import TranscriptStore, append_pending
from durable_agent.engine.contracts import CallModelInput, CallModelOutput, ToolCall
from durable_agent.engine.errors import classify_status
from durable_agent.engine.messages import Message, Usage, to_api_messages
from durable_agent.engine.state import TEXT_PREVIEW_CHARS, QueryConfig
from durable_agent.engine.tools import TOOL_SPECS

ClientFactory = Callable[[], anthropic.AsyncAnthropic]

BASE_SYSTEM_PROMPT = """You are a coding agent working in a local workspace through tools \
(Read, Write, Edit, Bash, Grep, Glob). Inspect before you change, make focused edits, run the \
relevant checks, and finish with a short summary of what you did."""


def default_client() -> anthropic.AsyncAnthropic:
    """The SDK reads ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL; retries belong to Temporal."""
    return anthropic.AsyncAnthropic(max_retries=0)


def system_prompt(config: QueryConfig) -> str:
    parts = [
        BASE_SYSTEM_PROMPT,
        f"Workspace (working directory of every tool): {config.workspace}\n"
        f"Platform: {platform.system().lower()}",
    ]
    if config.system_prompt:
        parts.append(config.system_prompt)
    return "\n\n".join(parts)


def _error_type(exc: anthropic.APIStatusError) -> str | None:
    body = exc.body
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("type"), str):
            return err["type"]
        if isinstance(body.get("type"), str) and body["type"] != "error":
            return body["type"]
    value = getattr(exc, "type", None)
    return value if isinstance(value, str) else None


def to_application_error(exc: Exception, attempt: int) -> ApplicationError:
    """The engine's classification, as the ApplicationError Temporal retries (or not)."""
    if isinstance(exc, anthropic.APIStatusError):
        decision = classify_status(
            exc.status_code, _error_type(exc), str(exc), dict(exc.response.headers), attempt
        )
    else:
        decision = classify_status(None, None, f"{type(exc).__name__}: {exc}", {}, attempt)
    return ApplicationError(
        f"{decision.kind.value}: {decision.message}",
        decision.model_dump(mode="json"),
        type=decision.kind.value,
        non_retryable=not decision.retryable,
        next_retry_delay=timedelta(seconds=decision.delay_seconds)
        if decision.delay_seconds is not None
        else None,
    )


class ModelActivities:
    """The model activity; receives the store and a factory for the anthropic client."""

    def __init__(self, store: TranscriptStore, client_factory: ClientFactory = default_client):
        self.store = store
        self.client_factory = client_factory
        self._client: anthropic.AsyncAnthropic | None = None

    def client(self) -> anthropic.AsyncAnthropic:
        if self._client is None:
            self._client = self.client_factory()
        return self._client

    @activity.defn(name="call_model")
    async def call_model(self, req: CallModelInput) -> CallModelOutput:
        parent = req.parent_uuid
        if req.new_user is not None:
            parent = append_pending(self.store, req.session_id, req.new_user).uuid
        chain = self.store.chain(req.session_id, parent)
        request: dict[str, Any] = {
            "model": req.config.model,
            "max_tokens": req.config.max_output_tokens,
            "system": system_prompt(req.config),
            "messages": to_api_messages(chain),
            "tools": [TOOL_SPECS[n].api_tool() for n in req.config.tools if n in TOOL_SPECS],
        }
        try:
            async with self.client().messages.stream(**request) as stream:
                async for _event in stream:
                    activity.heartbeat()
                final = await stream.get_final_message()
        except (anthropic.APIStatusError, anthropic.APIConnectionError) as exc:
            raise to_application_error(exc, activity.info().attempt) from exc
        message = Message.model_validate(
            {"role": "assistant", "content": [b.model_dump() for b in final.content]}
        )
        self.store.append(req.session_id, req.assistant_uuid, parent, message)
        return CallModelOutput(
            assistant_uuid=req.assistant_uuid,
            stop_reason=final.stop_reason,
            usage=Usage(
                input_tokens=final.usage.input_tokens,
                output_tokens=final.usage.output_tokens,
                cache_creation_input_tokens=final.usage.cache_creation_input_tokens or 0,
                cache_read_input_tokens=final.usage.cache_read_input_tokens or 0,
            ),
            text=message.text()[:TEXT_PREVIEW_CHARS],
            tool_calls=[_tool_call(b.id, b.name, b.input) for b in message.tool_uses()],
            model=final.model,
        )


def _tool_call(tool_id: str, name: str, raw: dict[str, Any]) -> ToolCall:
    spec = TOOL_SPECS.get(name)
    if spec is None:
        return ToolCall(
            id=tool_id, name=name, concurrency_safe=False, read_only=False, summary=name
        )
    return ToolCall(
        id=tool_id,
        name=name,
        concurrency_safe=spec.is_concurrency_safe(raw),
        read_only=spec.read_only,
        summary=spec.summary(raw),
    )
