"""One trace per prompt across the client, workflows and activities, with GenAI attributes."""

import uuid

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
from tests.helpers import replay_client_factory
from workflows.session import SessionWorkflow


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
