"""Sub-agents (issue 25 item 1): an `Agent` call is a child QueryWorkflow with its own
conversation (its own transcript: the parent's chain never holds its messages), system
prompt, tools and model, under the parent's permission rules and hooks; its final report,
read from its transcript by the `agent_report` step, is the call's result.

A lost worker costs the child only its running step (its finished model calls are in its
history), never the parent's turn. Several Agent calls of one message run at once (the tool is
concurrency-safe); agents do not start agents (MAX_AGENT_DEPTH)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ChildWorkflowError, FailureError

with workflow.unsafe.imports_passed_through():
    from durable_agent.engine.agents import (
        MAX_AGENT_DEPTH,
        agent_model,
        agent_tools,
        find_agent,
        with_built_in,
    )
    from durable_agent.engine.contracts import (
        AgentReportInput,
        EndToolProcessesInput,
        QueryInput,
        ToolCall,
    )
    from durable_agent.engine.messages import ToolResultBlock, Usage
    from durable_agent.engine.state import (
        Attachments,
        ProgressKind,
        QueryConfig,
        QueryResult,
        RunToolOutput,
    )
    from durable_agent.engine.tools import AgentInput
    from durable_agent.names import Signals, Workflows, agent_session
    from workflows import activity_options as steps

from workflows.hook_runs import HookRuns
from workflows.hosting import Hosting
from workflows.loop_context import LoopContext

INTERRUPTED_AGENT_PROCESSES_PATCH = "interrupted-agent-processes-v1"
"""An interrupted sub-agent's tool processes (and its own sub-agents') are ended once its
workflow has closed; histories from before left them to the session's end."""


def error_output(call: ToolCall, text: str) -> RunToolOutput:
    return RunToolOutput(
        tool_use_id=call.id,
        is_error=True,
        preview=text[:200],
        content_chars=len(text),
        inline=ToolResultBlock(tool_use_id=call.id, content=text, is_error=True),
    )


