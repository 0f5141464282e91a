"""A worker an operator can run (issue 26): settings from the environment, Temporal through an
envconfig profile over TLS, a health endpoint, Prometheus metrics, and a drain on SIGTERM that
lets a long tool finish."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from durable_agent import temporal_config
from durable_agent.engine.state import Terminal
from durable_agent.operating import SettingsError, WorkerSettings, host_port
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from durable_agent.temporal_config import TemporalConfigError
from durable_agent.wiring import connect
from tests.helpers import free_port, start_session, worker_env
from tests.helpers import start_worker_logged as start_worker
from tests.tls_proxy import TlsProxy

ROOT = Path(__file__).resolve().parent.parent


async def get(url: str) -> tuple[int, str]:
    """GET in a thread: the proxy in this event loop must go on carrying the worker's calls."""
    return await asyncio.to_thread(_get, url)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 — loopback
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def wait_for(predicate, seconds: float = 60.0, what: str = "it") -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


# --- settings and profiles -------------------------------------------------------------------


def test_worker_settings_come_from_the_environment():
    settings = WorkerSettings.from_env(
        {
            "DURABLE_AGENT_MAX_CONCURRENT_ACTIVITIES": "8",
            "DURABLE_AGENT_WORKFLOW_POLLERS": "3",
            "DURABLE_AGENT_HEALTH_ADDRESS": ":8080",
            "DURABLE_AGENT_DRAIN_SECONDS": "30",
            "DURABLE_AGENT_DEPLOYMENT": "agents",
            "DURABLE_AGENT_BUILD_ID": "v7",
            "DURABLE_AGENT_MAX_CACHED_WORKFLOWS": " ",  # blank: the default
            "DURABLE_AGENT_MCP_IDLE_SECONDS": "0",
            "DURABLE_AGENT_RECYCLE_ABOVE": "0",
        }
    )
    assert settings.mcp_idle_seconds == 0 and WorkerSettings().mcp_idle_seconds == 1800
    assert settings.recycle_above == 0 and WorkerSettings().recycle_above == 1.1
    assert (settings.max_concurrent_activities, settings.workflow_pollers) == (8, 3)
    assert (settings.drain_seconds, settings.deployment, settings.build_id) == (30, "agents", "v7")
    assert settings.max_cached_workflows is None and settings.task_queue == "durable-agent"
    assert host_port(":8080") == ("0.0.0.0", 8080)
    assert host_port("127.0.0.1:9") == ("127.0.0.1", 9)


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("MAX_CONCURRENT_ACTIVITIES", "0", "greater than or equal to 1"),
        ("DRAIN_SECONDS", "soon", "valid number"),
        ("MCP_IDLE_SECONDS", "-5", "greater than or equal to 0"),
        ("RECYCLE_ABOVE", "-1", "greater than or equal to 0"),
        ("IDLE_CHECK_SECONDS", "0", "greater than 0"),
        ("METRICS_ADDRESS", "localhost", "host:port"),
    ],
)
def test_a_bad_worker_setting_is_one_line_and_a_hint(name, value, words):
    with pytest.raises(SettingsError) as caught:
        WorkerSettings.from_env({f"DURABLE_AGENT_{name}": value})
    assert f"DURABLE_AGENT_{name}" in str(caught.value) and words in str(caught.value)
    assert caught.value.hint


