"""The dev server we start: SQLite in WAL mode, one task-queue partition."""

import sqlite3

from durable_agent.devserver import server_args
from tests.faults.harness import DevServer


def test_the_dev_server_keeps_its_sqlite_file_in_wal_mode(tmp_path):
    assert "matching.numTaskqueueReadPartitions=1" in server_args()
    db = tmp_path / "temporal.db"
    with DevServer(db):
        mode = sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_the_embedded_dev_server_does_not_hold_the_projects_secrets(tmp_path, monkeypatch):
    """A tool may read /proc/<server>/environ: the server gets no private variable."""
    from pathlib import Path

    from durable_agent.devserver import ensure_dev_server, stop_dev_server

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-never-in-the-server")
    monkeypatch.setenv("DURABLE_AGENT_WITHHOLD_ENV", "VAULT_*")
    monkeypatch.setenv("VAULT_TOKEN", "vault-never-in-the-server")
    home = tmp_path / "home"
    info, _ = ensure_dev_server(home)
    try:
        environ = Path(f"/proc/{info.pid}/environ").read_bytes()
    finally:
        stop_dev_server(home)
    assert b"PATH=" in environ  # it was read
    assert b"never-in-the-server" not in environ


def test_state_dirs_starting_their_servers_at_once_each_get_their_own(tmp_path):
    """Three state dirs start their embedded servers at the same moment: all find the default
    port free, one gets it; the others must not record it (its answer is the winner's) but
    start again elsewhere. Each record names a live server of its own, on its own port."""
    from concurrent.futures import ThreadPoolExecutor

    from durable_agent.devserver import _listens, ensure_dev_server, port_open, stop_dev_server

    homes = [tmp_path / f"home{i}" for i in range(3)]
    with ThreadPoolExecutor(len(homes)) as pool:
        infos = [info for info, _ in pool.map(ensure_dev_server, homes)]
    try:
        assert len({info.address for info in infos}) == len(homes), infos
        for info in infos:
            port = int(info.address.rsplit(":", 1)[1])
            assert port_open("127.0.0.1", port) and _listens(info.pid, port) is True, info
    finally:
        for home in homes:
            stop_dev_server(home)


def test_a_port_another_test_process_claimed_is_not_given_again(monkeypatch):
    """The xdist workers are processes of their own: a port one of them claimed for a test's
    server (down for a restart, or not yet bound) is not handed to a server of another."""
    import subprocess
    import sys

    from tests.faults import harness

    offered = [harness.free_port(0), harness.free_port(0)]
    holder = subprocess.Popen(
        [
            sys.executable, "-c",
            "import sys; from tests.faults import harness;"
            f" harness.free_port = lambda _: {offered[0]};"
            " print(harness._claim_port(), flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert int(holder.stdout.readline()) == offered[0]
        ports = iter(offered)
        monkeypatch.setattr(harness, "free_port", lambda _: next(ports))
        assert harness._claim_port() == offered[1]  # offered[0] was skipped
    finally:
        holder.kill()
        holder.wait()
    # the claim lasts as long as its process
    monkeypatch.setattr(harness, "free_port", lambda _: offered[0])
    assert harness._claim_port() == offered[0]