def without_callbacks(hooks: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """`hooks` without the Agent SDK's callbacks: the front-end answers those of the prompt it
    follows, not a sub-agent's (which would wait for an answer forever)."""
    if not isinstance(hooks, Mapping):
        return None
    kept: dict[str, Any] = {}
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            kept[event] = groups
            continue
        out = []
        for group in groups:
            if isinstance(group, Mapping) and isinstance(group.get("hooks"), list):
                handlers = [h for h in group["hooks"] if not _callback(h)]
                if handlers:
                    out.append({**group, "hooks": handlers})
            else:
                out.append(group)
        if out:
            kept[event] = out
    return kept or None


def _callback(handler: object) -> bool:
    return isinstance(handler, Mapping) and handler.get("type") == "callback"


def child_config(cfg: QueryConfig, agent_input: AgentInput, parent_model: str) -> QueryConfig:
    """The sub-agent's config: the parent's rules, hooks (commands only), sandbox, workspace
    and limits; its agent's system prompt, tools and model; no Agent tool, no approvals (no
    one follows it: an ask is a deny), no Stop hooks (the parent's SubagentStop instead)."""
    agent = find_agent(cfg.call.agents, agent_input.subagent_type)
    assert agent is not None
    settings = dict(cfg.settings) if cfg.settings is not None else None
    if settings is not None:
        settings["hooks"] = without_callbacks(settings.get("hooks"))
    tools = agent_tools(agent, cfg.call.tools)
    # The web search is the API's own tool: the agent has it only when its tools name it.
    explicit = agent.tools is not None and "WebSearch" not in agent.tools
    call = cfg.call.model_copy(
        update={
            "tools": tools,
            "web_search": None if explicit else cfg.call.web_search,
            "mcp_tools": [
                t for t in cfg.call.mcp_tools if agent.tools is None or t.name in agent.tools
            ],
            "agents": [],
            "base_system_prompt": agent.prompt or None,
            "system_prompt": None,
            "stream_events": False,
            "tool_hooks": without_callbacks(cfg.call.tool_hooks),
        }
    )
    attachments = None
    if cfg.attachments is not None:
        attachments = Attachments(nested_memory=cfg.attachments.nested_memory)
    return cfg.model_copy(
        update={
            "model": agent_model(agent, agent_input.model, parent_model),
            "call": call,
            "agent_depth": cfg.agent_depth + 1,
            "max_turns": None,
            "token_budget": None,
            "approvals": False,
            "stop_hooks": False,
            "tool_summaries": False,
            "attachments": attachments,
            "settings": settings,
        }
    )


class SubAgents:
    """The prompt's running sub-agents."""

    def __init__(self, ctx: LoopContext, hooks: HookRuns, hosting: Hosting) -> None:
        self._ctx = ctx
        self._hooks = hooks
        self._hosting = hosting
        self._running: dict[str, workflow.ChildWorkflowHandle[Any, QueryResult]] = {}
        self._background: dict[str, asyncio.Future[None]] = {}
        self.reports: list[str] = []
        """Background agents' reports not yet given to the model."""

    @property
    def busy(self) -> bool:
        """A background agent still runs."""
        return any(not task.done() for task in self._background.values())

    def take_reports(self) -> list[str]:
        reports, self.reports = self.reports, []
        return reports

    async def wait_for_reports(self) -> list[str]:
        """Claude has finished while agents of its run in the background: the next report (or
        none, once they are all done)."""
        await workflow.wait_condition(lambda: bool(self.reports) or not self.busy)
        return self.take_reports()

    async def stop(self, call: ToolCall, task_id: str) -> RunToolOutput:
        """TaskStop: interrupt a background agent; its report (saying so) follows."""
        handle = self._running.get(task_id)
        if handle is None or task_id not in self._background:
            running = ", ".join(k for k in self._background if k in self._running) or "none"
            return error_output(
                call, f"No background agent {task_id!r} is running (running: {running})."
            )
        await self._interrupt(handle)
        text = f"Stopping the background agent {task_id}: its report will say where it was."
        return RunToolOutput(
            tool_use_id=call.id, is_error=False, preview=text, content_chars=len(text),
            inline=ToolResultBlock(tool_use_id=call.id, content=text),
        )  # fmt: skip

    def interrupt(self) -> None:
        """Pass the interrupt on to the running sub-agents (they end, their reports say so)."""
        for handle in self._running.values():
            asyncio.ensure_future(self._interrupt(handle))

    async def _interrupt(self, handle: workflow.ChildWorkflowHandle[Any, QueryResult]) -> None:
        try:
            await handle.signal(Signals.INTERRUPT)
        except FailureError:  # it ended meanwhile
            pass

    async def run(self, call: ToolCall, agent_input: AgentInput, run_id: str) -> RunToolOutput:
        cfg = self._ctx.cfg
        if cfg.agent_depth >= MAX_AGENT_DEPTH:
            return error_output(call, "A sub-agent cannot start agents; do the task yourself.")
        agent = find_agent(cfg.call.agents, agent_input.subagent_type)
        if agent is None:
            names = ", ".join(a.name for a in with_built_in(cfg.call.agents))
            return error_output(
                call, f"No agent named {agent_input.subagent_type!r}; the agents are: {names}."
            )
        parent = self._ctx.inp
        child_session = agent_session(parent.session_id, call.id)
        child_cfg = child_config(cfg, agent_input, self._ctx.state.model or cfg.model)
        await self._hooks.observe(
            "SubagentStart", agent.name, agent_type=agent.name, agent_id=child_session
        )
        self._ctx.emit(
            ProgressKind.STATUS, f"agent {agent.name} started: {agent_input.description}"
        )
        try:
            handle = await workflow.start_child_workflow(
                Workflows.QUERY,
                QueryInput(
                    session_id=child_session,
                    prompt=agent_input.prompt,
                    parent_uuid=None,
                    config=child_cfg,
                    workspace=self._hosting.workspace,
                ),
                id=f"{parent.session_id}-agent-{call.id}",  # from history: replays alike
                result_type=QueryResult,
                static_summary=f"agent {agent.name}: {agent_input.description}"[:200],
                execution_timeout=timedelta(days=7),
            )
            self._running[call.id] = handle
            if agent_input.run_in_background:
                self._background[call.id] = asyncio.ensure_future(
                    self._in_background(call, agent_input, handle, child_session, run_id)
                )
                text = (
                    f"The agent {agent.name} is running in the background (task id {call.id}). "
                    "Its report will come to you in a message when it finishes: go on with "
                    "other work meanwhile, and stop it with TaskStop if it is no longer needed."
                )
                return RunToolOutput(
                    tool_use_id=call.id, is_error=False, preview=text[:200],
                    content_chars=len(text), inline=ToolResultBlock(tool_use_id=call.id, content=text),
                )  # fmt: skip
            try:
                result = await handle
            except (asyncio.CancelledError, ChildWorkflowError):
                if self._ctx.interrupted and workflow.patched(INTERRUPTED_AGENT_PROCESSES_PATCH):
                    await self._end_processes(child_session)
                raise
            finally:
                self._running.pop(call.id, None)
        except ChildWorkflowError as exc:
            return error_output(call, f"The agent {agent.name} failed: {exc.cause or exc}")
        return await self._finished(call, agent_input, result, child_session, run_id)

    async def _end_processes(self, child_session: str) -> None:
        """What an interrupted sub-agent's tools left running: the interrupt cancels its
        workflow, which closes at once, and its running tool's activity then takes the
        workflow's absence for a server that lost it and lets the command run on."""
        queue = self._hosting.workspace.host_queue if self._hosting.workspace else None
        try:
            await steps.end_tool_processes(EndToolProcessesInput(session_id=child_session), queue)
        except ActivityError as exc:
            workflow.logger.warning("could not end an interrupted agent's processes: %s", exc)

    async def _in_background(
        self,
        call: ToolCall,
        agent_input: AgentInput,
        handle: workflow.ChildWorkflowHandle[Any, QueryResult],
        child_session: str,
        run_id: str,
    ) -> None:
        head = f"The background agent {agent_input.subagent_type} (task {call.id}: "
        head += f"{agent_input.description}) finished."
        try:
            result = await handle
        except ChildWorkflowError as exc:
            self.reports.append(f"{head} It failed: {exc.cause or exc}")
            return
        finally:
            self._running.pop(call.id, None)
        out = await self._finished(call, agent_input, result, child_session, run_id, notify=True)
        report = out.inline.text() if out.inline is not None else out.preview
        self.reports.append(f"{head} Its report:\n\n{report}")

    async def _finished(
        self,
        call: ToolCall,
        agent_input: AgentInput,
        result: QueryResult,
        child_session: str,
        run_id: str,
        notify: bool = False,
    ) -> RunToolOutput:
        agent = find_agent(self._ctx.cfg.call.agents, agent_input.subagent_type)
        assert agent is not None
        parent = self._ctx.inp
        self._roll_up(result)
        if self._hosting.enabled and result.workspace is not None:
            self._hosting.workspace = result.workspace  # its files are the session's now
        await self._hooks.observe(
            "SubagentStop", agent.name, agent_type=agent.name, agent_id=child_session,
            stop_hook_active=False,
        )  # fmt: skip
        self._ctx.emit(
            ProgressKind.STATUS,
            f"agent {agent.name} finished ({result.terminal.value}, {result.turn_count} turns)",
        )
        report = AgentReportInput(
            session_id=parent.session_id,
            agent_session_id=child_session,
            head_uuid=result.head_uuid,
            tool_use_id=call.id,
            run_id=run_id,
            agent=agent.name,
            terminal=result.terminal,
            message=result.message,
            notify=notify,
        )
        try:
            return await steps.agent_report(report)
        except ActivityError as exc:
            return error_output(call, f"The agent {agent.name}'s report could not be read: {exc}")

    def _roll_up(self, result: QueryResult) -> None:
        """Its usage and cost are the parent's too."""
        state = self._ctx.state
        by_model = dict(state.usage_by_model)
        for model, used in result.usage_by_model.items():
            by_model[model] = by_model.get(model, Usage()) + used
        self._ctx.state = state.model_copy(
            update={
                "usage": state.usage + result.usage,
                "usage_by_model": by_model,
                "api_duration_ms": state.api_duration_ms + result.api_duration_ms,
            }
        )
