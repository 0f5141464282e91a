"""run_tool records a side-effecting tool's start and result, so a retry never runs it twice."""

import asyncio
import subprocess
import sys

import pytest

from activities.tools.registry import (
    IN_STEP_INLINE_CHARS,
    INLINE_MAX_BYTES,
    INTERRUPTED_TEXT,
    ToolActivities,
    kept_inline,
    run_in_step,
)
from activities.transcript import StoreError
from durable_agent.engine.contracts import RunToolInput
from durable_agent.engine.messages import Message, ToolResultBlock, ToolUseBlock


def _setup(store, tmp_path, command):
    block = ToolUseBlock(id="toolu_1", name="Bash", input={"command": command})
    store.append("s", "a1", None, Message(role="assistant", content=[block]))
    return RunToolInput(
        session_id="s", assistant_uuid="a1", tool_use_id="toolu_1", name="Bash",
        workspace=str(tmp_path), run_id="r1",
    )  # fmt: skip


async def test_a_retried_attempt_returns_the_recorded_result_without_running_again(store, tmp_path):
    req = _setup(store, tmp_path, "echo ran >> marker; echo done")
    tools = ToolActivities(store)
    first = await tools.run_tool(req)
    again = await tools.run_tool(req)
    assert (tmp_path / "marker").read_text() == "ran\n"
    assert first.preview == again.preview == "done"
    assert not again.is_error


@pytest.fixture
def dead_pid() -> int:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(dead.stdout)


@pytest.fixture
def live_pid():
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    yield owner.pid
    owner.kill()
    owner.wait()


async def test_started_without_a_result_is_reported_as_interrupted_not_rerun(
    store, tmp_path, dead_pid
):
    from activities.tools import registry

    req = _setup(store, tmp_path, "echo ran >> marker")
    tools = ToolActivities(store)
    record = {**registry._owner_record(), "pid": dead_pid}
    store.mark_tool_started("s", "toolu_1", "r1", record)
    out = await tools.run_tool(req)
    assert out.is_error
    assert not (tmp_path / "marker").exists()
    assert store.get_tool_result("s", "toolu_1", "r1").content == INTERRUPTED_TEXT


async def test_a_live_earlier_attempt_is_waited_for_and_its_result_returned(
    store, tmp_path, live_pid
):
    from activities.tools import registry

    req = _setup(store, tmp_path, "echo ran >> marker")
    store.mark_tool_started("s", "toolu_1", "r1", {**registry._owner_record(), "pid": live_pid})
    tools = ToolActivities(store)

    async def finish_later():
        await asyncio.sleep(0.5)
        store.put_tool_result("s", ToolResultBlock(tool_use_id="toolu_1", content="real"), "r1")

    writer = asyncio.create_task(finish_later())
    out = await asyncio.wait_for(tools.run_tool(req), 10)
    await writer
    assert out.preview == "real" and not out.is_error
    assert not (tmp_path / "marker").exists()


async def test_a_result_the_store_cannot_keep_is_returned_inline(store, tmp_path, monkeypatch):
    req = _setup(store, tmp_path, "echo ran >> marker; echo the-output")

    def full(*args, **kwargs):
        raise StoreError("could not write: No space left on device")

    monkeypatch.setattr(store, "put_tool_result", full)
    out = await ToolActivities(store).run_tool(req)
    assert out.inline is not None and out.inline.content == "the-output"
    assert (tmp_path / "marker").read_text() == "ran\n"


