"""Shared fixtures: one dev server and one time-skipping server per test run (DESIGN.md §5)."""

from __future__ import annotations

import asyncio
import os
import sysconfig
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from activities.transcript import TranscriptStore
from durable_agent.devserver import server_args
from tests.system_tools import on_ci, require

BIN = Path(sysconfig.get_path("scripts"))


async def _started(start: Callable[[], Awaitable[WorkflowEnvironment]]) -> WorkflowEnvironment:
    """The SDK gives a server it starts 5 s to answer; on a loaded 2-core CI box it once took
    longer and every test that used it errored. Three tries."""
    for attempt in range(3):
        try:
            return await start()
        except RuntimeError as exc:
            if "did not start" not in str(exc) or attempt == 2:
                raise
            await asyncio.sleep(1)
    raise AssertionError("unreachable")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "needs_tool(name): needs a system tool (tests/system_tools.py); skip or fail"
    )
    # Every durable-agent process a test starts has a state home of its own, so under
    # PYTHONDONTWRITEBYTECODE each would compile its imports from source into that home
    # (durable_agent/bytecode.py: 1.5-3 s of CPU a start, hundreds of starts). One bytecode
    # cache for the run instead, set before pytest-xdist starts its workers (they inherit it).
    cache = getattr(config, "cache", None)
    if cache is not None and not hasattr(config, "workerinput"):
        os.environ.setdefault("PYTHONPYCACHEPREFIX", str(cache.mkdir("pycache")))
    # Workers the tests start keep the workflow modules in the sandbox, which stops a workflow
    # that calls something non-deterministic (durable_agent/wiring.py: a worker runs without
    # the sandbox otherwise; tests/test_sandbox_modes.py runs sessions that way).
    os.environ["DURABLE_AGENT_SANDBOX"] = "strict"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Under pytest-xdist (`-n 2`), every test under tests/faults/ runs on one worker, one at a
    time: each kills and times real processes, and two at once would measure each other (and a
    module fixture such as the server-restart tries would run once per worker). The rest are
    spread test by test. (`xdist_group` marks would say the same, but pytest-xdist 3.8 writes
    the group into `item._nodeid`, which pytest 9 no longer reads: they group nothing.)"""
    from xdist.scheduler import LoadScopeScheduling

    class FaultsTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "tests/faults/" if nodeid.startswith("tests/faults/") else nodeid

    return FaultsTogether(config, log)


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("needs_tool"):
        require(mark.args[0])


@pytest_asyncio.fixture(scope="session")
async def dev_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await _started(
        lambda: WorkflowEnvironment.start_local(
            data_converter=pydantic_data_converter,
            dev_server_existing_path=str(BIN / "temporal"),
            dev_server_extra_args=server_args(),
        )
    )
    yield env
    await env.shutdown()
    await asyncio.sleep(0.5)  # the SDK's native layer crashes on an immediate exit


@pytest_asyncio.fixture(scope="session")
async def ts_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await _started(
        lambda: WorkflowEnvironment.start_time_skipping(
            data_converter=pydantic_data_converter,
            test_server_existing_path=str(BIN / "temporal-test-server"),
        )
    )
    yield env
    await env.shutdown()
    await asyncio.sleep(0.5)


@pytest.fixture(autouse=True)
def close_postgres_stores(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every PostgresStore a test opens is closed when it ends: a pool left to the garbage
    collector is finalized in one of its own threads, which cannot join itself (a warning in
    whichever test is running then)."""
    try:
        from durable_agent.store import postgres as module
    except ImportError:  # no psycopg: no PostgresStore either
        yield
        return
    opened: list[Any] = []
    real_init = module.PostgresStore.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        opened.append(self)

    monkeypatch.setattr(module.PostgresStore, "__init__", init)
    yield
    for store in opened:
        store.db.close()


@pytest.fixture(autouse=True)
def hermetic_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads the machine's ~/.claude/settings.json, its managed settings or a real
    API key."""
    monkeypatch.setenv("DURABLE_AGENT_SETTINGS", str(tmp_path / "no-settings.json"))
    monkeypatch.setenv("DURABLE_AGENT_MANAGED_SETTINGS", str(tmp_path / "no-managed.json"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "no-claude-dir"))  # no user memory
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)


@pytest.fixture
def task_queue() -> str:
    return f"tq-{uuid.uuid4()}"


@pytest.fixture
def store(tmp_path: Path) -> TranscriptStore:
    return TranscriptStore(tmp_path / "state")


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    yield ws


def client_of(env: WorkflowEnvironment) -> Client:
    return env.client


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """One real PostgreSQL server per test process (tests/postgres.py); each test that uses it
    takes a database of its own (`pg_url`)."""
    from tests import postgres

    why = postgres.available()
    if why is not None:
        if on_ci():
            pytest.fail(f"{why}; under CI=true the shared-store tests must run", pytrace=False)
        pytest.skip(why)
    with postgres.postgres_server() as server:
        yield server


@pytest.fixture
def pg_url(pg_server: Any) -> str:
    """A fresh, empty database on the test server."""
    return str(pg_server.fresh_database())


@pytest.fixture(params=["files", "postgresql"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TranscriptStore]:
    """The store on each backend: the embedded files, then PostgreSQL."""
    if request.param == "files":
        yield TranscriptStore(tmp_path / "state")
        return
    from durable_agent.store.postgres import PostgresStore

    store = PostgresStore(tmp_path / "state", request.getfixturevalue("pg_url"))
    yield store
    store.db.close()
