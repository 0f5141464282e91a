"""`python worker.py`: connect to Temporal (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE), register the
workflows and activities on DURABLE_AGENT_TASK_QUEUE (default `durable-agent`), and run."""

import asyncio
import sys

from durable_agent.wiring import main

if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except RuntimeError as exc:
        sys.exit(f"durable-agent worker: {exc}\nhint: is Temporal running? Set TEMPORAL_ADDRESS.")
