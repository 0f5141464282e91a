"""Inputs and outputs of every activity and workflow: one pydantic model each."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from durable_agent.engine.hooks import HookCommandSpec
from durable_agent.engine.messages import Usage
from durable_agent.engine.permissions import (
    PermissionContext,
    PermissionMode,
    SandboxSpec,
    SessionGrant,
)
from durable_agent.engine.request import ModelRequest
from durable_agent.engine.schedules import Wakeup
from durable_agent.engine.state import (
    HostedWorkspace,
    ModelCallConfig,
    PendingUser,
    ProgressEvent,
    QueryConfig,
    QueryResult,
    SeenFiles,
    State,
    Terminal,
    ToolResultRef,
)
from durable_agent.engine.state import RunToolOutput as RunToolOutput  # re-exported
from durable_agent.engine.state import ToolCall as ToolCall  # re-exported: State carries it
from durable_agent.engine.state import WithheldError as WithheldError
from durable_agent.engine.tools import TodoItem
from durable_agent.mcp.config import McpServerSpec
from durable_agent.mcp.contracts import McpServerState


class CallModelInput(BaseModel):
    """Ids and the few new entries; the activity reads the rest of the chain from the store."""

    session_id: str
    parent_uuid: str | None
    new_user: PendingUser | None = None
    assistant_uuid: str
    config: ModelCallConfig
    workspace: str
    """The tools' directory (the system prompt names it)."""
    request: ModelRequest
    run_read_only_tools: bool = False
    """Run the answer's Read, Grep and Glob calls inside this step (no tool activity, no
    signal); their results come back in `CallModelOutput.tool_results`."""


class RetryNotice(BaseModel):
    """Sent by the model activity to its workflow before Temporal retries it."""

    attempt: int
    error_type: str
    message: str
    delay_seconds: float | None


class CallModelOutput(BaseModel):
    assistant_uuid: str
    stop_reason: str | None
    usage: Usage
    text: str = ""
    """Assistant text, capped at TEXT_PREVIEW_CHARS (the store keeps it whole)."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    model: str = ""
    withheld: WithheldError | None = None
    attempt: int = 1
    """The activity attempt that produced this message (its early tools are the valid ones)."""
    tool_results: list[RunToolOutput] = Field(default_factory=list)
    """The tool calls this step ran itself (`run_read_only_tools`), stored under their run_id."""
    api_duration_ms: int = 0
    """From sending the request to the end of the answer's stream (this attempt)."""


class ToolReady(BaseModel):
    """Signalled by the model activity when a tool_use block is complete in the stream."""

    call_id: str
    """The assistant uuid of the model call."""
    attempt: int
    call: ToolCall


class RunToolInput(BaseModel):
    """The tool_use block itself is read from the store by (assistant_uuid, tool_use_id)."""

    session_id: str
    assistant_uuid: str
    tool_use_id: str
    name: str
    workspace: str
    run_id: str = ""
    """Names this execution's stored result."""
    permissions: PermissionContext | None = None
    """Read deny rules keep denied files out of Grep and Glob results (and the sandbox's view)."""
    sandbox: SandboxSpec | None = None
    """Bash runs under bubblewrap with this policy; None: unsandboxed."""
    env: dict[str, str] = Field(default_factory=dict)
    """The settings' `env`: added to the tool's environment (private names excepted)."""
    input_override: dict[str, Any] | None = None
    """The input to run instead of the stored block's: a PreToolUse hook's `updatedInput`
    (checked against the permission rules again by the workflow)."""
    hosted: str | None = None
    """A travelling workspace's checkpoint: the host runs the tool in its copy of it (made to
    hold that checkpoint first), `workspace` being the path the model sees."""
    mcp_server: McpServerSpec | None = None
    """An MCP tool's server (the call goes to this worker's connection to it)."""
    mcp_tool: str | None = None
    """The server's own name for the tool (`mcp__<server>__<tool>` is the model's)."""


class BetweenTurnsInput(BaseModel):
    """The between-turn look at the workspace (activities/turns.py): after a batch of file
    tools (`tool_use_ids`: their stored calls name the paths), or as a prompt starts
    (`check_changes`: what changed since the files were last seen)."""

    session_id: str
    workspace: str
    """The workspace as the model sees it (its paths are the ones in `seen`)."""
    seen: SeenFiles
    assistant_uuid: str | None = None
    tool_use_ids: list[str] = Field(default_factory=list)
    check_changes: bool = False
    nested_memory: bool = False
    hosted: str | None = None
    """A travelling workspace's checkpoint: the host looks at its copy (as for a tool)."""


