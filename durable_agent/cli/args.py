"""The command line: the parser, its validators, and the QueryConfig it builds."""

from __future__ import annotations

import argparse
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from durable_agent import __version__
from durable_agent.cli.console import FORMATS
from durable_agent.cli.errors import CliError
from durable_agent.cli.usage import Parser
from durable_agent.engine.budget import parse_amount
from durable_agent.engine.permissions import PermissionContext, PermissionMode, SandboxSpec
from durable_agent.engine.settings import (
    SettingsError,
    permission_context,
    sandbox_spec,
    snapshot,
)
from durable_agent.engine.state import (
    DEFAULT_MODEL,
    TOOL_CONCURRENCY_ENV,
    ActivityOptions,
    EagerTools,
    ModelCallConfig,
    QueryConfig,
)
from durable_agent.engine.tool_hooks import tool_hook_settings
from durable_agent.engine.web_search import WEB_SEARCH, WebSearchConfig


def workspace_dir(raw: str, flag: str = "--workspace") -> Path:
    path = Path(raw).expanduser()
    what = "workspace" if flag == "--workspace" else flag
    if not path.exists():
        raise CliError(
            f"{what} {raw} does not exist", f"pass an existing directory with {flag} DIR"
        )
    if not path.is_dir():
        raise CliError(f"{what} {raw} is not a directory", f"pass a directory with {flag} DIR")
    return path.resolve()


def _tool_concurrency() -> int:
    raw = os.environ.get(TOOL_CONCURRENCY_ENV)
    if raw is None:
        return QueryConfig().tool_concurrency
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise CliError(f"{TOOL_CONCURRENCY_ENV}={raw!r} is not a positive integer")
    return value


@dataclass(frozen=True)
class Controls:
    """What the settings and the permission flags make of a session: its permission context,
    its Bash sandbox (None: off) and the merged settings snapshot its prompts carry."""

    permissions: PermissionContext
    sandbox: SandboxSpec | None = None
    settings: dict[str, Any] | None = None

    @property
    def tool_hooks(self) -> dict[str, Any] | None:
        """The settings' hooks that run around tool calls (ModelCallConfig.tool_hooks)."""
        return tool_hook_settings((self.settings or {}).get("hooks"))


def controls_for(args: argparse.Namespace, workspace: Path) -> Controls:
    """The settings layers of the workspace (and --settings, --setting-sources) with the
    permission and sandbox flags: what every tool call of the session is checked against."""
    from activities.settings import load_settings

    try:
        merged = load_settings(
            workspace, getattr(args, "settings", None), getattr(args, "setting_sources", None)
        )
        mode = getattr(args, "permission_mode", None)
        if getattr(args, "dangerously_skip_permissions", False):
            mode = PermissionMode.BYPASS.value
        home = str(Path.home())
        sandbox = sandbox_spec(
            merged, enabled=getattr(args, "sandbox", False), cwd=str(workspace), home=home
        )
        permissions = permission_context(
            merged,
            cwd=str(workspace),
            home=home,
            mode=mode,
            allowed=getattr(args, "allowed_tools", None),
            disallowed=getattr(args, "disallowed_tools", None),
            add_dirs=[
                str(workspace_dir(d, "--add-dir")) for d in getattr(args, "add_dir", None) or []
            ],
            sandboxed=sandbox is not None,
        )
    except SettingsError as exc:
        raise CliError(str(exc), SETTINGS_HINT) from None
    if sandbox is not None and not getattr(args, "no_worker", False) and not shutil.which("bwrap"):
        raise CliError(
            "the Bash sandbox is on (sandbox.enabled or --sandbox) but bubblewrap is not installed",
            "apt-get install bubblewrap, or turn the sandbox off (sandbox.enabled: false)",
        )
    return Controls(permissions, sandbox, snapshot(merged))


SETTINGS_HINT = "fix the file or flag named above (settings docs: permissions.allow/ask/deny)"