async def test_a_store_that_fails_after_the_tool_ran_still_reports_it_ran(
    store, tmp_path, monkeypatch
):
    """Any OSError, not only the StoreError of a full disk (a read-only store: EROFS)."""
    req = _setup(store, tmp_path, "echo ran >> marker; echo the-output")

    def read_only(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(store, "put_tool_result", read_only)
    out = await ToolActivities(store).run_tool(req)
    assert out.inline is not None and out.inline.content == "the-output"
    assert not out.is_error
    assert (tmp_path / "marker").read_text() == "ran\n"


async def test_a_side_effect_whose_start_cannot_be_recorded_does_not_run(
    store, tmp_path, monkeypatch
):
    req = _setup(store, tmp_path, "echo ran >> marker")

    def read_only(*args, **kwargs):
        raise StoreError("could not write …started: Read-only file system")

    monkeypatch.setattr(store, "mark_tool_started", read_only)
    out = await ToolActivities(store).run_tool(req)
    assert out.is_error and not (tmp_path / "marker").exists()
    text = store.get_tool_result("s", "toolu_1", "r1").content
    assert text.startswith("Bash did not run: the session store could not record its start")


def test_a_result_too_large_to_travel_inline_is_cut_and_says_the_rest_was_lost():
    small = ToolResultBlock(tool_use_id="t", content="x" * 1000)
    assert kept_inline(small, OSError(30, "Read-only file system")) is small
    big = kept_inline(ToolResultBlock(tool_use_id="t", content="y" * 400_000), OSError(28, "full"))
    assert len(big.model_dump_json().encode()) <= INLINE_MAX_BYTES
    assert big.text().startswith("yyy") and big.text().endswith(
        "[the rest of this output was lost: the session store could not keep it ([Errno 28] full)]"
    )


@pytest.mark.parametrize("command", ["cat marker", "ls"])
async def test_read_only_tools_write_no_start_record(store, tmp_path, command):
    req = _setup(store, tmp_path, command)
    await ToolActivities(store).run_tool(req)
    assert store.tool_started("s", "toolu_1", "r1") is None


async def test_bash_returns_when_its_shell_exits_not_when_a_background_job_does(store, tmp_path):
    import time

    from activities.tools.environment import kill_tagged

    req = _setup(store, tmp_path, "sleep 1000 & echo started")
    began = time.monotonic()
    out = await ToolActivities(store).run_tool(req)
    assert time.monotonic() - began < 3
    assert out.preview == "started" and not out.is_error
    assert kill_tagged("s/toolu_1/r1") == 1  # the job carries its execution's tag


async def test_bash_runs_without_the_workers_secrets(store, tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "token")
    monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
    monkeypatch.setenv("DURABLE_AGENT_HOME", str(tmp_path / "home"))
    req = _setup(store, tmp_path, "env > env.txt")
    await ToolActivities(store).run_tool(req)
    names = {line.split("=", 1)[0] for line in (tmp_path / "env.txt").read_text().splitlines()}
    assert "CLAUDE_PROJECT_DIR" in names and "PATH" in names
    assert not {n for n in names if n.startswith(("ANTHROPIC_", "TEMPORAL_", "DURABLE_AGENT_"))}


async def test_a_short_in_step_read_travels_inline_and_a_long_one_is_stored(store, tmp_path):
    """A read the model-call step runs itself: a short result comes back whole in the step's
    output (no file, no fsync), a long one is stored and only its preview travels."""
    (tmp_path / "short.txt").write_text("one line\n")
    (tmp_path / "long.txt").write_text("".join(f"line {i}\n" for i in range(IN_STEP_INLINE_CHARS)))
    short = ToolUseBlock(id="toolu_s", name="Read", input={"file_path": "short.txt"})
    long = ToolUseBlock(id="toolu_l", name="Read", input={"file_path": "long.txt"})
    got_short = await run_in_step(store, "s", short, str(tmp_path), "step1")
    got_long = await run_in_step(store, "s", long, str(tmp_path), "step1")
    assert got_short.inline is not None and "one line" in got_short.inline.text()
    assert store.get_tool_result("s", "toolu_s", "step1") is None
    assert got_long.inline is None and got_long.content_chars > IN_STEP_INLINE_CHARS
    stored = store.get_tool_result("s", "toolu_l", "step1")
    assert stored is not None and "line 1\n" in stored.text()


def test_the_session_end_ends_what_its_sub_agents_left_running_too(store):
    """A sub-agent's tools run under its own session id (`<session>.agent-<call>`): the
    session's end sweeps their processes with its own, and leaves other sessions' alone."""
    import time

    from activities.tools.environment import RUN_TAG_NAME, tagged_processes
    from durable_agent.engine.contracts import EndProcessesInput

    tags = {"own": "s/t1/r1", "agent": "s.agent-t2/t3/r1", "other": "sx/t1/r1"}
    procs = {
        name: subprocess.Popen(["sleep", "1000"], env={RUN_TAG_NAME: tag})
        for name, tag in tags.items()
    }
    try:
        for _ in range(100):  # until each shows its environment (empty in the middle of exec)
            if all(tagged_processes(tag) for tag in tags.values()):
                break
            time.sleep(0.02)
        ending = ToolActivities(store).end_session_processes(EndProcessesInput(session_id="s"))
        out = asyncio.run(ending)
        assert out.killed == 2
        assert procs["own"].wait(5) and procs["agent"].wait(5)  # killed: a signal's exit
        assert procs["other"].poll() is None
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