class BetweenTurnsOutput(BaseModel):
    seen: SeenFiles
    context: list[str] = Field(default_factory=list)
    """What to add to the next user entry, each a text block (empty: nothing)."""


class AgentReportInput(BaseModel):
    """A finished sub-agent: its last answer becomes the parent's tool result."""

    session_id: str
    agent_session_id: str
    head_uuid: str | None
    tool_use_id: str
    run_id: str = ""
    agent: str
    terminal: Terminal
    message: str = ""
    notify: bool = False
    """A background agent's: the report is returned whole (inline) for a message to the
    parent, not stored as a tool result (its call was answered when it started)."""


class SummaryInput(BaseModel):
    """A tool batch to sum up in one line (activities/summaries.py)."""

    session_id: str
    assistant_uuid: str
    results: list[ToolResultRef]


class SummaryOutput(BaseModel):
    summary: str


class ApprovalRequest(BaseModel):
    """A tool call that waits for a person's decision (the `approvals` query lists them)."""

    request_id: str
    """The call's tool_use_id: what `approve_tool` names."""
    tool_name: str
    tool_input: dict[str, Any] = Field(default_factory=dict)
    summary: str
    reason: str
    """Which rule or mode asks."""
    always: str
    """What "always for this session" would allow (a rule, or this exact call)."""


class ApprovalAnswer(BaseModel):
    """The `approve_tool` Update: allow once, allow always (for the session), or deny."""

    request_id: str
    behavior: Literal["allow", "deny"]
    always: bool = False
    """With allow: the session allows the same again without asking (see SessionGrant)."""
    message: str = ""
    """With deny: told to Claude with the denial."""
    by: str = ""
    """Who answered (the CLI puts user@host), for the record."""


class AppendEntryInput(BaseModel):
    session_id: str
    entry: PendingUser


class AppendEntryOutput(BaseModel):
    uuid: str


class QueryInput(BaseModel):
    """Input of QueryWorkflow; `state` is set when continuing as new."""

    session_id: str
    prompt: str
    parent_uuid: str | None
    config: QueryConfig
    state: State | None = None
    context_tokens: int = 0
    """The conversation's size before this prompt (from the previous prompt's result)."""
    session_grants: list[SessionGrant] = Field(default_factory=list)
    """The session's "always" answers so far."""
    answered: QueryResult | None = None
    """This prompt reached the model while the one before it ran, whose result (here) is its
    answer too: the workflow returns it at once."""
    session_start: str | None = None
    """SessionStart's source when this prompt opens the session (`startup`) or a CLI's return
    to it (`resume`); None otherwise."""
    compact: bool = False
    """A manual compaction (`/compact`) instead of a prompt: `prompt` holds its instructions
    (may be empty); no model turn runs after the summary."""
    events: list[ProgressEvent] = Field(default_factory=list)
    """When continuing as new: the newest progress events of the run before, still served by
    the progress query (a watcher may not have read those emitted just before)."""
    workspace: HostedWorkspace | None = None
    """The session's travelling workspace (a shared store); None: tools work in place."""
    seen: SeenFiles | None = None
    """The files the session's earlier prompts read or wrote, the nested memory given."""
    todos: list[TodoItem] = Field(default_factory=list)
    """The model's todo list as the session's last prompt left it."""


class CompactInput(BaseModel):
    session_id: str
    parent_uuid: str | None
    pending: PendingUser | None
    config: ModelCallConfig
    workspace: str
    """Where the PreCompact hooks run; the system prompt names it."""
    microcompact_keep: int
    """The summary request clears tool results older than the newest N (`microcompact_keep_recent`)."""
    request: ModelRequest
    boundary_uuid: str
    summary_uuid: str
    trigger: str
    pre_tokens: int
    pre_compact: list[HookCommandSpec] | None = None
    """The PreCompact handlers of the prompt's settings snapshot; None (histories from before
    the snapshot): the activity reads the settings files."""
    custom_instructions: str = ""
    """What the user asked the summary to keep (`/compact …`); PreCompact hooks see it."""


