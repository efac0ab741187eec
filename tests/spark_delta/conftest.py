"""Fixtures for delta-spark and raydelta on the same tables.

``delta`` is the session's one Spark (real delta-spark, ``tests/conftest.py``)
with a local Ray cluster started next to it. Delta's state reconstruction
runs on ``spark.databricks.delta.snapshotPartitions`` shuffle partitions (50
by default): on tables of a few files that is pure overhead, so the fixture
lowers it to 1 (a performance setting only; nothing read changes).

Every table a test leaves under its ``tmp_path`` has its actors released
afterwards (each actor is a process; a session of these tests would
otherwise keep dozens alive).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def delta(spark: Any, ray_cluster: Any) -> Iterator[Any]:
    spark.conf.set("spark.databricks.delta.snapshotPartitions", "1")
    yield spark


@pytest.fixture(autouse=True)
def release_tables(tmp_path: Path) -> Iterator[None]:
    yield
    import ray

    if not ray.is_initialized():
        return
    import raydelta

    for log in tmp_path.rglob("_delta_log"):
        raydelta.release_table(str(log.parent))
