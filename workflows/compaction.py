"""Compaction (workflow side): the autocompact activity summarising the conversation into a
compact boundary (auto, reactive or a manual `/compact`), its PreCompact / PostCompact /
SessionStart "compact" hooks, and what the engine makes of the outcome."""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from durable_agent.engine.context import estimate_text_tokens
    from durable_agent.engine.contracts import CompactInput
    from durable_agent.engine.loop import after_compaction, compaction_failed, model_request
    from durable_agent.engine.state import PendingUser, ProgressKind
    from durable_agent.engine.steps import after_manual_compact, before_manual_compact
    from durable_agent.engine.tool_hooks import prompt_with_context
    from workflows import activity_options as steps

from workflows.failures import error_text
from workflows.hook_runs import HookRuns
from workflows.loop_context import LoopContext, _Interrupted


class Compaction:
    def __init__(self, ctx: LoopContext, hooks: HookRuns) -> None:
        self._ctx = ctx
        self._hooks = hooks

    async def manual(self, instructions: str) -> None:
        """`/compact [instructions]`: summarise now and end; no model turn follows."""
        ctx = self._ctx
        nothing = before_manual_compact(ctx.state)
        if nothing is not None:
            ctx.state = nothing
            return
        compacted = await self.compact(reactive=False, instructions=instructions)
        ctx.state = after_manual_compact(ctx.state, compacted, ctx.interrupted)

    async def compact(self, reactive: bool, instructions: str | None = None) -> bool:
        """Summarise into a compact boundary (True when done). Interrupted, the phase is
        unchanged (the interrupt ends the prompt); failed, autocompact counts a failure,
        reactive gives up. `instructions` (not None): a manual `/compact`."""
        ctx, hooks = self._ctx, self._hooks
        cfg, state = ctx.cfg, ctx.state
        trigger = "manual" if instructions is not None else "reactive" if reactive else "auto"
        matcher = (
            "auto" if trigger == "auto" else "manual"
        )  # the hooks' `trigger` (PreCompact's too)
        ctx.phase = "compacting"
        workflow.set_current_details(f"compacting {state.context_tokens:,} tokens ({trigger})")
        req = CompactInput(
            session_id=ctx.inp.session_id,
            parent_uuid=state.head_uuid,
            pending=state.pending,
            config=cfg.call,
            workspace=cfg.workspace,
            microcompact_keep=cfg.microcompact_keep_recent,
            request=model_request(state, cfg),
            boundary_uuid=str(workflow.uuid4()),
            summary_uuid=str(workflow.uuid4()),
            trigger=trigger,
            pre_tokens=state.context_tokens,
            pre_compact=None if cfg.settings is None else hooks.handlers("PreCompact", matcher),
            custom_instructions=instructions or "",
        )
        try:
            out = await ctx.guarded(steps.autocompact(req, cfg))
        except _Interrupted:
            return False
        except ActivityError as exc:
            ctx.emit(
                ProgressKind.STATUS, f"{trigger} compact failed: {error_text(exc)}", is_error=True
            )
            ctx.state = compaction_failed(ctx.state, reactive)
            return False
        for note in out.hook_notes:
            ctx.emit(ProgressKind.STATUS, note, is_error=True)
        await hooks.observe("PostCompact", matcher, trigger=matcher)
        ctx.emit(
            ProgressKind.STATUS,
            f"compacted the conversation ({trigger}): {out.pre_tokens:,} → {out.post_tokens:,} tokens",
        )
        ctx.state = after_compaction(
            ctx.state,
            cfg,
            out.summary_uuid,
            out.pre_tokens,
            out.post_tokens,
            str(workflow.uuid4()),
            reactive,
        )
        context = await hooks.session_start_context("compact")
        if context:  # SessionStart "compact": its context follows the summary
            text = prompt_with_context("", context).strip()
            pending = PendingUser(
                uuid=str(workflow.uuid4()), parent_uuid=ctx.state.head_uuid, prompt=text
            )
            tokens = ctx.state.context_tokens + estimate_text_tokens(text)
            ctx.state = ctx.state.model_copy(update={"pending": pending, "context_tokens": tokens})
        return True