class CompactOutput(BaseModel):
    summary_uuid: str
    pre_tokens: int
    post_tokens: int
    summary_chars: int
    hook_notes: list[str] = Field(default_factory=list)


class PlanCollapseInput(BaseModel):
    session_id: str
    parent_uuid: str | None
    pending: PendingUser | None
    request: ModelRequest
    target_tokens: int


class PlanCollapseOutput(BaseModel):
    tool_use_ids: list[str]


class PromptRequest(BaseModel):
    prompt: str
    max_turns: int | None = None
    session_start: str | None = None
    """`resume`: the first prompt a CLI sends to a session it re-attached to (SessionStart
    hooks run with that source first)."""
    compact: bool = False
    """`/compact [instructions]`: summarise the conversation now; `prompt` holds the
    instructions (may be empty)."""
    checkpoint_id: str | None = None
    """A travelling workspace's files as the submitter has them now (edited, or rewound, since
    the last prompt): the prompt's tools start from this checkpoint."""
    mid_turn_id: str | None = None
    """Set by the session when it passed this prompt to the running one (to reach the model
    at its next turn); the running prompt's result names the ids it took."""
    scheduled: str | None = None
    """The wake-up or cron job whose prompt this is (it runs between prompts, never joins
    one)."""

    def mid_turn(self) -> bool:
        """A plain prompt, which may join the running one: not `/compact`, no turn limit of
        its own, no files to start from, not a scheduled one."""
        return (
            not self.compact
            and self.max_turns is None
            and self.checkpoint_id is None
            and self.scheduled is None
        )


class MidTurnPrompt(BaseModel):
    id: str
    prompt: str


class MidTurnPrompts(BaseModel):
    """The session's prompts sent while this one runs (the `mid_turn_prompts` signal)."""

    prompts: list[MidTurnPrompt]


class SessionState(BaseModel):
    """Everything a session carries from prompt to prompt, and whole across continue-as-new."""

    head_uuid: str | None = None
    queries: int = 0
    """Prompts started so far (the next one's workflow id is numbered after them)."""
    context_tokens: int = 0
    queued: list[PromptRequest] = Field(default_factory=list)
    """Prompts accepted and not started, in order."""
    last_result: QueryResult | None = None
    last_error: str | None = None
    closed: bool = False
    session_grants: list[SessionGrant] = Field(default_factory=list)
    """What "always for this session" answers allow (each prompt starts with them)."""
    seen: SeenFiles | None = None
    """The files the prompts read or wrote, the nested memory given (between-turn context)."""
    todos: list[TodoItem] = Field(default_factory=list)
    """The model's todo list (its last TodoWrite in the session)."""
    mcp: list[McpServerState] | None = None
    """The MCP servers as the session last connected or refreshed them (None: not yet)."""
    workspace: HostedWorkspace | None = None
    """The travelling workspace (a shared store): the CLI's upload, then each prompt's last
    checkpoint and host; None: tools work in the workspace in place."""
    wakeups: list[Wakeup] = Field(default_factory=list)
    """Pending wake-ups, in due order (at most MAX_WAKEUPS)."""
    cron_jobs: list[str] = Field(default_factory=list)
    """Job ids its prompts' CronCreate calls created (deleted when the session ends)."""


class SessionInput(BaseModel):
    session_id: str
    config: QueryConfig
    head_uuid: str | None = None
    initial_prompt: str | None = None
    initial_max_turns: int | None = None
    close_when_idle: bool = False
    """End the session after the initial prompt (headless `run`)."""
    queries_per_run: int = Field(default=50, ge=1)
    """Continue-as-new after this many prompts, carrying the session's state."""
    state: SessionState | None = None
    """Set by continue-as-new."""
    workspace: HostedWorkspace | None = None
    """The submitter's workspace as uploaded to the shared store (it travels); None: tools
    work in the workspace in place."""
    queries: int = 0
    context_tokens: int = 0
    queued: list[PromptRequest] = Field(default_factory=list)
    """`queries`, `context_tokens`, `queued`: how continue-as-new carried the state before
    SessionState (histories of running sessions still hold them)."""

    def initial_state(self) -> SessionState:
        if self.state is not None:
            return self.state.model_copy(deep=True)
        queued = list(self.queued)
        if self.initial_prompt:
            first = PromptRequest(prompt=self.initial_prompt, max_turns=self.initial_max_turns)
            queued.insert(0, first)
        return SessionState(
            head_uuid=self.head_uuid,
            queries=self.queries,
            context_tokens=self.context_tokens,
            queued=queued,
            workspace=self.workspace,
        )


