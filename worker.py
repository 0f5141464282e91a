"""`python worker.py`: a durable-agent worker. It connects to Temporal, registers the workflows
and activities on the shared task queue DURABLE_AGENT_TASK_QUEUE (default `durable-agent`), and
runs until SIGTERM, then drains.

Temporal: the cluster TEMPORAL_ADDRESS, or a `temporalio.envconfig` profile, names
(TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS,
TEMPORAL_TLS_CLIENT_CERT_PATH / _KEY_PATH, TEMPORAL_TLS_SERVER_CA_CERT_PATH — as the `temporal`
CLI reads them); else the dev server the CLI runs for $DURABLE_AGENT_HOME; else localhost:7233.
Sessions that a CLI runs in its own worker are on a queue of their own and are not served here
(`durable-agent resume SESSION` picks such a session up again). infra/README.md is the
operations page.
"""

import asyncio
import signal
import sys
from types import FrameType

from durable_agent.cli import hard_exit
from durable_agent.codec import CodecKeyError
from durable_agent.operating import SettingsError, print_help, replace_process
from durable_agent.temporal_config import TemporalConfigError


def stop_now(_signum: int, _frame: FrameType | None) -> None:
    """SIGTERM while the worker does not poll (starting, waiting for Temporal, or between a
    recycle's drain and the fresh process): nothing runs, so it ends at once, as drained."""
    print("SIGTERM: nothing is running; exiting", flush=True)
    hard_exit(0)


def fail(message: str, hint: str) -> None:
    print(f"durable-agent worker: {message}", file=sys.stderr)
    print(f"hint: {hint}", file=sys.stderr)
    hard_exit(1)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, stop_now)  # while polling, run_until_signalled's drain
    if any(arg in ("-h", "--help") for arg in sys.argv[1:]):
        print_help()
        sys.exit(0)
    if sys.argv[1:]:
        fail(f"unexpected arguments {' '.join(sys.argv[1:])}", "it takes none; see --help")
    from durable_agent.wiring import main

    try:
        recycled = asyncio.run(main())
    except KeyboardInterrupt:
        hard_exit(130)
    except (CodecKeyError, SettingsError, TemporalConfigError) as exc:
        fail(str(exc), exc.hint or "see `python worker.py --help`")
    except RuntimeError as exc:
        fail(
            str(exc),
            "is Temporal running? `durable-agent server` starts one; or set TEMPORAL_ADDRESS "
            "(or TEMPORAL_PROFILE).",
        )
    if recycled is None:  # drained: no interpreter finalization (DESIGN.md §5, hard_exit)
        hard_exit(0)
    else:
        try:
            replace_process(recycled.settled, recycled.host_queue)
        except OSError as exc:
            fail(
                f"could not start afresh: {exc}",
                "start it again (DURABLE_AGENT_RECYCLE_ABOVE=0 turns recycling off)",
            )
