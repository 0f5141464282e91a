"""The names Temporal knows our workflows, activities, signals, queries and updates by.

They are part of the contract with running workflows and recorded histories: a renamed
signal would no longer reach a session started before the rename. Workflow code, activities
and the CLI all use these constants; none spells a name itself.
"""

from __future__ import annotations

from typing import Final


class Workflows:
    SESSION: Final = "SessionWorkflow"
    QUERY: Final = "QueryWorkflow"
    SCHEDULED_PROMPT: Final = "ScheduledPromptWorkflow"
    """What a session's cron job (a Temporal Schedule) starts at each firing."""


class Activities:
    CALL_MODEL: Final = "call_model"
    RUN_TOOL: Final = "run_tool"
    AUTOCOMPACT: Final = "autocompact"
    PLAN_COLLAPSE: Final = "plan_collapse"
    APPEND_ENTRY: Final = "append_entry"
    TRANSCRIPT_LOCATION: Final = "transcript_location"
    RUN_STOP_HOOKS: Final = "run_stop_hooks"
    RUN_HOOKS: Final = "run_hooks"
    END_SESSION_PROCESSES: Final = "end_session_processes"
    END_TOOL_PROCESSES: Final = "end_tool_processes"
    CLAIM_HOST: Final = "claim_workspace_host"
    CHECKPOINT_WORKSPACE: Final = "checkpoint_workspace"
    BETWEEN_TURNS: Final = "between_turns"
    SUMMARIZE_TOOLS: Final = "summarize_tools"
    DELETE_SCHEDULES: Final = "delete_schedules"
    AGENT_REPORT: Final = "agent_report"
    CONNECT_MCP_SERVERS: Final = "connect_mcp_servers"
    CALL_MCP_TOOL: Final = "call_mcp_tool"
    REFRESH_MCP_TOOLS: Final = "refresh_mcp_tools"
    CLOSE_MCP_SESSION: Final = "close_mcp_session"


class Signals:
    INTERRUPT: Final = "interrupt"
    """Both workflows: the session passes it on to its running prompt."""
    CLOSE: Final = "close"
    STOP: Final = "stop"
    """SessionWorkflow: end now (waiting prompts dropped, the running one interrupted)."""
    TOOL_USE_READY: Final = "tool_use_ready"
    MODEL_RETRY: Final = "model_retry"
    MID_TURN_PROMPTS: Final = "mid_turn_prompts"
    """QueryWorkflow: prompts the session received while it runs."""
    SCHEDULED_PROMPT: Final = "scheduled_prompt"
    """SessionWorkflow: a cron job's prompt, to run between prompts."""


class Queries:
    STATUS: Final = "status"
    TRANSCRIPT_PATH: Final = "transcript_path"
    PROGRESS: Final = "progress"
    PHASE: Final = "phase"
    HOOK_REQUESTS: Final = "hook_requests"
    """QueryWorkflow: the Agent SDK hook callbacks an event waits for."""
    APPROVALS: Final = "approvals"
    """QueryWorkflow: the tool calls waiting for a person's decision."""


class Updates:
    SUBMIT_PROMPT: Final = "submit_prompt"
    APPROVE_TOOL: Final = "approve_tool"
    HOOK_CALLBACK_RESULT: Final = "hook_callback_result"
    """QueryWorkflow: what the SDK's hook callbacks answered (unknown request ids rejected)."""
    CANCEL_WAKEUP: Final = "cancel_wakeup"
    """SessionWorkflow: drop a pending wake-up (unknown ids are rejected)."""
    CONFIGURE: Final = "configure"
    """SessionWorkflow: change the model or permission mode of the prompts that follow."""
    """QueryWorkflow: answer a waiting tool call (unknown or answered request ids are rejected)."""


AGENT_SESSION_INFIX: Final = ".agent-"
"""A sub-agent's session id is its session's, this, and the Agent call's id (`agent_session`);
a sub-agent's own sub-agents nest the same way. Also part of the contract: workflow ids,
transcript names, workspace copies and tool run tags are all spelled with it."""


def agent_session(session_id: str, call_id: str) -> str:
    """The session id of the sub-agent that Agent call `call_id` of `session_id` starts."""
    return f"{session_id}{AGENT_SESSION_INFIX}{call_id}"


def agents_prefix(session_id: str) -> str:
    """What the session ids of `session_id`'s sub-agents (and theirs) start with."""
    return f"{session_id}{AGENT_SESSION_INFIX}"


def owning_session(session_id: str) -> str:
    """The session a (sub-agent's) session id belongs to: the id itself for a session."""
    return session_id.split(AGENT_SESSION_INFIX, 1)[0]
