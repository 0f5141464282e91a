"""The warm worker `durable-agent server` keeps: a `run` from the same environment and code
needs no worker of its own (issue 9: first model request ≤ 1.5 s), a different one runs its
own, and a run whose warm worker dies takes its session over."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from durable_agent import warm
from durable_agent.replay import ReplayServer, Turn, text_turn, tool_turn
from tests.helpers import wait_until
from tests.test_cli import ROOT, cli_env, durable_agent


def test_the_fingerprint_is_the_code_and_the_environment_but_its_volatile_part():
    env = {"PATH": "/bin", "ANTHROPIC_BASE_URL": "http://a", "PWD": "/x", "SHLVL": "1"}
    same = {**env, "PWD": "/y", "OLDPWD": "/x", "SHLVL": "3"}
    assert warm.fingerprint(env) == warm.fingerprint(same)
    assert warm.fingerprint(env) != warm.fingerprint({**env, "ANTHROPIC_BASE_URL": "http://b"})
    assert warm.fingerprint(env) != warm.fingerprint({**env, "FOO": "1"})  # a tool would see it
    assert "http://a" not in warm.fingerprint(env)


def test_only_a_live_warm_worker_of_this_fingerprint_is_found(tmp_path):
    env = {"PATH": "/bin"}
    fp = warm.fingerprint(env)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    warm.write_record(tmp_path, fp, warm.WarmRecord(pid=int(dead.stdout), task_queue="q"))
    assert warm.find(tmp_path, env) is None  # its process is gone
    warm.write_record(tmp_path, fp, warm.WarmRecord(pid=os.getpid(), task_queue="q"))
    assert warm.find(tmp_path, env) is None  # a live process, but no warm worker (pytest)
    assert warm.find(tmp_path, {**env, warm.WARM_ENV: "0"}) is None


def test_a_starting_warm_worker_is_known_by_its_live_pid(tmp_path):
    env = {"PATH": "/bin"}
    marker = warm.starting_path(tmp_path, warm.fingerprint(env))
    marker.parent.mkdir(parents=True)
    marker.write_text(str(os.getpid()))
    assert warm.starting(tmp_path, env) is None  # a live process, but no warm worker (pytest)
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; print(flush=True); time.sleep(30)", "warm-worker"],
        stdout=subprocess.PIPE,
    )
    try:
        assert sleeper.stdout is not None
        sleeper.stdout.readline()  # it runs (just after the fork its cmdline can be empty)
        marker.write_text(str(sleeper.pid))
        assert warm.starting(tmp_path, env) == sleeper.pid
        assert warm.starting(tmp_path, {**env, "FOO": "1"}) is None  # another fingerprint
        assert warm.starting(tmp_path, {**env, warm.WARM_ENV: "0"}) is None
        warm.started(tmp_path, warm.fingerprint(env))
        assert warm.starting(tmp_path, env) is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_run_right_after_server_waits_for_the_starting_warm_worker(tmp_path):
    """`server` then `run` at once: the warm worker is still importing (held here with SIGSTOP
    so that it surely is); the run waits for it instead of starting a worker of its own."""
    home = tmp_path / "home"
    with ReplayServer([text_turn("done")]) as server:
        env = cli_env(tmp_path, ANTHROPIC_API_KEY="dummy", ANTHROPIC_BASE_URL=server.base_url)
        env.pop("DURABLE_AGENT_TASK_QUEUE")
        env.pop(warm.WARM_ENV, None)
        started = durable_agent(["server"], env)
        try:
            assert started.returncode == 0, started.stderr
            marker = next((home / "warm").glob("*.starting"))
            pid = int(marker.read_text())
            os.kill(pid, signal.SIGSTOP)
            ws = tmp_path / "ws"
            ws.mkdir()
            run = subprocess.Popen(_run(ws), env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)  # fmt: skip
            time.sleep(1.5)
            assert run.poll() is None and server.requests == []  # waiting, no worker of its own
            os.kill(pid, signal.SIGCONT)
            out, err = run.communicate(timeout=120)
            assert run.returncode == 0, err
            assert f"served by the warm worker (pid {pid})" in err
            assert json.loads(out.strip().splitlines()[-1])["terminal"] == "completed"
            assert not marker.exists()  # it polls: no longer starting
        finally:
            stopped = durable_agent(["server", "--stop"], env)
            assert stopped.returncode == 0, stopped.stderr


def _wait_for_record(home: Path, deadline: float = 60) -> warm.WarmRecord:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        for path in (home / "warm").glob("*.json"):
            record = warm.WarmRecord.model_validate_json(path.read_text())
            if warm.is_warm_worker(record.pid):
                return record
        time.sleep(0.2)
    logs = "".join(p.read_text() for p in (home / "warm").glob("*.log"))
    raise AssertionError(f"no warm worker came up: {logs[-2000:]}")


class Script:
    """Replay turns the test queues up; a text answer when none is left."""

    def __init__(self) -> None:
        self.turns: list[Turn] = []

    def __call__(self, body: dict[str, Any], index: int) -> Turn:
        return self.turns.pop(0) if self.turns else text_turn("done")


@contextlib.contextmanager
def _warm(tmp_path: Path, **extra: str) -> Iterator[tuple[dict[str, str], Any, Any, Script]]:
    """`durable-agent server` for a fresh state dir, its warm worker up, in an environment
    whose API is a replay server (and `extra`); all stopped afterwards."""
    script = Script()
    with ReplayServer(script) as server:
        env = cli_env(
            tmp_path, ANTHROPIC_API_KEY="dummy", ANTHROPIC_BASE_URL=server.base_url, **extra
        )
        env.pop("DURABLE_AGENT_TASK_QUEUE")
        env.pop(warm.WARM_ENV, None)
        started = durable_agent(["server"], env)
        assert started.returncode == 0, started.stderr
        assert "starting a warm worker" in started.stdout
        try:
            yield env, _wait_for_record(tmp_path / "home"), server, script
        finally:
            stopped = durable_agent(["server", "--stop"], env)
            assert stopped.returncode == 0, stopped.stderr


@pytest.fixture
def warm_home(tmp_path):
    with _warm(tmp_path) as found:
        yield found


def _run(ws: Path) -> list[str]:
    return [sys.executable, "-m", "durable_agent", "run", "go", "--workspace", str(ws),
            "--output-format", "json", "--allowedTools", "Bash"]  # fmt: skip


def test_a_run_from_the_same_shell_is_served_by_the_warm_worker(warm_home, tmp_path):
    env, record, server, script = warm_home
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("alpha\n")
    script.turns += [tool_turn([("r1", "Read", {"file_path": "notes.txt"})]), text_turn("done")]
    served = durable_agent(_run(ws)[3:], env)
    assert served.returncode == 0, served.stderr
    assert f"served by the warm worker (pid {record.pid})" in served.stderr
    result = json.loads(served.stdout.strip().splitlines()[-1])
    assert result["terminal"] == "completed" and result["turn_count"] == 2
    assert server.violations == [] and len(server.requests) == 2
    assert "alpha" in json.dumps(server.requests[1]["messages"][-1])

    # Another environment (one variable more, which a tool would see): a worker of its own.
    other = durable_agent(_run(ws)[3:], {**env, "FOO": "1"})
    assert other.returncode == 0, other.stderr
    assert "served by the warm worker" not in other.stderr

    stopped = durable_agent(["server", "--stop"], env)
    assert stopped.returncode == 0
    deadline = time.monotonic() + 10
    while warm.is_warm_worker(record.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not warm.is_warm_worker(record.pid)


def test_a_run_takes_its_session_over_when_the_warm_worker_dies(warm_home, tmp_path):
    """SIGKILL the warm worker while the run's Bash runs: the CLI starts a worker on the
    session's queue, the tool is not run a second time, and the prompt completes."""
    env, record, server, script = warm_home
    ws = tmp_path / "ws"
    ws.mkdir()
    command = "echo began >> began; sleep 4; echo ran >> marker"
    script.turns += [tool_turn([("b1", "Bash", {"command": command})]), text_turn("done")]
    proc = subprocess.Popen(_run(ws), env=env, cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (ws / "began").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        os.kill(record.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "served by the warm worker" in err and "this process serves the session" in err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["terminal"] == "completed"
    assert (ws / "began").read_text() == "began\n"  # started once, never again
    assert not (ws / "marker").exists() or (ws / "marker").read_text() == "ran\n"


def test_the_warm_worker_gives_its_memory_back_by_recycling(tmp_path):
    """Like `python worker.py` (tests/test_operating.py), here at any growth: idle after its
    first work it records its size; idle again and larger, it replaces itself (same pid) and
    the next run is served by it as before, with no second warm worker started meanwhile."""
    with _warm(
        tmp_path, DURABLE_AGENT_IDLE_CHECK_SECONDS="0.5", DURABLE_AGENT_RECYCLE_ABOVE="0.01",
        DURABLE_AGENT_RECYCLE_MIN_MB="0",
    ) as (env, record, server, script):  # fmt: skip
        log = next((tmp_path / "home" / "warm").glob("*.log"))
        ws = tmp_path / "ws"
        ws.mkdir()

        def served(n: int) -> None:
            script.turns.append(text_turn(f"answer {n}"))
            done = durable_agent(_run(ws)[3:], env)
            assert done.returncode == 0, done.stderr
            assert f"served by the warm worker (pid {record.pid})" in done.stderr, n
            assert f"answer {n}" in done.stdout

        served(0)
        _wait(lambda: "idle after work at" in log.read_text(), "a settled size", log)
        # Each idle spell after work looks once; one whose size came out lower lowers the
        # baseline instead (glibc's trim): work again until one comes out higher.
        for n in range(1, 9):
            served(n)
            if wait_until(lambda: "recycling:" in log.read_text(), 5, 0.1):
                break
        _wait(lambda: "recycling:" in log.read_text(), "the recycling", log, 1)
        _wait(lambda: log.read_text().count("warm worker pid") == 2, "a fresh one", log)
        served(99)

        # One record, this worker's (at any growth it may be recycling again after the run:
        # its record is back once the fresh process serves)
        def one_record() -> bool:
            names = [p.name for p in (tmp_path / "home" / "warm").glob("*.json")]
            return names == [f"{warm.fingerprint(env)}.json"]

        _wait(one_record, "one record", log, 20)
        text = log.read_text()
        assert "idle size of the process it replaced" in text  # its baseline carried over


def _wait(predicate: Callable[[], bool], what: str, log: Path, seconds: float = 60) -> None:
    assert wait_until(predicate, seconds, 0.1), f"no {what}: {log.read_text()[-2000:]}"
