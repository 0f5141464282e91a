"""autocompact / reactive compact: the model summarises the conversation; the store gets a
compact boundary and the summary, and the loop goes on from there."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anthropic
import httpx2
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import heartbeating
from activities.hooks import run_commands, run_hooks
from activities.model import (
    MalformedResponse,
    ModelActivities,
    StreamIncomplete,
    read_stream,
    system_prompt,
)
from activities.transcript import chain_with_pending, off_loop, request_view
from durable_agent.engine.context import (
    drop_oldest,
    estimate_messages_tokens,
    plan_collapse,
)
from durable_agent.engine.contracts import (
    CallModelInput,
    CompactInput,
    CompactOutput,
    PlanCollapseInput,
    PlanCollapseOutput,
)
from durable_agent.engine.errors import ErrorKind, RetryTrack
from durable_agent.engine.messages import (
    CompactMetadata,
    Message,
    TextBlock,
    TranscriptEntry,
)
from durable_agent.engine.request import (
    ModelRequest,
    api_tools,
    build_request,
    request_messages,
)
from durable_agent.engine.web_search import server_tools
from durable_agent.names import Activities

SUMMARY_PROMPT = """The conversation above is about to be replaced by a summary, {why}. \
Write that summary now: detailed enough that you can continue the \
work from it alone, without the earlier messages. Do not call any tools.

Use exactly these sections:
1. Request and intent: everything the user asked for, in their words where it matters.
2. Key concepts: technologies, conventions and decisions that shape the work.
3. Files and code: each file read, changed or created, why it matters, and the important code.
4. Errors and fixes: what went wrong and how it was solved (or not yet).
5. Pending tasks: what was asked and is not done.
6. Current work: precisely what was being done just before this summary.
7. Next step: the very next action, in line with the user's latest request.

Write the summary inside <summary></summary> tags."""

WHY_AUTO = "because the context window is nearly full"
WHY_MANUAL = "because the user asked for it (/compact)"
USER_INSTRUCTIONS = "\n\nThe user's instructions for this summary:\n{instructions}"


def summary_prompt(req: CompactInput) -> str:
    """The summary request's instruction; a manual `/compact` says so, with the user's
    instructions after it."""
    if req.trigger != "manual":
        return SUMMARY_PROMPT.format(why=WHY_AUTO)
    text = SUMMARY_PROMPT.format(why=WHY_MANUAL)
    extra = req.custom_instructions.strip()
    return text + (USER_INSTRUCTIONS.format(instructions=extra) if extra else "")


CONTINUATION = """This session continues from an earlier conversation that {why}. \
The summary below covers the earlier part of it.

{summary}

