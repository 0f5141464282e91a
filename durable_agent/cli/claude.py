"""`durable-agent -p …`: Claude Code's own command line, for CI scripts and the Agent SDK.

`durable-agent` with Claude Code's flags (no subcommand) behaves as `claude` does in print
mode: the prompt from the argument or stdin (`--input-format text`), or user messages and
control requests as JSON lines on stdin (`--input-format stream-json`, what the Agent SDK
speaks); the answer as text, one JSON result, or Claude Code's stream-json lines
(`system/init`, `assistant`, `user`, `result`). Every prompt runs as a prompt of one durable
session, so what this buys a CI job or an SDK program is durability.

Built from Claude Code's public CLI reference and headless-mode docs and the Agent SDK's own
source (its transport shows the flags it passes, its parser the fields it reads). Flags that
are not supported yet are refused with one line naming them, never ignored.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import functools
import json
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError

from durable_agent import warm
from durable_agent.cli.args import _permission_options, parser, positive_usd
from durable_agent.cli.claude_input import InputError, Stdin, parse_line
from durable_agent.cli.console import Console
from durable_agent.cli.errors import CliError
from durable_agent.cli.following import follow_with
from durable_agent.cli.reconnect import riding_out
from durable_agent.cli.serving import (
    prepared,
    served_warm,
    serving,
    warm_eligible,
    warm_worker_for,
)
from durable_agent.cli.sessions import (
    compact_request,
    find_session,
    fleet_start,
    new_session_queue,
    session_memo,
    state_name,
)
from durable_agent.cli.stopping import Stopped, Stops, stop_session
from durable_agent.cli.travel import Travel, bring_back, checkpoint_here, sync, upload
from durable_agent.cli.watching import query_result, watch
from durable_agent.engine.agents import with_built_in
from durable_agent.engine.contracts import (
    ApprovalAnswer,
    ApprovalRequest,
    ConfigChange,
    HookCallbackAnswer,
    HookCallbackRequest,
    PromptAccepted,
    PromptRequest,
    SessionInput,
    SessionState,
    SessionStatus,
)
from durable_agent.engine.messages import TranscriptEntry, Usage
from durable_agent.engine.pricing import price_of
from durable_agent.engine.state import (
    ProgressEvent,
    ProgressKind,
    QueryConfig,
    QueryResult,
    SeenFiles,
    Terminal,
)
from durable_agent.engine.tool_hooks import result_field
from durable_agent.engine.web_search import WEB_SEARCH, offered
from durable_agent.mcp.contracts import McpServerState, McpStatus
from durable_agent.names import Queries, Signals, Updates, Workflows

T = TypeVar("T")

CLAUDE_CODE_VERSION = "2.1.332"
"""The Claude Code version whose stream-json and control protocol this front-end speaks (what
`system/init` reports as `claude_code_version`, which the Agent SDK checks)."""

UNSUPPORTED = {
    "--system-prompt-file": "pass the text with --system-prompt",
    "--append-system-prompt-file": "pass the text with --append-system-prompt",
    "--plugin-dir": "plugins are not supported",
    "--json-schema": "structured output is not supported yet",
    "--betas": "beta headers are not supported",
    "--thinking": "use --max-thinking-tokens",
    "--effort": "effort levels are not supported",
    "--include-hook-events": "hook events are not streamed yet",
    "--session-mirror": "session stores are not supported",
    "--resume-session-at": "resuming is not built yet",
    "--resume-drops-turn": "resuming is not built yet",
    "--task-budget": "use `durable-agent run --task-budget`",
}
"""Claude Code flags refused with a reason (value-taking or not, they are never ignored)."""


def claude_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="durable-agent",
        description="Claude Code's print mode (`claude -p`), every prompt a durable session's. "
        "The prompt comes from the argument or stdin; with --input-format stream-json, user "
        "messages and control requests come as JSON lines (the Agent SDK's protocol).",
        add_help=False,
    )
    p.add_argument("prompt", nargs="?")
    p.add_argument("-p", "--print", action="store_true", dest="print_mode")
    p.add_argument("--output-format", choices=("text", "json", "stream-json"), default="text")
    p.add_argument("--input-format", choices=("text", "stream-json"), default="text")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--include-partial-messages", action="store_true", dest="partial")
    p.add_argument(
        "--replay-user-messages",
        action="store_true",
        help="echo each prompt back on stdout, with its uuid (what rewind_files names)",
    )
    p.add_argument("--system-prompt", help="replaces the built-in system prompt")
    p.add_argument("--append-system-prompt")
    p.add_argument("--model")
    p.add_argument("--fallback-model")
    p.add_argument("--max-turns", type=int)
    p.add_argument("--max-budget-usd", type=positive_usd)
    p.add_argument("--max-thinking-tokens", type=int)
    p.add_argument("--session-id", help="the new session's id (a UUID)")
    p.add_argument("-r", "--resume", metavar="ID", help="continue this session")
    p.add_argument("-c", "--continue", action="store_true", dest="cont", help="the newest one here")
    p.add_argument("--fork-session", action="store_true", help="with --resume: a new session")
    p.add_argument("--permission-prompt-tool", help="only `stdio`: ask the SDK (can_use_tool)")
    p.add_argument("--workspace", default=".", help=argparse.SUPPRESS)
    p.add_argument("-h", "--help", action="store_true", dest="show_help")
    _permission_options(p)
    return p


def parse_claude_args(argv: list[str]) -> argparse.Namespace:
    """Claude Code's flags; CliError (one line) for an unsupported or unknown one."""
    for raw in argv:
        flag = raw.split("=", 1)[0]
        if flag in UNSUPPORTED:
            raise CliError(f"{flag} is not supported", UNSUPPORTED[flag])
    p = claude_parser()
    args, unknown = p.parse_known_args(argv)
    flags = [u for u in unknown if u.startswith("-")]
    if flags:
        raise CliError(f"unknown option {flags[0]}", "durable-agent --help lists what is supported")
    if unknown:
        raise CliError(f"unexpected argument {unknown[0]!r}", "give one prompt, quoted")
    if args.fork_session and not (args.resume or args.cont):
        raise CliError("--fork-session forks the session of --resume or --continue", "add one")
    if args.permission_prompt_tool not in (None, "stdio"):
        raise CliError(
            f"--permission-prompt-tool {args.permission_prompt_tool}: only stdio is supported",
            "the SDK sets it with can_use_tool",
        )
    if args.session_id is not None:
        try:
            args.session_id = str(uuid.UUID(args.session_id))
        except ValueError:
            raise CliError(
                f"--session-id {args.session_id!r} is not a UUID",
                "session ids are UUIDs, as in Claude Code (python3 -c 'import uuid; print(uuid.uuid4())')",
            ) from None
    return args


