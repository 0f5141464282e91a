"""OpenTelemetry: span and metric names (GenAI semantic conventions) and the optional setup.

Spans: `invoke_agent durable-agent` around a prompt (the CLI), Temporal's own spans through the
OpenTelemetryPlugin, `chat {model}` for each model call and `execute_tool {name}` for each tool
(both in activities), all in one trace. `DURABLE_AGENT_OTEL=console` prints them to stderr.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from opentelemetry import metrics, trace

NAME = "durable_agent"
OTEL_ENV = "DURABLE_AGENT_OTEL"
SYSTEM = "anthropic"


def tracer() -> trace.Tracer:
    return trace.get_tracer(NAME)


_token_usage: Any = None


def token_usage() -> Any:
    """Histogram `gen_ai.client.token.usage` ({token}), by gen_ai.token.type and model."""
    global _token_usage
    if _token_usage is None:
        _token_usage = metrics.get_meter(NAME).create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Tokens used per model call"
        )
    return _token_usage


def setup_from_env() -> bool:
    """Install a replay-safe tracer provider when DURABLE_AGENT_OTEL asks for one."""
    target = os.environ.get(OTEL_ENV, "").strip().lower()
    if target not in ("console",):
        return False
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
    from temporalio.contrib.opentelemetry import create_tracer_provider

    provider = create_tracer_provider()
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    trace.set_tracer_provider(provider)
    return True


def plugins() -> list[Any]:
    """The Temporal plugin that carries trace context through workflows and activities, when
    a replay-safe tracer provider is installed (it refuses to run with any other)."""
    from temporalio.contrib.opentelemetry import OpenTelemetryPlugin, ReplaySafeTracerProvider

    if not isinstance(trace.get_tracer_provider(), ReplaySafeTracerProvider):
        return []
    return [OpenTelemetryPlugin(add_temporal_spans=True)]


def shutdown() -> None:
    """Flush and stop the tracer provider, if one was installed."""
    provider = trace.get_tracer_provider()
    stop = getattr(provider, "shutdown", None)
    if callable(stop):
        stop()
