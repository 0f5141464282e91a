"""Bounds on what a prompt carries across continue-as-new: a session of any length must not
grow the State (denials, collapsed ids) nor the progress tail a new run starts with. Pure."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from durable_agent.engine.state import PermissionDenial, ProgressEvent, State

MAX_DENIALS = 100
"""`State.permission_denials` keeps the newest; `denials_dropped` counts the rest."""
DENIAL_VALUE_CHARS = 200
"""A denied call's input value longer than this is kept as its start and its length."""
DENIAL_KEYS = 20
MAX_COLLAPSED_IDS = 500
"""Collapsed tool results remembered since the last compaction (the oldest are forgotten: at
worst they show again, and the next drain clears them again)."""
CARRIED_EVENTS = 100
CARRIED_EVENT_CHARS = 32_000
"""The progress events a new run starts with (for a watcher that has not read them yet)."""


def _short(value: Any) -> Any:
    if isinstance(value, bool | int | float) or value is None:
        return value
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if len(text) <= DENIAL_VALUE_CHARS:
        return value
    return f"{text[:DENIAL_VALUE_CHARS]}… ({len(text):,} characters)"


def input_summary(tool_input: dict[str, Any]) -> dict[str, Any]:
    """A denied call's input as the denial keeps it: the keys, each long value cut short (a
    refused Write is listed without its whole content)."""
    keys = list(tool_input)[:DENIAL_KEYS]
    return {str(k): _short(tool_input[k]) for k in keys}


def add_denials(state: State, denials: Sequence[PermissionDenial]) -> State:
    """The state listing `denials` too, summarised, the newest MAX_DENIALS of them."""
    short = [d.model_copy(update={"tool_input": input_summary(d.tool_input)}) for d in denials]
    listed = (*state.permission_denials, *short)
    kept = listed[-MAX_DENIALS:]
    dropped = state.denials_dropped + len(listed) - len(kept)
    return state.model_copy(update={"permission_denials": kept, "denials_dropped": dropped})


def add_collapsed(state: State, ids: Sequence[str]) -> tuple[str, ...]:
    """`collapsed_ids` with `ids` added, the newest MAX_COLLAPSED_IDS."""
    return (*state.collapsed_ids, *ids)[-MAX_COLLAPSED_IDS:]


def carried_events(events: Sequence[ProgressEvent]) -> list[ProgressEvent]:
    """The newest events, at most CARRIED_EVENTS and about CARRIED_EVENT_CHARS of text (the
    last one always)."""
    kept: list[ProgressEvent] = []
    chars = 0
    for event in reversed(events):
        chars += len(event.text)
        if kept and (len(kept) >= CARRIED_EVENTS or chars > CARRIED_EVENT_CHARS):
            break
        if len(event.text) > CARRIED_EVENT_CHARS:
            event = event.model_copy(update={"text": event.text[:CARRIED_EVENT_CHARS] + "…"})
        kept.append(event)
    return kept[::-1]
