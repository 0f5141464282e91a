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


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads xdist_group into the node ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/faults/" in str(item.fspath):
            item.add_marker(pytest.mark.faults)
            # Under pytest-xdist the fault tests run one at a time, on one worker: each kills
            # and times real processes, and two at once would measure each other.
            item.add_marker(pytest.mark.xdist_group("faults"))
