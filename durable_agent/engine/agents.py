"""Sub-agents as the model sees them (issue 25 item 1): the `Agent` tool starts one, each a
child QueryWorkflow with its own conversation, system prompt, tools and model, whose final
report is the tool's result. The definitions: the built-in `general-purpose`, the project's
`.claude/agents/*.md`, the user's, `--agents JSON` (found where the session starts:
durable_agent/agents.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from durable_agent.engine.tools import AgentInput as AgentInput  # re-exported

AgentSource = Literal["built-in", "project", "user", "flag"]

GENERAL_PURPOSE = "general-purpose"
MAX_AGENT_DEPTH = 1
"""A sub-agent has no Agent tool: agents do not start agents (Claude Code's rule too)."""
AGENT_TOOL_NAMES = frozenset({"Agent", "Task"})
PARENT_ONLY_TOOLS = frozenset(
    {"TaskStop", "ScheduleWakeup", "CronCreate", "CronList", "CronDelete"}
)
"""A sub-agent neither stops agents nor schedules the session's later prompts."""
"""`Task` was the tool's earlier name: permission rules and hook matchers take both."""
MODEL_ALIASES = {
    "haiku": "claude-haiku-4-5",
    "sonnet": "claude-sonnet-4-5",
    "opus": "claude-opus-4-1",
}


class AgentDef(BaseModel):
    """One kind of sub-agent."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    prompt: str = ""
    """Its system prompt (the file's body); empty: ours (the general-purpose agent)."""
    tools: tuple[str, ...] | None = None
    """The tools it may use (None: the parent's, the Agent tool excepted)."""
    model: str | None = None
    """An alias (haiku, sonnet, opus), a model id, `inherit` or None: the parent's model."""
    source: AgentSource = "built-in"
    path: str = ""


BUILT_IN = AgentDef(
    name=GENERAL_PURPOSE,
    description="A general-purpose agent for researching complex questions, searching for "
    "code and carrying out multi-step tasks; use it when a search may take several tries, to "
    "keep the details out of your own context.",
)


AGENT_TOOL_INTRO = (
    "Start a sub-agent to carry out a task on its own: it gets your prompt (and nothing else "
    "of this conversation), works with its own tools, and answers with one final report, "
    "which is all you see of its work. Use it for searches and research that would take many "
    "steps, or for work an agent below is made for; give it a complete, self-contained task "
    "and say what its report must contain. Several Agent calls in one message run at the same "
    "time. Read its report and tell the user what matters: they do not see it."
)


def agent_listing(agents: Sequence[AgentDef]) -> str:
    lines = []
    for agent in agents:
        tools = ", ".join(agent.tools) if agent.tools is not None else "all tools"
        lines.append(f"- {agent.name}: {agent.description} (tools: {tools})")
    return "\n".join(lines)


def with_built_in(agents: Sequence[AgentDef]) -> list[AgentDef]:
    """The agents the model can start: the session's, and general-purpose unless redefined."""
    names = {a.name for a in agents}
    return [*agents, *([BUILT_IN] if GENERAL_PURPOSE not in names else [])]


def agent_tool_description(agents: Sequence[AgentDef]) -> str:
    return f"{AGENT_TOOL_INTRO}\n\nAvailable agents (subagent_type):\n" + agent_listing(
        with_built_in(agents)
    )


def find_agent(agents: Sequence[AgentDef], name: str) -> AgentDef | None:
    return next((a for a in with_built_in(agents) if a.name == name), None)


def agent_model(agent: AgentDef, asked: str | None, parent: str) -> str:
    """The call's `model`, else the definition's, else the parent's; aliases expanded."""
    chosen = asked or agent.model
    if not chosen or chosen == "inherit":
        return parent
    return MODEL_ALIASES.get(chosen, chosen)


def agent_tools(agent: AgentDef, parent: Sequence[str]) -> tuple[str, ...]:
    """Its tools among the parent's (a definition cannot widen them), never the Agent tool."""
    allowed = [t for t in parent if t not in AGENT_TOOL_NAMES | PARENT_ONLY_TOOLS]
    if agent.tools is None:
        return tuple(allowed)
    return tuple(t for t in agent.tools if t in allowed)