def _tool_set(raw: str | None) -> tuple[str, ...]:
    """`--tools "Read,Grep"` (commas or spaces); "default" = every tool; "" = none."""
    every = (*ModelCallConfig().tools, WEB_SEARCH)
    if raw is None or raw.strip() == "default":
        return every
    names = [n for n in raw.replace(",", " ").split() if n]
    unknown = [n for n in names if n not in every]
    if unknown:
        raise CliError(f"--tools: unknown tool {unknown[0]!r}", f"the tools are {', '.join(every)}")
    return tuple(n for n in every if n in names)


def _web_search(args: argparse.Namespace) -> WebSearchConfig:
    """The search's domain lists (comma lists; the API takes one of the two)."""
    allowed = getattr(args, "web_search_allowed_domains", None)
    blocked = getattr(args, "web_search_blocked_domains", None)
    if allowed is not None and blocked is not None:
        raise CliError(
            "--web-search-allowed-domains and --web-search-blocked-domains cannot be used together",
            "the API takes one list: keep the one you need",
        )
    return WebSearchConfig(allowed_domains=_domains(allowed), blocked_domains=_domains(blocked))


def _domains(raw: str | None) -> tuple[str, ...]:
    return tuple(d for d in (raw or "").replace(",", " ").split() if d)


def build_config(
    args: argparse.Namespace, workspace: Path, controls: Controls | None = None
) -> QueryConfig:
    """The config of the session's prompts; without `controls`, no permission checks (the
    engine's own tests)."""
    for flag, value in (("--model", args.model), ("--fallback-model", args.fallback_model)):
        if value is not None and not value.strip():  # not the default model, silently
            raise CliError(
                f"{flag} is empty", f"give a model id ({DEFAULT_MODEL}, …) or leave {flag} out"
            )
    try:
        return _query_config(args, workspace, controls)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = str(error["loc"][-1]) if error.get("loc") else "an option"
        raise CliError(
            f"--{field.replace('_', '-')}: {error['msg'].lower()}",
            "durable-agent COMMAND --help lists the options and their ranges",
        ) from None


def _query_config(
    args: argparse.Namespace, workspace: Path, controls: Controls | None
) -> QueryConfig:
    tools = _tool_set(getattr(args, "tools", None))
    search = _web_search(args)
    return QueryConfig(
        model=args.model or os.environ.get("ANTHROPIC_MODEL") or DEFAULT_MODEL,
        max_turns=args.max_turns,
        workspace=str(workspace),
        tool_concurrency=_tool_concurrency(),
        thinking_budget=args.thinking_budget,
        prompt_caching=not args.no_prompt_caching,
        context_window=args.context_window,
        autocompact=not args.no_autocompact,
        task_budget=args.task_budget,
        token_budget=args.token_budget,
        max_budget_usd=getattr(args, "max_budget_usd", None),
        call=ModelCallConfig(
            system_prompt=getattr(args, "append_system_prompt", None),
            unattended=args.unattended,
            fallback_model=args.fallback_model,
            eager_tools=EagerTools.NONE
            if args.no_streaming_tools
            else EagerTools(args.eager_tools),
            tools=tuple(n for n in tools if n != WEB_SEARCH),
            web_search=search if WEB_SEARCH in tools else None,
            permissions=controls.permissions if controls else None,
            tool_hooks=controls.tool_hooks if controls else None,
        ),
        activity=ActivityOptions(unattended_max_seconds=args.unattended_hours * 3600),
        sandbox=controls.sandbox if controls else None,
        settings=controls.settings if controls else None,
        # In chat a person can answer a call that asks; a headless run never waits for one.
        approvals=getattr(args, "command", None) == "chat",
    )


