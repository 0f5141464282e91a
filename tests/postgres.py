"""A real PostgreSQL server for the tests, started in a temp dir (initdb + pg_ctl), never a mock.

Debian keeps `initdb`/`pg_ctl` in /usr/lib/postgresql/<version>/bin; PostgreSQL refuses to run
as root, so as root the cluster belongs to the `postgres` user. The server listens on a free
loopback port with `trust` authentication (the tests' own throwaway cluster); each test gets a
database of its own (`fresh_database`) so that tests never see each other's rows."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg


def pg_bin(tool: str) -> str | None:
    """`tool` (initdb, pg_ctl) on PATH, else in the newest /usr/lib/postgresql/*/bin."""
    found = shutil.which(tool)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{tool}"), key=_version)
    return candidates[-1] if candidates else None


def _version(path: str) -> int:
    part = Path(path).parent.parent.name
    return int(part) if part.isdigit() else 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PostgresServer:
    data: Path
    port: int
    user: str
    as_user: str | None

    @property
    def admin_url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def fresh_database(self) -> str:
        """A new, empty database's URL."""
        name = "t_" + uuid.uuid4().hex[:16]
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def _ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        ctl = pg_bin("pg_ctl")
        assert ctl is not None
        return _run([ctl, "-D", str(self.data), *args], self.as_user)

    def stop(self, mode: str = "fast") -> None:
        self._ctl("stop", "-m", mode, "-w")

    def start(self) -> None:
        log = self.data.parent / "server.log"
        result = self._ctl(
            "start", "-w", "-t", "60", "-l", str(log),
            "-o", f"-p {self.port} -k {self.data.parent} -c listen_addresses=127.0.0.1",
        )  # fmt: skip
        if result.returncode != 0:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {result.stderr.strip()}\n{tail}")


def _run(argv: list[str], as_user: str | None) -> subprocess.CompletedProcess[str]:
    if as_user is not None:
        entry = pwd.getpwnam(as_user)

        def drop() -> None:
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)

        return subprocess.run(
            argv, capture_output=True, text=True, preexec_fn=drop, env={**os.environ, "HOME": "/"}
        )
    return subprocess.run(argv, capture_output=True, text=True)


def available() -> str | None:
    """Why no server can be started here, or None."""
    if pg_bin("initdb") is None or pg_bin("pg_ctl") is None:
        return "PostgreSQL is not installed: apt-get install postgresql"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root without a `postgres` user to run the server as"
    return None


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """A server for the duration of the block, its cluster deleted after."""
    initdb = pg_bin("initdb")
    assert initdb is not None
    as_user = "postgres" if os.geteuid() == 0 else None
    base = Path(tempfile.mkdtemp(prefix="da-pg-"))
    if as_user is not None:
        entry = pwd.getpwnam(as_user)
        os.chown(base, entry.pw_uid, entry.pw_gid)
    data = base / "data"
    user = as_user or pwd.getpwuid(os.geteuid()).pw_name
    result = _run(
        [initdb, "-D", str(data), "-U", user, "--auth=trust", "-E", "UTF8", "--no-sync"], as_user
    )
    if result.returncode != 0:
        raise RuntimeError(f"initdb failed: {result.stderr.strip()}")
    (data / "postgresql.conf").open("a").write("fsync = off\nmax_connections = 200\n")
    server = PostgresServer(data=data, port=_free_port(), user=user, as_user=as_user)
    try:
        server.start()
        _wait(server)
        yield server
    finally:
        with contextlib.suppress(Exception):
            server.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)


def _wait(server: PostgresServer) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            psycopg.connect(server.admin_url, connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
