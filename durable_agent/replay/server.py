"""A Messages-API-compatible HTTP server on 127.0.0.1 that streams real SSE from a cassette."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from durable_agent.replay.cassette import PROXY_PAGE, ErrorReply, Fault, Turn, turn_events

Script = Callable[[dict[str, Any], int], Turn]


def tool_pairing_problems(messages: list[dict[str, Any]]) -> list[str]:
    """What the real API would reject: a tool_use not answered, in order, in the next user turn."""
    problems = []
    for i, msg in enumerate(messages):
        if msg.get("role") != "assistant" or not isinstance(msg.get("content"), list):
            continue
        ids = [b["id"] for b in msg["content"] if b.get("type") == "tool_use"]
        if not ids:
            continue
        if i + 1 >= len(messages):
            problems.append(f"messages[{i}]: tool_use ids {ids} have no following user message")
            continue
        nxt = messages[i + 1].get("content")
        got = (
            [b.get("tool_use_id") for b in nxt if b.get("type") == "tool_result"]
            if isinstance(nxt, list)
            else []
        )
        if got != ids:
            problems.append(
                f"messages[{i + 1}]: tool_result ids {got} do not answer tool_use ids {ids} in order"
            )
    return problems


class LoopbackServer:
    """An HTTP server on 127.0.0.1 in a daemon thread; subclasses provide `_handler`."""

    def __init__(self, port: int = 0) -> None:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._httpd.daemon_threads = True

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Self:
        threading.Thread(target=self.serve_forever, name="loopback-http", daemon=True).start()
        return self

    def serve_forever(self) -> None:
        self._httpd.serve_forever(poll_interval=0.05)

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ReplayServer(LoopbackServer):
    """Serves `turns` in order (or asks `script` for each), recording every request."""

    def __init__(self, turns: list[Turn] | Script, strict: bool = True, port: int = 0) -> None:
        self._turns = turns
        self.strict = strict
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.request_times: list[float] = []
        """time.monotonic() at which each request arrived."""
        self.violations: list[str] = []
        self.open_connections = 0
        """Connections accepted and not yet finished."""
        self.hangups: list[float] = []
        """time.monotonic() at which a client closed a stream the server was still sending (or
        pausing in)."""
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        """Accepted connections still open (kept for the next request): `stop` ends them."""
        super().__init__(port)

    def stop(self) -> None:
        super().stop()
        with self._lock:
            kept = list(self._connections)
        for conn in kept:  # their handler threads see the end and finish
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def remaining(self) -> int:
        return len(self._turns) - len(self.requests) if isinstance(self._turns, list) else 0

    def next_turn(self, body: dict[str, Any]) -> Turn:
        with self._lock:
            index = len(self.requests)
            self.requests.append(body)
            if callable(self._turns):
                return self._turns(body, index)
            if index >= len(self._turns):
                return self._violation(
                    f"request {index + 1}: the cassette has only {len(self._turns)} turns"
                )
            turn = self._turns[index]
            problems = tool_pairing_problems(body.get("messages", [])) if self.strict else []
            problems += _expectation_problems(turn, body)
            if problems:
                return self._violation(f"request {index + 1}: " + "; ".join(problems))
            return turn

    def _violation(self, text: str) -> Turn:
        self.violations.append(text)
        return Turn(
            error=ErrorReply(status=400, type="invalid_request_error", message=f"replay: {text}")
        )

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # each event goes out as it is written

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with server._lock:
                    server.open_connections += 1
                    server._connections.add(self.connection)

            def finish(self) -> None:
                try:
                    super().finish()
                finally:
                    with server._lock:
                        server.open_connections -= 1
                        server._connections.discard(self.connection)

            def do_GET(self) -> None:
                """`/_replay/state`: what the server saw, for a client in another process."""
                if self.path.split("?")[0] != STATE_PATH:
                    return self._error(
                        ErrorReply(
                            status=404, type="not_found_error", message=f"no route {self.path}"
                        )
                    )
                with server._lock:
                    state = {
                        "requests": len(server.requests),
                        "request_times": list(server.request_times),
                        "violations": list(server.violations),
                    }
                self._json(200, state)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    return self._error(
                        ErrorReply(
                            status=400, type="invalid_request_error", message="body is not JSON"
                        )
                    )
                if self.path.split("?")[0].endswith("/v1/messages/count_tokens"):
                    tokens = (len(json.dumps(body.get("messages", []))) + 3) // 4
                    return self._json(200, {"input_tokens": tokens})
                if not self.path.split("?")[0].endswith("/v1/messages"):
                    return self._error(
                        ErrorReply(
                            status=404, type="not_found_error", message=f"no route {self.path}"
                        )
                    )
                with server._lock:
                    server.request_times.append(time.monotonic())
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                turn = server.next_turn(body)
                if turn.error is not None:
                    return self._error(turn.error)
                assert turn.response is not None
                if turn.fault is not None and turn.fault.kind == "reset":
                    return self._reset()
                if turn.fault is not None and turn.fault.kind == "non_json_200":
                    return self._raw(200, turn.fault.content_type, turn.fault.body or PROXY_PAGE)
                if body.get("stream"):
                    self._stream(turn, body.get("model", "replay"))
                else:
                    self._json(200, {**turn.response, "model": body.get("model", "replay")})

            def _json(
                self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def _raw(self, status: int, content_type: str, text: str) -> None:
                data = text.encode()
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _wait(self, seconds: float) -> bool:
                """Sleep `seconds`; False (and a hangup counted) if the client closes first."""
                deadline = time.monotonic() + seconds
                while (left := deadline - time.monotonic()) > 0:
                    readable, _, _ = select.select([self.connection], [], [], min(left, 0.05))
                    if readable and not self._peer_open():
                        return False
                return True

            def _peer_open(self) -> bool:
                try:
                    if self.connection.recv(1, socket.MSG_PEEK) != b"":
                        return True
                except OSError:
                    pass
                with server._lock:
                    server.hangups.append(time.monotonic())
                return False

            def _error(self, err: ErrorReply) -> None:
                body = {"type": "error", "error": {"type": err.type, "message": err.message}}
                self._json(err.status, body, err.headers)

            def _stream(self, turn: Turn, model: str) -> None:
                fault = turn.fault
                breaks = fault is not None and fault.kind in BREAKING
                # As the API does: a whole stream is chunked and its connection kept for the
                # next request; one that a fault cuts ends with the connection.
                chunked = not breaks
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                if chunked:
                    self.send_header("transfer-encoding", "chunked")
                else:
                    self.send_header("connection", "close")
                    self.close_connection = True
                self.end_headers()
                for sent, (event, data) in enumerate(turn_events(turn, model)):
                    if fault is not None and breaks and sent >= fault.after_events:
                        self._break(fault)
                        break
                    if turn.event_delay:
                        time.sleep(turn.event_delay)
                    if sent in turn.pause_before and not self._wait(turn.pause_before[sent]):
                        return
                    frame = f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
                    if chunked:
                        frame = b"%x\r\n%s\r\n" % (len(frame), frame)
                    try:
                        self.wfile.write(frame)
                        self.wfile.flush()
                    except OSError:
                        self.close_connection = True
                        with server._lock:
                            server.hangups.append(time.monotonic())
                        return
                if chunked:
                    try:
                        self.wfile.write(b"0\r\n\r\n")
                        self.wfile.flush()
                    except OSError:
                        self.close_connection = True

            def _break(self, fault: Fault) -> None:
                if fault.kind == "error_event":
                    err = {
                        "type": "error",
                        "error": {"type": fault.error_type, "message": "scripted"},
                    }
                    data = fault.body if fault.body is not None else json.dumps(err)
                    self.wfile.write(f"event: error\ndata: {data}\n\n".encode())
                elif fault.kind == "garbage_event":
                    data = fault.body if fault.body is not None else "<html>not json</html>"
                    self.wfile.write(f"event: content_block_delta\ndata: {data}\n\n".encode())
                elif fault.kind == "stall":
                    self.wfile.flush()
                    self._wait(fault.seconds)
                elif fault.kind == "drop":
                    # Half a frame, then a reset: the client sees the connection die mid-event.
                    self.wfile.write(b'event: content_block_delta\ndata: {"type": "cont')
                    self.wfile.flush()
                    self._reset()

            def _reset(self) -> None:
                """Close with SO_LINGER 0: the client gets a TCP RST (ECONNRESET)."""
                self.close_connection = True
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.connection.close()

        return Handler


STATE_PATH = "/_replay/state"
"""GET: how many requests came, when (time.monotonic(), the same clock in every process of
the machine) and the violations, as JSON."""

BREAKING = frozenset({"drop", "truncate", "error_event", "garbage_event", "stall"})
"""Fault kinds that cut the stream after `after_events` events."""


def _expectation_problems(turn: Turn, body: dict[str, Any]) -> list[str]:
    if turn.expect is None:
        return []
    problems = []
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    last = json.dumps(users[-1]) if users else ""
    for needle in turn.expect.last_user_contains:
        if needle not in last:
            problems.append(f"expected {needle!r} in the last user message")
    if turn.expect.model and body.get("model") != turn.expect.model:
        problems.append(f"expected model {turn.expect.model!r}, got {body.get('model')!r}")
    return problems
