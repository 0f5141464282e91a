"""`durable-agent`: run prompts as durable Temporal workflows, watch and steer them.

The package's layers, each importing only the ones below it (tests/test_cli_imports.py):

- this module: `main` (parse, dispatch to the command's module), `hard_exit`;
- the commands: `commands` (run, resume, demo, server, status, interrupt, approve, list),
  `chat` (chat, tail), `claude` (Claude Code's own command line: `durable-agent -p …`;
  its stream-json stdin in `claude_input`);
- `approving` (answering tool calls that wait for a person);
- what the commands share: `serving` (config, client and in-process worker for a command),
  `watching` (following a prompt; `stalls`: what a prompt without progress waits for),
  `connect`, `sessions` (ids, task queues, memo), `reconnect` (riding out an outage),
  `following` (the embedded server's moves), `args` (parser and QueryConfig), `console`,
  `sdk_log` (the SDK's error logs in one line), `errors`.

A command's module is imported only when it runs, and none imports `workflows/` (the CLI names
workflows, signals, queries and updates by the constants of durable_agent.names); the worker's
modules (activities, anthropic, temporalio.worker) are imported only by a command that runs one.
"""

from __future__ import annotations

import os
import sys
from argparse import Namespace
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from durable_agent.cli.errors import EXIT_DETACHED, EXIT_USAGE, CliError

if TYPE_CHECKING:
    from durable_agent.cli.args import build_config, parser

__all__ = ["CliError", "build_config", "hard_exit", "main", "parser"]


def __getattr__(name: str) -> Any:
    """`parser` and `build_config` are imported when first asked for: importing this package
    (the console script's first step) must be quick, so that a Ctrl-C in the first moments of
    the CLI reaches `main`, which ends quietly, rather than interrupting an import."""
    if name in ("parser", "build_config"):
        from durable_agent.cli import args

        return getattr(args, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _started() -> None:
    """The imports are done: Ctrl-C raises KeyboardInterrupt again, which the commands handle
    (`python -m durable_agent` ends at once on a Ctrl-C until here: an import interrupted
    in a native extension can fail in ways `except KeyboardInterrupt` does not catch)."""
    import signal

    if getattr(signal.getsignal(signal.SIGINT), "__name__", "") == "_while_starting":
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if _claude_invocation(argv):
            _started()
            hard_exit(_run_claude(argv))
        from durable_agent.cli.args import parser

        args = parser().parse_args(argv)
    except KeyboardInterrupt:  # Ctrl-C while the CLI starts (imports): nothing has begun
        os._exit(EXIT_DETACHED)
    _started()
    if getattr(args, "tenant", None) is not None:  # read where the session starts (fairness.py)
        os.environ["DURABLE_AGENT_TENANT"] = args.tenant
    if args.command is None:
        parser().print_help()
        sys.exit(EXIT_USAGE)
    import asyncio

    hard_exit(_guarded(lambda: asyncio.run(command(args.command)(args))))


def _guarded(run: Callable[[], int]) -> int:
    """The command's exit code; never a traceback: a usage error is one line and a hint, a
    closed stdout (`| head`) ends quietly, anything else is one line that says it is a bug
    (DURABLE_AGENT_DEBUG=1 shows the traceback)."""
    from durable_agent.cli.console import fail

    try:
        return run()
    except CliError as exc:
        return fail(str(exc), exc.hint)
    except KeyboardInterrupt:
        return EXIT_DETACHED
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except Exception as exc:
        if os.environ.get("DURABLE_AGENT_DEBUG"):
            raise
        return fail(
            f"unexpected {type(exc).__name__}: {exc}".splitlines()[0][:300],
            "this is a bug in durable-agent; DURABLE_AGENT_DEBUG=1 shows the traceback",
        )


def _silence_stdout() -> None:
    """The reader of stdout went away: further writes (the final flush) go nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _claude_invocation(argv: list[str]) -> bool:
    return bool(argv) and argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")


def _run_claude(argv: list[str]) -> int:
    """Claude Code's command line (`durable-agent -p …`, the Agent SDK's `cli_path`)."""
    import asyncio

    from durable_agent.cli import claude

    return _guarded(lambda: asyncio.run(claude.cmd_claude(argv)))


def command(name: str) -> Callable[[Namespace], Coroutine[Any, Any, int]]:
    """The command's coroutine function, importing only its own module (and what that needs)."""
    if name in ("chat", "tail"):
        from durable_agent.cli import chat

        return chat.cmd_chat if name == "chat" else chat.cmd_tail
    from durable_agent.cli import commands

    found = commands.COMMANDS.get(name)
    if found is None:
        raise CliError(f"unknown command {name}")
    return found


def stand_down_reaper() -> None:
    """This process exits on purpose: where it started a tool, hook or MCP server, its reaper
    leaves their processes be (durable_agent/reaper.py); where it started none, the module
    was never imported and there is nothing to do."""
    environment = sys.modules.get("activities.tools.environment")
    if environment is not None:
        environment.stand_down()


def hard_exit(code: int) -> None:
    """Exit without interpreter finalization, where the SDK's native layer can abort the process
    (DESIGN.md §5: SIGABRT/SIGSEGV at exit); everything is flushed first."""
    try:
        stand_down_reaper()
        from durable_agent import telemetry

        telemetry.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (BrokenPipeError, ValueError):  # its reader is gone (`| head`)
                pass
    except KeyboardInterrupt:  # Ctrl-C as the command ends: it has ended
        pass
    os._exit(code)