FILE_CHECKPOINTING_ENV = "CLAUDE_CODE_ENABLE_SDK_FILE_CHECKPOINTING"
"""Set by the Agent SDK for enable_file_checkpointing=True."""

NO_WORKER_ENV = "DURABLE_AGENT_NO_WORKER"
"""Set to 1: `-p` runs no worker; its session goes on the shared queue (as `run --no-worker`)."""


def run_args(args: argparse.Namespace) -> argparse.Namespace:
    """What the session's config is built from: `run`'s defaults and this command line."""
    base = parser().parse_args(["run", "-"])
    for key, value in vars(args).items():
        if value is not None or not hasattr(base, key):
            setattr(base, key, value)
    base.command = "claude"
    # Claude Code's flags have no --no-worker: a CI script that sends `-p` to a fleet of
    # `python worker.py` says so in the environment.
    base.no_worker = os.environ.get(NO_WORKER_ENV, "").strip().lower() in ("1", "true", "yes")
    base.thinking_budget = args.max_thinking_tokens
    base.output_format = "text"
    return base


class Out:
    """Claude Code's stdout: stream-json lines, one JSON result, or the result's text."""

    def __init__(self, output_format: str, session_id: str, replay_user: bool = False) -> None:
        self.format = output_format
        self.session_id = session_id
        self.replay_user = replay_user
        """--replay-user-messages: the prompts are shown too."""

    def line(self, obj: dict[str, Any]) -> None:
        if self.format == "stream-json":
            self.write(obj)

    def write(self, obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    def init(self, config: QueryConfig, mcp: list[McpServerState] | None = None) -> None:
        perms = config.call.permissions
        self.line(
            {
                "type": "system",
                "subtype": "init",
                "cwd": config.workspace,
                "session_id": self.session_id,
                "tools": [
                    *config.call.tools,
                    *([WEB_SEARCH] if offered(config.call.web_search, perms) else []),
                ],
                "mcp_servers": [{"name": s.name, "status": s.status.value} for s in mcp or []],
                "model": config.model,
                "permissionMode": perms.mode.value if perms else "default",
                "slash_commands": ["compact"],
                "apiKeySource": "none",
                "claude_code_version": CLAUDE_CODE_VERSION,
                "output_style": "default",
                "agents": [a.name for a in with_built_in(config.call.agents)],
                "skills": [],
                "plugins": [],
                "uuid": str(uuid.uuid4()),
            }
        )

    def entries(self, entries: list[TranscriptEntry]) -> None:
        """Claude's messages, the tool results and compact boundaries; not the prompt itself
        (nor hook feedback the loop sent as text), as Claude Code's stream-json leaves them out."""
        for entry in entries:
            if entry.type == "user" and not _has_tool_results(entry) and not self.replay_user:
                continue
            self.line(entry_line(entry, self.session_id))

    def result(self, result: QueryResult, text: str, started: float) -> None:
        obj = result_line(result, text, self.session_id, started)
        if self.format == "text":
            sys.stdout.write(text + ("\n" if text and not text.endswith("\n") else ""))
            sys.stdout.flush()
        else:
            self.write(obj)

    def error(self, message: str, started: float) -> None:
        """An error that ends the run before a prompt's result (text: stderr says it)."""
        if self.format != "text":
            self.write(error_result_line(message, self.session_id, started))


SUBTYPES = {
    Terminal.COMPLETED: "success",
    Terminal.MAX_TURNS: "error_max_turns",
    Terminal.MAX_BUDGET: "error_max_budget_usd",
}


def result_line(result: QueryResult, text: str, session_id: str, started: float) -> dict[str, Any]:
    """Claude Code's `result` message for one prompt, plus our `terminal_reason`."""
    usage = result.usage
    model_usage = {}
    for model, used in (result.usage_by_model or {result.model: usage}).items():
        model_usage[model] = {
            "inputTokens": used.input_tokens,
            "outputTokens": used.output_tokens,
            "cacheReadInputTokens": used.cache_read_input_tokens,
            "cacheCreationInputTokens": used.cache_creation_input_tokens,
            "costUSD": price_of(model).cost(used),
        }
    subtype = SUBTYPES.get(result.terminal, "error_during_execution")
    return {
        "type": "result",
        "subtype": subtype,
        "is_error": result.terminal != Terminal.COMPLETED,
        "duration_ms": int((time.monotonic() - started) * 1000),
        "duration_api_ms": result.api_duration_ms,
        "num_turns": result.turn_count,
        "result": text,
        "session_id": session_id,
        "total_cost_usd": sum(m["costUSD"] for m in model_usage.values()),
        "usage": usage.model_dump(),
        "modelUsage": model_usage,
        "permission_denials": [
            {"tool_name": d.tool_name, "tool_use_id": d.tool_use_id, "tool_input": d.tool_input}
            for d in result.permission_denials
        ],
        "stop_reason": None,
        "uuid": str(uuid.uuid4()),
        "terminal_reason": result.terminal.value,
        **({"errors": [result.message]} if subtype != "success" and result.message else {}),
    }


def error_result_line(message: str, session_id: str, started: float) -> dict[str, Any]:
    """The `result` message of a run that ended with no prompt's result (nothing was paid
    for), shaped as result_line's."""
    return {
        "type": "result",
        "subtype": "error_during_execution",
        "is_error": True,
        "duration_ms": int((time.monotonic() - started) * 1000),
        "duration_api_ms": 0,
        "num_turns": 0,
        "result": message,
        "session_id": session_id,
        "total_cost_usd": 0.0,
        "usage": Usage().model_dump(),
        "modelUsage": {},
        "permission_denials": [],
        "stop_reason": None,
        "uuid": str(uuid.uuid4()),
        "errors": [message],
    }


def entry_line(entry: TranscriptEntry, session_id: str) -> dict[str, Any]:
    """A transcript entry as Claude Code's stream-json shows it."""
    if entry.type == "system":
        meta = entry.compact_metadata
        return {
            "type": "system",
            "subtype": entry.subtype or "status",
            "session_id": session_id,
            "uuid": entry.uuid,
            **(
                {"compact_metadata": {"trigger": meta.trigger, "pre_tokens": meta.pre_tokens}}
                if meta
                else {}
            ),
        }
    assert entry.message is not None
    message = entry.message
    blocks = [b.model_dump(exclude_none=True) for b in message.content]
    if entry.type == "assistant":
        api = {
            "id": message.id or f"msg_{entry.uuid}",
            "type": "message",
            "role": "assistant",
            "model": message.model or "",
            "content": blocks,
            "stop_reason": message.stop_reason,
            "stop_sequence": None,
            "usage": message.usage.model_dump() if message.usage else {},
        }
        return {
            "type": "assistant",
            "message": api,
            "parent_tool_use_id": None,
            "session_id": session_id,
            "uuid": entry.uuid,
        }
    return {
        "type": "user",
        "message": {"role": "user", "content": blocks},
        "parent_tool_use_id": None,
        "session_id": session_id,
        "uuid": entry.uuid,
    }


def _has_tool_results(entry: TranscriptEntry) -> bool:
    return entry.message is not None and any(b.type == "tool_result" for b in entry.message.content)


def prompt_text(message: dict[str, Any]) -> str:
    """The text of a stream-json user message (a string, or text blocks)."""
    content = (message.get("message") or {}).get("content", "")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text", "") for b in content if isinstance(b, dict)]
        return "\n".join(p for p in parts if p)
    return ""


class Front:
    """One `durable-agent -p` process: its session, its prompts in order, the control protocol."""

    def __init__(
        self, client: Client, out: Out, handle: WorkflowHandle[Any, Any], stdio_approval: bool
    ) -> None:
        self.client = client
        self.out = out
        self.handle = handle
        self.stdio_approval = stdio_approval
        self.accepted: asyncio.Queue[str | None] = asyncio.Queue()
        """The workflow ids of the prompts accepted, in order (None: no more)."""
        self.replies: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.last: QueryResult | None = None
        self.travel: Travel | None = None
        """The workspace this process sent to the shared store, if it did."""
        self.workspace = Path(".")
        self.checkpointing = os.environ.get(FILE_CHECKPOINTING_ENV, "").strip().lower() in (
            "1",
            "true",
        )
        """The Agent SDK's enable_file_checkpointing: the files before each prompt are kept,
        and rewind_files puts them back."""
        self.pending: collections.deque[str | None] = collections.deque()
        """The checkpoint taken when each accepted prompt was sent (None: none), in order."""
        self.checkpoints: dict[str, str] = {}
        """A prompt's user message uuid -> the checkpoint of the files before it."""
        self._seen: Any = None
        self.head: str | None = None
        self.default_model = ""
        """What set_model(None) goes back to (the model this process started with)."""

    async def submit(self, prompt: str) -> None:
        """A prompt, or `/compact [instructions]` (as Claude Code takes it in print mode)."""
        request = compact_request(prompt) or PromptRequest(prompt=prompt)
        checkpoint = None
        if not request.compact:
            if self.travel is not None:  # files edited or rewound here since travel with it
                request.checkpoint_id = await sync(self.travel)
                checkpoint = self.travel.base_id
            elif self.checkpointing:
                checkpoint, self._seen = await asyncio.to_thread(
                    checkpoint_here, self.workspace, self._seen
                )
        update_id = f"prompt-{uuid.uuid4()}"  # the same on a retry: the prompt goes in once
        try:
            accepted = await self._riding_out(
                lambda: self.handle.execute_update(
                    Updates.SUBMIT_PROMPT, request, id=update_id, result_type=PromptAccepted
                )
            )
        except WorkflowUpdateFailedError as exc:
            raise CliError(f"the prompt was not accepted: {exc.cause}") from exc
        self.pending.append(checkpoint if self.checkpointing else None)
        await self.accepted.put(accepted.query_workflow_id)

    async def control(self, message: dict[str, Any]) -> None:
        """Answer one control request from the SDK: initialize (registering its hook callbacks),
        interrupt, set_model, set_permission_mode; any other gets an error response naming it."""
        request_id = message.get("request_id", "")
        request = message.get("request") or {}
        subtype = request.get("subtype")
        if subtype == "initialize":
            if request.get("hooks"):  # run by the SDK when their events come (hook_callback)
                change = ConfigChange(sdk_hooks=request["hooks"])
                await self.handle.execute_update(Updates.CONFIGURE, change, result_type=str)
            reply = {
                "commands": [],
                "output_style": "default",
                "available_output_styles": ["default"],
                "models": [],
                "account": {},
                "hooks_applied": True,
            }
            self.respond(request_id, reply)
        elif subtype == "interrupt":
            await self.handle.signal(Signals.INTERRUPT)
            self.respond(request_id, {})
        elif subtype in ("set_model", "set_permission_mode"):
            try:
                change = (
                    ConfigChange(model=request.get("model") or self.default_model)
                    if subtype == "set_model"
                    else ConfigChange(permission_mode=request.get("mode"))
                )
                await self.handle.execute_update(Updates.CONFIGURE, change, result_type=str)
            except ValueError as exc:  # pydantic's ValidationError too: an unknown mode
                self.respond(request_id, error=f"{subtype}: {exc}")
            except WorkflowUpdateFailedError as exc:
                self.respond(request_id, error=f"{subtype}: {exc.cause}")
            else:
                self.respond(request_id, {})
        elif subtype == "rewind_files":
            await self.rewind_files(request_id, str(request.get("user_message_id", "")))
        else:
            self.respond(request_id, error=f"control request {subtype!r} is not supported yet")

    async def rewind_files(self, request_id: str, message_id: str) -> None:
        """The Agent SDK's rewind_files: the workspace's files as they were before the prompt
        of that user message (and, for a travelling workspace, the next prompt starts there)."""
        if not self.checkpointing:
            self.respond(
                request_id,
                error="rewind_files: file checkpointing is not enabled "
                "(ClaudeAgentOptions(enable_file_checkpointing=True))",
            )
            return
        checkpoint = self.checkpoints.get(message_id)
        if checkpoint is None:
            self.respond(
                request_id,
                error=f"rewind_files: no checkpoint for user message {message_id!r} "
                "(the uuid of a prompt this process sent, as --replay-user-messages shows it)",
            )
            return
        from durable_agent.cli.rewind import restore

        try:
            summary = await asyncio.to_thread(restore, checkpoint, self.workspace)
        except Exception as exc:  # noqa: BLE001 — the SDK gets the reason, the run goes on
            self.respond(request_id, error=f"rewind_files: {exc}")
            return
        Console("json").info(f"rewound {self.workspace}: {summary}")
        self.respond(request_id, {})

    def bind(self, entries: list[TranscriptEntry], checkpoint: str | None) -> str | None:
        """The prompt's own user message among `entries` gets `checkpoint` (the files before
        it); what is left to bind (None once bound)."""
        for entry in entries:
            if checkpoint is None:
                break
            if entry.type == "user" and entry.message and not _has_tool_results(entry):
                self.checkpoints[entry.uuid] = checkpoint
                checkpoint = None
        return checkpoint

    def respond(
        self, request_id: str, reply: dict[str, Any] | None = None, error: str | None = None
    ) -> None:
        body: dict[str, Any] = {"request_id": request_id}
        if error is not None:
            body.update(subtype="error", error=error)
        else:
            body.update(subtype="success", response=reply or {})
        self.out.write({"type": "control_response", "response": body})

    def reply(self, message: dict[str, Any]) -> None:
        """The SDK's answer to a control request of ours (can_use_tool)."""
        response = message.get("response") or {}
        waiting = self.replies.pop(str(response.get("request_id")), None)
        if waiting is not None and not waiting.done():
            waiting.set_result(response)

    async def _riding_out(self, call: Callable[[], Awaitable[T]]) -> T:
        """`call()` through a Temporal outage, as `run` rides one out (cli/reconnect.py): said
        on stderr (stdout is the SDK's), given up after DURABLE_AGENT_RECONNECT_SECONDS."""
        return await riding_out(call, Console("json"), self.out.session_id)

    async def _answer(self, child: WorkflowHandle[Any, Any], update: str, answer: Any) -> None:
        """The SDK's answer to what the prompt waits for (Update `update`), through an outage;
        one the prompt no longer waits for (answered elsewhere, timed out, interrupted) is
        dropped."""
        with contextlib.suppress(WorkflowUpdateFailedError):
            await self._riding_out(lambda: child.execute_update(update, answer, result_type=str))

    async def ask_sdk(self, child: WorkflowHandle[Any, Any]) -> None:
        """The prompt waits for the SDK: its hook callbacks, then approvals (can_use_tool)."""
        await self.run_sdk_hooks(child)
        if self.stdio_approval:
            await self.approvals(child)

    async def request(self, body: dict[str, Any]) -> dict[str, Any]:
        """Send a control request to the SDK; its control_response."""
        request_id = f"req_{uuid.uuid4().hex[:12]}"
        waiting = self.replies[request_id] = asyncio.get_running_loop().create_future()
        self.out.write({"type": "control_request", "request_id": request_id, "request": body})
        return await waiting

    async def run_sdk_hooks(self, child: WorkflowHandle[Any, Any]) -> None:
        requests = await self._riding_out(
            lambda: child.query(Queries.HOOK_REQUESTS, result_type=list[HookCallbackRequest])
        )
        for req in requests:
            outputs: list[dict[str, Any] | None] = []
            errors: list[str] = []
            data = await asyncio.to_thread(_with_tool_result, req, self.out.session_id)
            for callback_id in req.callback_ids:
                response = await self.request(
                    {"subtype": "hook_callback", "callback_id": callback_id,
                     "input": data, "tool_use_id": req.tool_use_id}
                )  # fmt: skip
                ok = response.get("subtype") != "error"
                outputs.append((response.get("response") or {}) if ok else None)
                errors.append("" if ok else str(response.get("error") or "the callback failed"))
            answer = HookCallbackAnswer(request_id=req.request_id, outputs=outputs, errors=errors)
            await self._answer(child, Updates.HOOK_CALLBACK_RESULT, answer)

    async def approvals(self, child: WorkflowHandle[Any, Any]) -> None:
        """Calls that wait for approval: ask the SDK (can_use_tool), pass its answers on."""
        requests = await self._riding_out(
            lambda: child.query(Queries.APPROVALS, result_type=list[ApprovalRequest])
        )
        for req in requests:
            ask = {
                "subtype": "can_use_tool",
                "tool_name": req.tool_name,
                "input": req.tool_input,
                "tool_use_id": req.request_id,
                "permission_suggestions": [],
                "decision_reason": req.reason,
            }
            response = await self.request(ask)
            body = response.get("response") or {}
            if response.get("subtype") == "error" or body.get("behavior") != "allow":
                message = str(body.get("message") or response.get("error") or "")
                answer = ApprovalAnswer(
                    request_id=req.request_id, behavior="deny", message=message, by="sdk"
                )
            else:
                answer = ApprovalAnswer(request_id=req.request_id, behavior="allow", by="sdk")
            await self._answer(child, Updates.APPROVE_TOOL, answer)

    async def follow(self, lines: Lines) -> None:
        """Each accepted prompt in order: its transcript entries as they land, then its result."""
        console = Console("json")  # progress stays off stdout
        while (child_id := await self.accepted.get()) is not None:
            started = time.monotonic()
            child = self.client.get_workflow_handle(child_id, result_type=QueryResult)
            shown: list[TranscriptEntry] = []
            unbound = [self.pending.popleft() if self.pending else None]

            def show_landed(
                drain: bool = True,
                before: str | None = None,
                shown: list[TranscriptEntry] = shown,
                unbound: list[str | None] = unbound,
            ) -> None:
                new = lines.landed(drain, before)
                shown.extend(new)
                unbound[0] = self.bind(new, unbound[0])
                self.out.entries(new)

            async def live(events: list[ProgressEvent]) -> None:
                for event in events:
                    if event.kind == ProgressKind.RETRY:  # Claude Code's api_retry system line
                        self.out.line(
                            {"type": "system", "subtype": "api_retry", "message": event.text,
                             "session_id": self.out.session_id, "uuid": str(uuid.uuid4())}
                        )  # fmt: skip
                show_landed()

            if lines.partial is not None:  # a message's stream comes after what precedes it
                lines.partial.before_message = lambda uuid: show_landed(False, uuid)

            outcome = self._riding_out(functools.partial(query_result, child))
            result = await watch(
                outcome, child, console, asyncio.Event(), "waiting for a worker",
                3600.0, on_approval=functools.partial(self.ask_sdk, child), on_events=live,
            )  # fmt: skip
            assert result is not None
            if lines.partial is not None:
                lines.partial.before_message = None
            rest = lines.chain_to(result.head_uuid)  # whatever the live view had not shown
            shown.extend(rest)
            self.bind(rest, unbound[0])
            self.out.entries(rest)
            text = next(
                (e.message.text() for e in reversed(shown) if e.type == "assistant" and e.message),
                result.final_text,
            )
            await bring_back(self.travel, result.workspace, console)
            self.out.result(result, text if result.terminal == Terminal.COMPLETED else
                            (text or result.message), started)  # fmt: skip
            self.head, self.last = result.head_uuid, result


class StreamTail:
    """`--include-partial-messages`: the raw stream events the worker of this machine writes
    for the session (TranscriptStore.stream_path), as Claude Code's `stream_event` lines, from
    where the file stood when this process started."""

    def __init__(self, store: Any, out: Out) -> None:
        self.store, self.out = store, out
        _, self.offset = store.stream_since(out.session_id, None)
        self.before_message: Callable[[str], None] | None = None
        """Shows the transcript entries that landed before the entry (uuid) whose stream
        starts: a tool's result, stored as the next model call begins."""
        self.task = asyncio.ensure_future(self._loop())

    async def _loop(self) -> None:
        while True:
            self.drain()
            await asyncio.sleep(0.1)

    def drain(self) -> None:
        lines, self.offset = self.store.stream_since(self.out.session_id, self.offset)
        for raw in lines:
            try:
                item = json.loads(raw)
            except ValueError:
                continue
            if self.before_message is not None and item["event"].get("type") == "message_start":
                self.before_message(item["assistant_uuid"])
            self.out.line(
                {
                    "type": "stream_event",
                    "uuid": str(uuid.uuid4()),
                    "session_id": self.out.session_id,
                    "event": item["event"],
                    "parent_tool_use_id": None,
                }
            )

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        self.drain()


class Lines:
    """Which of the session's transcript entries stdout has shown: each once, in chain order,
    as they land (an entry whose parent has been seen), and at a prompt's end whatever of its
    chain is left. The transcript is read where this process's worker keeps it."""

    def __init__(self, store: Any, session_id: str, head: str | None) -> None:
        self.store = store
        self.session_id = session_id
        self.known = {e.uuid for e in store.chain(session_id, head)} if head else set()
        self.partial: StreamTail | None = None

    def landed(self, drain: bool = True, before: str | None = None) -> list[TranscriptEntry]:
        """New entries in chain order (up to the entry `before`, not included)."""
        if drain and self.partial is not None:
            self.partial.drain()  # a message's stream events come before the message
        new = []
        for entry in self.store.entries(self.session_id).values():  # in file order
            if entry.uuid == before:
                break
            if entry.uuid not in self.known and (
                entry.parent_uuid is None or entry.parent_uuid in self.known
            ):
                self.known.add(entry.uuid)
                new.append(entry)
        return new

    def chain_to(self, head: str | None) -> list[TranscriptEntry]:
        rest = [e for e in self.store.chain(self.session_id, head) if e.uuid not in self.known]
        self.known.update(e.uuid for e in rest)
        return rest


async def cmd_claude(argv: list[str]) -> int:
    started = time.monotonic()
    args = parse_claude_args(argv)
    if args.show_help:
        claude_parser().print_help()
        return 0
    if not args.print_mode and args.input_format == "text":
        raise CliError(
            "interactive mode is not supported",
            "use -p (print mode) as in CI, or `durable-agent chat` for a conversation",
        )
    prompt = args.prompt
    if args.input_format == "text" and prompt is None:
        prompt = "" if sys.stdin.isatty() else sys.stdin.read()
        if not prompt.strip():
            raise CliError(
                "no prompt", 'give it as an argument or on stdin: echo "…" | durable-agent -p'
            )
    ns = run_args(args)
    console = Console("json")
    stops = Stops()
    async with prepared(ns, console, None) as (client, config), AsyncExitStack() as stack:
        config = config.model_copy(
            update={
                "approvals": args.permission_prompt_tool == "stdio",
                "call": config.call.model_copy(
                    update={"base_system_prompt": args.system_prompt, "stream_events": args.partial}
                ),
            }
        )
        stops.hold()  # a stop from here waits for the session to have started
        opened = await _open_session(client, console, ns, args, config, stack)
        session_id, handle = opened.session_id, opened.handle
        out = Out(args.output_format, session_id, args.replay_user_messages)
        front = Front(client, out, handle, args.permission_prompt_tool == "stdio")
        front.head, front.default_model = opened.head, config.model
        front.travel = opened.travel
        front.workspace = Path(config.workspace)
        store = _store()
        lines = Lines(store, session_id, opened.head)
        if args.partial and args.output_format == "stream-json":
            lines.partial = StreamTail(store, out)
            stack.push_async_callback(lines.partial.stop)
        follower = asyncio.ensure_future(front.follow(lines))

        async def converse() -> None:
            out.init(config, await mcp_states(handle, config))
            if args.input_format == "text":
                await front.submit(prompt)
            else:
                try:
                    await _read_stream(front, follower)
                except InputError as exc:
                    out.error(str(exc), started)  # the SDK reads a result to the end
                    if opened.owned:  # nothing more comes: the session ends with this process
                        with contextlib.suppress(RPCError, TimeoutError):
                            await handle.signal(Signals.CLOSE)
                            await asyncio.wait_for(handle.result(), CLOSE_SECONDS)
                    raise
            await front.accepted.put(None)
            await follower
            if opened.owned:  # a session another process runs goes on after this one
                await handle.signal(Signals.CLOSE)
                await handle.result()

        outcome = await stops.around(converse())
        if isinstance(outcome, Stopped):
            follower.cancel()
            await stop_session(client, handle, opened.owned, console)
            return outcome.exit_code
    last = front.last
    return 0 if last is not None and last.terminal == Terminal.COMPLETED else 1


async def mcp_states(handle: WorkflowHandle[Any, Any], config: QueryConfig) -> list[McpServerState]:
    """The session's MCP servers as it connected them (their status for the init line); it
    connects them as it starts: a few seconds for a server that starts slowly."""
    if not config.mcp_servers:
        return []
    deadline = time.monotonic() + MCP_CONNECT_SECONDS
    while time.monotonic() < deadline:
        try:
            status = await asyncio.wait_for(
                handle.query(Queries.STATUS, result_type=SessionStatus), 10
            )
        except (RPCError, TimeoutError):
            status = None
        if status is not None and status.mcp:
            return status.mcp
        await asyncio.sleep(0.2)
    return [
        McpServerState(name=s.name, status=McpStatus.FAILED, error="no answer yet")
        for s in config.mcp_servers
    ]


MCP_CONNECT_SECONDS = 60.0
CLOSE_SECONDS = 5.0
"""How long a run that ends on bad input waits for its session to close (prompts it accepted
go on after it otherwise)."""


@dataclass
class Opened:
    session_id: str
    handle: WorkflowHandle[Any, Any]
    head: str | None = None
    owned: bool = True
    """Started by this process (it closes it at the end of its input)."""
    travel: Travel | None = None
    """The workspace this process sent to the shared store (each prompt's files come back)."""


async def _open_session(
    client: Client,
    console: Console,
    ns: argparse.Namespace,
    args: argparse.Namespace,
    config: QueryConfig,
    stack: AsyncExitStack,
) -> Opened:
    """A new session, or (`--resume ID`, `--continue`) an earlier one: joined where it still
    runs (this process serves its queue), started again from its head where it finished."""

    resumed = args.resume or (
        await _latest_session(client, config.workspace) if args.cont else None
    )
    if resumed is None:
        session_id = args.session_id or str(uuid.uuid4())
        travel = await upload(config.workspace, console)
        start = SessionInput(
            session_id=session_id, config=config, workspace=travel.hosted if travel else None
        )
    else:
        session_id = resumed
        handle = client.get_workflow_handle(session_id, result_type=SessionStatus)
        try:
            desc = await handle.describe()
        except RPCError as exc:
            raise CliError(f"no session {session_id}: {exc.message}", "durable-agent list") from exc
        if args.fork_session:
            return await _fork(client, console, handle, desc.status, ns, args, config, stack)
        if desc.status == WorkflowExecutionStatus.RUNNING:
            place = await find_session(client, session_id)
            await stack.enter_async_context(
                serving(client, console, session_id, place, ns.no_worker)
            )
            # Asked once this process serves the queue: the session's last worker may be gone.
            status = await handle.query(Queries.STATUS, result_type=SessionStatus)
            if not ns.no_worker:
                await _transcript_here(session_id, status.head_uuid)
            return Opened(session_id, handle, status.head_uuid, owned=False)
        if desc.status != WorkflowExecutionStatus.COMPLETED:
            raise CliError(
                f"session {session_id} is {state_name(desc.status)}: it cannot be resumed",
                f"durable-agent status {session_id} shows how it ended",
            )
        before: SessionStatus = await handle.result()
        await _transcript_here(session_id, before.head_uuid)
        last = before.last_result
        travel = await upload(config.workspace, console)  # the files as they are here now
        state = SessionState(
            head_uuid=before.head_uuid,
            queries=before.queries,
            context_tokens=last.context_tokens if last else 0,
            session_grants=before.session_grants,
            workspace=travel.hosted if travel else None,
            seen=resumed_seen(last, config),
        )
        start = SessionInput(session_id=session_id, config=config, state=state)
    handle = await _start(client, ns, start, stack, "durable-agent -p")
    head = start.state.head_uuid if start.state else None
    return Opened(session_id, handle, head, travel=travel)


async def _start(
    client: Client,
    ns: argparse.Namespace,
    start: SessionInput,
    stack: AsyncExitStack,
    summary: str,
) -> WorkflowHandle[Any, SessionStatus]:
    """Start the session on a queue of its own, served by a worker in this process (unless
    --no-worker) for as long as `stack` lasts; or, when the warm worker of this environment
    and code runs, on its queue (this process then imports no worker: anthropic alone takes
    longer than the 1.5 s a run may take to its first request)."""
    task_queue = new_session_queue(ns, start.session_id)
    found = await warm_worker_for(ns)
    if found is not None:
        task_queue = found.task_queue
        await stack.enter_async_context(served_warm(client, Console("json"), found))
    elif not ns.no_worker:
        from durable_agent.wiring import build_worker

        if warm_eligible(ns):  # for the next run from this shell
            from durable_agent.paths import state_home

            warm.spawn(state_home())
        follow_with(client, await stack.enter_async_context(build_worker(client, task_queue)))
    config, fair = fleet_start(start.config, task_queue)
    return await client.start_workflow(
        Workflows.SESSION,
        start.model_copy(update={"config": config}),
        id=start.session_id,
        task_queue=task_queue,
        static_summary=summary,
        memo=session_memo(task_queue, start.config, "claude"),
        result_type=SessionStatus,
        **fair,
    )


async def _fork(
    client: Client,
    console: Console,
    handle: WorkflowHandle[Any, SessionStatus],
    status: WorkflowExecutionStatus | None,
    ns: argparse.Namespace,
    args: argparse.Namespace,
    config: QueryConfig,
    stack: AsyncExitStack,
) -> Opened:
    """`--fork-session`: a new session that starts from the resumed one's head (its finished
    prompts), which goes on untouched."""

    if status == WorkflowExecutionStatus.COMPLETED:
        before = await handle.result()
    elif status == WorkflowExecutionStatus.RUNNING:
        before = await handle.query(Queries.STATUS, result_type=SessionStatus)
    else:
        raise CliError(
            f"session {handle.id} is {state_name(status)}: it cannot be forked",
            f"durable-agent status {handle.id} shows how it ended",
        )
    await _transcript_here(handle.id, before.head_uuid)
    session_id = args.session_id or str(uuid.uuid4())
    await asyncio.to_thread(_store().fork, handle.id, session_id, before.head_uuid)
    last = before.last_result
    travel = await upload(config.workspace, console)
    state = SessionState(
        head_uuid=before.head_uuid,
        context_tokens=last.context_tokens if last else 0,
        session_grants=before.session_grants,
        workspace=travel.hosted if travel else None,
        seen=resumed_seen(last, config),
    )
    start = SessionInput(session_id=session_id, config=config, state=state)
    forked = await _start(client, ns, start, stack, f"fork of {handle.id}")
    return Opened(session_id, forked, before.head_uuid, travel=travel)


async def _transcript_here(session_id: str, head: str | None) -> None:
    """A session goes on from its transcript, which the embedded store keeps in the state dir
    of the machine that ran it (a shared store, DURABLE_AGENT_STORE, keeps it for every
    machine): refuse, in one line, to go on from a machine that does not hold it, rather than
    start a worker there that cannot read it."""
    store = _store()
    if head is None or head in await asyncio.to_thread(store.entries, session_id):
        return
    raise CliError(
        f"session {session_id}'s transcript is not in this machine's state dir "
        f"({store.transcript_path(session_id)} lacks its last entry)",
        "resume it on the machine that ran it (same DURABLE_AGENT_HOME), or share a store "
        "(DURABLE_AGENT_STORE=postgresql://…, for the machine that runs it too), or first copy "
        f"{store.transcript_path(session_id).name} (and its .results directory) from the "
        "sessions directory there into this one",
    )


async def _latest_session(client: Client, workspace: str) -> str:
    """`--continue`: the newest session of this workspace."""
    query = f'WorkflowType="{Workflows.SESSION}"'
    async for wf in client.list_workflows(query, limit=100):
        try:
            memo = await wf.memo()
        except Exception:  # noqa: BLE001 — an unreadable memo is not this workspace's
            continue
        if memo.get("workspace") == workspace:
            return wf.id
    raise CliError(f"no session to continue in {workspace}", 'start one: durable-agent -p "…"')


async def _read_stream(front: Front, follower: asyncio.Future[Any]) -> None:
    """User messages and control messages from stdin until its end."""
    stdin = Stdin()
    number = messages = 0
    while (raw := await stdin.lines.get()) is not None:
        number += 1
        if follower.done():
            follower.result()  # its error, if it failed
        message = parse_line(raw, number)
        if message is None:
            continue
        messages += 1
        kind = message.get("type")
        if kind == "user":
            await front.submit(prompt_text(message))
        elif kind == "control_request":
            await front.control(message)
        elif kind == "control_response":
            front.reply(message)
        elif kind == "control_cancel_request":
            continue
        else:
            raise InputError(f"line {number}: unknown message type {kind!r}")
    if messages == 0:  # (an SDK that only said `initialize` and left has its answer)
        raise InputError("it held only blank lines" if number else "it is empty")


def _with_tool_result(req: HookCallbackRequest, session_id: str) -> dict[str, Any]:
    """The callback's input with the tool's stored result (PostToolUse `tool_response`,
    PostToolUseFailure `error`), read from this machine's store (blocking)."""
    ref = req.tool_result
    if ref is None:
        return req.input
    block = _store().tool_result(session_id, ref.tool_use_id, ref.run_id)
    if block is None:
        return req.input
    return {**req.input, result_field(req.event): block.text()}


def _store() -> Any:
    """This machine's transcript store: one per state dir and process, so that the entries it
    has parsed (resume's check, the live lines, hook results) are read once."""
    from durable_agent.paths import state_home

    return _store_at(str(state_home()))


def _store_at(root: str) -> Any:
    from durable_agent.store import open_store

    return open_store(Path(root))


def resumed_seen(last: QueryResult | None, config: QueryConfig) -> SeenFiles | None:
    """The files the session watches, its memory files as this CLI read them into the system
    prompt (an edit made before now is in it, not a change to note)."""
    seen = last.seen if last is not None else None
    wanted = config.attachments
    if wanted is None or not wanted.memory_stamps:
        return seen
    base = seen or SeenFiles()
    return base.model_copy(update={"stamps": {**base.stamps, **wanted.memory_stamps}})
