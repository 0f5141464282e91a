"""`python worker.py`: connect to Temporal (TEMPORAL_ADDRESS, else the dev server the CLI runs
for $DURABLE_AGENT_HOME, else localhost:7233; TEMPORAL_NAMESPACE), register the workflows and
activities on the shared task queue DURABLE_AGENT_TASK_QUEUE (default `durable-agent`), and run.

Sessions that a CLI runs in its own worker are on a queue of their own and are not served here
(`durable-agent resume SESSION` picks such a session up again)."""

import asyncio
import sys

from durable_agent.cli import hard_exit
from durable_agent.codec import CodecKeyError
from durable_agent.wiring import main

if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        hard_exit(130)
    except CodecKeyError as exc:
        print(f"durable-agent worker: {exc}", file=sys.stderr)
        print(f"hint: {exc.hint}", file=sys.stderr)
        hard_exit(1)
    except RuntimeError as exc:
        print(f"durable-agent worker: {exc}", file=sys.stderr)
        print(
            "hint: is Temporal running? `durable-agent server` starts one; "
            "or set TEMPORAL_ADDRESS.",
            file=sys.stderr,
        )
        hard_exit(1)
