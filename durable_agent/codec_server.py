"""`python -m durable_agent.codec_server`: the codec endpoint, so an operator who holds the keys
reads encrypted histories in the Temporal Web UI or CLI.

It serves POST `/decode` and `/encode` (a `{"payloads": [...]}` body, Temporal's protobuf JSON)
with the keys of DURABLE_AGENT_CODEC_KEY / DURABLE_AGENT_CODEC_KEY_FILE. Point the Web UI's
codec endpoint at http://127.0.0.1:8081, or pass `--codec-endpoint http://127.0.0.1:8081` to
`temporal workflow show`. Whoever reaches it reads every history: it listens on loopback only,
and only the browser origin `--origin` (default: the dev server's Web UI) may call it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from durable_agent.codec import CodecKeyError, EncryptionCodec, codec_from_env

DEFAULT_PORT = 8081
DEFAULT_ORIGIN = "http://localhost:8233"
MAX_BODY_BYTES = 64 << 20


def serve(
    codec: EncryptionCodec, port: int = DEFAULT_PORT, origin: str = DEFAULT_ORIGIN
) -> ThreadingHTTPServer:
    """A server on 127.0.0.1:`port` (0: any free port); run it with `serve_forever()`."""

    class Handler(BaseHTTPRequestHandler):
        def _cors(self) -> None:
            self.send_header("Access-Control-Allow-Origin", origin)
            self.send_header("Access-Control-Allow-Methods", "POST, OPTIONS")
            self.send_header("Access-Control-Allow-Headers", "Content-Type, X-Namespace")
            self.send_header("Access-Control-Allow-Credentials", "true")

        def do_OPTIONS(self) -> None:  # noqa: N802 — http.server's naming
            self.send_response(200)
            self._cors()
            self.end_headers()

        def do_POST(self) -> None:  # noqa: N802
            step = {"/encode": codec.encode, "/decode": codec.decode}.get(self.path.rstrip("/"))
            length = int(self.headers.get("Content-Length") or 0)
            if step is None or length > MAX_BODY_BYTES:
                self.send_error(404 if step is None else 413)
                return
            try:
                payloads = json_format.Parse(self.rfile.read(length), Payloads())
                done = Payloads(payloads=asyncio.run(step(payloads.payloads)))
            except (json_format.ParseError, CodecKeyError, ValueError) as exc:
                self.send_error(400, str(exc).splitlines()[0][:200])
                return
            body = json_format.MessageToJson(done).encode()
            self.send_response(200)
            self._cors()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a request log would be noise; errors go back to the caller

    return ThreadingHTTPServer(("127.0.0.1", port), Handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m durable_agent.codec_server")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--origin", default=DEFAULT_ORIGIN, help="the Web UI's address")
    args = parser.parse_args(argv)
    try:
        codec = codec_from_env(os.environ)
        if codec is None:
            raise CodecKeyError("no codec key: set DURABLE_AGENT_CODEC_KEY or _FILE")
    except CodecKeyError as exc:
        print(f"codec server: {exc}\nhint: {exc.hint}", file=sys.stderr)
        return 2
    server = serve(codec, args.port, args.origin)
    print(f"codec endpoint: http://127.0.0.1:{server.server_port} (for {args.origin})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
