"""`python -m durable_agent`: the CLI. A Ctrl-C while its modules are still being imported
ends it at once, quietly, with 130 (nothing has begun); once `main` has imported what the
command needs, it handles Ctrl-C (`cli._started`).
(`_signal`, not `signal`: importing `signal` builds its enums, time a Ctrl-C could land in;
`posix`, not `os`, for the same reason: `os` may not be imported yet, `posix` is built in.)"""

import _signal

from durable_agent import _while_starting

_signal.signal(_signal.SIGINT, _while_starting)  # durable_agent/__init__ set it already
from durable_agent.cli import main  # noqa: E402 — under the handler above

main()  # which restores Ctrl-C's KeyboardInterrupt once its imports are done
