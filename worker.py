"""`python worker.py`: connect to Temporal (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE), register the
workflows and activities on DURABLE_AGENT_TASK_QUEUE (default `durable-agent`), and run."""

import asyncio
import sys

from durable_agent.cli import hard_exit
from durable_agent.wiring import main

if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        hard_exit(130)
    except RuntimeError as exc:
        print(f"durable-agent worker: {exc}", file=sys.stderr)
        print("hint: is Temporal running? Set TEMPORAL_ADDRESS.", file=sys.stderr)
        hard_exit(1)