def test_an_envconfig_profile_names_the_cluster(tmp_path):
    config = tmp_path / "temporal.toml"
    config.write_text(
        '[profile.cloud]\naddress = "ns.acct.tmprl.cloud:7233"\nnamespace = "ns.acct"\n'
        'api_key = "secret-key"\n'
        '[profile.mtls]\naddress = "temporal.internal:7233"\n'
        f'[profile.mtls.tls]\nclient_cert_path = "{tmp_path / "c.pem"}"\n'
        f'client_key_path = "{tmp_path / "c.key"}"\n'
    )
    (tmp_path / "c.pem").write_text("cert")
    (tmp_path / "c.key").write_text("key")
    # nothing named: the embedded dev server, plain
    assert temporal_config.connect_kwargs("127.0.0.1:7", {}) == {
        "target_host": "127.0.0.1:7",
        "namespace": "default",
    }
    cloud = temporal_config.connect_kwargs(
        "127.0.0.1:7", {"TEMPORAL_CONFIG_FILE": str(config), "TEMPORAL_PROFILE": "cloud"}
    )
    assert cloud["target_host"] == "ns.acct.tmprl.cloud:7233" and cloud["tls"] is True
    assert cloud["api_key"] == "secret-key" and cloud["namespace"] == "ns.acct"
    described = temporal_config.describe(cloud)
    assert "API key" in described and "TLS" in described and "secret-key" not in described
    mtls = temporal_config.connect_kwargs(
        None,
        {
            "TEMPORAL_CONFIG_FILE": str(config),
            "TEMPORAL_PROFILE": "mtls",
            "TEMPORAL_NAMESPACE": "team",  # the environment overrides the profile
        },
    )
    assert mtls["tls"].client_cert == b"cert" and mtls["namespace"] == "team"
    assert "mTLS" in temporal_config.describe(mtls)
    for env in (
        {"TEMPORAL_CONFIG_FILE": str(config), "TEMPORAL_PROFILE": "nope"},
        {"TEMPORAL_CONFIG_FILE": str(tmp_path / "missing.toml")},
    ):
        with pytest.raises(TemporalConfigError) as caught:
            temporal_config.connect_kwargs(None, env)
        assert caught.value.hint


