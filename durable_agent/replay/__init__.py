"""A fake Messages API: real HTTP + SSE from cassettes, for `demo` and tests."""

from durable_agent.replay.cassette import (
    ErrorReply,
    Expect,
    Fault,
    Turn,
    load_cassette,
    text_turn,
    tool_turn,
)
from durable_agent.replay.server import ReplayServer, tool_pairing_problems

__all__ = [
    "ErrorReply",
    "Expect",
    "Fault",
    "ReplayServer",
    "Turn",
    "load_cassette",
    "text_turn",
    "tool_pairing_problems",
    "tool_turn",
]
