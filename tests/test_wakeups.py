"""Wake-ups (issue 25 item 3): ScheduleWakeup continues a session later on a Temporal timer,
whatever restarted meanwhile; a headless session stays open for its wake-ups; `status` shows
them and `schedule delete` cancels one. (Cron jobs: tests/test_schedules.py.)"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from activities.tools.registry import execute_tool
from activities.tools.schedule import scheduled_fields
from durable_agent import wiring
from durable_agent.cli.schedules import status_lines
from durable_agent.engine.contracts import SessionStatus
from durable_agent.engine.permissions import (
    Behavior,
    PermissionContext,
    PermissionMode,
    PermissionRules,
    check,
    parse_rule,
)
from durable_agent.engine.schedules import (
    MAX_WAKEUPS,
    Wakeup,
    WakeupRequest,
    add_wakeups,
    clamp_delay,
    wakeup_id,
    wakeup_lines,
)
from durable_agent.names import Queries, Updates
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from durable_agent.wiring import build_worker
from tests.helpers import record_histories, replay_client_factory, start_session

HOUR = {"delaySeconds": 3600, "reason": "check the deploy", "prompt": "is the deploy done?"}


def wakeup_turn(call_id: str, **fields: Any) -> Any:
    return tool_turn([(call_id, "ScheduleWakeup", {**HOUR, **fields})])


async def status_when(
    handle: WorkflowHandle[Any, Any], fact: Callable[[SessionStatus], bool], seconds: float = 60
) -> SessionStatus:
    """The session's status once `fact` holds of it (waits for the fact, fails after `seconds`)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        status = await handle.query(Queries.STATUS, result_type=SessionStatus)
        if fact(status):
            return status
        assert loop.time() < deadline, f"never came true; last status: {status}"
        await asyncio.sleep(0.05)


async def eventually(check: Callable[[], Awaitable[bool]], seconds: float = 30) -> None:
    """Until `check()` holds (fails after `seconds`)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not await check():
        assert loop.time() < deadline, "never came true"
        await asyncio.sleep(0.05)


def answered(n: int) -> Callable[[SessionStatus], bool]:
    """The session's `n`-th prompt has its result."""

    def fact(status: SessionStatus) -> bool:
        last = status.last_result
        return last is not None and last.query_workflow_id.endswith(f"-q{n}")

    return fact


def last_user_text(body: dict[str, Any]) -> str:
    return json.dumps(body["messages"][-1])


