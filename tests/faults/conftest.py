"""Fault tests: real dev servers, real worker processes, the replay server (see harness.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.harness import DevServer


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[DevServer]:
    """A dev server of the test's own, which the test may kill and restart."""
    with DevServer(tmp_path / "temporal.db") as server:
        yield server


def pytest_itemcollected(item: pytest.Item) -> None:
    """Mark each fault test `faults` (`-m "not faults"` leaves them out). Under pytest-xdist
    they run on one worker, one at a time: tests/conftest.py's scheduler."""
    if "tests/faults/" in str(item.fspath):
        item.add_marker(pytest.mark.faults)
