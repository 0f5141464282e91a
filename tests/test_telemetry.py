"""One trace per prompt across the client, workflows and activities, with GenAI attributes;
exported over OTLP by the CLI and a worker."""

import asyncio
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.contrib.opentelemetry import create_tracer_provider
from temporalio.contrib.pydantic import pydantic_data_converter

from durable_agent import telemetry
from durable_agent.engine.contracts import SessionInput
from durable_agent.engine.state import QueryConfig, Terminal
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from durable_agent.wiring import build_worker
from tests.helpers import replay_client_factory, start_worker_logged, worker_env
from workflows.session import SessionWorkflow

ROOT = Path(__file__).resolve().parent.parent


async def test_a_prompt_is_one_trace_with_model_and_tool_spans(
    dev_env, store, workspace, task_queue
):
    exporter = InMemorySpanExporter()
    provider = create_tracer_provider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    client = await Client.connect(
        dev_env.client.service_client.config.target_host,
        data_converter=pydantic_data_converter,
        plugins=telemetry.plugins(),
    )
    (workspace / "a.txt").write_text("alpha\n")
    turns = [
        tool_turn([("r1", "Read", {"file_path": "a.txt"})], input_tokens=321, output_tokens=12),
        text_turn("done"),
    ]
    sid = f"otel-{uuid.uuid4()}"
    with ReplayServer(turns) as server:
        async with build_worker(client, task_queue, store, replay_client_factory(server)):
            with telemetry.tracer().start_as_current_span("invoke_agent durable-agent"):
                status = await client.execute_workflow(
                    SessionWorkflow.run,
                    SessionInput(session_id=sid, config=QueryConfig(workspace=str(workspace)), initial_prompt="read", close_when_idle=True),
                    id=sid,
                    task_queue=task_queue,
                )  # fmt: skip
    provider.force_flush()
    assert status.last_result is not None and status.last_result.terminal == Terminal.COMPLETED
    spans = exporter.get_finished_spans()
    names = [s.name for s in spans]
    assert {
        "invoke_agent durable-agent",
        "RunWorkflow:SessionWorkflow",
        "RunWorkflow:QueryWorkflow",
    } <= set(names)
    assert names.count("chat claude-sonnet-4-5") == 2 and names.count("execute_tool Read") == 1
    assert len({s.context.trace_id for s in spans}) == 1  # one trace for the prompt
    chat = next(
        s
        for s in spans
        if s.name == "chat claude-sonnet-4-5"
        and (s.attributes or {}).get("gen_ai.usage.input_tokens") == 321
    )
    attrs = dict(chat.attributes or {})
    assert attrs["gen_ai.system"] == "anthropic" and attrs["gen_ai.operation.name"] == "chat"
    assert (
        attrs["gen_ai.request.model"] == "claude-sonnet-4-5"
        and attrs["gen_ai.usage.output_tokens"] == 12
    )
    assert tuple(attrs["gen_ai.response.finish_reasons"]) == ("tool_use",)  # type: ignore[arg-type]
    tool = next(s for s in spans if s.name == "execute_tool Read")
    assert tool.attributes["gen_ai.tool.call.id"] == "r1"  # type: ignore[index]


class Collector:
    """An OTLP/gRPC collector on loopback: keeps every span and metric name it is sent."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, str, bytes]] = []
        """(service.name, span name, trace id)"""
        self.metrics: set[str] = set()
        self.address = ""

    def __enter__(self) -> "Collector":
        from concurrent import futures

        import grpc
        from opentelemetry.proto.collector.metrics.v1 import (
            metrics_service_pb2,
            metrics_service_pb2_grpc,
        )
        from opentelemetry.proto.collector.trace.v1 import (
            trace_service_pb2,
            trace_service_pb2_grpc,
        )

        collector = self

        def service_name(resource: Any) -> str:
            names = [a.value.string_value for a in resource.attributes if a.key == "service.name"]
            return names[0] if names else ""

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 — gRPC's name
                for rs in request.resource_spans:
                    service = service_name(rs.resource)
                    for ss in rs.scope_spans:
                        collector.spans += [(service, s.name, s.trace_id) for s in ss.spans]
                return trace_service_pb2.ExportTraceServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:  # noqa: N802
                for rm in request.resource_metrics:
                    for sm in rm.scope_metrics:
                        collector.metrics.update(m.name for m in sm.metrics)
                return metrics_service_pb2.ExportMetricsServiceResponse()

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), self._server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), self._server)
        port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        self.address = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(grace=None)


async def test_otlp_carries_the_cli_and_worker_spans_of_a_prompt_as_one_trace(dev_env, tmp_path):
    """DURABLE_AGENT_OTEL=otlp, as infra/ sets it: `run --no-worker` and `python worker.py`
    send their spans to one OTLP/gRPC collector — the prompt's span from the CLI, the
    workflows', model call's and tool's from the worker, one trace — and the worker's metrics
    (its token counts and the Temporal SDK's) go to the same collector."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("alpha\n")
    turns = [tool_turn([("r1", "Read", {"file_path": "a.txt"})]), text_turn("done")]
    queue = f"otlp-{uuid.uuid4().hex[:8]}"
    address = dev_env.client.service_client.config.target_host
    with Collector() as collector, ReplayServer(turns) as server:
        env = worker_env(
            server.base_url, tmp_path / "home", queue, address,
            DURABLE_AGENT_OTEL="otlp", OTEL_EXPORTER_OTLP_ENDPOINT=collector.address,
            OTEL_SERVICE_NAME="durable-agent-worker",
        )  # fmt: skip
        log = tmp_path / "worker.log"
        worker = start_worker_logged(env, log)
        try:
            cli = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "durable_agent", "run", "--no-worker", "--workspace",
                 str(workspace), "read a.txt"],
                cwd=ROOT, env={**env, "OTEL_SERVICE_NAME": "durable-agent-cli"},
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert cli.returncode == 0, cli.stderr
            assert "done" in cli.stdout
            # The Temporal SDK's metrics go out every second from its own thread, not at exit:
            # the worker is stopped once they have come (or after 15 s: the assertion below).
            for _ in range(150):
                if any(name.startswith("temporal_") for name in list(collector.metrics)):
                    break
                await asyncio.sleep(0.1)
            worker.send_signal(signal.SIGTERM)  # spans still batched are sent as it exits
            assert await asyncio.to_thread(worker.wait, 60) == 0, log.read_text()
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    by_service: dict[str, set[str]] = {}
    for service, name, _ in collector.spans:
        by_service.setdefault(service, set()).add(name)
    assert "invoke_agent durable-agent" in by_service.get("durable-agent-cli", set()), by_service
    worker_spans = by_service.get("durable-agent-worker", set())
    assert {
        "RunWorkflow:SessionWorkflow",
        "chat claude-sonnet-4-5",
        "execute_tool Read",
    } <= worker_spans, by_service
    assert len({trace_id for *_, trace_id in collector.spans}) == 1, "not one trace"
    # the worker's token counts (flushed as it exits) and its Temporal SDK metrics
    assert "gen_ai.client.token.usage" in collector.metrics, collector.metrics
    assert any(name.startswith("temporal_") for name in collector.metrics), collector.metrics