Continue the work from where it stopped. Do not ask the user further questions unless the \
summary says you were waiting for an answer."""

CONTINUED_AUTO = "ran out of context"
CONTINUED_MANUAL = "was summarised at the user's request"

MAX_SUMMARY_SHRINKS = 3
_SUMMARY = re.compile(r"<summary>(.*?)</summary>", re.DOTALL)


def with_instruction(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    block = {"type": "text", "text": text}
    if messages and messages[-1]["role"] == "user":
        return [*messages[:-1], {**messages[-1], "content": [*messages[-1]["content"], block]}]
    return [*messages, {"role": "user", "content": [block]}]


def extract_summary(text: str) -> str:
    match = _SUMMARY.search(text)
    return (match.group(1) if match else text).strip()


class CompactionActivities:
    """Summaries use the model activity's client, credentials and error classification."""

    def __init__(self, model: ModelActivities) -> None:
        self.model = model
        self.store = model.store

    @activity.defn(name=Activities.AUTOCOMPACT)
    async def autocompact(self, req: CompactInput) -> CompactOutput:
        parent, chain = await off_loop(
            chain_with_pending, self.store, req.session_id, req.parent_uuid, req.pending
        )
        hook_notes = await self._pre_compact_hooks(req)
        messages = await off_loop(self._messages_to_summarise, req, chain)
        summary = await self._summarise(messages, req)
        entry = await off_loop(self._store_summary, req, parent, summary)
        post = await self._count_tokens([entry], req)
        return CompactOutput(
            summary_uuid=req.summary_uuid,
            pre_tokens=req.pre_tokens,
            post_tokens=post,
            summary_chars=len(summary),
            hook_notes=hook_notes,
        )

    def _messages_to_summarise(
        self, req: CompactInput, chain: list[TranscriptEntry]
    ) -> list[dict[str, Any]]:
        """The conversation since the last boundary as the summary request shows it; the whole
        text of results it cuts short is kept for the Read tool (blocking)."""
        view = req.request.model_copy(
            update={"microcompact_keep": req.microcompact_keep, "task_budget": None}
        )
        return request_view(
            self.store, req.session_id, chain, lambda paths: request_messages(chain, view, paths)
        )

    def _store_summary(
        self, req: CompactInput, parent: str | None, summary: str
    ) -> TranscriptEntry:
        """The compact boundary, then the summary after it (blocking)."""
        boundary = TranscriptEntry(
            uuid=req.boundary_uuid,
            parentUuid=parent,
            type="system",
            subtype="compact_boundary",
            compactMetadata=CompactMetadata(trigger=req.trigger, pre_tokens=req.pre_tokens),
        )
        self.store.append_entry(req.session_id, boundary)
        why = CONTINUED_MANUAL if req.trigger == "manual" else CONTINUED_AUTO
        text = CONTINUATION.format(why=why, summary=summary)
        return self.store.append(
            req.session_id,
            req.summary_uuid,
            req.boundary_uuid,
            Message(role="user", content=[TextBlock(text=text)]),
            isCompactSummary=True,
        )

    async def _pre_compact_hooks(self, req: CompactInput) -> list[str]:
        """PreCompact hooks run first; what they print to stderr is shown to the user."""
        payload = {
            "session_id": req.session_id,
            "transcript_path": str(await off_loop(self.store.local_transcript, req.session_id)),
            "trigger": "auto" if req.trigger == "auto" else "manual",
            "custom_instructions": req.custom_instructions,
        }
        ledger = self.store.hook_records(req.session_id)
        if req.pre_compact is not None:  # chosen from the prompt's settings snapshot
            body = {**payload, "hook_event_name": "PreCompact", "cwd": req.workspace}
            outcomes = await run_commands(
                req.pre_compact, "PreCompact", body, Path(req.workspace), ledger, req.session_id
            )
        else:  # histories from before the snapshot: the settings files, as then
            outcomes = await run_hooks(
                "PreCompact", payload["trigger"], payload, Path(req.workspace), ledger
            )
        return [
            f"PreCompact hook `{o.command}` exited {o.exit_code}: {o.stderr.strip()}"
            for o in outcomes
            if o.exit_code != 0
        ]

    async def _summarise(self, messages: list[dict[str, Any]], req: CompactInput) -> str:
        track = _track()  # the earlier attempts' failures, as the model call keeps them
        for _ in range(MAX_SUMMARY_SHRINKS + 1):
            body = {
                "model": req.request.model,
                "max_tokens": req.config.compact_max_tokens,
                "system": system_prompt(req.config, req.workspace, req.request.model),
                "messages": with_instruction(messages, summary_prompt(req)),
                "tools": api_tools(
                    req.config.tools, req.config.skills, req.config.agents, req.config.mcp_tools
                )
                + server_tools(req.config.web_search, req.config.permissions),
                "tool_choice": {"type": "none"},
            }
            if not body["system"]:  # `--system-prompt ""`: the API takes no empty system
                del body["system"]
            try:
                text = await self._stream_text(body, req.config.stream_idle_seconds, track)
            except (
                anthropic.APIError, httpx2.HTTPError, OSError, StreamIncomplete, MalformedResponse,
            ) as exc:  # fmt: skip
                decision = self.model._decide(exc, _compact_call(req), track)
                if decision.kind == ErrorKind.PROMPT_TOO_LONG:
                    messages = drop_oldest(messages)
                    if messages:
                        continue
                    raise ApplicationError(
                        "the conversation is too long to summarise", type="PromptTooLong",
                        non_retryable=True,
                    ) from exc  # fmt: skip
                self.model.after_failure(decision)
                raise ApplicationError(
                    f"summary failed: {decision.message}", type=decision.error_type,
                    non_retryable=not decision.retryable,
                ) from exc  # fmt: skip
            summary = extract_summary(text)
            if summary:
                return summary
            raise ApplicationError("the model returned an empty summary", type="EmptySummary")
        raise ApplicationError(
            "the conversation is too long to summarise", type="PromptTooLong", non_retryable=True
        )

    async def _stream_text(self, body: dict[str, Any], idle: float, track: RetryTrack) -> str:
        """The summary, read like any model answer (bounded idle time, unreadable answers named),
        heartbeating meanwhile (with the attempt's track) so that an interrupt or a dead worker
        is noticed."""
        async with heartbeating(track.model_dump(mode="json")):
            client = await self.model.client_after(track)
            final = await read_stream(client.messages.stream(**body), idle)
        return "".join(b.text for b in final.content if b.type == "text")

    async def _count_tokens(self, chain: list[TranscriptEntry], req: CompactInput) -> int:
        """An exact figure where it matters: the size the loop continues from."""
        plain = ModelRequest(model=req.request.model, max_tokens=1, prompt_caching=False)
        body, _ = build_request(
            chain,
            system_prompt(req.config, req.workspace, req.request.model),
            req.config.tools,
            plain,
            skills=req.config.skills,
            server_tools=server_tools(req.config.web_search, req.config.permissions),
            agents=req.config.agents,
            mcp_tools=req.config.mcp_tools,
        )
        try:
            client = await self.model.client()
            # No `system` when the prompt has none (`--system-prompt ""`, as the Agent SDK sends).
            fields = {k: body[k] for k in ("system", "tools") if k in body}
            counted = await client.messages.count_tokens(
                model=body["model"], messages=body["messages"], **fields
            )
            return int(counted.input_tokens)
        except (anthropic.APIError, httpx2.HTTPError, OSError):
            return estimate_messages_tokens(body["messages"]) + 2_000

    @activity.defn(name=Activities.PLAN_COLLAPSE)
    async def plan_collapse(self, req: PlanCollapseInput) -> PlanCollapseOutput:
        _, chain = await off_loop(
            chain_with_pending, self.store, req.session_id, req.parent_uuid, req.pending
        )
        overflow_paths = self.store.overflow_paths(req.session_id)
        messages, _ = request_messages(chain, req.request, overflow_paths)
        return PlanCollapseOutput(tool_use_ids=plan_collapse(messages, req.target_tokens, []))


def _compact_call(req: CompactInput) -> CallModelInput:
    config = req.config.model_copy(update={"query_source": "compact"})
    return CallModelInput(
        session_id=req.session_id, parent_uuid=req.parent_uuid, assistant_uuid=req.summary_uuid,
        config=config, workspace=req.workspace, request=req.request,
    )  # fmt: skip


def _track() -> RetryTrack:
    details = activity.info().heartbeat_details
    return RetryTrack.model_validate(details[0]) if details else RetryTrack()
