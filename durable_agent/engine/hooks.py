"""Hook events in Claude Code's format, decided without I/O: which handlers an event runs
(`hooks_for`) and what their exits and output mean for the loop (`aggregate`).

The activity runs the commands (JSON on stdin, in parallel, each with its own timeout) and hands
back one `HookRun` each; the workflow acts on the `HookEventResult`. Built from Claude Code's
public hooks reference; where it leaves a detail open the safer reading is chosen and said so
where it is decided.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from durable_agent.engine.state import ToolResultRef

DEFAULT_TIMEOUT_SECONDS = 60.0
MAX_TEXT_CHARS = 10_000
"""Claude Code caps what one hook adds to the context (and its messages) at 10,000 characters."""

MATCHER_FIELDS: dict[str, str] = {
    "PreToolUse": "tool_name",
    "PostToolUse": "tool_name",
    "PostToolUseFailure": "tool_name",
    "PermissionRequest": "tool_name",
    "PermissionDenied": "tool_name",
    "SessionStart": "source",
    "SessionEnd": "reason",
    "Notification": "notification_type",
    "PreCompact": "trigger",
    "PostCompact": "trigger",
    "SubagentStart": "agent_type",
    "SubagentStop": "agent_type",
    "StopFailure": "error_type",
    "ConfigChange": "source",
    "InstructionsLoaded": "load_reason",
    "Elicitation": "mcp_server_name",
    "ElicitationResult": "mcp_server_name",
}
"""The payload field each event's matcher is compared with. Any other event (UserPromptSubmit,
Stop, ...) has no matcher: its groups run whatever their `matcher` says."""

BLOCKING_EVENTS = frozenset(
    {
        "PreToolUse",
        "PermissionRequest",
        "PostToolUse",
        "PostToolUseFailure",
        "UserPromptSubmit",
        "Stop",
        "SubagentStop",
    }
)
"""Events where exit 2 (or `decision: "block"`) blocks; on any other event exit 2 is a note."""
TOOL_GATES = frozenset({"PreToolUse", "PermissionRequest"})
"""Events whose block is a permission denial of the pending tool call."""
PLAIN_CONTEXT_EVENTS = frozenset({"UserPromptSubmit", "SessionStart"})
"""Events where plain (non-JSON) stdout on exit 0 is added to Claude's context."""
OUTPUT_IGNORED_EVENTS = frozenset({"StopFailure"})
"""Observers only: the docs say their exit code and output are ignored."""

_EXACT = re.compile(r"[A-Za-z0-9_|]+")
PermissionDecision = Literal["allow", "deny", "ask"]
_RANK: dict[str, int] = {"allow": 0, "ask": 1, "deny": 2}
_DECISIONS: dict[str, PermissionDecision] = {"allow": "allow", "ask": "ask", "deny": "deny"}


class HookCommandSpec(BaseModel):
    """One command handler to run."""

    command: str
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    """Seconds before this handler is ended (reported as timed out, non-blocking)."""
    source: str = ""
    """Where it was configured (a settings file), when known; for messages only."""


class HookRun(BaseModel):
    """How one handler ended."""

    command: str
    exit_code: int | None
    """None: it did not exit by itself (timed out, interrupted, or could not start)."""
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    interrupted: bool = False
    """An earlier attempt started it and its outcome was lost with its worker; not re-run."""

    @property
    def blocking(self) -> bool:
        return self.exit_code == 2


