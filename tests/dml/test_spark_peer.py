"""delta-spark next to raydelta's DML: each reads what the other changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raydelta
from tests.dml.conftest import SCHEMA, batch, rows_of

pytestmark = pytest.mark.spark


def _spark_rows(spark: Any, uri: str) -> list[dict[str, Any]]:
    frame = spark.read.format("delta").load(uri)
    return sorted(
        (r.asDict() for r in frame.select("id", "part", "x").collect()), key=lambda r: r["id"]
    )


def test_delta_spark_reads_our_deletion_vectors_and_change_feed(
    ray_cluster: Any, spark: Any, tmp_path: Path
) -> None:
    table = raydelta.create_table(
        str(tmp_path / "ours"),
        SCHEMA,
        partition_by=["part"],
        properties={"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"},
    )
    for start in (0, 10):
        table.append(batch(start, 10))
    table.delete("x > 6")
    table.update({"x": "x + 100"}, predicate="id % 3 = 0")
    assert _spark_rows(spark, table.uri) == rows_of(table.to_arrow())
    ours = sorted(
        (r["_commit_version"], r["_change_type"], r["id"], r["x"])
        for r in table.changes(1).to_pylist()
    )
    feed = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 1)
        .load(table.uri)
    )
    theirs = sorted(
        (r["_commit_version"], r["_change_type"], r["id"], r["x"]) for r in feed.collect()
    )
    assert ours == theirs


def test_we_read_delta_spark_delete_and_update_with_deletion_vectors(
    ray_cluster: Any, spark: Any, tmp_path: Path
) -> None:
    uri = str(tmp_path / "theirs")
    data = batch(0, 20)
    spark.createDataFrame(data.to_pandas()).write.format("delta").partitionBy("part").option(
        "delta.enableDeletionVectors", "true"
    ).option("delta.enableChangeDataFeed", "true").save(uri)
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE x > 6")
    spark.sql(f"UPDATE delta.`{uri}` SET x = x + 100 WHERE id % 3 = 0")
    table = raydelta.open_table(uri)
    assert any(r["deletionVector"] for r in table.snapshot().files.to_pylist())
    expected = [
        {**r, "x": r["x"] + 100} if r["id"] % 3 == 0 else r for r in data.to_pylist() if r["x"] <= 6
    ]
    assert rows_of(table.to_arrow()) == sorted(expected, key=lambda r: r["id"])
    assert _spark_rows(spark, uri) == rows_of(table.to_arrow())
    feed = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 1)
        .load(uri)
    )
    theirs = sorted(
        (r["_commit_version"], r["_change_type"], r["id"], r["x"]) for r in feed.collect()
    )
    ours = sorted(
        (r["_commit_version"], r["_change_type"], r["id"], r["x"])
        for r in table.changes(1).to_pylist()
    )
    assert ours == theirs
    # and our DML continues on their table; they read it
    table.delete("id = 1")
    assert _spark_rows(spark, uri) == rows_of(table.to_arrow())
    assert pa.table(table.to_arrow()).num_rows == len(expected) - sum(
        1 for r in expected if r["id"] == 1
    )
