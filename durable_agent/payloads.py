"""The data converter: pydantic models, encrypted when a key is set, and a filesystem store for
any payload over 256 KiB.

The workflows never send large payloads by design (ids, not transcripts); this is the safety
net DESIGN.md §3 asks for, so that an oversized payload is offloaded instead of leaving a
workflow stuck. Payloads are content-addressed files under `$DURABLE_AGENT_HOME/payloads`,
which the client and every worker must share (a fleet would use the S3 driver instead).

With `DURABLE_AGENT_CODEC_KEY` (or `DURABLE_AGENT_CODEC_KEY_FILE`) every payload — a settings
file's `env` values, prompts, tool output, query answers — is AES-GCM encrypted before it leaves
the process (before offloading too), so the server's history holds none of it in plaintext.
The CLI and every worker need the same keys; `python -m durable_agent.codec_server` decodes for
the Web UI and `temporal` CLI of an operator who holds them (durable_agent/codec.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticPayloadConverter, pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    EncodingPayloadConverter,
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from durable_agent.codec import EncryptionCodec, codec_from_env

__all__ = ["EncryptionCodec", "FilesystemDriver", "codec_from_env", "data_converter"]


class SharedPayloadConverter(PydanticPayloadConverter):
    """Temporal's pydantic payload converter, whose parts (stateless but for a cache of type
    adapters) are built once per process instead of at every construction. A worker's SDK
    builds a data converter afresh several times for each workflow activation (one for each
    serialization context: the workflow's, each activity command's, and with the store's
    context), and each built a PydanticPayloadConverter it then discarded: 4-5 % of a busy
    worker's CPU (py-spy, bench/sessions_per_worker.py). Inside the workflow sandbox each
    workflow still gets parts of its own: its type hints are its sandbox's classes, which a
    shared cache would keep alive."""

    _shared: ClassVar[Mapping[bytes, EncodingPayloadConverter] | None] = None

    def __init__(self) -> None:
        shared = SharedPayloadConverter._shared
        if workflow.unsafe.in_sandbox():
            super().__init__()
        elif shared is None:
            super().__init__()
            SharedPayloadConverter._shared = self.converters
        else:
            self._set_converters(*shared.values())


class FilesystemDriver(StorageDriver):
    def __init__(self, root: Path) -> None:
        self.root = root

    def name(self) -> str:
        return "durable-agent-fs"

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        return await asyncio.to_thread(lambda: [self._store(p) for p in payloads])

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        return await asyncio.to_thread(lambda: [self._retrieve(c) for c in claims])

    def _store(self, payload: Payload) -> StorageDriverClaim:
        data = payload.SerializeToString()
        digest = hashlib.sha256(data).hexdigest()
        target = self.root / digest[:2] / f"{digest}.bin"
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(data)
            tmp.replace(target)
        return StorageDriverClaim(claim_data={"sha256": digest})

    def _retrieve(self, claim: StorageDriverClaim) -> Payload:
        digest = claim.claim_data["sha256"]
        data = (self.root / digest[:2] / f"{digest}.bin").read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            raise ValueError(f"stored payload {digest} is corrupt")
        payload = Payload()
        payload.ParseFromString(data)
        return payload


class StoreDriver(StorageDriver):
    """Oversized payloads as blobs of the shared store (DURABLE_AGENT_STORE), which every
    worker and CLI of a fleet reach."""

    def __init__(self, home: Path, env: Mapping[str, str] | None) -> None:
        self.home, self.env = home, env

    def name(self) -> str:
        return "durable-agent-store"

    def _blobs(self) -> Any:
        from durable_agent.store import open_store

        return open_store(self.home, self.env).blobs()

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        def put() -> list[StorageDriverClaim]:
            blobs, claims = self._blobs(), []
            for payload in payloads:
                data = payload.SerializeToString()
                digest = hashlib.sha256(data).hexdigest()
                if blobs.missing([digest]):
                    blobs.put(digest, data)
                claims.append(StorageDriverClaim(claim_data={"sha256": digest}))
            return claims

        return await asyncio.to_thread(put)

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        def get() -> list[Payload]:
            blobs, out = self._blobs(), []
            for claim in claims:
                payload = Payload()
                payload.ParseFromString(blobs.get(claim.claim_data["sha256"]))
                out.append(payload)
            return out

        return await asyncio.to_thread(get)


def data_converter(home: Path, env: Mapping[str, str] | None = None) -> DataConverter:
    """The converter of every client and worker; encrypting when `env` (default: this
    process's) sets a codec key (see `codec_from_env`). Oversized payloads go to the shared
    store when DURABLE_AGENT_STORE names one, else to files under `home`."""
    from durable_agent.store import store_url

    driver: StorageDriver = (
        StoreDriver(home, env) if store_url(env) else FilesystemDriver(home / "payloads")
    )
    storage = ExternalStorage(drivers=[driver])
    converter = dataclasses.replace(
        pydantic_data_converter,
        payload_converter_class=SharedPayloadConverter,
        external_storage=storage,
    )
    codec = codec_from_env(os.environ if env is None else env)
    if codec is None:
        return converter
    # Failure messages stay plain text: the CLI's stall lines read them from the server, and
    # they carry errors (API, store), not what a prompt or settings hold.
    return dataclasses.replace(converter, payload_codec=codec)