class HookEventInput(BaseModel):
    """The input of the `run_hooks` activity: one event, the handlers chosen for it."""

    session_id: str
    workspace: str
    """The hooks' working directory, `cwd` on stdin and `$CLAUDE_PROJECT_DIR`."""
    event: str
    target: str | None = None
    """What the matchers were compared with (tool name, source, trigger, ...); for the record."""
    payload: dict[str, Any] = Field(default_factory=dict)
    """The event's own fields (tool_name, tool_input, tool_response, tool_use_id, prompt,
    source, permission_mode, ...); the activity adds session_id, transcript_path, cwd and
    hook_event_name."""
    commands: list[HookCommandSpec] = Field(default_factory=list)
    """From `hooks_for` on the settings snapshot."""
    heartbeat_seconds: float = 5.0
    """Heartbeat timeout of the hook activity (a dead worker is noticed after this)."""
    env: dict[str, str] = Field(default_factory=dict)
    """The settings' `env`: added to the hooks' environment (private names excepted)."""
    recorded_runs: list[HookRun] = Field(default_factory=list)
    """Runs already made elsewhere (the Agent SDK's hook callbacks), read with these."""
    hosted: str | None = None
    """A travelling workspace's checkpoint: the hooks run in the host's copy of it."""
    ledger_name: str | None = None
    """The step's name in the hook ledger, the same on every host (else the activity's id,
    which a new host's activity does not share)."""
    tool_result: ToolResultRef | None = None
    """PostToolUse / PostToolUseFailure: the tool's result, read from the store by the activity
    into the payload's `tool_response` (or `error`), so a large result stays out of history."""


class HookEventResult(BaseModel):
    """What every handler of one event decided, together.

    Precedence for the loop: `prevent_continuation` first (the prompt ends, `stop_reason` to the
    user; on PreToolUse the call is not made either), then `blocked`, then the rest."""

    event: str = ""
    ran: int = 0
    """Handlers that ran (or whose recorded outcome an earlier attempt left)."""
    blocked: bool = False
    """Exit 2, `decision: "block"`, or a PreToolUse/PermissionRequest deny. Per event:
    PreToolUse / PermissionRequest: the call is not made, `reason` goes to Claude as its result;
    PostToolUse / PostToolUseFailure: the tool already ran, `reason` goes to Claude;
    UserPromptSubmit: the prompt is erased and not sent, `reason` is shown to the user only;
    Stop / SubagentStop: Claude does not stop, `reason` goes to Claude. Never set on other
    events (there exit 2 is a note)."""
    reason: str = ""
    """Every blocking handler's reason (stderr on exit 2), in configured order, one per line."""
    permission_decision: PermissionDecision | None = None
    """PreToolUse `permissionDecision` (or the deprecated `decision: approve|block`) and
    PermissionRequest `decision.behavior`, combined: deny beats ask beats allow; None when no
    handler decided. `allow` only skips the ask: settings deny rules still apply (safer)."""
    permission_reason: str = ""
    """The reasons given with the winning decision (ask: shown to the user; deny: in `reason`)."""
    updated_input: dict[str, Any] | None = None
    """A replacement tool input (PreToolUse/PermissionRequest `updatedInput`); when several
    handlers give one, the last in configured order wins and a note says so. None on deny."""
    additional_context: list[str] = Field(default_factory=list)
    """For Claude's context, in configured order: `additionalContext`, and on UserPromptSubmit
    and SessionStart plain stdout. Empty when a UserPromptSubmit is blocked (no prompt)."""
    prevent_continuation: bool = False
    """Some handler said `continue: false`: Claude stops after this event."""
    stop_reason: str = ""
    """The first `stopReason` given with `continue: false`; shown to the user, not to Claude."""
    system_messages: list[str] = Field(default_factory=list)
    """`systemMessage` warnings, shown to the user."""
    notes: list[str] = Field(default_factory=list)
    """Non-blocking errors shown to the user: other exit codes, timeouts, exit 2 on events
    that cannot block, unusable JSON."""


def matcher_target(event: str, payload: Mapping[str, Any]) -> str | None:
    """The value `event`'s matchers are compared with, taken from its payload."""
    field = MATCHER_FIELDS.get(event)
    value = payload.get(field) if field else None
    return value if isinstance(value, str) else None