def tool_result(body: dict[str, Any], tool_use_id: str) -> dict[str, Any]:
    for message in body["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block.get("type") == "tool_result" and block["tool_use_id"] == tool_use_id:
                return dict(block)
    raise AssertionError(f"no tool_result for {tool_use_id}")


# --------------------------------------------------------------------------- the acceptance


@pytest.fixture
def cacheless(monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers keep no workflow cache, so no sticky queue: on the time-skipping server, a
    workflow task left on a stopped worker's sticky queue never moves to the shared one (its
    schedule-to-start timeout runs on server time, which the waiting task holds still). A new
    worker replays the whole history, as one on another machine would."""
    monkeypatch.setattr(wiring, "Worker", functools.partial(wiring.Worker, max_cached_workflows=0))


@pytest_asyncio.fixture
async def own_ts_env() -> AsyncIterator[WorkflowEnvironment]:
    """A time-skipping server of this test's own: on the one the other tests share, what they
    left running can hold its clock still (it failed so on CI, under load)."""
    from tests.conftest import BIN, _started

    env = await _started(
        lambda: WorkflowEnvironment.start_time_skipping(
            data_converter=pydantic_data_converter,
            test_server_existing_path=str(BIN / "temporal-test-server"),
        )
    )
    yield env
    await env.shutdown()


async def test_a_wake_up_an_hour_ahead_completes_across_a_worker_restart(
    own_ts_env, store, workspace, task_queue, cacheless
):
    """Issue 25's acceptance: a wake-up an hour ahead completes on the time-skipping server
    across a worker restart."""
    ts_env = own_ts_env
    client = ts_env.client
    turns = [wakeup_turn("sw1"), text_turn("I will look again in an hour"), text_turn("deployed")]
    with ReplayServer(turns) as server:
        factory = replay_client_factory(server)
        async with build_worker(client, task_queue, store, factory):
            sid, handle = await start_session(client, workspace, task_queue, "deploy, then check")
            waiting = await status_when(handle, answered(1))
        # The first prompt is over; the session waits, with no worker at all.
        assert [w.id for w in waiting.wakeups] == [wakeup_id("sw1")]
        assert waiting.close_when_idle and not waiting.closed and waiting.queries == 1
        shown = await status_lines(client, waiting)  # what `status` prints of it
        assert shown[0].startswith(f"wake-up {wakeup_id('sw1')} at ")
        assert shown[0].endswith(": check the deploy")  # ("in N min": by this machine's clock)
        assert shown[1] == "the session stays open for its wake-ups, then ends"
        assert len(server.requests) == 2
        due = waiting.wakeups[0].due
        async with ts_env.time_skipping_unlocked():  # the server's clock jumps to the timer
            await eventually(lambda: clock_past(ts_env, due), seconds=90)
        assert len(server.requests) == 2  # the timer fired; nothing has run it
        async with build_worker(client, task_queue, store, factory):  # a new worker
            final = await handle.result()
    assert server.violations == []
    assert len(server.requests) == 3 and "is the deploy done?" in last_user_text(server.requests[2])
    assert final.queries == 2 and final.wakeups == [] and final.last_result is not None
    assert final.last_result.final_text == "deployed"
    # The woken prompt went on from the conversation before it.
    assert "I will look again in an hour" in json.dumps(server.requests[2]["messages"])
    # The model was told when, relative to now (the workflow fixed the time).
    answer = json.dumps(tool_result(server.requests[1], "sw1"))
    assert "in 3600 seconds" in answer and "check the deploy" in answer
    await record_histories(client, sid)


async def clock_past(env: Any, due: datetime) -> bool:
    return bool(await env.get_current_time() >= due)


# --------------------------------------------------------------------------- the tool


def test_the_delay_is_clamped_to_a_minute_and_an_hour():
    assert [clamp_delay(s) for s in (-5, 0, 59, 60, 61, 3600, 3601, 10**9)] == [
        60, 60, 60, 60, 61, 3600, 3600, 3600,
    ]  # fmt: skip
    kept = scheduled_fields("t1", "ScheduleWakeup", {**HOUR, "delaySeconds": 5})
    assert kept == {
        "wakeup": WakeupRequest(delay_seconds=60, reason=HOUR["reason"], prompt=HOUR["prompt"])
    }
    assert (
        scheduled_fields("t1", "ScheduleWakeup", {**HOUR, "delaySeconds": 7200})[
            "wakeup"
        ].delay_seconds
        == 3600
    )


async def test_the_tool_says_the_clamped_delay(tmp_path):
    out = await execute_tool("ScheduleWakeup", {**HOUR, "delaySeconds": 5}, str(tmp_path))
    assert not out.is_error and "in 60 seconds (5 clamped to 60-3600)" in out.content
    out = await execute_tool("ScheduleWakeup", {**HOUR, "delaySeconds": 900}, str(tmp_path))
    assert "in 900 seconds: check the deploy" in out.content and "clamped" not in out.content


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"delaySeconds": "soon"}, "delaySeconds"),
        ({"delaySeconds": None}, "delaySeconds"),
        ({"prompt": ""}, "prompt"),
        ({"reason": ""}, "reason"),
        ({"when": "later"}, "when"),
        ({"prompt": "x" * 10_001}, "prompt"),
    ],
)
async def test_bad_input_is_refused_naming_the_field_and_keeps_no_wake_up(
    tmp_path, change, problem
):
    raw = {**HOUR, **change}
    out = await execute_tool("ScheduleWakeup", raw, str(tmp_path))
    assert out.is_error and "InputValidationError" in out.content and problem in out.content
    assert scheduled_fields("t1", "ScheduleWakeup", raw) == {}


def test_wake_ups_are_bounded_and_in_due_order():
    from datetime import UTC, datetime

    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    made = [
        Wakeup(id=f"w{i}", due=t0 + timedelta(minutes=20 - i), reason="r", prompt="p")
        for i in range(15)
    ]
    kept = add_wakeups([], made)
    assert len(kept) == MAX_WAKEUPS and [w.id for w in kept][-1] == "w5"  # the newest 10
    assert [w.due for w in kept] == sorted(w.due for w in kept)
    again = add_wakeups(kept, [made[-1].model_copy(update={"reason": "new"})])
    assert len(again) == MAX_WAKEUPS and next(w for w in again if w.id == "w14").reason == "new"
    line = wakeup_lines([made[0]], t0)[0]
    assert line == "wake-up w0 at 2025-01-01 00:20:00 UTC (in 20 min 0 s): r"


def test_the_scheduling_tools_need_no_permission_but_rules_still_apply():
    base = PermissionContext(cwd="/w", home="/h")
    for name in ("ScheduleWakeup", "CronCreate", "CronList", "CronDelete"):
        assert check(name, {}, base).behavior == Behavior.ALLOW, name
    plan = base.model_copy(update={"mode": PermissionMode.PLAN})
    assert check("ScheduleWakeup", HOUR, plan).behavior == Behavior.ALLOW
    rules = PermissionRules(deny=[parse_rule("CronCreate", "projectSettings", "/w")])
    denied = base.model_copy(update={"rules": rules})
    assert check("CronCreate", {}, denied).behavior == Behavior.DENY


# --------------------------------------------------------------------------- the session


async def test_a_headless_session_stays_open_for_its_wake_ups_then_closes(
    own_ts_env, store, workspace, task_queue
):
    """The woken prompt schedules another: the session stays open for it too, then closes."""
    ts_env = own_ts_env
    turns = [
        wakeup_turn("sw1", delaySeconds=10, prompt="first check"),  # clamped to a minute
        text_turn("later"),
        wakeup_turn("sw2", delaySeconds=1800, prompt="second check"),
        text_turn("once more later"),
        text_turn("all checked"),
    ]
    client = ts_env.client
    with ReplayServer(turns) as server:
        async with build_worker(client, task_queue, store, replay_client_factory(server)):
            _, handle = await start_session(client, workspace, task_queue, "watch it")
            first = await status_when(handle, answered(1))
            desc = await handle.describe()
            final = await handle.result()
    assert server.violations == []
    assert len(server.requests) == 5 and final.queries == 3 and final.closed is False
    assert final.last_result is not None and final.last_result.final_text == "all checked"
    assert "first check" in last_user_text(server.requests[2])
    assert "second check" in last_user_text(server.requests[4])
    # Clamped: due a minute after the call (the prompt took a few real seconds at most).
    due = first.wakeups[0].due
    assert 60 <= (due - desc.start_time).total_seconds() < 75, due
    # What the woken prompts' workflows are called in the Web UI.
    woken = await client.get_workflow_handle(f"{handle.id}-q2").describe()
    assert await woken.static_summary() == f"[{wakeup_id('sw1')}] first check"


async def test_a_bad_call_keeps_no_wake_up_and_the_session_closes(
    own_ts_env, store, workspace, task_queue
):
    ts_env = own_ts_env
    turns = [wakeup_turn("sw1", delaySeconds="soon"), text_turn("could not")]
    client = ts_env.client
    with ReplayServer(turns) as server:
        async with build_worker(client, task_queue, store, replay_client_factory(server)):
            _, handle = await start_session(client, workspace, task_queue, "later")
            final = await handle.result()
    assert final.queries == 1 and final.wakeups == []
    result = tool_result(server.requests[1], "sw1")
    assert result["is_error"] and "delaySeconds" in json.dumps(result)


async def test_a_wake_up_can_be_cancelled_and_an_unknown_one_is_refused(
    own_ts_env, store, workspace, task_queue
):
    ts_env = own_ts_env
    turns = [wakeup_turn("sw1"), text_turn("later")]
    client = ts_env.client
    with ReplayServer(turns) as server:
        async with build_worker(client, task_queue, store, replay_client_factory(server)):
            _, handle = await start_session(client, workspace, task_queue, "later")
            await status_when(handle, answered(1))
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await handle.execute_update(Updates.CANCEL_WAKEUP, "w0000000", result_type=str)
            assert "no wake-up w0000000" in str(refused.value.cause)
            assert wakeup_id("sw1") in str(refused.value.cause)  # the pending ones are named
            said = await handle.execute_update(
                Updates.CANCEL_WAKEUP, wakeup_id("sw1"), result_type=str
            )
            final = await handle.result()  # headless: nothing left to wait for
    assert said == f"wake-up {wakeup_id('sw1')} cancelled (check the deploy)"
    assert final.queries == 1 and final.wakeups == [] and len(server.requests) == 2
