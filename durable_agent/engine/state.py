"""The query loop's closed sets (transitions, terminals), its frozen State and QueryConfig."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from durable_agent.engine.agents import AgentDef
from durable_agent.engine.budget import BudgetTracker
from durable_agent.engine.errors import ErrorKind
from durable_agent.engine.messages import ToolResultBlock, Usage
from durable_agent.engine.permissions import (
    Decision,
    PermissionContext,
    SandboxSpec,
    SessionGrant,
)
from durable_agent.engine.prompt import Environment
from durable_agent.engine.schedules import Wakeup, WakeupRequest
from durable_agent.engine.skills import SkillInfo
from durable_agent.engine.tools import AgentInput, TodoItem, ToolName
from durable_agent.engine.web_search import WebSearchConfig
from durable_agent.mcp.config import McpServerSpec
from durable_agent.mcp.contracts import McpTool

DEFAULT_MODEL = "claude-sonnet-4-5"
DEFAULT_MAX_OUTPUT_TOKENS = 8_000
ESCALATED_MAX_OUTPUT_TOKENS = 64_000
MAX_OUTPUT_TOKENS_RECOVERIES = 3
UNATTENDED_MAX_SECONDS = 6 * 3600.0
OUTPUT_RECOVERY_MESSAGE = (
    "Output token limit reached — continue exactly from where you stopped, without repeating "
    "anything. Break the remaining work into smaller pieces."
)
DEFAULT_TOOL_CONCURRENCY = 10
TOOL_CONCURRENCY_ENV = "DURABLE_AGENT_MAX_TOOL_USE_CONCURRENCY"
DEFAULT_ITERATIONS_PER_RUN = 100
TEXT_PREVIEW_CHARS = 16_000
MAX_PROMPT_CHARS = 100_000
"""A prompt travels in workflow history; larger ones must be put in a file and referenced."""
MAX_TRANSITIONS = 100
"""`State.transitions` keeps the newest ones: the state is carried across continue-as-new, and a
prompt of any length must not grow it (`dropped_transitions` counts the rest)."""


class Transition(StrEnum):
    """Why the loop continued (the reference engine's `transition.reason`)."""

    NEXT_TURN = "next_turn"
    STOP_HOOK_BLOCKING = "stop_hook_blocking"
    TOKEN_BUDGET_CONTINUATION = "token_budget_continuation"
    REACTIVE_COMPACT_RETRY = "reactive_compact_retry"
    COLLAPSE_DRAIN_RETRY = "collapse_drain_retry"
    MAX_OUTPUT_TOKENS_ESCALATE = "max_output_tokens_escalate"
    MAX_OUTPUT_TOKENS_RECOVERY = "max_output_tokens_recovery"
    BACKGROUND_AGENT_REPORTS = "background_agent_reports"
    """Claude had finished, and the reports of its background agents came in."""


class Terminal(StrEnum):
    """Why a query ended. These names are the public contract."""

    COMPLETED = "completed"
    ABORTED_STREAMING = "aborted_streaming"
    ABORTED_TOOLS = "aborted_tools"
    BLOCKING_LIMIT = "blocking_limit"
    PROMPT_TOO_LONG = "prompt_too_long"
    IMAGE_ERROR = "image_error"
    MODEL_ERROR = "model_error"
    MAX_TURNS = "max_turns"
    MAX_BUDGET = "max_budget"
    """The prompt's model calls cost `--max-budget-usd` or more (engine/pricing.py)."""
    HOOK_STOPPED = "hook_stopped"
    STOP_HOOK_PREVENTED = "stop_hook_prevented"


class EagerTools(StrEnum):
    """Which tool_use blocks may start before the model's stream ends."""

    SAFE = "safe"
    """Only concurrency-safe, read-only ones: a tool started for an attempt that later fails
    still runs to its end, and for these that costs nothing."""
    ALL = "all"
    NONE = "none"
    """Every tool starts after the stream (`--no-streaming-tools`)."""


LEGACY_STREAMING_FLAG = "streaming_tool_execution"


def _legacy_streaming_flag(data: dict[str, Any]) -> dict[str, Any]:
    """Configs written before `eager_tools` was the one gate: streaming execution off meant
    that nothing starts early, whatever `eager_tools` said."""
    if data.pop(LEGACY_STREAMING_FLAG, True) is False:
        data["eager_tools"] = EagerTools.NONE
    return data


class ModelCallConfig(BaseModel):
    """What the model call reads (call_model, and the compaction's summary call): it is
    `CallModelInput.config` and `CompactInput.config`."""

    model_config = ConfigDict(frozen=True)

    system_prompt: str | None = None
    """Extra system prompt text appended to the built-in one."""
    base_system_prompt: str | None = None
    """Replaces the built-in system prompt (`--system-prompt`; "" sends none)."""
    environment: Environment | None = None
    """Where the session was started (directory, git, platform, date), gathered once by the
    CLI: the system prompt's environment block."""
    memory: str = ""
    """The CLAUDE.md memory files (engine/memory.py) as read where the session was started."""
    mcp_tools: list[McpTool] = Field(default_factory=list)
    """The MCP servers' tools as the session recorded them (connect, then refresh between
    prompts): listed in each request after ours; a replay never asks a server."""
    agents: list[AgentDef] = Field(default_factory=list)
    """The sub-agent definitions found where the session was started (durable_agent/agents.py;
    general-purpose is always there): the Agent tool's description lists them."""
    skills: list[SkillInfo] = Field(default_factory=list)
    """The Agent Skills found where the session was started (durable_agent/skills.py; at most
    MAX_SKILLS): the Skill tool's description lists them, and without any no Skill tool is
    sent."""
    tools: tuple[str, ...] = tuple(name.value for name in ToolName)
    """Names of the tools offered to the model."""
    query_source: str = "sdk"
    """Who asks (the reference engine's querySource): background sources fail at once on 529."""
    unattended: bool = False
    """Ride out 429/529 indefinitely (backoff capped at 5 minutes) for
    `ActivityOptions.unattended_max_seconds`."""
    fallback_model: str | None = None
    """Model to switch to for the rest of the query when the main one stays overloaded."""
    max_retries: int = Field(default=10, ge=0)
    """Retries of one model call after its first attempt, outside unattended 429/529 handling."""
    stream_idle_seconds: float = Field(default=90.0, gt=0)
    """A model stream that sends nothing for this long is a stalled attempt: closed, retried."""
    eager_tools: EagerTools = EagerTools.SAFE
    """Which tools may start while the model still streams (see EagerTools); the one gate of
    streaming tool execution (`none` is the old `streaming_tool_execution: false`)."""
    compact_max_tokens: int = Field(default=16_000, ge=1_000)
    """Output cap of a summary (it must fit the 20k summary reserve)."""
    permissions: PermissionContext | None = None
    """Rules, mode and working directories every tool call is checked against (the call
    step decides, since only it sees the inputs); None: no checks (the engine's own tests and
    histories recorded before permissions existed)."""
    stream_events: bool = False
    """Also write each raw stream event to the session's stream file (for a front-end that
    shows partial messages); never to history or the transcript."""
    tool_hooks: dict[str, Any] | None = None
    """The settings' PreToolUse / PostToolUse / PostToolUseFailure hooks: a tool they match
    goes to the workflow (which runs them around it), never inside the call step, and keeps
    its input on the ToolCall for the hooks' stdin. None: no tool hooks."""
    web_search: WebSearchConfig | None = Field(default_factory=WebSearchConfig)
    """The API's web search (WebSearch), offered unless the permissions deny it; None: off
    (`--tools` without WebSearch)."""

    @model_validator(mode="before")
    @classmethod
    def _one_gate(cls, data: Any) -> Any:
        return _legacy_streaming_flag(dict(data)) if isinstance(data, dict) else data


class ActivityOptions(BaseModel):
    """Timeouts and heartbeats of the activities; only workflows/ reads them."""

    model_config = ConfigDict(frozen=True)

    unattended_max_seconds: float = Field(default=UNATTENDED_MAX_SECONDS, gt=0)
    """schedule_to_close of a model call in unattended mode (all its retries included)."""
    model_heartbeat_seconds: float = 5.0
    """Heartbeat timeout of the model activity (a dead worker is noticed after this)."""
    tool_heartbeat_seconds: float = 5.0
    """Heartbeat timeout of tool and hook activities."""
    model_call_timeout_seconds: float = 600.0
    """start_to_close of one model call attempt."""
    tool_timeout_seconds: float = 900.0
    """start_to_close of one tool attempt (Bash has its own, shorter, timeout)."""
    model_task_queue: str | None = None
    """The task queue of the model calls (the fleet's rate-limited model queue,
    durable_agent/fairness.py); None: the session's own queue."""


class Attachments(BaseModel):
    """Context the loop gives the model between turns, as Claude Code does."""

    model_config = ConfigDict(frozen=True)

    nested_memory: bool = False
    """A folder's CLAUDE.md below the workspace, the first time a file under it is read (the
    project memory level is loaded)."""
    changed_files: bool = False
    """A file the agent read or wrote that changed outside it before the next prompt: noted,
    with its current text."""
    memory_stamps: dict[str, str] = Field(default_factory=dict)
    """The memory files in the workspace as the system prompt has them: a session's first
    prompt starts watching them, so that an edit of one is noted before a later prompt."""


class SeenFiles(BaseModel):
    """The files the loop has been watching for the model (carried from prompt to prompt)."""

    stamps: dict[str, str] = Field(default_factory=dict)
    """Path the model used → its stamp (durable_agent/stamps.py) when a tool last read or
    wrote it (the newest MAX_SEEN_FILES, oldest first)."""
    attached: list[str] = Field(default_factory=list)
    """The nested CLAUDE.md files already given (never twice)."""


MAX_SEEN_FILES = 200


class QueryConfig(BaseModel):
    """Gates and limits, snapshotted once when a query starts (never read from env in a workflow):
    what the engine decides with, and (`call`, `activity`) what the model call and the activity
    options read."""

    model_config = ConfigDict(frozen=True)

    model: str = DEFAULT_MODEL
    """Model id sent to the Messages API."""
    max_turns: int | None = None
    """Stop with `max_turns` once this many model turns ran (None = unlimited)."""
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS
    """`max_tokens` of each request."""
    workspace: str = "."
    """Absolute path of the directory the tools are confined to."""
    tool_concurrency: int = Field(default=DEFAULT_TOOL_CONCURRENCY, ge=1)
    """How many concurrency-safe tools run at once."""
    thinking_budget: int | None = Field(default=None, ge=1024)
    """Enable extended thinking with this many budget tokens."""
    prompt_caching: bool = True
    """cache_control on the system prompt and the last message."""
    context_window: int | None = Field(default=None, ge=50_000)
    """Context window in tokens (default: 200k, or 1M for a model id ending in `[1m]`)."""
    autocompact: bool = True
    """Summarise the conversation when it nears the window; off: stop at `blocking_limit`."""
    tool_result_budget_tokens: int = Field(default=25_000, ge=1_000)
    """A larger tool result is shown to the model as a preview plus the path of the whole."""
    message_result_budget_tokens: int = Field(default=50_000, ge=1_000)
    """The same, for all tool results of one message together."""
    snip_keep_turns: int | None = Field(default=None, ge=1)
    """Keep only this many recent turns in the request (after the first prompt); None: off."""
    microcompact_keep_recent: int = Field(default=10, ge=0)
    """Results of compactable tools older than the newest N are cleared from the request..."""
    microcompact_above_tokens: int | None = None
    """...once the context is above this many tokens (default: half the window)."""
    max_budget_usd: float | None = Field(default=None, gt=0)
    """Stop before the next model call once the prompt's calls cost this much (USD, by the
    price table); `--max-budget-usd`."""
    token_budget: int | None = Field(default=None, ge=1)
    """Output tokens Claude should spend on a prompt: when it stops earlier (below 90 %), it is
    told to keep working (`--token-budget`; or written in the prompt, `+500k`)."""
    task_budget: int | None = Field(default=None, ge=1)
    """Total task budget (API `output_config.task_budget`), sent from the first request;
    `remaining` is added after a compaction."""
    stop_hooks: bool = True
    """Run the user's Stop hooks (Claude Code settings) when Claude finishes."""
    iterations_per_run: int = Field(default=DEFAULT_ITERATIONS_PER_RUN, ge=1)
    """Continue-as-new after this many loop iterations in one workflow run."""
    call: ModelCallConfig = ModelCallConfig()
    """What the model call reads (sent with each call)."""
    activity: ActivityOptions = ActivityOptions()
    """Timeouts and heartbeats of the activities the workflow schedules."""
    sandbox: SandboxSpec | None = None
    """Bash runs in the sandbox (settings `sandbox.enabled`, `--sandbox`); None: it does not."""
    approvals: bool = False
    """Someone can answer a tool call that asks (`chat`, the SDK front-end): it waits, durably,
    for an `approve_tool` Update. False (headless `run`): an ask is a deny, nobody waits."""
    mcp_servers: list[McpServerSpec] = Field(default_factory=list)
    """The MCP servers in effect (`--mcp-config`, `.mcp.json` approved, settings), as the CLI
    read them: the session connects them on a worker and records their tools."""
    agent_depth: int = Field(default=0, ge=0)
    """0: a session's prompt; 1: a sub-agent's (it has no Agent tool)."""
    tool_summaries: bool = False
    """After each tool batch a small-model call writes a one-line summary of it, beside the
    next model call, shown as a progress line (on in `chat`; DURABLE_AGENT_TOOL_SUMMARIES=1)."""
    attachments: Attachments | None = None
    """What the loop adds to the conversation between turns (engine/attachments.py); None:
    nothing (sessions started before it, and workflow tests)."""
    settings: dict[str, Any] | None = None
    """The merged Claude Code settings the prompt started with (as a settings file spells them,
    plus `layers`: which files contributed): hooks are chosen from it, `status` shows it. The
    workflow never reads a settings file."""

    @model_validator(mode="before")
    @classmethod
    def _nest_flat_fields(cls, data: Any) -> Any:
        """The flat shape (histories written before the split, and `QueryConfig(unattended=True)`)
        gives the same config: each field of a sub-model is moved into it."""
        if not isinstance(data, dict):
            return data
        data = _legacy_streaming_flag(dict(data))
        for key, sub in (("call", ModelCallConfig), ("activity", ActivityOptions)):
            flat = {name: data.pop(name) for name in sub.model_fields if name in data}
            if not flat:
                continue
            nested = data.get(key) or {}
            if isinstance(nested, BaseModel):
                nested = nested.model_dump(exclude_unset=True)
            twice = sorted(set(flat) & set(nested))
            if twice:
                raise ValueError(f"{', '.join(twice)} given both flat and in `{key}`")
            data[key] = {**nested, **flat}
        return data


class ToolResultRef(BaseModel):
    """A tool_result for the next user entry: stored by the tool activity, or given inline."""

    tool_use_id: str
    inline: ToolResultBlock | None = None
    run_id: str = ""
    """Which execution's stored result (a discarded attempt's result is never referenced)."""


class PendingUser(BaseModel):
    """A user entry the workflow has decided on but the store may not hold yet."""

    uuid: str
    parent_uuid: str | None
    prompt: str | None = None
    results: list[ToolResultRef] = Field(default_factory=list)
    context: list[str] = Field(default_factory=list)
    """What the loop adds after the prompt or the results (a nested CLAUDE.md, a changed file):
    each a text block of its own."""
    prompts: list[str] = Field(default_factory=list)
    """Prompts the user sent while the tools ran, after the results (each a text block)."""
    prompt_ids: list[str] = Field(default_factory=list)
    """Their ids (`State.mid_turn`): absorbed once the model has answered this entry."""


class WithheldError(BaseModel):
    """A failure the loop may recover from (prompt too long), returned instead of raised."""

    kind: ErrorKind
    message: str
    prompt_tokens: int | None = None
    max_tokens: int | None = None


class ToolCall(BaseModel):
    """A tool_use the model asked for, without its (possibly large) input."""

    id: str
    name: str
    concurrency_safe: bool
    read_only: bool
    summary: str
    permission: Decision | None = None
    """What the permission rules and mode decided (None: not checked)."""
    permission_input: dict[str, Any] | None = None
    """The tool's input, kept only when it is not allowed (for `permission_denials`) or when
    tool hooks match it (their stdin's `tool_input`)."""
    todos: list[TodoItem] | None = None
    """A valid TodoWrite call's list: the workflow keeps it once the call ran."""
    agent: AgentInput | None = None
    """A valid Agent call's input: the workflow runs it as a child workflow."""
    task_stop: str | None = None
    """A valid TaskStop call's task id: the workflow stops that background agent."""
    wakeup: WakeupRequest | None = None
    """A valid ScheduleWakeup call (its delay clamped): the session keeps it once the call ran."""
    cron_job: str | None = None
    """A valid CronCreate call's job id: the session deletes the job when it ends."""


class PermissionDenial(BaseModel):
    """A tool call the permission rules or mode refused (Claude Code's `permission_denials`)."""

    tool_name: str
    tool_use_id: str
    tool_input: dict[str, Any] = Field(default_factory=dict)
    reason: str = ""


class RunToolOutput(BaseModel):
    tool_use_id: str
    is_error: bool
    preview: str
    """First line(s) of the result for display; the whole result is in the store."""
    content_chars: int = 0
    inline: ToolResultBlock | None = None
    """The whole result, when the store could not keep it (the tool ran; it must not be lost)."""
    run_id: str = ""
    """Of a tool the model-call step ran itself: the execution its stored result belongs to."""
    denied: bool = False
    """Refused by the permission rules or mode: it never ran (and aborts no sibling)."""


class Phase(StrEnum):
    """Where the loop is: what the last step left for the engine to decide on (`decide`)."""

    TURN = "turn"
    """A new iteration: continue-as-new, an interrupt, the context check."""
    CALL = "call"
    """The context is ready: call the model."""
    RECOVER = "recover"
    """The API withheld an error the loop may recover from (`State.withheld`)."""
    FAILED = "failed"
    """The model call failed (`State.ending`): the fallback model, or model_error."""
    TOOLS = "tools"
    """The answer asks for tools (`State.answer`)."""
    TOOLS_DONE = "tools_done"
    """Every tool_use has its result in `pending`."""
    NEXT_TURN = "next_turn"
    """The turn is over: the next one starts, unless max_turns is reached."""
    STOPPING = "stopping"
    """Claude finished: the Stop hooks may send it back to work."""
    HOOKS_PASSED = "hooks_passed"
    """The Stop hooks let it finish: the token budget may still continue it."""
    ENDED = "ended"
    """The prompt ends with `State.ending`."""


class Answer(BaseModel):
    """What the loop still needs of the model's last answer."""

    attempt: int = 1
    """The activity attempt that produced it (its early tools are the valid ones)."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    text: str = ""
    done: list[RunToolOutput] = Field(default_factory=list)
    """Tool calls the model-call step already ran (read-only ones)."""


class Ending(BaseModel):
    terminal: Terminal
    message: str = ""
    error_type: str = ""
    """Of a failed model call: whether the fallback model may take over."""


class CompactTracking(BaseModel):
    """Autocompact bookkeeping (reset after every compaction)."""

    compacted: bool = False
    turn_id: str | None = None
    turn_counter: int = 0
    consecutive_failures: int = 0


class State(BaseModel):
    """Everything carried from one loop iteration to the next (and across continue-as-new)."""

    model_config = ConfigDict(frozen=True)

    turn_count: int = 1
    head_uuid: str | None = None
    pending: PendingUser | None = None
    transition: Transition | None = None
    usage: Usage = Usage()
    transitions: tuple[Transition, ...] = ()
    """The newest MAX_TRANSITIONS reasons to continue."""
    dropped_transitions: dict[Transition, int] = Field(default_factory=dict)
    """The older ones, counted by kind (`transition_count` sees them all)."""
    event_count: int = 0
    model: str | None = None
    """The model in use when it is not the configured one (after a fallback)."""
    fallback_head: str | None = None
    """The last entry before the fallback: thinking blocks up to it are not sent again."""
    max_tokens_override: int | None = None
    output_recoveries: int = 0
    usage_by_model: dict[str, Usage] = Field(default_factory=dict)
    retries: dict[str, int] = Field(default_factory=dict)
    """Failed model-call attempts that Temporal retried, by error type."""
    context_tokens: int = 0
    """Tokens the next request is expected to hold (last usage plus new content)."""
    compaction: CompactTracking = CompactTracking()
    compactions: int = 0
    has_attempted_reactive_compact: bool = False
    """Once per turn; survives a stop_hook_blocking continue so compaction cannot loop."""
    collapse_drained: bool = False
    collapsed_ids: tuple[str, ...] = ()
    """Tool results cleared from the view since the last compaction (the newest, bounded)."""
    microcompacting: bool = False
    strip_images: bool = False
    task_budget_remaining: int | None = None
    warned_context: bool = False
    stop_hook_active: bool = False
    budget_tracker: BudgetTracker = BudgetTracker()
    permission_denials: tuple[PermissionDenial, ...] = ()
    """The newest refused calls, each with a summary of its input (engine/bounds.py)."""
    denials_dropped: int = 0
    """Older refused calls no longer listed."""
    api_duration_ms: int = 0
    """Time the model calls took (request to the end of the stream), summed."""
    session_grants: tuple[SessionGrant, ...] = ()
    """What the user allowed by answering "always for this session" (the session's earlier
    prompts' answers included): a later call of the session that would ask is checked with them."""
    phase: Phase = Phase.TURN
    answer: Answer | None = None
    withheld: WithheldError | None = None
    ending: Ending | None = None
    run_iterations: int = 0
    """Loop iterations in this workflow run (continue-as-new after `iterations_per_run`)."""
    notice: str = ""
    """What to tell the user about the decision just made; `decide` shows it once."""
    seen: SeenFiles = SeenFiles()
    """Files read or written, nested memory given (for the between-turn attachments)."""
    todos: tuple[TodoItem, ...] = ()
    """The model's todo list (its last TodoWrite), carried from prompt to prompt."""
    mid_turn: tuple[tuple[str, str], ...] = ()
    """Prompts the session passed on while this one runs, (id, text), not yet given to the
    model: they go after the next batch's tool results."""
    absorbed: tuple[str, ...] = ()
    """The ids of those given to the model (the session answers them with this result)."""
    wakeups: tuple[Wakeup, ...] = ()
    """Wake-ups this prompt's ScheduleWakeup calls asked for (at most MAX_WAKEUPS)."""
    cron_jobs: tuple[str, ...] = ()
    """Job ids of this prompt's CronCreate calls (at most MAX_CRON_JOBS)."""

    def transition_count(self, transition: Transition) -> int:
        """How often the prompt continued for `transition`, the dropped ones included."""
        return self.transitions.count(transition) + self.dropped_transitions.get(transition, 0)

    def at(self, phase: Phase, **changes: object) -> State:
        return self.model_copy(update={"phase": phase, **changes})

    def ended(self, terminal: Terminal, message: str = "") -> State:
        return self.at(Phase.ENDED, ending=Ending(terminal=terminal, message=message))

    def failed(self, message: str, error_type: str) -> State:
        """The model call failed for good (its retries are spent)."""
        ending = Ending(terminal=Terminal.MODEL_ERROR, message=message, error_type=error_type)
        return self.at(Phase.FAILED, ending=ending)

    def next(self, transition: Transition, **changes: object) -> State:
        """A new State for a `continue`, recording why. A new turn resets the once-per-turn
        recovery flags and the output-limit recoveries (escalation, 3 messages); every other
        continue keeps them."""
        kept = (*self.transitions, transition)
        dropped = dict(self.dropped_transitions)
        for old in kept[:-MAX_TRANSITIONS]:
            dropped[old] = dropped.get(old, 0) + 1
        update: dict[str, object] = {
            "transition": transition,
            "transitions": kept[-MAX_TRANSITIONS:],
            "dropped_transitions": dropped,
            "phase": Phase.TURN,
            "answer": None,
            "withheld": None,
            "ending": None,
        }
        if transition == Transition.NEXT_TURN:
            update["has_attempted_reactive_compact"] = False
            update["collapse_drained"] = False
            update["output_recoveries"] = 0
            update["max_tokens_override"] = None
            if self.compaction.compacted:
                update["compaction"] = self.compaction.model_copy(
                    update={"turn_counter": self.compaction.turn_counter + 1}
                )
        return self.model_copy(update={**update, **changes})


class ProgressKind(StrEnum):
    TEXT = "text"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    STATUS = "status"
    APPROVAL = "approval"
    """A tool call waits for a person's decision (the `approvals` query lists it)."""
    RETRY = "retry"
    """A model call failed an attempt and will be tried again (the text says why and when)."""
    HOOK = "hook_callback"
    """An event waits for the Agent SDK's hook callbacks (the `hook_requests` query)."""


class ProgressEvent(BaseModel):
    """What the CLI shows while a query runs."""

    index: int
    kind: ProgressKind
    text: str
    is_error: bool = False


class HostedWorkspace(BaseModel):
    """A session's workspace when it travels (a shared store): the checkpoint (a manifest id
    of the store's blobs) the host's copy must hold, and the task queue of the worker that
    hosts it now (None: none yet, or it was lost)."""

    checkpoint_id: str
    host_queue: str | None = None
    lost_hosts: int = 0
    """Hosts this session lost so far (each loss loses the changes since its checkpoint)."""


class QueryResult(BaseModel):
    """The outcome of one prompt."""

    terminal: Terminal
    message: str = ""
    head_uuid: str | None = None
    turn_count: int = 0
    usage: Usage = Usage()
    final_text: str = ""
    transitions: list[Transition] = Field(default_factory=list)
    """The newest MAX_TRANSITIONS."""
    transitions_dropped: int = 0
    """How many older ones `transitions` leaves out."""
    query_workflow_id: str = ""
    model: str = ""
    fallback_used: bool = False
    usage_by_model: dict[str, Usage] = Field(default_factory=dict)
    retries: dict[str, int] = Field(default_factory=dict)
    compactions: int = 0
    context_tokens: int = 0
    permission_denials: list[PermissionDenial] = Field(default_factory=list)
    denials_dropped: int = 0
    """Refused calls older than those `permission_denials` lists."""
    session_grants: list[SessionGrant] = Field(default_factory=list)
    """The session's "always" answers after this prompt (the next prompt starts with them)."""
    api_duration_ms: int = 0
    """Time its model calls took (Claude Code's duration_api_ms)."""
    seen: SeenFiles | None = None
    """The files the loop watches after this prompt (the next prompt starts with them)."""
    todos: list[TodoItem] | None = None
    """The model's todo list after this prompt (None: a prompt from before todo lists)."""
    absorbed: list[str] = Field(default_factory=list)
    """The session's prompts sent while this one ran that reached the model in it."""
    wakeups: list[Wakeup] = Field(default_factory=list)
    """Wake-ups this prompt asked for: the session queues each prompt when it is due."""
    cron_jobs: list[str] = Field(default_factory=list)
    """Cron jobs this prompt created (the session deletes them when it ends)."""
    workspace: HostedWorkspace | None = None
    """A travelling workspace after this prompt: its last checkpoint is the files the model
    left (what the CLI writes back); None when tools work in the workspace in place."""