def matcher_accepts(matcher: str | None, target: str | None) -> bool:
    """Claude Code's matcher rules: missing, "" or "*" accept everything; a matcher of only
    letters, digits, `_` and `|` is an exact name or a `|` list of them (`Edit|Write`); anything
    else is an unanchored regular expression (`Notebook.*`, `mcp__memory__.*`, `^Write$`).
    A specific matcher never accepts an unknown (None) target; a matcher that does not compile
    is compared as an exact string."""
    if matcher is None or matcher in ("", "*"):
        return True
    if target is None:
        return False
    if _EXACT.fullmatch(matcher):
        names = matcher.split("|")
        # `Task` was the Agent tool's name: a matcher naming either takes both.
        return target in names or (
            target in ("Agent", "Task") and bool({"Agent", "Task"} & set(names))
        )
    try:
        return re.search(matcher, target) is not None
    except re.error:
        return matcher == target


def matcher_problem(matcher: str | None) -> str | None:
    """Why `matcher` can never work as `matcher_accepts` reads it (a regular expression that
    does not compile), else None: for settings validation."""
    if matcher is None or matcher in ("", "*") or _EXACT.fullmatch(matcher):
        return None
    try:
        re.compile(matcher)
    except re.error as exc:
        return f"not a valid regular expression: {exc}"
    return None


def hooks_for(
    hooks: Mapping[str, Any] | None, event: str, target: str | None, source: str = ""
) -> list[HookCommandSpec]:
    """The command handlers of `event` whose group's matcher accepts `target` (the matcher is
    ignored for events without one), deduplicated. `hooks` is a settings `hooks` value, as
    pydantic models (`dict[str, list[HookGroup]]`) or plain JSON. Handlers of other types
    (http, prompt, agent, ...) are not run here."""
    return _specs(hooks, event, target, "command", "command", "", source)


SDK_CALLBACK = "sdk-callback:"
"""A handler the Agent SDK registered (`initialize.hooks`): `HookCommandSpec.command` is this
prefix and the callback id; the SDK process runs it, through the drop-in front-end."""


def callbacks_for(
    hooks: Mapping[str, Any] | None, event: str, target: str | None
) -> list[HookCommandSpec]:
    """The SDK callbacks (`{"type": "callback", "id": …}` handlers) of `event` for `target`."""
    return _specs(hooks, event, target, "callback", "id", SDK_CALLBACK)


def _specs(
    hooks: Mapping[str, Any] | None,
    event: str,
    target: str | None,
    kind: str,
    key: str,
    prefix: str,
    source: str = "",
) -> list[HookCommandSpec]:
    """The handlers of type `kind` (their `key` field names what runs) of the groups of
    `event` whose matcher accepts `target`, deduplicated."""
    groups = hooks.get(event) if isinstance(hooks, Mapping) else None
    found: list[HookCommandSpec] = []
    for group in groups if isinstance(groups, list) else []:
        matcher = _field(group, "matcher")
        if event in MATCHER_FIELDS and not matcher_accepts(
            matcher if isinstance(matcher, str) else None, target
        ):
            continue
        handlers = _field(group, "hooks")
        for handler in handlers if isinstance(handlers, list) else []:
            what = _field(handler, key)
            if _field(handler, "type") == kind and isinstance(what, str) and what:
                timeout = _timeout(_field(handler, "timeout"))
                found.append(HookCommandSpec(command=prefix + what, timeout=timeout, source=source))
    return dedupe(found)


def sdk_hooks(registered: Mapping[str, Any] | None) -> dict[str, list[dict[str, Any]]]:
    """The hooks an `initialize` request registers (`{event: [{matcher, hookCallbackIds,
    timeout}]}`) in the settings' shape, as callback handlers."""
    out: dict[str, list[dict[str, Any]]] = {}
    for event, matchers in (registered or {}).items():
        for m in matchers if isinstance(matchers, list) else []:
            ids = m.get("hookCallbackIds") if isinstance(m, dict) else None
            if not isinstance(ids, list):
                continue
            handlers = [
                {
                    "type": "callback",
                    "id": str(i),
                    **({"timeout": m["timeout"]} if m.get("timeout") else {}),
                }
                for i in ids
            ]
            group: dict[str, Any] = {"hooks": handlers}
            if m.get("matcher") is not None:
                group["matcher"] = m["matcher"]
            out.setdefault(str(event), []).append(group)
    return out


