"""A fleet that shares fairly: whose session this is (its tenant), and where its model calls go.

A session started with DURABLE_AGENT_TENANT set carries that tenant as its Temporal fairness key
(and DURABLE_AGENT_TENANT_WEIGHT as its weight); its activities and children inherit it, so a
task queue backed up by one tenant's burst hands out its tasks to the tenants in proportion to
their weights instead of first come, first served (the server needs `matching.enableFairness`;
the embedded dev server has it on).

A session started on the shared queue with DURABLE_AGENT_MODEL_TASK_QUEUE set makes its model
calls on that queue, where the fleet's workers run them at no more than
DURABLE_AGENT_MODEL_CALLS_PER_SECOND across the fleet (durable_agent/operating.py): a burst is
spread out there rather than amplifying an API overload, and it is shared by tenant too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from temporalio.common import Priority

from durable_agent.cli.errors import CliError

TENANT_ENV = "DURABLE_AGENT_TENANT"
WEIGHT_ENV = "DURABLE_AGENT_TENANT_WEIGHT"
MODEL_QUEUE_ENV = "DURABLE_AGENT_MODEL_TASK_QUEUE"
TENANT_MEMO = "tenant"
MAX_KEY_BYTES = 64
"""The server's limit on a fairness key."""


class FairnessError(CliError):
    """A tenant or weight that cannot be a fairness key: one line and a hint."""


def tenant(given: str | None = None, env: Mapping[str, str] = os.environ) -> str | None:
    """The tenant a new session belongs to: `given` (--tenant), else DURABLE_AGENT_TENANT."""
    name = (given if given is not None else env.get(TENANT_ENV, "")).strip()
    if not name:
        return None
    if len(name.encode()) > MAX_KEY_BYTES:
        raise FairnessError(
            f"tenant {name[:20]!r}… is longer than {MAX_KEY_BYTES} bytes",
            "use a short id for the tenant (a team or customer id)",
        )
    return name


def weight(env: Mapping[str, str] = os.environ) -> float | None:
    raw = env.get(WEIGHT_ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not 0.001 <= value <= 1000:
        raise FairnessError(
            f"{WEIGHT_ENV}={raw!r} is not a weight",
            "give a number from 0.001 to 1000 (1 is the default share)",
        )
    return value


def priority(name: str | None, env: Mapping[str, str] = os.environ) -> Priority | None:
    """The Priority a session of tenant `name` starts with (None: the server's default)."""
    if name is None:
        return None
    return Priority(fairness_key=name, fairness_weight=weight(env))


def start_options(name: str | None, env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """Keyword arguments for `start_workflow` of a session of tenant `name`."""
    found = priority(name, env)
    return {"priority": found} if found is not None else {}


def model_queue(
    session_queue: str, shared_queue: str, env: Mapping[str, str] = os.environ
) -> str | None:
    """Where the model calls of a session on `session_queue` go: the fleet's model queue when the
    session is on the fleet's shared queue and one is configured; else its own queue (None). A
    session served by a CLI's own worker keeps its calls there: no fleet worker may be running."""
    name = env.get(MODEL_QUEUE_ENV, "").strip()
    if not name or session_queue != shared_queue:
        return None
    return name
