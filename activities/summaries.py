"""`summarize_tools`: a one-line summary of a tool batch, written by the small model while the
next model call runs (issue 24 item 5). It reads the calls and their results from the store;
the workflow shows the line as progress and ignores a failure."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import anthropic
from temporalio import activity

from activities.tools.web_fetch import small_fast_model
from activities.transcript import TranscriptError, TranscriptStore, off_loop
from durable_agent.engine.contracts import SummaryInput, SummaryOutput
from durable_agent.names import Activities

PART_CHARS = 600
"""Each call's input and result are cut here: the gist is enough for one line."""
MAX_SUMMARY_CHARS = 120

INSTRUCTIONS = (
    "Below are tool calls a coding agent just made and what they returned. Write one line "
    "(at most 80 characters, no quotes, no trailing period) saying what they did or found, "
    "like a git commit subject: 'Read the config loader and its tests', 'Ran pytest: 3 "
    "failures in test_api.py'. Answer with the line only."
)


def _cut(text: str) -> str:
    return text if len(text) <= PART_CHARS else text[:PART_CHARS] + "…"


class SummaryActivities:
    def __init__(
        self, store: TranscriptStore, client: Callable[[], Awaitable[anthropic.AsyncAnthropic]]
    ) -> None:
        self.store = store
        self.client = client
        """The model activity's client (its key, its connection)."""

    def _batch(self, req: SummaryInput) -> str:
        parts = []
        for ref in req.results:
            try:
                call = self.store.tool_use(req.session_id, req.assistant_uuid, ref.tool_use_id)
            except TranscriptError:
                continue
            result = ref.inline or self.store.tool_result(
                req.session_id, ref.tool_use_id, ref.run_id
            )
            said = result.text() if result is not None else "(no result)"
            status = "error" if result is not None and result.is_error else "result"
            parts.append(
                f"{call.name} {_cut(json.dumps(call.input, ensure_ascii=False))}\n"
                f"{status}: {_cut(said)}"
            )
        return "\n\n".join(parts)

    @activity.defn(name=Activities.SUMMARIZE_TOOLS)
    async def summarize_tools(self, req: SummaryInput) -> SummaryOutput:
        batch = await off_loop(self._batch, req)
        if not batch:
            return SummaryOutput(summary="")
        client = await self.client()
        reply = await client.messages.create(
            model=small_fast_model(),
            max_tokens=100,
            messages=[{"role": "user", "content": f"{INSTRUCTIONS}\n\n{batch}"}],
        )
        text = "".join(b.text for b in reply.content if isinstance(b, anthropic.types.TextBlock))
        line = (text.strip().splitlines() or [""])[0].strip().strip("\"'")
        return SummaryOutput(summary=line[:MAX_SUMMARY_CHARS])
