"""Hook orchestration (workflow side): which handlers of the settings snapshot (and the Agent
SDK's callbacks) an event has, the run_hooks activity that runs them, the durable wait for the
SDK's answers to its callbacks (the `hook_callback_result` Update), and the events of a prompt
(SessionStart, UserPromptSubmit, Stop) and of a tool call (PreToolUse, PostToolUse(Failure)).

What a hook's result means for the prompt or the call is the engine's (`engine.tool_hooks`,
`engine.loop`); this module runs the hooks and applies it. A replay never re-runs a hook: its
result is in the history."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from durable_agent.engine.contracts import (
        HookCallbackAnswer,
        HookCallbackRequest,
        RunToolOutput,
        StopHooksInput,
        ToolCall,
    )
    from durable_agent.engine.hooks import (
        SDK_CALLBACK,
        HookCommandSpec,
        HookEventInput,
        HookEventResult,
        HookRun,
        aggregate,
        callbacks_for,
        hooks_for,
    )
    from durable_agent.engine.loop import after_stop_hooks
    from durable_agent.engine.messages import ToolResultBlock
    from durable_agent.engine.permissions import Decision, check
    from durable_agent.engine.state import Phase, ProgressKind, ToolResultRef
    from durable_agent.engine.tool_hooks import (
        POST_TOOL_USE_FAILURE,
        PRE_TOOL_USE,
        USER_PROMPT_SUBMIT,
        after_prompt_hooks,
        pre_tool_gate,
        result_field,
        tool_feedback,
        user_notes,
        with_prompt_context,
    )
    from workflows import activity_options as steps

from workflows.failures import error_text
from workflows.hosting import HOST_LOSS_PATCH
from workflows.loop_context import LoopContext, _Interrupted
from workflows.streaming_tools import CallNotes

if TYPE_CHECKING:
    from workflows.hosting import Hosting

STOP_HOOKS_PATCH = "stop-hooks-v1"
"""Histories recorded before Stop hooks existed end without the hooks activity."""
STOP_HOOKS_SNAPSHOT_PATCH = "stop-hooks-snapshot-v1"
"""Stop hooks come from the prompt's settings snapshot (no activity when there are none) and
get Claude Code's whole input; before, an activity read the settings files every time."""
HOOK_EVENTS_PATCH = "hook-events-v1"
"""UserPromptSubmit, PreToolUse, PostToolUse and PostToolUseFailure hooks run (a run_hooks
activity each) when the settings snapshot has them; before, only Stop and PreCompact did."""


async def refused(call: ToolCall, reason: str, notes: CallNotes) -> RunToolOutput:
    """The answer to a tool call the permission rules, the mode or a hook refused: it never
    runs, and the denial is listed in the prompt's result."""
    notes.denial = reason
    text = f"{reason.rstrip('.')}. The call did not run."
    return RunToolOutput(
        tool_use_id=call.id,
        is_error=True,
        preview=text,
        content_chars=len(text),
        inline=ToolResultBlock(tool_use_id=call.id, content=text, is_error=True),
        denied=True,
    )


