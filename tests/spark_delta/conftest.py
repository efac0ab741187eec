"""Fixtures for delta-spark and raydelta on the same tables.

``delta`` is the session's one Spark (real delta-spark, ``tests/conftest.py``,
which also rebuilds delta-spark's snapshot state on one partition) with a
local Ray cluster started next to it.

Every table a test leaves under its ``tmp_path`` has its actors killed
afterwards (each actor is a process; a session of these tests would
otherwise keep dozens alive).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.actor_teardown import kill_actors_under


@pytest.fixture(scope="session")
def delta(spark: Any, ray_cluster: Any) -> Iterator[Any]:
    yield spark


@pytest.fixture(autouse=True)
def release_tables(tmp_path: Path) -> Iterator[None]:
    yield
    kill_actors_under(tmp_path)
