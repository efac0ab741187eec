"""Fixtures for delta-spark and raydelta on the same tables.

``delta`` is the session's one Spark (real delta-spark, ``tests/conftest.py``)
with a local Ray cluster started next to it. Delta's state reconstruction
runs on ``spark.databricks.delta.snapshotPartitions`` shuffle partitions (50
by default): on tables of a few files that is pure overhead, so the fixture
lowers it to 1 (a performance setting only; nothing read changes).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def delta(spark: Any, ray_cluster: Any) -> Iterator[Any]:
    spark.conf.set("spark.databricks.delta.snapshotPartitions", "1")
    yield spark
