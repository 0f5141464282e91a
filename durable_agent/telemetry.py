"""OpenTelemetry: span and metric names (GenAI semantic conventions) and the optional setup.

Spans: `invoke_agent durable-agent` around a prompt (the CLI), Temporal's own spans through the
OpenTelemetryPlugin, `chat {model}` for each model call and `execute_tool {name}` for each tool
(both in activities), all in one trace. `DURABLE_AGENT_OTEL=console` prints them to stderr;
`DURABLE_AGENT_OTEL=otlp` sends them over OTLP/gRPC to OTEL_EXPORTER_OTLP_ENDPOINT (or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; default http://localhost:4317), the same collector a worker's
Temporal metrics go to (wiring.worker_runtime). The exporter reads the standard OTEL_EXPORTER_OTLP_*
variables (headers, certificates, timeout) and the resource OTEL_SERVICE_NAME and
OTEL_RESOURCE_ATTRIBUTES.
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


TARGETS = ("console", "otlp")


def setup_from_env() -> bool:
    """Install a replay-safe tracer provider when DURABLE_AGENT_OTEL asks for one (console:
    each span printed to stderr as it ends; otlp: batched to the collector, flushed at exit)."""
    target = os.environ.get(OTEL_ENV, "").strip().lower()
    if target not in TARGETS:
        if target:
            print(
                f"warning: {OTEL_ENV}={target!r} is not one of {', '.join(TARGETS)}: no traces",
                file=sys.stderr,
            )
        return False
    from temporalio.contrib.opentelemetry import create_tracer_provider

    provider = create_tracer_provider()
    if target == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    else:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        _export_metrics_over_otlp()
    trace.set_tracer_provider(provider)
    return True


def _export_metrics_over_otlp() -> None:
    """This process's own metrics (gen_ai.client.token.usage) to the same collector, every
    OTEL_METRIC_EXPORT_INTERVAL ms (default 60 s) and at exit; the Temporal SDK's worker
    metrics go there through its runtime (wiring.worker_runtime)."""
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))


def plugins() -> list[Any]:
    """The Temporal plugin that carries trace context through workflows and activities, when
    a replay-safe tracer provider is installed (it refuses to run with any other)."""
    from temporalio.contrib.opentelemetry import OpenTelemetryPlugin, ReplaySafeTracerProvider

    if not isinstance(trace.get_tracer_provider(), ReplaySafeTracerProvider):
        return []
    return [OpenTelemetryPlugin(add_temporal_spans=True)]


def shutdown() -> None:
    """Flush and stop the tracer and meter providers, if they were installed."""
    for provider in (trace.get_tracer_provider(), metrics.get_meter_provider()):
        stop = getattr(provider, "shutdown", None)
        if callable(stop):
            stop()
