"""The payload codec: AES-256-GCM over every payload, keys named by an id for rotation.

Keys come from `DURABLE_AGENT_CODEC_KEY` or the file `DURABLE_AGENT_CODEC_KEY_FILE`: entries
`ID:BASE64` or a bare `BASE64` (its id is then a hash of the key), separated by commas or lines.
The first entry encrypts; every entry decrypts, so a rotation puts the new key first and keeps
the old ones until no history needs them. Both variables stay with the worker (no tool or hook
sees a `DURABLE_AGENT_*` variable).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from durable_agent.cli.errors import CliError

KEY_ENV = "DURABLE_AGENT_CODEC_KEY"
KEY_FILE_ENV = "DURABLE_AGENT_CODEC_KEY_FILE"
ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"
NONCE_BYTES = 12
GENERATE_HINT = (
    "a key is 32 random bytes in base64: "
    "python -c 'import os, base64; print(base64.b64encode(os.urandom(32)).decode())'"
)


class CodecKeyError(CliError):
    """A codec key that cannot be used, or a payload no key here opens (one line and a hint
    in the CLI and the worker, never a traceback)."""

    def __init__(self, message: str, hint: str | None = GENERATE_HINT) -> None:
        super().__init__(message, hint)


def _parse(text: str, source: str) -> dict[str, bytes]:
    keys: dict[str, bytes] = {}
    for raw in text.replace(",", "\n").splitlines():
        entry = raw.strip()
        if not entry or entry.startswith("#"):
            continue
        key_id, sep, encoded = entry.rpartition(":")
        try:
            key = base64.b64decode(encoded, validate=True)
        except binascii.Error:
            raise CodecKeyError(f"{source}: a key is not base64") from None
        if len(key) != 32:
            raise CodecKeyError(f"{source}: a key has {len(key)} bytes, not 32")
        keys.setdefault(key_id.strip() if sep else hashlib.sha256(key).hexdigest()[:12], key)
    return keys


def codec_from_env(env: Mapping[str, str]) -> EncryptionCodec | None:
    """The codec the variables configure; None when they name no key."""
    text, source = env.get(KEY_ENV, ""), KEY_ENV
    if not text.strip() and env.get(KEY_FILE_ENV):
        path = Path(env[KEY_FILE_ENV]).expanduser()
        try:
            text, source = path.read_text(), str(path)
        except OSError as exc:
            raise CodecKeyError(
                f"{KEY_FILE_ENV}: cannot read {path}: {exc.strerror}", "set it to a readable file"
            ) from None
    keys = _parse(text, source)
    return EncryptionCodec(keys) if keys else None


class EncryptionCodec(PayloadCodec):
    """Encrypts with the first key, decrypts with the one a payload names; a payload that is
    not encrypted passes through (histories written before the key was set)."""

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        try:
            from cryptography.exceptions import InvalidTag
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError:  # only a dev dependency's dependency today: say what to install
            raise CodecKeyError(
                f"{KEY_ENV} is set but the cryptography package is not installed",
                "uv add cryptography (or unset the key)",
            ) from None
        if not keys:
            raise CodecKeyError("no codec key")
        self._invalid = InvalidTag
        self._ciphers = {key_id: AESGCM(key) for key_id, key in keys.items()}
        self.key_id = next(iter(keys))

    def encrypt(self, payload: Payload) -> Payload:
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[self.key_id].encrypt(
            nonce, payload.SerializeToString(), self.key_id.encode()
        )
        metadata = {"encoding": ENCODING, KEY_ID: self.key_id.encode()}
        return Payload(metadata=metadata, data=nonce + sealed)

    def decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        key_id = payload.metadata.get(KEY_ID, b"").decode()
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise CodecKeyError(
                f"a payload is encrypted with key {key_id!r}, which {KEY_ENV} does not hold",
                "when rotating, keep the old keys after the new one",
            )
        data = payload.data
        try:
            opened = cipher.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], key_id.encode())
        except self._invalid:
            raise CodecKeyError(
                f"a payload sealed with key {key_id!r} does not open: it was changed, or "
                "this key is not the one that sealed it",
                f"check that every worker and CLI has the same {KEY_ENV}",
            ) from None
        inner = Payload()
        inner.ParseFromString(opened)
        return inner

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(p) for p in payloads]