def positive_usd(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not an amount in dollars") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


def _positive(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _tokens(raw: str) -> int:
    value = parse_amount(raw)
    if value is None:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a token amount (like 500000, 500k, 2M)")
    return value


def _positive_float(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


def _thinking_budget(raw: str) -> int:
    value = _positive(raw)
    if value < 1024:
        raise argparse.ArgumentTypeError("must be at least 1024 tokens")
    return value


CLAUDE_USAGE = """\
in place of `claude -p` (CI scripts, the Agent SDK's cli_path), with Claude Code's flags:
  durable-agent -p "PROMPT" [--output-format text|json|stream-json] [--allowedTools RULE ...]
  echo "PROMPT" | durable-agent -p
  durable-agent -p --help      the Claude Code flags it takes"""


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="durable-agent",
        description="A coding agent whose every step is a durable Temporal workflow step.\n"
        "Without TEMPORAL_ADDRESS it starts a local Temporal dev server (SQLite, in\n"
        "$DURABLE_AGENT_HOME) and keeps it running for the next command.",
        epilog=CLAUDE_USAGE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"durable-agent {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="run one prompt headless (like `claude -p`)",
        description="Run one prompt to the end and print what the agent does. "
        "Needs ANTHROPIC_API_KEY (ANTHROPIC_BASE_URL is honoured). Exit 0 when the "
        "query completes, 1 when it stops otherwise (the reason is printed).",
    )
    run.add_argument("prompt", help="what the agent should do")
    _query_options(run)
    run.add_argument(
        "--record",
        metavar="FILE",
        help="also write every model call to FILE as a cassette (for `demo`-style replays "
        "and tests)",
    )
    run.add_argument(
        "--no-worker",
        action="store_true",
        help="do not run a worker in this process: the session goes on the shared task queue "
        "($DURABLE_AGENT_TASK_QUEUE, default durable-agent) that `python worker.py` serves",
    )

    resume = sub.add_parser(
        "resume",
        help="pick up a session whose CLI has gone, and follow it to its end",
        description="A session that `run` started is served by that CLI's own worker, on a "
        "task queue of its own; if the CLI died, the session waits. `resume` runs a worker "
        "on that session's queue with this environment's ANTHROPIC_API_KEY and "
        "ANTHROPIC_BASE_URL (it warns if the endpoint differs from the one the session "
        "started with) and follows it like `run`, with the same exit codes.",
    )
    resume.add_argument("session_id")
    resume.add_argument("--output-format", choices=FORMATS, default="text")
    resume.add_argument(
        "--no-worker",
        action="store_true",
        help="only follow the session; a worker must serve its task queue elsewhere",
    )

    demo = sub.add_parser(
        "demo",
        help="replay a recorded session against an example workspace (no API key)",
        description="Copies the example workspace to a temporary directory and runs a "
        "recorded session through the local fake Messages API and the real client.",
    )
    demo.add_argument("--output-format", choices=FORMATS, default="text")
    demo.add_argument("--keep", action="store_true", help="print the workspace path and keep it")

    chat = sub.add_parser(
        "chat",
        help="a multi-turn session: one prompt per line",
        description="Start (or with --session, continue) a session; each line you type is a "
        "prompt in the same conversation. /exit or end of input closes the session.",
    )
    chat.add_argument(
        "--session",
        help="continue this running session instead of a new one (its own task queue is "
        "served by this process)",
    )
    _query_options(chat)
    chat.add_argument(
        "--no-worker",
        action="store_true",
        help="do not run a worker in this process (a new session goes on the shared task queue)",
    )

    server = sub.add_parser(
        "server", help="start (or show) the local Temporal dev server with its Web UI"
    )
    server.add_argument(
        "--stop",
        action="store_true",
        help="stop the dev server started for this state dir, and its warm workers",
    )
    server.add_argument(
        "--no-warm-worker",
        action="store_true",
        help="do not start a warm worker beside it (one that serves `run` from this shell's "
        "environment, so a run starts without importing a worker; "
        f"{warm_env()}=0 turns it off everywhere)",
    )
    sub.add_parser(  # no help=: internal, so not listed in --help
        "warm-worker",
        description="the background worker `server` starts (one per environment; not run by hand)",
    )

    status = sub.add_parser("status", help="show a session's state")
    status.add_argument("session_id")
    status.add_argument("--output-format", choices=("text", "json"), default="text")

    export = sub.add_parser(
        "export",
        help="write the files a session left into DIR (a shared store's travelling workspace)",
        description="The files of the session's last checkpoint (the shared store, "
        "DURABLE_AGENT_STORE) written into DIR: added and changed ones; a file of DIR that "
        "differs from them is left as it is and named.",
    )
    export.add_argument("session_id")
    export.add_argument("dir")

    rewind = sub.add_parser(
        "rewind",
        help="put a workspace's files back as they were before prompt N (a shared store)",
        description="Makes the workspace hold exactly the files of the checkpoint prompt N "
        "started from (files .gitignore names and .git are left alone). Needs the session "
        "to have run with a shared store (DURABLE_AGENT_STORE).",
    )
    rewind.add_argument("session_id")
    rewind.add_argument("--to", type=_positive, required=True, metavar="N", help="prompt number")
    rewind.add_argument("--workspace", help="the directory to restore (default: the session's)")

    tail = sub.add_parser(
        "tail", help="follow the prompt running in a session (Ctrl-C stops following)"
    )
    tail.add_argument("session_id")

    interrupt = sub.add_parser("interrupt", help="interrupt the prompt running in a session")
    interrupt.add_argument("session_id")

    approve = sub.add_parser(
        "approve",
        help="answer a tool call that waits for approval in a session (from any terminal)",
        description="In `chat`, a tool call the permission rules ask about waits, durably, for "
        "a person: the chat terminal asks, and any other terminal can answer with this command "
        "(the wait survives worker restarts and the chat's CLI dying). Without --always or "
        "--deny, the call is allowed once. With no call named, the only one waiting is "
        "answered; --list shows what waits.",
    )
    approve.add_argument("session_id")
    approve.add_argument("--id", dest="request_id", help="the request (tool_use id) to answer")
    approve.add_argument(
        "--always",
        action="store_true",
        help="allow it for the rest of the session (this file for edits, this exact command "
        "for Bash); `status` lists what the session allows",
    )
    approve.add_argument(
        "--deny",
        nargs="?",
        const="",
        metavar="MESSAGE",
        help="deny it; MESSAGE is told to Claude with the denial",
    )
    approve.add_argument("--list", action="store_true", help="only show what waits")

    listing = sub.add_parser(
        "list",
        help="recent sessions: outcome, first prompt, workspace, age (newest first)",
        description="The outcome is how the session's last prompt ended (completed, "
        "max_turns, model_error, ...), or running.",
    )
    listing.add_argument("--json", action="store_true", help="one JSON array")
    listing.add_argument("--limit", type=_positive, default=50, help="at most N (default 50)")
    _schedule_parser(sub)
    return p


def _schedule_parser(sub: Any) -> None:
    """`schedule add|list|delete`: a session's cron jobs (Temporal Schedules) and wake-ups."""
    schedule = sub.add_parser(
        "schedule",
        help="recurring prompts for a running session (cron), and its wake-ups",
        description="A cron job sends its prompt to a running session at every match of a "
        "5-field cron expression (this machine's local time); the session runs it between "
        "prompts. Jobs live in Temporal (they survive restarts) and end with their session. "
        "Claude creates them with CronCreate and wakes the session later with ScheduleWakeup; "
        "`status` shows both.",
    )
    actions = schedule.add_subparsers(dest="schedule_command", metavar="ACTION", required=True)
    add = actions.add_parser(
        "add",
        help="send PROMPT to SESSION at every match of --cron",
        description="Send PROMPT to SESSION (running) at every match of the cron expression; "
        "recurring jobs end after 7 days, --once ones after their first run.",
    )
    add.add_argument("session_id", metavar="SESSION")
    add.add_argument(
        "--cron",
        required=True,
        metavar="EXPR",
        help='minute hour day-of-month month day-of-week, e.g. "7 * * * *" (hourly at :07)',
    )
    add.add_argument("prompt", help="what the session is asked each time")
    add.add_argument("--once", action="store_true", help="run once, at the next match")
    listing = actions.add_parser(
        "list",
        help="cron jobs (of SESSION, with its wake-ups; or of every session)",
        description="The cron jobs of SESSION and its pending wake-ups, or the jobs of every "
        "session: id, schedule, next run, prompt.",
    )
    listing.add_argument("session_id", nargs="?", metavar="SESSION")
    listing.add_argument("--json", action="store_true", help="one JSON object")
    delete = actions.add_parser(
        "delete",
        help="cancel a cron job or a pending wake-up by its id",
        description="Cancel the cron job ID (8 hex digits, as `schedule list` shows it), or "
        "the pending wake-up ID (w and 7 hex digits) of SESSION.",
    )
    delete.add_argument("id", metavar="ID")
    delete.add_argument("session_id", nargs="?", metavar="SESSION", help="needed for a wake-up")


def warm_env() -> str:
    from durable_agent.warm import WARM_ENV

    return WARM_ENV


def _query_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workspace", default=".", help="directory the tools work in (default: .)")
    _permission_options(p)
    p.add_argument("--model", help=f"model id (default: $ANTHROPIC_MODEL or {DEFAULT_MODEL})")
    p.add_argument(
        "--tenant",
        help="whose session this is (default: $DURABLE_AGENT_TENANT): a fleet shares its "
        "workers between tenants in proportion to their weights "
        "($DURABLE_AGENT_TENANT_WEIGHT), so one tenant's burst does not starve another",
    )
    p.add_argument("--max-turns", type=_positive, help="stop with max_turns after N model turns")
    p.add_argument(
        "--max-budget-usd",
        type=positive_usd,
        metavar="USD",
        help="stop (max_budget) before the next model call once the prompt has cost this much "
        "(Anthropic's list prices per model)",
    )
    p.add_argument(
        "--output-format",
        choices=FORMATS,
        default="text",
        help="text (default), json (one result object) or stream-json (one event per line)",
    )
    p.add_argument("--append-system-prompt", help="extra system prompt text")
    p.add_argument(
        "--fallback-model",
        help="switch to this model for the rest of the prompt when the main one stays "
        "overloaded (529 after 3 retries)",
    )
    p.add_argument(
        "--unattended",
        action="store_true",
        help="for CI and batch jobs: ride out rate limits and overload indefinitely "
        "(backoff capped at 5 minutes) for up to --unattended-hours per model call",
    )
    p.add_argument(
        "--unattended-hours",
        type=_positive_float,
        default=6.0,
        help="how long one model call may keep retrying in unattended mode (default 6)",
    )
    p.add_argument(
        "--thinking-budget",
        type=_thinking_budget,
        help="enable extended thinking with N budget tokens (at least 1024)",
    )
    p.add_argument(
        "--no-prompt-caching",
        action="store_true",
        help="do not mark the system prompt and last message for prompt caching",
    )
    p.add_argument(
        "--eager-tools",
        choices=[e.value for e in EagerTools],
        default=EagerTools.SAFE.value,
        help="which tools may start while Claude is still streaming: safe (read-only ones; "
        "default), all, or none",
    )
    p.add_argument(
        "--no-streaming-tools",
        action="store_true",
        help="run tools only after the model's answer is complete",
    )
    p.add_argument(
        "--context-window",
        type=_positive,
        help="context window in tokens (default 200000, or 1000000 for a [1m] model)",
    )
    p.add_argument(
        "--no-autocompact",
        action="store_true",
        help="never summarise; stop with blocking_limit when the context is full",
    )
    p.add_argument(
        "--token-budget",
        type=_tokens,
        metavar="N",
        help="output tokens Claude should spend (500000, 500k, 2M): when it stops below 90 %%, "
        "it is told to keep working; a prompt may say it too (+500k, 'use 2M tokens')",
    )
    p.add_argument(
        "--task-budget",
        type=_positive,
        help="total token budget, sent as the API's task budget after compactions",
    )


def _permission_options(p: argparse.ArgumentParser) -> None:
    """Claude Code's permission flags, same names and meaning. Nobody can approve a tool in a
    headless run, so a call that would ask is denied, and the result lists it."""
    g = p.add_argument_group(
        "permissions",
        "Bash, Edit and Write need permission; Read, Grep and Glob do not. Rules come from "
        "~/.claude/settings.json, .claude/settings.json, .claude/settings.local.json and these "
        "flags (deny beats ask beats allow). A call that would ask is denied in a headless run.",
    )
    g.add_argument(
        "--permission-mode",
        choices=[m.value for m in PermissionMode],
        help="default (ask for Bash/Edit/Write), acceptEdits (edits inside the workspace are "
        "allowed), plan (read-only), bypassPermissions (no checks), dontAsk (deny what would "
        "ask); default: permissions.defaultMode in settings, else default",
    )
    g.add_argument(
        "--dangerously-skip-permissions",
        action="store_true",
        help="the same as --permission-mode bypassPermissions",
    )
    for flag, alias, dest, what in (
        ("--allowedTools", "--allowed-tools", "allowed_tools", "allow without asking"),
        ("--disallowedTools", "--disallowed-tools", "disallowed_tools", "always deny"),
    ):
        g.add_argument(
            flag,
            alias,
            dest=dest,
            nargs="+",
            action="extend",
            metavar="RULE",
            help=f"rules to {what}, e.g. Edit 'Bash(npm test:*)' 'Read(./secrets/**)' "
            "(several per argument, separated by commas or spaces)",
        )
    g.add_argument(
        "--tools",
        metavar="LIST",
        help="the tools Claude may use at all, e.g. 'Read,Grep,Glob' ('' = none, 'default' = all)",
    )
    g.add_argument(
        "--web-search-allowed-domains",
        metavar="LIST",
        help="WebSearch (the API runs it) gives results only from these domains (a comma list)",
    )
    g.add_argument(
        "--web-search-blocked-domains",
        metavar="LIST",
        help="WebSearch never gives results from these domains (a comma list; not with "
        "--web-search-allowed-domains)",
    )
    g.add_argument(
        "--add-dir",
        nargs="+",
        action="extend",
        metavar="DIR",
        help="more directories the tools may work in besides the workspace",
    )
    g.add_argument(
        "--sandbox",
        action="store_true",
        help="run Bash under bubblewrap (as sandbox.enabled in settings does): it may write only "
        "in the workspace, --add-dir folders and a private /tmp, has no network, and cannot read "
        "what a Read(...) deny rule names; with autoAllowBashIfSandboxed (the default) Bash "
        "needs no allow rule",
    )
    g.add_argument(
        "--settings",
        metavar="FILE_OR_JSON",
        help="one more settings layer (a path, or JSON text), above the project's",
    )
    g.add_argument(
        "--setting-sources",
        metavar="LIST",
        help="which settings files to read: a comma list of user, project, local (default: all)",
    )
    g.add_argument(
        "--mcp-config",
        metavar="FILE_OR_JSON",
        action="append",
        default=[],
        help='MCP servers: a file or JSON text {"mcpServers": {NAME: {"command": ..., "args": '
        '[...]} or {"type": "http", "url": ...}}} (repeatable); besides .mcp.json and settings',
    )
    g.add_argument(
        "--strict-mcp-config",
        action="store_true",
        help="use only the --mcp-config servers (not .mcp.json nor settings)",
    )
    g.add_argument(
        "--agents",
        metavar="JSON",
        help='sub-agents for the Agent tool, beside .claude/agents/*.md: {"name": '
        '{"description": "...", "prompt": "...", "tools": ["Read"], "model": "haiku"}}',
    )
