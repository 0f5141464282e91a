"""durable_agent/payloads.py's payload converter: built in pieces once per process (the SDK
constructs one for every serialization context of every activation), but each sandboxed
workflow keeps pieces of its own."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio import workflow

from durable_agent.engine.state import PendingUser
from durable_agent.payloads import SharedPayloadConverter, data_converter


def test_outside_the_sandbox_the_pieces_are_built_once():
    first, second = SharedPayloadConverter(), SharedPayloadConverter()
    assert first.converters is not second.converters  # each its own mapping (with_context sets it)
    for encoding, converter in first.converters.items():
        assert second.converters[encoding] is converter


def test_inside_the_sandbox_each_workflow_has_its_own():
    shared = SharedPayloadConverter()
    workflow.unsafe._set_in_sandbox(True)
    try:
        own = SharedPayloadConverter()
    finally:
        workflow.unsafe._set_in_sandbox(False)
    assert own.converters[b"json/plain"] is not shared.converters[b"json/plain"]


def test_the_converter_round_trips_models_as_before(tmp_path: Path):
    converter = data_converter(tmp_path)
    assert converter.payload_converter_class is SharedPayloadConverter
    value = PendingUser(uuid="u1", parent_uuid=None, prompt="hello")
    payloads = asyncio.run(converter.encode([value]))
    assert payloads[0].metadata["encoding"] == b"json/plain"
    assert asyncio.run(converter.decode(payloads, [PendingUser])) == [value]
