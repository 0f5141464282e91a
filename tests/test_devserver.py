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
