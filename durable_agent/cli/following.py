"""Following the embedded dev server to a new address: started again while its recorded port
was taken, it comes back elsewhere, and a CLI that waits for it (its calls, its worker) moves
there instead of retrying the old address until it gives up."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import google.protobuf.message
from temporalio.client import Client
from temporalio.service import RPCError, ServiceClient, ServiceResponse

from durable_agent.cli.console import Console
from durable_agent.devserver import info_path, running


def following(client: Client, home: Path, console: Console) -> Client:
    """`client`, its calls going wherever the dev server of `home` is recorded to be."""
    config = client.config()
    config["service_client"] = FollowingServiceClient(client.service_client, home, console)
    return Client(**config)


def follow_with(client: Client, worker: Any) -> None:
    """Move `worker` (a temporalio Worker on `client`) along when the server moves."""
    service = client.service_client
    if isinstance(service, FollowingServiceClient):
        service.on_move.append(lambda: setattr(worker, "client", client))


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


class FollowingServiceClient(ServiceClient):
    """A service client that, before each call, looks whether the dev server's info file
    changed (a stat), and if it records a running server elsewhere, connects there."""

    def __init__(self, inner: ServiceClient, home: Path, console: Console) -> None:
        super().__init__(inner.config)
        self._inner = inner
        self._home = home
        self._console = console
        self._stamp = _stamp(info_path(home))
        self.on_move: list[Callable[[], None]] = []

    async def _follow(self) -> None:
        stamp = _stamp(info_path(self._home))
        if stamp == self._stamp:
            return
        info = running(self._home)
        if info is None:  # not up yet: look again at the next call
            return
        self._stamp = stamp
        if info.address == self.config.target_host:
            return
        config = dataclasses.replace(self.config, target_host=info.address)
        try:
            inner = await ServiceClient.connect(config)
        except RuntimeError:  # the SDK's "cannot connect": try again at the next call
            self._stamp = None
            return
        self._console.info(f"the Temporal dev server moved to {info.address}; following it")
        self._inner, self.config = inner, config
        for move in self.on_move:
            move()

    @property
    def worker_service_client(self) -> Any:
        return self._inner.worker_service_client

    def update_rpc_metadata(self, metadata: Mapping[str, str | bytes]) -> None:
        self._inner.update_rpc_metadata(metadata)

    def update_api_key(self, api_key: str | None) -> None:
        self._inner.update_api_key(api_key)

    async def _rpc_call(
        self,
        rpc: str,
        req: google.protobuf.message.Message,
        resp_type: type[ServiceResponse],
        *,
        service: str,
        retry: bool,
        metadata: Mapping[str, str | bytes],
        timeout: timedelta | None,  # noqa: ASYNC109 — the SDK's signature
    ) -> ServiceResponse:
        await self._follow()
        inner = self._inner

        async def call(target: ServiceClient) -> ServiceResponse:
            return await target._rpc_call(
                rpc, req, resp_type,
                service=service, retry=retry, metadata=metadata, timeout=timeout,
            )  # fmt: skip

        try:
            return await call(inner)
        except RPCError:
            await self._follow()
            if self._inner is inner:
                raise
        # It went to the old address (its server gone, someone else there): once more at the
        # new one, as the SDK retries a call that found no server.
        return await call(self._inner)