class HookRuns:
    """The prompt's hooks. `requests`/`answers`: the SDK hook callbacks waiting for the
    front-end, and its answers not yet taken (QueryWorkflow's handlers read and fill them)."""

    def __init__(self, ctx: LoopContext, hosting: Hosting | None = None) -> None:
        self._ctx = ctx
        self._hosting = hosting
        """A travelling workspace's host, where hooks run (None or disabled: on any worker)."""
        self.requests: dict[str, HookCallbackRequest] = {}
        self.answers: dict[str, HookCallbackAnswer] = {}
        self._hosted_steps = 0
        """Hook steps run on a host so far (each one's ledger name, HOST_LOSS_PATCH)."""

    # --- the SDK's answers (QueryWorkflow's hook_callback_result Update and hook_requests Query)

    def record(self, answer: HookCallbackAnswer) -> str:
        self.answers[answer.request_id] = answer
        return f"{len(answer.outputs)} answer(s) recorded"

    def check_waiting(self, answer: HookCallbackAnswer) -> None:
        if answer.request_id not in self.requests or answer.request_id in self.answers:
            raise ValueError(f"no hook callback {answer.request_id!r} is waiting")

    def waiting(self) -> list[HookCallbackRequest]:
        return [r for r in self.requests.values() if r.request_id not in self.answers]

    # --- which handlers, with what ---------------------------------------------------------

    def handlers(self, event: str, target: str | None) -> list[HookCommandSpec]:
        """The settings snapshot's handlers of `event` for `target` (none without a snapshot)."""
        return self._handlers((self._ctx.cfg.settings or {}).get("hooks"), event, target)

    def tool_handlers(self, event: str, tool_name: str) -> list[HookCommandSpec]:
        return self._handlers(self._ctx.cfg.call.tool_hooks, event, tool_name)

    def _handlers(self, hooks: Any, event: str, target: str | None) -> list[HookCommandSpec]:
        """Command handlers and the Agent SDK's callbacks (`SDK_CALLBACK` specs)."""
        found = [*hooks_for(hooks, event, target), *callbacks_for(hooks, event, target)]
        return found if found and workflow.patched(HOOK_EVENTS_PATCH) else []

    def settings_env(self) -> dict[str, str]:
        env = (self._ctx.cfg.settings or {}).get("env")
        return {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}

    def payload(self, **fields: Any) -> dict[str, Any]:
        ctx = self._ctx.cfg.call.permissions
        return {**fields, "permission_mode": ctx.mode.value if ctx else "default"}

    # --- running them ----------------------------------------------------------------------

    async def run(
        self,
        event: str,
        target: str | None,
        commands: list[HookCommandSpec],
        payload: dict[str, Any],
        tool_result: ToolResultRef | None = None,
    ) -> HookEventResult | None:
        """Run one event's hooks (an activity: a replay reads its result from history, never
        re-runs them); None when the activity failed. The user sees the hooks' messages. The
        Agent SDK's callbacks among them are asked first, through the front-end."""
        ctx = self._ctx
        sdk = [c for c in commands if c.command.startswith(SDK_CALLBACK)]
        commands = [c for c in commands if not c.command.startswith(SDK_CALLBACK)]
        recorded = await self._sdk_hooks(event, sdk, payload, tool_result) if sdk else []
        if not commands:  # only the SDK's: nothing for an activity to run
            result = aggregate(event, recorded)
        else:
            req = HookEventInput(
                session_id=ctx.inp.session_id,
                workspace=ctx.cfg.workspace,
                event=event,
                target=target,
                payload=payload,
                commands=commands,
                heartbeat_seconds=ctx.cfg.activity.tool_heartbeat_seconds,
                tool_result=tool_result,
                env=self.settings_env(),
                recorded_runs=recorded,
            )
            summary = f"{event} hooks" + (f": {target}" if target else "")
            try:
                result = await self._run_hooks(req, summary)
            except ActivityError as exc:
                ctx.emit(ProgressKind.STATUS, f"{event} hooks failed: {error_text(exc)}", True)
                return None
        for note in user_notes(result):
            ctx.emit(ProgressKind.STATUS, f"{event} hook: {note}", is_error=True)
        return result

    async def _run_hooks(self, req: HookEventInput, summary: str) -> HookEventResult:
        if self._hosting is None:
            return await steps.run_hooks(req, summary)

        def step(req: HookEventInput, queue: str | None) -> Awaitable[HookEventResult]:
            return steps.run_hooks(req, summary, queue)

        if self._hosting.enabled and workflow.patched(HOST_LOSS_PATCH):
            # One ledger name for the step on every host (its activity id changes with the
            # host): a hook the lost host started is not run again on the next one.
            self._hosted_steps += 1
            req = req.model_copy(update={"ledger_name": f"hosted-{self._hosted_steps}"})

        # a hook may change files as a tool may
        return await self._hosting.run(req, step, changes=True)

    async def _sdk_hooks(
        self,
        event: str,
        callbacks: list[HookCommandSpec],
        payload: dict[str, Any],
        tool_result: ToolResultRef | None,
    ) -> list[HookRun]:
        """Wait (durably) for the SDK's answers to its hook callbacks of this event; a callback
        that does not answer within its timeout counts as a hook that timed out."""
        ctx = self._ctx
        request_id = str(workflow.uuid4())
        data = {
            **payload,
            "hook_event_name": event,
            "session_id": ctx.inp.session_id,
            "cwd": ctx.cfg.workspace,
        }
        if tool_result is not None and tool_result.inline is not None:
            data[result_field(event)] = tool_result.inline.text()
        ids = [c.command.removeprefix(SDK_CALLBACK) for c in callbacks]
        tool_use_id = payload.get("tool_use_id")
        self.requests[request_id] = HookCallbackRequest(
            request_id=request_id,
            event=event,
            callback_ids=ids,
            input=data,
            tool_use_id=tool_use_id if isinstance(tool_use_id, str) else None,
            tool_result=tool_result
            if tool_result is not None and tool_result.inline is None
            else None,
        )
        ctx.emit(ProgressKind.HOOK, f"{event}: waiting for the SDK's hook callbacks")
        timeout = max(c.timeout for c in callbacks)
        try:
            await workflow.wait_condition(
                lambda: request_id in self.answers, timeout=timedelta(seconds=timeout)
            )
        except TimeoutError:
            pass
        finally:
            self.requests.pop(request_id, None)
        answer = self.answers.pop(request_id, None)
        if answer is None:
            late = f"the SDK did not answer within {timeout:g}s"
            return [
                HookRun(command=c.command, exit_code=None, stderr=late, timed_out=True)
                for c in callbacks
            ]
        runs = []
        for i, spec in enumerate(callbacks):
            output = answer.outputs[i] if i < len(answer.outputs) else None
            error = answer.errors[i] if i < len(answer.errors) else ""
            if output is None:
                runs.append(HookRun(command=spec.command, exit_code=1, stderr=error or "no output"))
            else:
                runs.append(HookRun(command=spec.command, exit_code=0, stdout=json.dumps(output)))
        return runs

    async def observe(self, event: str, target: str | None, **fields: Any) -> None:
        """An event whose hooks can only observe (Notification, PostCompact, StopFailure)."""
        commands = self.handlers(event, target)
        if commands:
            await self.run(event, target, commands, self.payload(**fields))

    # --- a tool call's ---------------------------------------------------------------------

    async def pre_tool(
        self, call: ToolCall, commands: list[HookCommandSpec], notes: CallNotes
    ) -> RunToolOutput | tuple[Decision | None, dict[str, Any] | None]:
        """The PreToolUse verdict: a refusal, or the permission decision and the input to run
        (`updatedInput`, checked against the rules again)."""
        payload = self.payload(
            tool_name=call.name, tool_input=call.permission_input or {}, tool_use_id=call.id
        )
        result = await self.run(PRE_TOOL_USE, call.name, commands, payload)
        if result is None:  # an unknown verdict never lets a call through
            return await refused(call, "Its PreToolUse hooks could not run", notes)
        notes.feedback.extend(tool_feedback(PRE_TOOL_USE, call.name, result))
        if result.prevent_continuation:
            notes.stop = result.stop_reason or "a PreToolUse hook stopped the prompt"
            return await refused(call, f"Stopped by a PreToolUse hook: {notes.stop}", notes)
        rules, perms, updated = (
            call.permission,
            self._ctx.cfg.call.permissions,
            result.updated_input,
        )
        if updated is not None and perms is not None:
            rules = check(call.name, updated, perms)
        return pre_tool_gate(rules, result), updated

    async def post_tool(
        self,
        event: str,
        call: ToolCall,
        commands: list[HookCommandSpec],
        tool_input: dict[str, Any] | None,
        result_ref: ToolResultRef,
        notes: CallNotes,
    ) -> None:
        """PostToolUse(Failure): what they say goes to Claude after the results. The tool has
        run: an interrupt here keeps its result."""
        payload = self.payload(
            tool_name=call.name,
            tool_input=tool_input if tool_input is not None else call.permission_input or {},
            tool_use_id=call.id,
        )
        if event == POST_TOOL_USE_FAILURE:
            payload["is_interrupt"] = False
        try:
            result = await self.run(event, call.name, commands, payload, result_ref)
        except (CancelledError, asyncio.CancelledError):
            return
        if result is not None:
            notes.feedback.extend(tool_feedback(event, call.name, result))
            if result.prevent_continuation:
                notes.stop = result.stop_reason or f"a {event} hook stopped the prompt"

    # --- a prompt's ------------------------------------------------------------------------

    async def prompt_hooks(self, prompt: str) -> None:
        """SessionStart (the session's first prompt), then UserPromptSubmit: a block (or
        `continue: false`) erases the prompt and ends the query `hook_stopped`; what either
        adds to the context is added to the prompt (`engine.tool_hooks.after_prompt_hooks`)."""
        ctx = self._ctx
        base_tokens = ctx.inp.context_tokens
        context = await self.session_start_context(ctx.inp.session_start)
        commands = self.handlers(USER_PROMPT_SUBMIT, None)
        if context:
            ctx.state = with_prompt_context(ctx.state, prompt, context, base_tokens)
        if not commands:
            return
        payload = self.payload(prompt=prompt)
        try:
            result = await ctx.guarded(self.run(USER_PROMPT_SUBMIT, None, commands, payload))
        except _Interrupted:
            return  # the loop ends the prompt aborted
        ctx.state = after_prompt_hooks(ctx.state, result, prompt, context, base_tokens)

    async def session_start_context(self, source: str | None) -> list[str]:
        """SessionStart hooks (source `startup` before a session's first prompt, `resume`
        before the first one a returning CLI sends, `compact` after a compaction): what they
        add to Claude's context."""
        commands = self.handlers("SessionStart", source) if source is not None else []
        if not commands:
            return []
        payload = self.payload(source=source, model=self._ctx.cfg.model)
        try:
            result = await self._ctx.guarded(self.run("SessionStart", source, commands, payload))
        except _Interrupted:
            return []
        return list(result.additional_context) if result is not None else []

    async def stop_hooks(self) -> None:
        """Claude is done: the user's Stop hooks may send it back to work, or stop the query."""
        ctx = self._ctx
        if not workflow.patched(STOP_HOOKS_PATCH):
            ctx.state = ctx.state.at(Phase.HOOKS_PASSED)
            return
        if ctx.cfg.settings is not None and workflow.patched(STOP_HOOKS_SNAPSHOT_PATCH):
            await self._stop_hooks_from_settings()
            return
        req = StopHooksInput(
            session_id=ctx.inp.session_id,
            workspace=ctx.cfg.workspace,
            stop_hook_active=ctx.state.stop_hook_active,
            heartbeat_seconds=ctx.cfg.activity.tool_heartbeat_seconds,
        )
        try:
            out = await ctx.guarded(steps.run_stop_hooks(req))
        except _Interrupted:
            ctx.state = ctx.state.at(Phase.HOOKS_PASSED)
            return
        except ActivityError as exc:
            ctx.emit(
                ProgressKind.STATUS, f"Stop hooks did not run: {error_text(exc)}", is_error=True
            )
            ctx.state = ctx.state.at(Phase.HOOKS_PASSED)
            return
        ctx.state = after_stop_hooks(
            ctx.state,
            out.blocking_errors,
            out.prevent_continuation,
            out.stop_reason,
            str(workflow.uuid4()),
        )

    async def _stop_hooks_from_settings(self) -> None:
        """The Stop hooks of the settings snapshot, with Claude Code's input; none: no step."""
        ctx = self._ctx
        commands = self.handlers("Stop", None)
        if not commands:
            ctx.state = ctx.state.at(Phase.HOOKS_PASSED)
            return
        state = ctx.state
        payload = self.payload(
            stop_hook_active=state.stop_hook_active,
            last_assistant_message=state.answer.text if state.answer else "",
        )
        try:
            result = await ctx.guarded(self.run("Stop", None, commands, payload))
        except _Interrupted:
            ctx.state = ctx.state.at(Phase.HOOKS_PASSED)
            return
        if result is None:
            ctx.state = ctx.state.at(Phase.HOOKS_PASSED)
            return
        ctx.state = after_stop_hooks(
            ctx.state,
            [result.reason] if result.blocked else [],
            result.prevent_continuation,
            result.stop_reason,
            str(workflow.uuid4()),
        )