def dedupe(commands: Iterable[HookCommandSpec]) -> list[HookCommandSpec]:
    """Identical command strings run once, where the first stands, with the largest timeout any
    of them was given (a handler is not ended sooner than one of its configurations allows)."""
    first: dict[str, HookCommandSpec] = {}
    for spec in commands:
        seen = first.get(spec.command)
        if seen is None:
            first[spec.command] = spec
        elif spec.timeout > seen.timeout:
            first[spec.command] = seen.model_copy(update={"timeout": spec.timeout})
    return list(first.values())


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def _timeout(value: Any) -> float:
    """Seconds; the default for a missing, non-numeric or non-positive value."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        return DEFAULT_TIMEOUT_SECONDS
    return float(value)


def aggregate(event: str, runs: list[HookRun]) -> HookEventResult:
    """One result from every handler's run, in configured order (see `HookEventResult`).

    Exit 0: stdout that is a JSON object is the handler's output (`continue`, `stopReason`,
    `systemMessage`, `decision`/`reason`, `hookSpecificOutput`); other stdout is context on
    UserPromptSubmit and SessionStart and ignored elsewhere. Exit 2: blocks on the events that
    can block (stderr is the reason; stdout is ignored), a note elsewhere. Other exits, timeouts:
    a note. Safer readings chosen: a PreToolUse/PermissionRequest handler whose run was
    interrupted (started by a lost attempt, not re-run) denies the call, so an unknown verdict
    never lets it through (the model may retry it); `hookSpecificOutput` naming another event is
    ignored with a note; stdout that starts like JSON but does not parse is noted."""
    acc = _Acc(event)
    for run in runs:
        acc.ran += 1
        if event not in OUTPUT_IGNORED_EVENTS:
            acc.read(run)
    return acc.result()


class _Acc:
    """The combined result as the runs are read."""

    def __init__(self, event: str) -> None:
        self.event = event
        self.ran = 0
        self.block_reasons: list[str] = []
        self.decisions: list[tuple[PermissionDecision, str]] = []
        self.updated: list[dict[str, Any]] = []
        self.context: list[str] = []
        self.stop_reasons: list[str] = []
        self.prevent = False
        self.system: list[str] = []
        self.notes: list[str] = []

    def read(self, run: HookRun) -> None:
        name = f"{self.event} hook `{_short(run.command)}`"
        detail = _cap(run.stderr.strip())
        if run.interrupted and self.event in TOOL_GATES:
            self.deny(f"{name} was interrupted and not re-run; the call was not made: {detail}")
        elif run.exit_code is None:
            self.notes.append(f"{name} {detail or 'did not finish'}")
        elif run.exit_code == 2 and self.event in BLOCKING_EVENTS:
            reason = detail or f"{name} blocked this (exit 2)"
            if self.event in TOOL_GATES:
                self.deny(reason)
            else:
                self.block_reasons.append(reason)
        elif run.exit_code != 0:
            self.notes.append(f"{name} exited {run.exit_code}" + (f": {detail}" if detail else ""))
        else:
            self.read_stdout(name, run.stdout)

    def deny(self, reason: str) -> None:
        self.decisions.append(("deny", reason))

    def read_stdout(self, name: str, stdout: str) -> None:
        text = stdout.strip()
        try:
            data = json.loads(text) if text else None
        except ValueError:
            data = None
            if text.startswith("{"):
                self.notes.append(f"{name} printed output that is not valid JSON")
        if isinstance(data, dict):
            self.read_json(name, data)
        elif text and self.event in PLAIN_CONTEXT_EVENTS:
            self.context.append(_cap(text))

    def read_json(self, name: str, data: dict[str, Any]) -> None:
        if data.get("continue") is False:
            self.prevent = True
            self.stop_reasons.append(_text(data.get("stopReason")))
        if message := _text(data.get("systemMessage")):
            self.system.append(message)
        specific = data.get("hookSpecificOutput")
        decided = False
        if isinstance(specific, dict):
            named = specific.get("hookEventName")
            if named is not None and named != self.event:
                self.notes.append(f"{name} gave hookSpecificOutput for {named!r}; ignored")
            else:
                decided = self.read_specific(name, specific)
        self.read_decision(name, data, decided)

    def read_specific(self, name: str, out: dict[str, Any]) -> bool:
        """Whether it made a permission decision."""
        if context := _text(out.get("additionalContext")):
            self.context.append(context)
        if self.event == "PreToolUse":
            decision, reason = out.get("permissionDecision"), out.get("permissionDecisionReason")
            updated = out.get("updatedInput")
        elif self.event == "PermissionRequest" and isinstance(out.get("decision"), dict):
            inner = out["decision"]
            decision, reason, updated = inner.get("behavior"), inner.get("message"), None
            if decision == "allow":
                updated = inner.get("updatedInput")
            if decision == "deny" and inner.get("interrupt") is True:
                self.prevent = True
        else:
            return False
        if updated is not None:
            if isinstance(updated, dict):
                self.updated.append(updated)
            else:
                self.notes.append(f"{name} gave an updatedInput that is not an object; ignored")
        mapped = _decision(decision)
        if mapped is None:
            return False
        text = _text(reason)
        self.decisions.append((mapped, text or (f"{name} denied this" if mapped == "deny" else "")))
        return True

    def read_decision(self, name: str, data: dict[str, Any], decided: bool) -> None:
        """Top-level `decision`/`reason`; PreToolUse's deprecated approve/block only when
        hookSpecificOutput did not decide."""
        decision, reason = data.get("decision"), _text(data.get("reason"))
        if self.event == "PreToolUse":
            if not decided and decision in ("approve", "block"):
                mapped: PermissionDecision = "allow" if decision == "approve" else "deny"
                self.decisions.append((mapped, reason or f"{name} blocked this"))
        elif decision == "block" and self.event in BLOCKING_EVENTS - TOOL_GATES:
            self.block_reasons.append(reason or f"{name} blocked this")

    def result(self) -> HookEventResult:
        out = HookEventResult(
            event=self.event,
            ran=self.ran,
            additional_context=self.context,
            prevent_continuation=self.prevent,
            stop_reason=next((r for r in self.stop_reasons if r), ""),
            system_messages=self.system,
            notes=self.notes,
        )
        if self.decisions:
            winner = max((d for d, _ in self.decisions), key=_RANK.__getitem__)
            reasons = [r for d, r in self.decisions if d == winner and r]
            out.permission_decision = winner
            out.permission_reason = "\n".join(reasons)
            if winner == "deny":
                self.block_reasons = [*reasons, *self.block_reasons]
        if self.updated and out.permission_decision != "deny":
            out.updated_input = self.updated[-1]
            if any(u != self.updated[-1] for u in self.updated):
                out.notes.append(
                    f"{len(self.updated)} {self.event} hooks gave different updatedInput; "
                    "the last configured one was used"
                )
        if self.block_reasons:
            out.blocked = True
            out.reason = "\n".join(self.block_reasons)
            if self.event == "UserPromptSubmit":
                out.additional_context = []
        return out


def _decision(value: Any) -> PermissionDecision | None:
    return _DECISIONS.get(value) if isinstance(value, str) else None


def _text(value: Any) -> str:
    return _cap(value.strip()) if isinstance(value, str) else ""


def _cap(text: str) -> str:
    if len(text) <= MAX_TEXT_CHARS:
        return text
    return text[:MAX_TEXT_CHARS] + f"… ({len(text) - MAX_TEXT_CHARS:,} more characters cut)"


def _short(command: str, limit: int = 120) -> str:
    one_line = " ".join(command.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 1] + "…"
