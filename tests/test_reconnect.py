"""The CLI rides out what a restarting server answers (durable_agent/cli/reconnect.py)."""

from __future__ import annotations

import io

import pytest
from temporalio.service import RPCError, RPCStatusCode

from durable_agent.cli.console import Console
from durable_agent.cli.errors import CliError
from durable_agent.cli.reconnect import riding_out


def _failing(statuses: list[RPCStatusCode]):
    calls: list[int] = []

    async def call() -> str:
        calls.append(1)
        if len(calls) <= len(statuses):
            status = statuses[len(calls) - 1]
            raise RPCError("operation was canceled", status, b"")
        return "answer"

    return call, calls


@pytest.mark.parametrize(
    "status", [RPCStatusCode.UNAVAILABLE, RPCStatusCode.CANCELLED, RPCStatusCode.UNKNOWN]
)
async def test_an_outage_is_waited_out(status):
    call, calls = _failing([status, status])
    stderr = io.StringIO()
    assert await riding_out(call, Console(err=stderr), "s1", give_up_after=30) == "answer"
    assert len(calls) == 3
    err = stderr.getvalue()
    assert "lost the Temporal server" in err and "reconnected" in err


async def test_an_answer_is_not_an_outage():
    call, calls = _failing([RPCStatusCode.NOT_FOUND])
    with pytest.raises(RPCError):
        await riding_out(call, Console(err=io.StringIO()), "s1", give_up_after=30)
    assert len(calls) == 1


async def test_it_gives_up_after_the_limit_and_says_the_session_goes_on():
    call, _ = _failing([RPCStatusCode.CANCELLED] * 10)
    with pytest.raises(CliError) as raised:
        await riding_out(call, Console(err=io.StringIO()), "s1", give_up_after=0.2)
    assert "durable-agent tail s1" in str(raised.value.hint)
