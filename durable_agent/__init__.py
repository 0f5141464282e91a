"""durable-agent: Claude Code's agent loop as a durable Temporal workflow."""

import _signal
import posix
import sys as _sys

__version__ = "0.1.0"


def _while_starting(signum: int, frame: object) -> None:
    """Ctrl-C while the CLI is still importing: nothing has begun, end at once, quietly."""
    posix._exit(130)


def _is_the_cli() -> bool:
    """`python -m durable_agent` (not one of its modules: `-m durable_agent.replay`) or the
    `durable-agent` console script: this process is the CLI, whose `main` restores Ctrl-C's
    KeyboardInterrupt once its imports are done (cli._started). Imported as a library (the
    worker's modules, tests) the package leaves SIGINT alone."""
    argv = list(getattr(_sys, "orig_argv", None) or [])
    if "-m" in argv[1:]:
        after = argv.index("-m", 1) + 1
        return argv[after : after + 1] == ["durable_agent"]
    argv0 = (getattr(_sys, "argv", None) or [""])[0]
    return argv0.rsplit("/", 1)[-1] == "durable-agent"


if _is_the_cli() and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    _signal.signal(_signal.SIGINT, _while_starting)

from durable_agent.bytecode import cache_bytecode_in_state_dir  # noqa: E402

cache_bytecode_in_state_dir()