def test_the_worker_refuses_a_bad_profile_in_one_line(tmp_path):
    env = worker_env("http://127.0.0.1:9", tmp_path, "q", TEMPORAL_PROFILE="nowhere")
    env["TEMPORAL_CONFIG_FILE"] = str(tmp_path / "absent.toml")
    done = subprocess.run(
        [sys.executable, "worker.py"], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.startswith("durable-agent worker: TEMPORAL_CONFIG_FILE names")
    assert "Traceback" not in done.stderr and "hint:" in done.stderr


# --- a worker over TLS, with health and metrics ------------------------------------------------


async def test_a_worker_reaches_a_tls_only_temporal_through_a_profile(dev_env, tmp_path):
    """The dev server behind a TLS-only proxy; the worker knows it only from an envconfig
    profile (CA file and server name). It serves a session, answers /readyz and /metrics, and
    exits 0 on SIGTERM."""
    plain = dev_env.client.service_client.config.target_host
    async with TlsProxy(plain, tmp_path) as proxy:
        profile = tmp_path / "temporal.toml"
        profile.write_text(
            f'[profile.secure]\naddress = "{proxy.address}"\nnamespace = "default"\n'
            f'[profile.secure.tls]\nserver_ca_cert_path = "{proxy.ca}"\n'
            'server_name = "localhost"\n'
        )
        named = {"TEMPORAL_CONFIG_FILE": str(profile), "TEMPORAL_PROFILE": "secure"}
        # TLS only: a plain client is refused
        from temporalio.client import Client

        with pytest.raises(RuntimeError):
            await asyncio.wait_for(Client.connect(proxy.address), 10)
        health, metrics = free_port(), free_port()
        queue = f"tls-{uuid.uuid4().hex[:8]}"
        with ReplayServer([text_turn("over TLS")]) as server:
            env = worker_env(
                server.base_url, tmp_path / "home", queue,
                DURABLE_AGENT_HEALTH_ADDRESS=f"127.0.0.1:{health}",
                DURABLE_AGENT_METRICS_ADDRESS=f"127.0.0.1:{metrics}",
                **named,
            )  # fmt: skip
            worker = start_worker(env, tmp_path / "worker.log")
            try:
                os.environ.update(named)  # this test's client goes through the profile too
                try:
                    client = await connect()
                finally:
                    for name in named:
                        os.environ.pop(name)
                workspace = tmp_path / "ws"
                workspace.mkdir()
                _, handle = await start_session(client, workspace, queue, "hello")
                status = await asyncio.wait_for(handle.result(), 120)
                assert status.last_result is not None
                assert status.last_result.final_text == "over TLS"
                code, body = await get(f"http://127.0.0.1:{health}/readyz")
                assert code == 200, body
                ready = json.loads(body)
                assert ready["polling"] and ready["temporal"] and not ready["draining"]
                assert (await get(f"http://127.0.0.1:{health}/healthz"))[0] == 200
                assert (await get(f"http://127.0.0.1:{health}/nothing"))[0] == 404
                code, scraped = await get(f"http://127.0.0.1:{metrics}/metrics")
                assert code == 200 and "temporal_" in scraped
                assert f'task_queue="{queue}"' in scraped
            finally:
                worker.send_signal(signal.SIGTERM)  # waited in a thread: the proxy runs here
                returncode = await asyncio.to_thread(worker.wait, 60)
        log = (tmp_path / "worker.log").read_text()
        assert returncode == 0, log
        assert f"at {proxy.address} (namespace default, TLS)" in log
        assert "drained" in log
        assert proxy.handshakes >= 2  # the worker's and this test's connections


# --- SIGTERM during a long tool --------------------------------------------------------------


def slow_tool(workspace: Path, seconds: float, output: str) -> tuple[Path, Path, str]:
    """A Bash command that marks `started` (appending: a second run shows), sleeps, marks
    `finished` and prints `output`; the workspace is made."""
    workspace.mkdir()
    started, finished = workspace / "started", workspace / "finished"
    command = (
        f"python3 -c \"open('{started}', 'a').write('x'); import time; time.sleep({seconds}); "
        f"open('{finished}', 'w').write('y'); print('{output}')\""
    )
    return started, finished, command


@pytest.mark.parametrize("store", ["local", "shared"])
async def test_sigterm_during_a_long_tool_lets_it_finish(dev_env, tmp_path, store, request):
    """SIGTERM while a Bash call runs: the worker stops taking work and says it is not ready,
    the tool runs to its end, its real result is reported by the draining worker, which then
    exits 0; a new worker (a replacement pod) carries the session on. The tool ran once. With
    a shared store a worker is a group (its host queue's worker too), which had no drain: it
    ended in an AttributeError's traceback instead."""
    shared = {"DURABLE_AGENT_STORE": request.getfixturevalue("pg_url")} if store == "shared" else {}
    workspace = tmp_path / "ws"
    started, finished, command = slow_tool(workspace, 4, "tool output ok")
    turns = [tool_turn([("b1", "Bash", {"command": command})]), text_turn("all done")]
    queue = f"drain-{uuid.uuid4().hex[:8]}"
    health = free_port()
    with ReplayServer(turns) as server:
        address = dev_env.client.service_client.config.target_host
        env = worker_env(
            server.base_url, tmp_path / "home", queue, address,
            DURABLE_AGENT_DRAIN_SECONDS="60",
            DURABLE_AGENT_HEALTH_ADDRESS=f"127.0.0.1:{health}", **shared,
        )  # fmt: skip
        log = tmp_path / "worker.log"
        worker = start_worker(env, log)
        replacement = None
        try:
            _, handle = await start_session(
                dev_env.client, workspace, queue, "go", config={"tool_heartbeat_seconds": 2}
            )
            await wait_for(started.exists, 90, "the tool to start")
            worker.send_signal(signal.SIGTERM)
            await wait_for(lambda: "draining" in log.read_text(), 10, "the drain to begin")
            code, body = await get(f"http://127.0.0.1:{health}/readyz")
            assert code == 503 and json.loads(body)["draining"], body
            assert worker.poll() is None and not finished.exists()  # waits for the tool
            returncode = await asyncio.to_thread(worker.wait, 60)
            assert finished.exists(), "the worker exited before its tool ended"
            assert returncode == 0, log.read_text()
            replacement = start_worker(env, tmp_path / "replacement.log")
            status = await asyncio.wait_for(handle.result(), 120)
        finally:
            for proc in (worker, replacement):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
    assert status.last_result is not None
    assert status.last_result.terminal == Terminal.COMPLETED
    assert status.last_result.final_text == "all done"
    assert started.read_text() == "x"  # ran once
    result = server.requests[1]["messages"][-1]["content"][0]
    assert result["tool_use_id"] == "b1" and not result.get("is_error")
    assert "tool output ok" in str(result["content"])


# --- memory -----------------------------------------------------------------------------------


async def test_an_idle_worker_gives_memory_back_once_per_idle_spell(monkeypatch):
    """Busy, then idle: the line cache cleared, one full collection and one malloc_trim;
    nothing while busy, nothing again while it stays idle."""
    from durable_agent import operating

    calls: list[str] = []

    def collect(*_args: object) -> int:
        calls.append("collect")
        return 0

    monkeypatch.setattr("gc.collect", collect)
    monkeypatch.setattr("linecache.clearcache", lambda: calls.append("lines"))
    monkeypatch.setattr(operating, "_malloc_trim", lambda: lambda: calls.append("trim"))
    releasing = asyncio.ensure_future(operating.release_memory_when_idle(0.2, 0.5))
    try:
        await asyncio.sleep(0.5)
        assert calls == []  # idle from the start: nothing was used
        end = time.monotonic() + 0.7
        while time.monotonic() < end:  # busy: the loop's own thread spins
            sum(range(10_000))
            await asyncio.sleep(0)
        assert calls == []
        # Idle from here; the check reads the whole process's CPU, which other work of a busy
        # test process (its threads) can keep over the share for a while (a CI run saw 0.7 s).
        for _ in range(50):
            await asyncio.sleep(0.1)
            if calls:
                break
        await asyncio.sleep(0.1)
        assert calls == ["lines", "collect", "trim"]
        await asyncio.sleep(0.6)
        assert calls == ["lines", "collect", "trim"]  # still idle: once
    finally:
        releasing.cancel()


def test_malloc_trim_is_found_on_glibc():
    from durable_agent import operating

    trim = operating._malloc_trim()
    assert trim is not None
    trim()


def test_every_workflow_module_is_sandboxed_or_a_passed_through_helper():
    """A workflow module is imported afresh in each workflow's sandbox; the rest (helpers, no
    workflow of their own) are passed through: a new module is one or the other, knowingly."""
    from durable_agent.wiring import WORKFLOW_HELPERS

    modules = {
        f"workflows.{p.stem}" for p in (ROOT / "workflows").glob("*.py") if p.stem != "__init__"
    }
    defining = {m for m in modules if "@workflow.defn" in _source(m)}
    assert defining == {"workflows.query", "workflows.schedules", "workflows.session"}
    assert set(WORKFLOW_HELPERS) == modules - defining


def _source(module: str) -> str:
    return (ROOT / (module.replace(".", "/") + ".py")).read_text()


async def test_an_idle_worker_with_grown_memory_recycles_itself_never_under_a_tool(
    dev_env, tmp_path
):
    """Recycling (here at any growth): the first idle spell after work records the RSS; at a
    later one the worker replaces itself — but not while a tool runs (the Bash call below
    sleeps, so the worker is idle by its CPU): it ran once, to its end, before the drain. The
    fresh process has the same pid, answers its health endpoint and serves the next session."""
    workspace = tmp_path / "ws"
    started, finished, command = slow_tool(workspace, 3, "slept")
    turns = [
        text_turn("first"),
        tool_turn([("b1", "Bash", {"command": command})]),
        text_turn("second"),
        text_turn("third"),
    ]
    queue = f"recycle-{uuid.uuid4().hex[:8]}"
    health = free_port()
    log = tmp_path / "worker.log"
    with ReplayServer(turns) as server:
        address = dev_env.client.service_client.config.target_host
        env = worker_env(
            server.base_url, tmp_path / "home", queue, address,
            DURABLE_AGENT_HEALTH_ADDRESS=f"127.0.0.1:{health}",
            DURABLE_AGENT_IDLE_CHECK_SECONDS="0.5",
            DURABLE_AGENT_RECYCLE_ABOVE="0.01",
            DURABLE_AGENT_RECYCLE_MIN_MB="0",
            ANTHROPIC_API_KEY="sk-kept-through-recycling",  # blanked in /proc, kept for exec
        )  # fmt: skip
        worker = start_worker(env, log)
        try:
            _, first = await start_session(dev_env.client, workspace, queue, "one")
            assert await final_text(first) == "first"
            await wait_for(lambda: "idle after work at" in log.read_text(), 30, "a settled RSS")
            assert "recycling" not in log.read_text()  # the first spell only records it
            _, second = await start_session(dev_env.client, workspace, queue, "two")
            await wait_for(started.exists, 90, "the tool to start")
            await wait_for(lambda: "recycling" in log.read_text(), 60, "the recycling")
            assert finished.exists(), "recycled while its tool ran"
            assert await final_text(second) == "second"
            await wait_for(lambda: log.read_text().count("worker on task queue") == 2, 60, "a new")
            assert worker.poll() is None  # the same process, afresh
            await wait_for(
                lambda: _get(f"http://127.0.0.1:{health}/readyz")[0] == 200, 60, "ready again"
            )
            _, third = await start_session(dev_env.client, workspace, queue, "three")
            assert await final_text(third) == "third"
            assert server.headers[-1]["authorization"] == "Bearer sk-kept-through-recycling"
        finally:
            worker.send_signal(signal.SIGTERM)
            returncode = await asyncio.to_thread(worker.wait, 60)
    text = log.read_text()
    assert returncode == 0, text
    assert "drained; starting afresh" in text and text.count("drained; exiting") == 1, text
    assert "idle size of the process it replaced" in text  # its baseline carried over
    assert started.read_text() == "x"  # ran once


async def final_text(handle) -> str | None:
    status = await asyncio.wait_for(handle.result(), 120)
    return status.last_result.final_text if status.last_result else None


def test_recycling_asks_for_growth_by_ratio_and_by_megabytes():
    from durable_agent.operating import should_recycle

    mb = 2**20
    assert should_recycle(180 * mb, 150 * mb, 1.1, 16 * mb)
    assert not should_recycle(160 * mb, 150 * mb, 1.1, 16 * mb)  # under 1.1x
    assert not should_recycle(70 * mb, 50 * mb, 1.1, 32 * mb)  # 1.4x, but only 20 MB
    assert not should_recycle(900 * mb, 150 * mb, 0, 0)  # 0: never


async def test_sigterm_before_the_worker_polls_exits_at_once_and_cleanly(tmp_path):
    """Waiting for Temporal (or, the same, between a recycle's drain and the fresh process's
    first poll): nothing runs, so SIGTERM ends it at once with 0, not killed by the signal."""
    queue = f"early-{uuid.uuid4().hex[:8]}"
    env = worker_env("http://127.0.0.1:9", tmp_path / "home", queue, f"127.0.0.1:{free_port()}")
    log = tmp_path / "worker.log"
    worker = start_worker(env, log)
    try:
        await wait_for(lambda: "not reachable yet" in log.read_text(), 60, "the wait")
        worker.send_signal(signal.SIGTERM)
        returncode = await asyncio.to_thread(worker.wait, 10)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert returncode == 0, log.read_text()
    assert "nothing is running; exiting" in log.read_text()


def test_a_recycled_worker_passes_its_host_queue_and_idle_size_on_and_no_tool_sees_them(
    monkeypatch,
):
    """The fresh process keeps the host queue (the travelling workspaces it hosts are still in
    its home: a new queue made their sessions wait 15 s and take the workspace elsewhere, a
    fault campaign found) and the idle size; both leave the environment at start."""
    from durable_agent import operating

    monkeypatch.setenv(operating.HOST_QUEUE_ENV, "durable-agent/host-0123456789ab")
    monkeypatch.setenv(operating.SETTLED_ENV, "123456")
    assert operating.inherited(operating.HOST_QUEUE_ENV) == "durable-agent/host-0123456789ab"
    assert operating.inherited_settled_rss() == 123456
    assert operating.HOST_QUEUE_ENV not in os.environ and operating.SETTLED_ENV not in os.environ
    assert operating.inherited(operating.HOST_QUEUE_ENV) is None
