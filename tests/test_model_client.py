"""What the model activity's client costs per call: a warm worker's first streamed call imports
nothing more (the prewarm's module list is current), and no call rebuilds the stream helper's
pydantic model."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.test_cli import ROOT

FIRST_CALL = """
import asyncio, json, sys
import activities.model as model
from durable_agent.replay import ReplayServer, text_turn

async def main():
    with ReplayServer([text_turn("hi"), text_turn("again")]) as server:
        client = model.default_client(model.ClientOptions(api_key="k", base_url=server.base_url))
        if sys.argv[1] == "prewarmed":
            model._import_stream_path()
        before = set(sys.modules)
        for _ in range(2):
            async with client.messages.stream(
                model="claude-sonnet-4-5", max_tokens=10, messages=[{"role": "user", "content": "x"}]
            ) as stream:
                await stream.get_final_message()
        await client.close()
        return sorted(set(sys.modules) - before)

print(json.dumps(asyncio.run(main())))
"""


def probe(code: str, *args: str) -> str:
    """What `code`, run in an interpreter of its own, prints last."""
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def imported_by_the_first_call(mode: str) -> list[str]:
    return json.loads(probe(FIRST_CALL, mode))


def test_the_prewarm_imports_what_the_first_streamed_call_would():
    assert imported_by_the_first_call("cold"), "the first call imports nothing lazily any more"
    assert imported_by_the_first_call("prewarmed") == []


STREAMS = """
import asyncio, gc
import pydantic._internal._generics as generics
import activities.model as model
from durable_agent.replay import ReplayServer, text_turn

built = []
real = generics.create_generic_submodel
generics.create_generic_submodel = lambda *a: built.append(a[0]) or real(*a)

async def main():
    with ReplayServer([text_turn(str(i)) for i in range(3)]) as server:
        client = model.default_client(model.ClientOptions(api_key="k", base_url=server.base_url))
        for _ in range(3):
            async with client.messages.stream(
                model="claude-sonnet-4-5", max_tokens=10, messages=[{"role": "user", "content": "x"}]
            ) as stream:
                await stream.get_final_message()
            gc.collect()
        await client.close()

asyncio.run(main())
print(len(built), sorted(set(built)))
"""


def test_no_stream_rebuilds_the_snapshot_model():
    """pydantic caches parametrized models weakly: the class the SDK's stream helper names at
    each stream's start is held by activities/model.py, so no stream builds one (without the
    hold, every stream did)."""
    built = probe(STREAMS)
    assert built.startswith("0 "), built
