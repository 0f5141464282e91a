"""durable-agent: Claude Code's agent loop as a durable Temporal workflow."""

import sys as _sys

__version__ = "0.1.0"

if _sys.dont_write_bytecode and _sys.pycache_prefix is None:
    from durable_agent.bytecode import cache_bytecode_in_state_dir

    cache_bytecode_in_state_dir()
