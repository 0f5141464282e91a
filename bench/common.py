"""What the benchmarks share: the embedded dev server, with its throttle lifted."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from durable_agent.devserver import server_args, temporal_binary


@contextlib.asynccontextmanager
async def dev_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=str(temporal_binary()),
        dev_server_extra_args=server_args(),
    )
    try:
        yield env
    finally:
        await env.shutdown()
        await asyncio.sleep(0.5)  # the SDK's native layer can crash on an immediate exit
