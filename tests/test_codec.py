"""The payload codec (issue 22 item 2): with a key, what workflows carry — a settings file's
`env` values among it — is encrypted in Temporal's history, a rotated key still opens old
payloads, and the codec endpoint decodes for an operator who holds the key."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import subprocess
import threading
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.client import Client

from durable_agent.codec import KEY_ENV, KEY_FILE_ENV, CodecKeyError, codec_from_env
from durable_agent.codec_server import serve
from durable_agent.devserver import temporal_binary
from durable_agent.engine.state import Terminal
from durable_agent.payloads import data_converter
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from tests.helpers import run_session
from tests.test_secrets import leaks


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def plain(text: str) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(text).encode())


async def test_a_payload_is_sealed_and_opens_again():
    codec = codec_from_env({KEY_ENV: new_key()})
    assert codec is not None
    secret = plain(f"secret-{uuid.uuid4().hex}")
    (sealed,) = await codec.encode([secret])
    assert sealed.metadata["encoding"] == b"binary/encrypted"
    assert not leaks(sealed.SerializeToString(), secret.data.decode())
    assert await codec.decode([sealed]) == [secret]
    assert await codec.decode([secret]) == [secret]  # written before the key: passes through
    tampered = Payload()
    tampered.CopyFrom(sealed)
    tampered.data = sealed.data[:-1] + bytes([sealed.data[-1] ^ 1])
    with pytest.raises(CodecKeyError, match="does not open: it was changed"):
        await codec.decode([tampered])


async def test_a_rotated_key_still_opens_what_the_old_one_sealed(tmp_path):
    old, new = new_key(), new_key()
    (sealed_old,) = await codec_from_env({KEY_ENV: f"k1:{old}"}).encode([plain("x")])  # type: ignore[union-attr]
    keys = tmp_path / "keys"
    keys.write_text(f"# newest first\nk2:{new}\nk1:{old}\n")
    rotated = codec_from_env({KEY_FILE_ENV: str(keys)})
    assert rotated is not None and rotated.key_id == "k2"
    (sealed_new,) = await rotated.encode([plain("y")])
    assert sealed_new.metadata["encryption-key-id"] == b"k2"
    assert await rotated.decode([sealed_old, sealed_new]) == [plain("x"), plain("y")]
    with pytest.raises(CodecKeyError, match="'k2', which DURABLE_AGENT_CODEC_KEY does not hold"):
        await codec_from_env({KEY_ENV: f"k1:{old}"}).decode([sealed_new])  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({KEY_ENV: "not base64!"}, "not base64"),
        ({KEY_ENV: base64.b64encode(b"short").decode()}, "has 5 bytes, not 32"),
        ({KEY_FILE_ENV: "/nonexistent/keys"}, "cannot read /nonexistent/keys"),
    ],
)
def test_a_bad_key_is_one_line_and_a_hint(env, message):
    with pytest.raises(CodecKeyError, match=message) as caught:
        codec_from_env(env)
    assert caught.value.hint and "\n" not in str(caught.value)


def test_no_key_no_codec():
    assert codec_from_env({}) is None
    assert data_converter(Path("/nonexistent"), {}).payload_codec is None


def _post(url: str, body: bytes) -> bytes:
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Access-Control-Allow-Origin"] == "http://localhost:8233"
        return response.read()


def _preflight(url: str) -> dict[str, str]:
    request = urllib.request.Request(url, method="OPTIONS")
    with urllib.request.urlopen(request, timeout=10) as response:
        return dict(response.headers)


async def test_the_codec_endpoint_decodes_for_the_web_ui():
    codec = codec_from_env({KEY_ENV: new_key()})
    assert codec is not None
    server = serve(codec, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        sealed = Payloads(payloads=await codec.encode([plain("hello")]))
        body = _post(f"{base}/decode", json_format.MessageToJson(sealed).encode())
        assert json_format.Parse(body, Payloads()).payloads[0] == plain("hello")
        encoded = _post(f"{base}/encode", body)
        assert json_format.Parse(encoded, Payloads()).payloads[0].metadata["encoding"] == (
            b"binary/encrypted"
        )
        with pytest.raises(urllib.error.HTTPError, match="404"):
            _post(f"{base}/other", body)
        # The browser's preflight: the Web UI sends JSON with an X-Namespace header.
        allowed = _preflight(f"{base}/decode")
        assert "X-Namespace" in allowed["Access-Control-Allow-Headers"]
        assert allowed["Access-Control-Allow-Origin"] == "http://localhost:8233"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("keyed", [True, False], ids=["codec", "control-no-key"])
async def test_settings_env_reaches_the_tool_but_not_the_history(
    dev_env, store, workspace, task_queue, tmp_path, keyed
):
    """A settings `env` value: Bash sees it; the raw history (session and prompt) holds it in
    no form with a key. The control, without one, finds it there: the scan can see."""
    value = f"settings-env-secret-{uuid.uuid4().hex}"
    command = 'printf %s "$TEAM_TOKEN" | sha256sum'
    turns = [tool_turn([("b1", "Bash", {"command": command})]), text_turn("done")]
    env = {KEY_ENV: new_key()} if keyed else {}
    client = Client(dev_env.client.service_client, data_converter=data_converter(tmp_path, env))
    with ReplayServer(turns) as api:
        session_id, status = await run_session(
            client, api, store, workspace, "go", task_queue, settings={"env": {"TEAM_TOKEN": value}}
        )
    assert status.last_result is not None and status.last_result.terminal == Terminal.COMPLETED
    (result,) = api.requests[1]["messages"][-1]["content"]
    assert hashlib.sha256(value.encode()).hexdigest() in result["content"]
    raw = b""
    for workflow_id in (session_id, f"{session_id}-q1"):
        history = await dev_env.client.get_workflow_handle(workflow_id).fetch_history()
        raw += history.to_json().encode()
    assert leaks(raw, value) is not keyed


async def test_the_temporal_cli_shows_an_encrypted_history_through_the_endpoint(dev_env, tmp_path):
    """An operator with the key reads the history with `temporal workflow show
    --codec-endpoint`; without the endpoint the input stays sealed."""
    env = {KEY_ENV: new_key()}
    codec = codec_from_env(env)
    assert codec is not None
    client = Client(dev_env.client.service_client, data_converter=data_converter(tmp_path, env))
    secret = f"operator-only-{uuid.uuid4().hex}"
    workflow_id = f"codec-{uuid.uuid4()}"
    handle = await client.start_workflow(
        "NoSuchWorkflow", secret, id=workflow_id, task_queue=f"none-{uuid.uuid4()}"
    )
    server = serve(codec, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    show = [
        str(temporal_binary()), "workflow", "show", "-w", workflow_id, "-o", "json",
        "--address", dev_env.client.service_client.config.target_host,
    ]  # fmt: skip
    try:
        endpoint = f"http://127.0.0.1:{server.server_port}"
        decoded = await asyncio.to_thread(
            subprocess.run, [*show, "--codec-endpoint", endpoint], capture_output=True,
            timeout=30,
        )  # fmt: skip
        sealed = await asyncio.to_thread(subprocess.run, show, capture_output=True, timeout=30)
    finally:
        server.shutdown()
        server.server_close()
        await handle.terminate()
    assert decoded.returncode == 0 and sealed.returncode == 0, decoded.stderr + sealed.stderr
    assert leaks(decoded.stdout, secret) and not leaks(sealed.stdout, secret)


async def test_an_offloaded_payload_is_stored_sealed(tmp_path):
    """A payload over the size limit goes to the state dir's payload store after encryption:
    the stored file holds no plaintext, and it decodes back whole."""
    converter = data_converter(tmp_path, {KEY_ENV: new_key()})
    big = f"offloaded-{uuid.uuid4().hex}-" + "x" * (300 << 10)
    payloads = await converter.encode([big])
    stored = [p.read_bytes() for p in (tmp_path / "payloads").rglob("*.bin")]
    assert len(stored) == 1 and not leaks(stored[0], big[:42])
    assert await converter.decode(payloads, [str]) == [big]