class EndProcessesInput(BaseModel):
    session_id: str


class EndProcessesOutput(BaseModel):
    killed: int


class EndToolProcessesInput(BaseModel):
    """The processes of one tool call's runs (every attempt's) after it was interrupted; with
    no tool_use_id, of every tool run of the (sub-agent's) session and of its own sub-agents."""

    session_id: str
    tool_use_id: str | None = None


class ConfigChange(BaseModel):
    """The `configure` Update of a session (the SDK's set_model / set_permission_mode): the
    prompts that start after it run with the change; the running one keeps its config."""

    model: str | None = None
    permission_mode: PermissionMode | None = None
    sdk_hooks: dict[str, Any] | None = None
    """The hooks the Agent SDK registered in `initialize` (`{event: [{matcher,
    hookCallbackIds, timeout}]}`): run by the SDK through the front-end (`hook_callback`)."""


class HookCallbackRequest(BaseModel):
    """Hook callbacks of the Agent SDK that an event waits for (the `hook_requests` query)."""

    request_id: str
    event: str
    callback_ids: list[str]
    input: dict[str, Any]
    """Claude Code's hook input for the event (hook_event_name, tool_name, tool_input, ...)."""
    tool_use_id: str | None = None
    tool_result: ToolResultRef | None = None
    """PostToolUse(Failure): where the tool's result is stored, for the front-end to read into
    the input's `tool_response` (`error`), as the hook activity does (it stays out of history)."""


class HookCallbackAnswer(BaseModel):
    """The `hook_callback_result` Update: each callback's output (Claude Code's hook JSON
    output), or its error, in the request's order."""

    request_id: str
    outputs: list[dict[str, Any] | None]
    errors: list[str] = Field(default_factory=list)


class PromptAccepted(BaseModel):
    query_workflow_id: str
    index: int


class SessionStatus(BaseModel):
    session_id: str
    running_query_id: str | None
    head_uuid: str | None
    queries: int
    last_result: QueryResult | None = None
    last_error: str | None = None
    closed: bool = False
    queued: int = 0
    """Prompts accepted that wait for the running one."""
    permission_mode: str | None = None
    """The mode its prompts start in (None: the session checks no permissions)."""
    sandboxed: bool = False
    """Bash runs in the sandbox."""
    settings: dict[str, Any] | None = None
    """The merged Claude Code settings its prompts carry (see QueryConfig.settings)."""
    session_grants: list[SessionGrant] = Field(default_factory=list)
    """What the user allowed for the rest of the session ("always")."""
    todos: list[TodoItem] = Field(default_factory=list)
    """The model's todo list as its last prompt left it."""
    wakeups: list[Wakeup] = Field(default_factory=list)
    """Pending wake-ups, in due order."""
    close_when_idle: bool = False
    """A headless session: it ends once idle with no wake-up pending."""
    mcp: list[McpServerState] = Field(default_factory=list)
    """Its MCP servers: status and tools (empty: none, or not connected yet)."""


class StopHooksInput(BaseModel):
    session_id: str
    workspace: str
    stop_hook_active: bool
    """True when the loop already continued because of a Stop hook (hooks use it to avoid
    blocking forever)."""
    heartbeat_seconds: float = 5.0
    """Heartbeat timeout of the hook activity (a dead worker is noticed after this)."""


class StopHooksOutput(BaseModel):
    blocking_errors: list[str] = Field(default_factory=list)
    """What blocking hooks said: sent to the model, and the loop goes on."""
    prevent_continuation: bool = False
    stop_reason: str = ""


class ClaimHostInput(BaseModel):
    session_id: str
    checkpoint_id: str


class ClaimHostOutput(BaseModel):
    host_queue: str
    """The task queue of the worker that now holds the session's workspace."""


class CheckpointInput(BaseModel):
    session_id: str
    checkpoint_id: str
    """What the host's copy was made from: a host holding another checkpoint has lost the
    changes since, and says so rather than record a checkpoint of the wrong files."""


class CheckpointOutput(BaseModel):
    checkpoint_id: str
    changed_files: int
    uploaded_bytes: int
