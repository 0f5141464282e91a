"""Record mode: a proxy to a real Messages API that writes each exchange as a cassette turn."""

from __future__ import annotations

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from durable_agent.replay.cassette import ErrorReply, Turn, save_turn
from durable_agent.replay.server import LoopbackServer

FORWARDED = ("x-api-key", "authorization", "anthropic-version", "anthropic-beta", "content-type")


def accumulate(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The final message of a stream of SSE (event, data) pairs."""
    msg: dict[str, Any] = {}
    partial: dict[int, str] = {}
    for _event, data in events:
        kind = data.get("type")
        if kind == "message_start":
            msg = {**data["message"], "content": []}
        elif kind == "content_block_start":
            msg["content"].append(dict(data["content_block"]))
        elif kind == "content_block_delta":
            block, delta = msg["content"][data["index"]], data["delta"]
            if delta["type"] == "text_delta":
                block["text"] = block.get("text", "") + delta["text"]
            elif delta["type"] == "input_json_delta":
                partial[data["index"]] = partial.get(data["index"], "") + delta["partial_json"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
        elif kind == "content_block_stop" and data["index"] in partial:
            msg["content"][data["index"]]["input"] = json.loads(partial.pop(data["index"]) or "{}")
        elif kind == "message_delta":
            msg.update(data.get("delta", {}))
            msg["usage"] = {**msg.get("usage", {}), **data.get("usage", {})}
    return msg


class RecordingProxy(LoopbackServer):
    """Forwards /v1/messages to `upstream`, passing the stream through and saving each turn."""

    def __init__(self, cassette: Path, upstream: str = "https://api.anthropic.com", port: int = 0):
        self.cassette = cassette
        self.upstream = urlsplit(upstream)
        self._lock = threading.Lock()
        super().__init__(port)

    def _connection(self) -> http.client.HTTPConnection:
        host, port = self.upstream.hostname or "", self.upstream.port
        if self.upstream.scheme == "https":
            return http.client.HTTPSConnection(host, port, timeout=600)
        return http.client.HTTPConnection(host, port, timeout=600)

    def save(self, turn: Turn) -> None:
        with self._lock:
            save_turn(self.cassette, turn)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {k: v for k, v in self.headers.items() if k.lower() in FORWARDED}
                conn = proxy._connection()
                base = proxy.upstream.path.rstrip("/")
                conn.request("POST", base + self.path, body=body, headers=headers)
                resp = conn.getresponse()
                self.send_response(resp.status)
                for key, value in resp.getheaders():
                    if key.lower() not in ("transfer-encoding", "content-length", "connection"):
                        self.send_header(key, value)
                self.send_header("connection", "close")
                self.end_headers()
                events: list[tuple[str, dict[str, Any]]] = []
                raw = bytearray()
                event = ""
                while line := resp.readline():
                    self.wfile.write(line)
                    self.wfile.flush()
                    raw += line
                    text = line.decode(errors="replace").rstrip("\r\n")
                    if text.startswith("event:"):
                        event = text[6:].strip()
                    elif text.startswith("data:") and resp.status == 200:
                        events.append((event, json.loads(text[5:])))
                self.close_connection = True
                conn.close()
                proxy.save(_turn(resp.status, dict(resp.getheaders()), bytes(raw), events))

        return Handler


def _turn(
    status: int, headers: dict[str, str], raw: bytes, events: list[tuple[str, dict[str, Any]]]
) -> Turn:
    if status == 200 and events:
        return Turn(response=accumulate(events))
    if status == 200:
        return Turn(response=json.loads(raw))
    try:
        err = json.loads(raw).get("error", {})
    except ValueError:
        err = {}
    kept = {
        k: v
        for k, v in headers.items()
        if k.lower().startswith("retry-after") or k.lower() == "x-should-retry"
    }
    return Turn(
        error=ErrorReply(
            status=status,
            type=err.get("type", "api_error"),
            message=err.get("message", raw.decode(errors="replace")[:500]),
            headers=kept,
        )
    )
