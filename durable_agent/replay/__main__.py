"""`python -m durable_agent.replay serve CASSETTE` / `record FILE`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from durable_agent.replay.cassette import load_cassette
from durable_agent.replay.record import RecordingProxy
from durable_agent.replay.server import LoopbackServer, ReplayServer


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m durable_agent.replay",
        description="A fake Messages API on 127.0.0.1: replay or record cassettes.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve a cassette (JSONL turns)")
    serve.add_argument("cassette", type=Path)
    serve.add_argument("--port", type=int, default=0)
    serve.add_argument(
        "--lenient", action="store_true", help="do not check tool_use/tool_result pairing"
    )
    record = sub.add_parser("record", help="proxy to a real API and write each exchange to FILE")
    record.add_argument("file", type=Path)
    record.add_argument("--upstream", default="https://api.anthropic.com")
    record.add_argument("--port", type=int, default=0)
    args = p.parse_args(argv)
    server: LoopbackServer
    if args.command == "serve":
        try:
            server = ReplayServer(
                load_cassette(args.cassette), strict=not args.lenient, port=args.port
            )
        except (OSError, ValueError) as exc:
            print(f"replay: error: {exc}", file=sys.stderr)
            return 2
    else:
        server = RecordingProxy(args.file, args.upstream, args.port)
    print(f"ANTHROPIC_BASE_URL={server.base_url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
