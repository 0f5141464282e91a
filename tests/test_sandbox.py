"""The Bash sandbox under real bubblewrap: what a command can write, read and reach."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from activities.tools.base import Workspace
from activities.tools.bash import run_bash
from activities.tools.environment import RUN_TAG, kill_tagged
from activities.tools.sandbox import SandboxPolicy, SandboxUnavailable, sandbox_argv
from durable_agent.engine.tools import BashInput
from tests.system_tools import needs

needs_bwrap = needs("bwrap")
SECRET = "sk-very-secret-4711"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "secrets").mkdir(parents=True)
    (root / "secrets" / "key.txt").write_text(SECRET + "\n")
    (root / ".env").write_text(f"TOKEN={SECRET}\n")
    (root / "public.txt").write_text("hello\n")
    return root


def sh(command: str, policy: SandboxPolicy, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        sandbox_argv(["bash", "-c", command], policy),
        cwd=cwd or policy.workspace,
        capture_output=True,
        text=True,
        timeout=60,
    )


def policy(ws: Path, **kw) -> SandboxPolicy:
    return SandboxPolicy(workspace=str(ws), **kw)


@needs_bwrap
def test_the_rest_of_the_filesystem_is_read_only(ws):
    marker = f"/etc/durable-agent-sandbox-{uuid.uuid4().hex}"
    done = sh(f"touch {marker}", policy(ws))
    assert done.returncode != 0 and "Read-only file system" in done.stderr
    assert not os.path.exists(marker)


@needs_bwrap
def test_home_is_read_only(ws):
    name = f"durable-agent-sandbox-{uuid.uuid4().hex}"
    done = sh(f"touch ~/{name}", policy(ws))
    assert done.returncode != 0 and "Read-only file system" in done.stderr
    assert not (Path.home() / name).exists()


@needs_bwrap
def test_the_workspace_is_writable(ws):
    done = sh("touch ./x && echo made > made.txt", policy(ws))
    assert done.returncode == 0, done.stderr
    assert (ws / "x").exists() and (ws / "made.txt").read_text() == "made\n"


@needs_bwrap
def test_add_dir_folders_are_writable_and_others_are_not(ws, tmp_path):
    extra, other = tmp_path / "extra", tmp_path / "other"
    extra.mkdir()
    other.mkdir()
    done = sh(
        f"echo a > {extra}/a.txt && echo b > {other}/b.txt", policy(ws, writable=[str(extra)])
    )
    assert (extra / "a.txt").read_text() == "a\n"
    assert done.returncode != 0 and not (other / "b.txt").exists()


@needs_bwrap
def test_tmp_is_private(ws):
    name = f"durable-agent-sandbox-{uuid.uuid4().hex}"
    host_file = Path("/tmp") / f"{name}-host"
    host_file.write_text("host")
    try:
        done = sh(f"echo inside > /tmp/{name} && cat /tmp/{name} && ls -A /tmp", policy(ws))
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[0] == "inside"
        assert host_file.name not in done.stdout  # the host's /tmp is not visible inside
        assert not (Path("/tmp") / name).exists()  # and what was written there is gone
    finally:
        host_file.unlink()


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP listener on the host's 127.0.0.1 that answers every connection with `pong`."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(1024)
                conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\npong")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


def _connect(port: int) -> str:
    code = (
        f"import socket; s = socket.create_connection(('127.0.0.1', {port}), timeout=5); "
        "s.sendall(b'ping'); print(s.recv(100).decode())"
    )
    # The interpreter itself, not the venv's link to it: a checkout under /tmp (CI clones)
    # is hidden by the sandbox's private /tmp; the stdlib is all this needs.
    return f'{os.path.realpath(sys.executable)} -c "{code}"'


@needs_bwrap
def test_no_network_unless_allowed(ws, listener):
    cut = sh(_connect(listener), policy(ws))
    assert cut.returncode != 0 and "pong" not in cut.stdout
    assert "Connection refused" in cut.stderr  # only a loopback of its own, nobody listening
    allowed = sh(_connect(listener), policy(ws, allow_network=True))
    assert allowed.returncode == 0, allowed.stderr
    assert "pong" in allowed.stdout


@needs_bwrap
@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_fails_without_network(ws, listener):
    url = f"http://127.0.0.1:{listener}/"
    cut = sh(f"curl -sS --max-time 5 {url}", policy(ws))
    assert cut.returncode != 0 and "pong" not in cut.stdout
    allowed = sh(f"curl -sS --max-time 5 {url}", policy(ws, allow_network=True))
    assert allowed.returncode == 0 and allowed.stdout == "pong"


@needs_bwrap
def test_a_denied_directory_reads_as_empty_to_every_command(ws):
    deny = policy(ws, deny_read=[str(ws / "secrets")])
    done = sh("cat secrets/key.txt; ls -A secrets; grep -r sk- secrets; cat $PWD/secrets/*", deny)
    assert SECRET not in done.stdout + done.stderr
    assert "hello" in sh("cat public.txt", deny).stdout  # the rest of the workspace is there
    written = sh("echo x > secrets/new.txt", deny)  # and the empty stand-in is read-only
    assert written.returncode != 0 and not (ws / "secrets" / "new.txt").exists()
    assert (ws / "secrets" / "key.txt").read_text() == SECRET + "\n"  # the host file is intact


@needs_bwrap
def test_a_denied_file_reads_empty(ws):
    deny = policy(ws, deny_read=[str(ws / ".env")])
    done = sh("cat .env; wc -c < .env", deny)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0" and SECRET not in done.stderr
    assert sh("echo TOKEN=x > .env", deny).returncode != 0
    assert (ws / ".env").read_text() == f"TOKEN={SECRET}\n"


@needs_bwrap
def test_edit_deny_rules_make_paths_read_only_to_every_command(ws):
    """`Edit(...)` deny rules hold for Bash too: what they name reads as it is and cannot be
    changed, created inside or removed; the rest of the workspace stays writable."""
    from activities.tools.sandbox import policy_for
    from durable_agent.engine.permissions import PermissionContext, PermissionRules, parse_rule
    from durable_agent.engine.permissions import SandboxSpec as Spec

    (ws / "ci").mkdir()
    (ws / "ci" / "deploy.yml").write_text("stage: prod\n")
    rules = PermissionRules(deny=[parse_rule("Edit(./ci/**)"), parse_rule("Write(./public.txt)")])
    ctx = PermissionContext(cwd=str(ws), home=str(ws.parent), rules=rules)
    frozen = policy_for(Spec(), ctx, str(ws))
    assert sorted(frozen.deny_write) == [str(ws / "ci"), str(ws / "public.txt")]
    done = sh("cat ci/deploy.yml public.txt", frozen)
    assert done.stdout == "stage: prod\nhello\n", done.stderr
    for change in ("echo x >> ci/deploy.yml", "touch ci/new.yml", "rm ci/deploy.yml",
                   "echo x > public.txt", "python3 -c \"open('public.txt', 'w')\""):  # fmt: skip
        assert sh(change, frozen).returncode != 0, change
    assert (ws / "ci" / "deploy.yml").read_text() == "stage: prod\n"
    assert (ws / "public.txt").read_text() == "hello\n" and not (ws / "ci" / "new.yml").exists()
    assert sh("echo ok > other.txt", frozen).returncode == 0  # the rest of the workspace


@needs_bwrap
def test_denied_paths_are_covered_through_symlinks(ws, tmp_path):
    (ws / "rel").symlink_to("secrets")
    (ws / "abs").symlink_to(ws / "secrets")
    (ws / "env-link").symlink_to(ws / ".env")
    linked_ws = tmp_path / "linked-ws"
    linked_ws.symlink_to(ws)
    # the rules name the paths through the symlinks; the workspace itself is a symlink
    deny = SandboxPolicy(
        workspace=str(linked_ws),
        deny_read=[str(linked_ws / "abs"), str(linked_ws / "env-link")],
    )
    done = sh(
        f"cat secrets/key.txt rel/key.txt abs/key.txt {ws}/secrets/key.txt .env env-link; "
        f"grep -r sk- {ws} {linked_ws}/",
        deny,
        cwd=linked_ws,
    )
    assert SECRET not in done.stdout + done.stderr
    assert sh("touch ./x", deny, cwd=linked_ws).returncode == 0 and (ws / "x").exists()


@needs_bwrap
def test_a_missing_denied_path_is_no_error(ws):
    done = sh("cat public.txt", policy(ws, deny_read=[str(ws / "nope"), str(ws / "a" / "b")]))
    assert done.returncode == 0 and done.stdout == "hello\n"


@needs_bwrap
def test_the_sandboxed_command_cannot_undo_a_deny_bind(ws):
    # run as root, bubblewrap keeps every capability unless told to drop them
    deny = policy(ws, deny_read=[str(ws / "secrets"), str(ws / ".env")])
    done = sh("umount secrets; umount .env; mount -o remount,rw /; cat secrets/key.txt .env", deny)
    assert SECRET not in done.stdout + done.stderr


def test_denied_paths_must_be_absolute(ws):
    with pytest.raises(ValueError, match="must be absolute: secrets"):
        policy(ws, deny_read=["secrets"])


def test_unavailable_when_bwrap_is_not_on_path(ws, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(SandboxUnavailable, match="install the Debian package bubblewrap"):
        sandbox_argv(["bash", "-c", "true"], policy(ws))
    assert "sandbox.enabled: false" in str(SandboxUnavailable())


# The Bash tool itself (activities/tools/bash.py) with a policy.


def _sleepers(marker: str) -> list[int]:
    """Live processes whose command line carries `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _wait_for(check, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


@needs_bwrap
async def test_the_bash_tool_runs_sandboxed_with_a_policy(ws):
    workspace = Workspace(ws)
    command = BashInput(command="cat secrets/key.txt; touch ./made && echo ok")
    plain = await run_bash(command, workspace)
    assert SECRET in plain.content  # without a policy: today's behaviour
    deny = policy(ws, deny_read=[str(ws / "secrets")])
    out = await run_bash(command, workspace, sandbox=deny)
    assert SECRET not in out.content and out.content.endswith("ok")
    home = await run_bash(BashInput(command="touch ~/durable-agent-probe"), workspace, deny)
    assert home.is_error and "Read-only file system" in home.content


@needs_bwrap
async def test_the_call_ends_with_its_shell_and_so_does_a_background_job(ws):
    marker = str(6000 + uuid.uuid4().int % 1000)
    began = time.monotonic()
    command = BashInput(command=f"sleep {marker}1 & echo started")
    out = await run_bash(command, Workspace(ws), policy(ws))
    assert time.monotonic() - began < 5
    assert out.content == "started" and not out.is_error
    # the job was in the sandbox's PID namespace, which ends with the shell
    assert await asyncio.to_thread(_wait_for, lambda: not _sleepers(f"sleep\0{marker}"))


@needs_bwrap
async def test_a_timeout_ends_the_whole_sandboxed_tree(ws):
    marker = str(3000 + uuid.uuid4().int % 1000)
    command = f"sleep {marker}1 & setsid sleep {marker}2 & nohup sleep {marker}3 >/dev/null & sleep {marker}4"
    out = await run_bash(BashInput(command=command, timeout=1500), Workspace(ws), policy(ws))
    assert out.is_error and "timed out" in out.content
    assert await asyncio.to_thread(_wait_for, lambda: not _sleepers(f"sleep\0{marker}"))


@needs_bwrap
async def test_cancelling_ends_the_whole_sandboxed_tree(ws):
    marker = str(4000 + uuid.uuid4().int % 1000)
    command = f"setsid sleep {marker}1 & sleep {marker}2"
    task = asyncio.create_task(run_bash(BashInput(command=command), Workspace(ws), policy(ws)))
    assert await asyncio.to_thread(_wait_for, lambda: len(_sleepers(f"sleep\0{marker}")) == 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(_wait_for, lambda: not _sleepers(f"sleep\0{marker}"))


@needs_bwrap
async def test_run_tags_find_sandboxed_processes(ws):
    marker = str(5000 + uuid.uuid4().int % 1000)
    tag = f"s/toolu_sandbox/{marker}"
    token = RUN_TAG.set(tag)
    try:
        task = asyncio.create_task(
            run_bash(BashInput(command=f"sleep {marker}1"), Workspace(ws), policy(ws))
        )
    finally:
        RUN_TAG.reset(token)
    assert await asyncio.to_thread(_wait_for, lambda: bool(_sleepers(f"sleep\0{marker}")))
    assert await asyncio.to_thread(kill_tagged, tag) >= 1
    out = await asyncio.wait_for(task, 10)
    assert out.is_error
    assert await asyncio.to_thread(_wait_for, lambda: not _sleepers(f"sleep\0{marker}"))
