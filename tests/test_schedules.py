"""Cron jobs (issue 25 item 3): CronCreate / CronList / CronDelete and `durable-agent schedule`
make Temporal Schedules whose firing sends the prompt to the session; jobs end with their
session; `status` shows them. Against the dev server (the time-skipping one has no Schedules);
a firing is the Schedule's `trigger()`, not a wait for the cron time."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from durable_agent.cli import CliError, commands, parser
from durable_agent.cli.schedules import with_wakeups
from durable_agent.engine.contracts import PromptRequest
from durable_agent.engine.schedules import cron_problem, job_id, schedule_id, split_schedule_id
from durable_agent.names import Signals, Updates
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from durable_agent.schedules import create_job, local_time_zone, session_jobs
from durable_agent.wiring import build_worker
from tests.helpers import replay_client_factory, start_session
from tests.test_cli import ROOT, cli_env
from tests.test_wakeups import HOUR, answered, eventually, status_when, tool_result


def _in_twelve_hours() -> str:
    """A daily job that fires within its 7 days but not during a test (its firings here are
    `trigger()`s), in the local time the jobs use."""
    when = datetime.now(ZoneInfo(local_time_zone())) + timedelta(hours=12)
    return f"{when.minute} {when.hour} * * *"


DAILY = _in_twelve_hours()


async def gone(client: Client, sid: str) -> bool:
    try:
        await client.get_schedule_handle(sid).describe()
    except RPCError as exc:
        return exc.status == RPCStatusCode.NOT_FOUND
    return False


def create(call_id: str, cron: str = DAILY, **more: Any) -> tuple[str, str, dict[str, Any]]:
    return (call_id, "CronCreate", {"cron": cron, "prompt": f"prompt of {call_id}", **more})


def test_cron_expressions_are_checked_before_anything_is_created():
    for good in ("*/5 * * * *", "7 9 * * 1-5", "0 9 * JAN MON-FRI", "1,15,30 */2 1-31/3 * 0,7"):
        assert cron_problem(good) is None, good
    assert cron_problem("@hourly") is not None
    assert "minute '61': 61 is outside 0-59" in (cron_problem("61 * * * *") or "")
    assert "a step must be at least 1" in (cron_problem("*/0 * * * *") or "")
    assert "runs backwards" in (cron_problem("0 5-3 * * *") or "")
    assert "'xyz' is not a number or a name" in (cron_problem("0 0 * xyz *") or "")
    assert split_schedule_id(schedule_id("session-1-cron-x", "0a1b2c3d")) == (
        "session-1-cron-x",
        "0a1b2c3d",
    )
    assert split_schedule_id("someone-elses-schedule") is None
    assert job_id("toolu_1") != job_id("toolu_2") and not job_id("toolu_1").startswith("w")


async def test_the_tools_create_list_and_delete_and_a_firing_reaches_the_session(
    dev_env, store, workspace, task_queue
):
    client = dev_env.client
    job = job_id("c1")
    turns = [
        tool_turn([create("c1")]),
        text_turn("scheduled"),
        text_turn("PRs checked"),  # the job's prompt, sent by its firing
        tool_turn([("l1", "CronList", {})]),
        tool_turn([("d1", "CronDelete", {"id": job}), ("d2", "CronDelete", {"id": job})]),
        text_turn("deleted"),
    ]
    with ReplayServer(turns) as server:
        async with build_worker(client, task_queue, store, replay_client_factory(server)):
            sid, handle = await start_session(
                client, workspace, task_queue, "every year", close_when_idle=False
            )
            await status_when(handle, answered(1))
            answer = json.dumps(tool_result(server.requests[1], "c1"))
            assert f"Scheduled cron job {job}" in answer and "ends" in answer, answer
            schedule = client.get_schedule_handle(schedule_id(sid, job))
            desc = await schedule.describe()
            assert desc.schedule.action.task_queue == task_queue
            end = desc.schedule.spec.end_at
            assert end is not None and end - datetime.now(UTC) > timedelta(days=6, hours=23)
            [listed] = await session_jobs(client, sid)
            assert (listed.id, listed.cron, listed.prompt) == (job, DAILY, "prompt of c1")

            await schedule.trigger()
            fired = await status_when(handle, answered(2))
            assert fired.last_result is not None and fired.last_result.final_text == "PRs checked"
            assert "prompt of c1" in json.dumps(server.requests[2]["messages"][-1])
            woken = await client.get_workflow_handle(f"{sid}-q2").describe()
            assert await woken.static_summary() == f"[{job}] prompt of c1"

            await handle.execute_update(
                Updates.SUBMIT_PROMPT, PromptRequest(prompt="list, then stop it")
            )
            await status_when(handle, answered(3))
            await handle.signal(Signals.CLOSE)
            await handle.result()
    assert server.violations == []
    assert job in json.dumps(tool_result(server.requests[4], "l1"))
    assert "is deleted" in json.dumps(tool_result(server.requests[5], "d1"))
    second = tool_result(server.requests[5], "d2")
    assert second["is_error"] and "No cron job" in json.dumps(second)
    assert await gone(client, schedule_id(sid, job))


async def test_a_one_shot_job_ends_after_it_fires_and_the_rest_end_with_the_session(
    dev_env, store, workspace, task_queue
):
    client = dev_env.client
    once, every = job_id("c1"), job_id("c2")
    turns = [
        tool_turn([create("c1", recurring=False)]),
        tool_turn([create("c2")]),
        text_turn("two jobs"),
        text_turn("reminded"),
    ]
    with ReplayServer(turns) as server:
        async with build_worker(client, task_queue, store, replay_client_factory(server)):
            sid, handle = await start_session(
                client, workspace, task_queue, "remind me", close_when_idle=False
            )
            await status_when(handle, answered(1))
            assert "runs once" in json.dumps(tool_result(server.requests[1], "c1"))
            await client.get_schedule_handle(schedule_id(sid, once)).trigger()
            await status_when(handle, answered(2))
            await eventually(lambda: gone(client, schedule_id(sid, once)))
            assert not await gone(client, schedule_id(sid, every))
            await handle.signal(Signals.CLOSE)
            await handle.result()
    assert await gone(client, schedule_id(sid, every))  # deleted as the session ended
    assert "prompt of c1" in json.dumps(server.requests[3]["messages"][-1])


async def test_a_job_whose_session_has_gone_deletes_itself_when_it_fires(
    dev_env, store, workspace, task_queue
):
    client = dev_env.client
    with ReplayServer([text_turn("hello")]) as server:
        async with build_worker(client, task_queue, store, replay_client_factory(server)):
            sid, handle = await start_session(
                client, workspace, task_queue, "hi", close_when_idle=False
            )
            job = await create_job(client, sid, "0badf00d", DAILY, "still there?")
            await handle.terminate("gone without a goodbye")  # no session end: the job stays
            assert not await gone(client, job.schedule_id)
            await client.get_schedule_handle(job.schedule_id).trigger()
            await eventually(lambda: gone(client, job.schedule_id))


# --------------------------------------------------------------------------- the CLI


async def run_cli(*argv: str) -> int:
    args = parser().parse_args(list(argv))
    return await commands.COMMANDS[args.command](args)


@pytest.fixture
def cli_here(dev_env, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", dev_env.client.service_client.config.target_host)
    monkeypatch.setenv("DURABLE_AGENT_HOME", str(tmp_path / "home"))


async def test_schedule_and_status_show_and_cancel_jobs_and_wake_ups(
    cli_here, dev_env, store, workspace, task_queue, capsys
):
    client = dev_env.client
    turns = [tool_turn([("sw1", "ScheduleWakeup", HOUR)]), text_turn("later")]
    with ReplayServer(turns) as server:
        async with build_worker(client, task_queue, store, replay_client_factory(server)):
            sid, handle = await start_session(
                client, workspace, task_queue, "check later", close_when_idle=False
            )
            waiting = await status_when(handle, lambda s: s.last_result is not None)
            wakeup = waiting.wakeups[0].id
            capsys.readouterr()
            # What `run` says while its headless session waits for the wake-up.
            said = await with_wakeups(client, sid, no_stalls)()
            assert said == [
                f"wake-up {wakeup} at {waiting.wakeups[0].due:%Y-%m-%d %H:%M:%S} UTC: check the deploy"
            ]

            assert await run_cli("schedule", "add", sid, "--cron", "7  * * * *", "look") == 0
            added = capsys.readouterr().out
            assert '"7 * * * *"' in added and "recurring" in added and ": look" in added
            job = added.split("cron job ")[1].split()[0]
            await eventually(lambda: _listed(client, sid, job))

            assert await run_cli("status", sid) == 0
            shown = capsys.readouterr().out
            assert f"wake-up {wakeup} at " in shown and "check the deploy" in shown
            assert f"cron job {job} " in shown

            assert await run_cli("schedule", "list", sid, "--json") == 0
            listed = json.loads(capsys.readouterr().out)
            assert [j["id"] for j in listed["cron_jobs"]] == [job]
            assert [w["id"] for w in listed["wakeups"]] == [wakeup]
            assert await run_cli("schedule", "list") == 0
            assert f"{sid}: cron job {job}" in capsys.readouterr().out

            assert await run_cli("schedule", "delete", wakeup, sid) == 0
            assert f"wake-up {wakeup} cancelled" in capsys.readouterr().out
            assert await run_cli("schedule", "delete", job) == 0
            assert f"cron job {job} of session {sid} deleted" in capsys.readouterr().out

            with pytest.raises(CliError, match=f"no wake-up {wakeup} in this session"):
                await run_cli("schedule", "delete", wakeup, sid)
            with pytest.raises(CliError, match=f"no cron job {job}"):
                await run_cli("schedule", "delete", job)
            assert await run_cli("schedule", "list", sid) == 0
            assert f"no cron jobs or wake-ups in {sid}" in capsys.readouterr().out
            await handle.signal(Signals.CLOSE)
            await handle.result()
    with pytest.raises(CliError, match=f"session {sid} is completed: a cron job needs a running"):
        await run_cli("schedule", "add", sid, "--cron", DAILY, "too late")
    with pytest.raises(CliError, match="no session no-such-session"):
        await run_cli("schedule", "add", "no-such-session", "--cron", DAILY, "hello")


async def no_stalls() -> list[str]:
    return []


async def _listed(client: Client, sid: str, job: str) -> bool:
    return job in [j.id for j in await session_jobs(client, sid)]


@pytest.mark.parametrize(
    ("argv", "error", "hint"),
    [
        (
            ["add", "S", "--cron", "1 2 3", "hi"],
            "--cron '1 2 3': 3 fields; a cron expression has 5",
            "five fields: minute hour",
        ),
        (["add", "S", "--cron", "* * * * *", " "], "the prompt is empty", "schedule add SESSION"),
        (["add", "S", "hi"], "the following arguments are required: --cron", "--help"),
        (["delete", "w1234567"], "w1234567 is a wake-up: name its session", "SESSION"),
        ([], "the following arguments are required: ACTION", "schedule --help"),
    ],
)
def test_schedule_usage_errors_are_one_line_and_a_hint(tmp_path, argv, error, hint):
    proc = subprocess.run(
        [sys.executable, "-m", "durable_agent", "schedule", *argv],
        env=cli_env(tmp_path), cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 2, proc.stderr
    assert error in lines[0] and lines[1].startswith("hint: ") and hint in lines[1]
