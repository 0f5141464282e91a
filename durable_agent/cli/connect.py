"""Reaching Temporal (TEMPORAL_ADDRESS, else this state dir's dev server, followed wherever it
moves) and the API key check."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

from opentelemetry import trace
from temporalio.client import Client
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter

from durable_agent import telemetry, temporal_config, warm
from durable_agent.cli import sdk_log
from durable_agent.cli.console import Console
from durable_agent.cli.errors import CliError
from durable_agent.cli.following import following
from durable_agent.devserver import (
    DevServerError,
    ensure_dev_server,
    pid_alive,
    recorded,
    running,
)
from durable_agent.paths import state_home
from durable_agent.payloads import data_converter

RECORDED_SERVER_SECONDS = 15.0
"""How long a command that starts no server waits for the recorded one whose process lives."""


async def connect(console: Console, start_server: bool = True) -> Client:
    """The Temporal cluster named by TEMPORAL_ADDRESS / TEMPORAL_PROFILE / TEMPORAL_CONFIG_FILE
    (durable_agent.temporal_config); else the dev server of this state dir (started if
    needed)."""
    address: str | None = None
    hint = "check TEMPORAL_ADDRESS (or your Temporal profile), or unset it to use the embedded dev server"
    if temporal_config.external():
        try:
            address = temporal_config.target()
        except temporal_config.TemporalConfigError as exc:
            raise CliError(str(exc), exc.hint) from None
    patience = connect_seconds()  # a server that is restarting comes back within seconds
    home: Path | None = None  # the embedded server's state dir, whose server the client follows
    if not address:
        home = state_home()
        try:
            if start_server:
                info, started = ensure_dev_server(home)
                if started:
                    console.info(
                        f"started Temporal dev server at {info.address} (Web UI {info.ui_url})"
                    )
                    warm.spawn(home)  # the next run from this shell needs no worker of its own
            else:
                found = running(home)
                recorded_info = recorded(home)
                if found is None and recorded_info is not None and pid_alive(recorded_info.pid):
                    # its process lives but did not answer at once (a busy machine, or a
                    # server just started): a few seconds more before saying it is not there
                    until = asyncio.get_running_loop().time() + RECORDED_SERVER_SECONDS
                    while found is None and asyncio.get_running_loop().time() < until:
                        await asyncio.sleep(0.5)
                        found = running(home)
                if found is None:
                    raise CliError(
                        "no Temporal dev server is running for this state dir",
                        "run `durable-agent server` or set TEMPORAL_ADDRESS",
                    )
                info = found
        except DevServerError as exc:
            hint = exc.hint or "set TEMPORAL_ADDRESS to use another Temporal server"
            raise CliError(str(exc), hint) from None
        address, hint = info.address, f"see the dev server log {info.log_path}"
        patience = max(patience, 15.0)  # a dev server that just started may need a few seconds
    telemetry.setup_from_env()
    sdk_log.one_line()  # the errors of this process's worker, if it runs one, in one line each
    runtime = quiet_runtime()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    said = False
    while True:
        try:
            client = await temporal_client(address, runtime)
        except RuntimeError as exc:  # the SDK raises RuntimeError when it cannot connect
            if loop.time() >= deadline:
                raise CliError(f"cannot reach Temporal at {address}: {exc}", hint) from None
            if not said and patience > 3:
                console.info(f"cannot reach Temporal at {address} yet; retrying for {patience:g}s…")
                said = True
            await asyncio.sleep(0.5)
            continue
        if said:
            console.info(f"connected to Temporal at {address}")
        return client if home is None else following(client, home, console)


async def temporal_client(address: str, runtime: Runtime) -> Client:
    """The client durable_agent.wiring.connect makes (the pydantic converter, payloads over
    256 KiB offloaded to the state dir, the OpenTelemetry plugin when a tracer provider is
    installed), without importing the worker's modules (activities, anthropic): a command that
    runs no worker starts in a fraction of the time. tests/test_cli_imports.py checks the two
    agree."""
    return await Client.connect(
        **temporal_config.connect_kwargs(address),
        data_converter=data_converter(state_home()),
        runtime=runtime,
        plugins=_plugins(),
    )


def _plugins() -> list[Any]:
    """telemetry.plugins(); it imports the SDK's OpenTelemetry module, and that imports
    temporalio.worker, which a command without a worker does not need: with no tracer provider
    installed there is no plugin to add."""
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return []
    return telemetry.plugins()


def quiet_runtime() -> Runtime:
    """The SDK core logs only errors (retries and cancellations are routine); as
    durable_agent.wiring.quiet_runtime."""
    logging.getLogger("temporalio").setLevel(logging.ERROR)
    quiet = TelemetryFilter(core_level="ERROR", other_level="ERROR")
    return Runtime(telemetry=TelemetryConfig(logging=LoggingConfig(filter=quiet)))


def connect_seconds() -> float:
    """How long the CLI tries to reach Temporal at start (DURABLE_AGENT_CONNECT_SECONDS)."""
    return float(os.environ.get("DURABLE_AGENT_CONNECT_SECONDS", "30"))


def require_api_key() -> None:
    from activities.credentials import Credentials

    if Credentials().helper() is not None:
        return
    if not (os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")):
        raise CliError(
            "ANTHROPIC_API_KEY is not set",
            "export ANTHROPIC_API_KEY=… (and ANTHROPIC_BASE_URL for a compatible server), "
            "or try `durable-agent demo`, which needs no key",
        )
