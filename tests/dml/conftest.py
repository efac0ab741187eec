"""Small tables for the DML tests: rows derived in Python, several files.

Every table a test leaves under its ``tmp_path`` has its actors killed
afterwards: each is a detached Ray actor (a process of ~100 MB), and the
session would otherwise keep one or two per test of this folder alive until
pytest exits."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raydelta
from tests.actor_teardown import kill_actors_under

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("x", pa.int64())])

FLAVOURS = {
    "plain": {},
    "dv": {"delta.enableDeletionVectors": "true"},
    "cdf": {"delta.enableChangeDataFeed": "true"},
    "dv_cdf": {"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"},
    "mapped_dv_cdf": {
        "delta.columnMapping.mode": "name",
        "delta.enableDeletionVectors": "true",
        "delta.enableChangeDataFeed": "true",
    },
}


@pytest.fixture(autouse=True)
def release_tables(tmp_path: Path) -> Iterator[None]:
    yield
    kill_actors_under(tmp_path)


def batch(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table(
        {"id": ids, "part": ["a" if i % 3 else "b" for i in ids], "x": [i * 7 % 11 for i in ids]},
        schema=SCHEMA,
    )


def rows_of(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.select(["id", "part", "x"]).to_pylist(), key=lambda r: r["id"])


@pytest.fixture
def make_table(ray_cluster: Any, tmp_path: Path) -> Any:
    """A table of 30 rows in 3 appends (3+ files), partitioned or not."""

    def make(
        flavour: str = "plain", *, partitioned: bool = True, name: str = "t"
    ) -> tuple[raydelta.Table, list[dict[str, Any]]]:
        table = raydelta.create_table(
            str(tmp_path / name),
            SCHEMA,
            partition_by=["part"] if partitioned else [],
            properties=FLAVOURS[flavour],
        )
        expected: list[dict[str, Any]] = []
        for start in (0, 10, 20):
            data = batch(start, 10)
            table.append(data)
            expected.extend(data.to_pylist())
        yield_rows = sorted(expected, key=lambda r: r["id"])
        return table, yield_rows

    return make
