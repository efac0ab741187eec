"""Fixtures of the ``raydelta`` Spark format tests.

``rd_spark`` is the session's one Spark (which has delta-spark's jars, so
``format("delta")`` is delta-spark's there) with the ``raydelta`` format
registered, attached to the session's Ray cluster. ``table_dir`` is a fresh
table path under ``tmp_path`` whose table actors are killed at teardown.
``peers_read(uri)`` reads a table with delta-spark, deltalake and duckdb and
returns their rows, each sorted, for the tests to compare.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.actor_teardown import kill_actors_under


@pytest.fixture
def rd_spark(spark: Any, ray_cluster: Any) -> Any:
    from raydelta.spark import register

    register(spark)
    return spark


@pytest.fixture
def table_dir(tmp_path: Path, ray_cluster: Any) -> Iterator[str]:
    yield str(tmp_path / "table")
    kill_actors_under(tmp_path)


def delta_spark_rows(spark: Any, uri: str, columns: list[str]) -> list[Any]:
    """delta-spark's rows of ``uri`` (its log replay on one partition: the
    session's ``snapshotPartitions``, tests/conftest.py)."""
    return spark.read.format("delta").load(uri).select(*columns).collect()  # type: ignore[no-any-return]


@pytest.fixture
def peers_read(rd_spark: Any, duck: Any) -> Callable[..., dict[str, list[tuple[Any, ...]]]]:
    """``peers_read(uri, columns)``: ``{"delta-spark": rows, "deltalake": rows,
    "duckdb": rows, "raydelta": rows}``, rows as sorted tuples of ``columns``."""
    import deltalake
    import pyarrow as pa

    def read(uri: str, columns: list[str]) -> dict[str, list[tuple[Any, ...]]]:
        select = ", ".join(f'"{c}"' for c in columns)
        spark_rows = delta_spark_rows(rd_spark, uri, columns)
        ours = rd_spark.read.format("raydelta").load(uri).select(*columns).collect()
        theirs = deltalake.DeltaTable(uri)
        rs = pa.table(
            deltalake.QueryBuilder()
            .register("t", theirs)
            .execute(f"select {select} from t")
            .read_all()
        ).to_pylist()
        duck_rows = duck.execute(f"SELECT {select} FROM delta_scan('{uri}')").fetchall()
        return {
            "delta-spark": sorted((tuple(r) for r in spark_rows), key=repr),
            "raydelta": sorted((tuple(r) for r in ours), key=repr),
            "deltalake": sorted((tuple(r[c] for c in columns) for r in rs), key=repr),
            "duckdb": sorted((tuple(r) for r in duck_rows), key=repr),
        }

    return read
