"""delta-spark's DML and raydelta's against the same table at once.

raydelta reads (a snapshot, or a staged DML whose files are written), then
delta-spark commits its DELETE/UPDATE/MERGE/OPTIMIZE, then raydelta commits:
each outcome follows delta-spark's conflict rules. A loser gets delta-spark's
exception class and leaves no file behind; the winner's commit is intact and
both engines read the same rows; work on disjoint partitions both commits.
Expected rows are derived in Python."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from raydelta.dml.operations import stage_delete, stage_update
from raydelta.dml.optimize import optimize
from raydelta.protocol.errors import (
    ConcurrentDeleteReadException,
    DeltaConcurrentModificationException,
)
from tests.dml.test_merge import SCHEMA, make, rows, sort
from tests.dml.test_merge_spark import data_files, spark_rows

pytestmark = pytest.mark.spark


def _path(table: Any) -> str:
    return str(table.uri.removeprefix("file://"))


def _both_read(spark: Any, table: Any, expected: list[dict[str, Any]]) -> None:
    assert spark_rows(spark, _path(table)) == sort(expected)
    assert sort(table.to_arrow().to_pylist()) == sort(expected)


def _optimize_at(table: Any, snapshot: Any) -> Any:
    return optimize(
        table,
        z_order=(),
        partition_filters=None,
        target_size=None,
        max_concurrent_tasks=None,
        snapshot=snapshot,
    )


@pytest.mark.parametrize("flavour", ["plain", "dv"])
def test_our_optimize_loses_to_delta_spark_delete_of_files_it_read(
    ray_cluster: Any, spark: Any, tmp_path: Path, flavour: str
) -> None:
    """delta-spark: a compaction whose input files a concurrent DELETE
    removed fails with ConcurrentDeleteReadException; the DELETE stands."""
    table, expected = make(tmp_path, flavour, partitioned=False)
    read = table.snapshot()
    before = data_files(_path(table))
    spark.sql(f"DELETE FROM delta.`{_path(table)}` WHERE id = 5")
    version = table.version()
    with pytest.raises(ConcurrentDeleteReadException):
        _optimize_at(table, read)
    assert table.version() == version
    assert data_files(_path(table)) - before == set(_spark_written(table, before))
    _both_read(spark, table, [r for r in expected if r["id"] != 5])


def _spark_written(table: Any, before: set[str]) -> list[str]:
    """The new files on disk that are delta-spark's: live data files and its
    deletion vector files (anything else would be ours, left behind)."""
    root = _path(table)
    live = {f"{root}/{p}" for p in table.snapshot().files.column("path").to_pylist()}
    new = data_files(root) - before
    return sorted(
        f for f in new if f in live or f.rsplit("/", 1)[-1].startswith("deletion_vector_")
    )


def test_our_optimize_commits_next_to_a_delta_spark_append(
    ray_cluster: Any, spark: Any, tmp_path: Path
) -> None:
    """OPTIMIZE changes no data: a concurrent blind append does not conflict."""
    table, expected = make(tmp_path, "plain", partitioned=False)
    read = table.snapshot()
    extra = rows(100, 3)
    spark.createDataFrame(extra, "id BIGINT, part STRING, x BIGINT").write.format("delta").mode(
        "append"
    ).save(_path(table))
    metrics = _optimize_at(table, read)
    assert metrics.num_removed_files >= 3
    _both_read(spark, table, expected + extra)


def test_our_delete_loses_to_delta_spark_optimize(
    ray_cluster: Any, spark: Any, tmp_path: Path
) -> None:
    table, expected = make(tmp_path, "plain", partitioned=False)
    before = data_files(_path(table))
    staged = stage_delete(table, "id % 4 = 0")
    written = data_files(_path(table)) - before
    assert written
    spark.sql(f"OPTIMIZE delta.`{_path(table)}`")
    with pytest.raises(ConcurrentDeleteReadException):
        staged.commit()
    assert not (written & data_files(_path(table)))
    _both_read(spark, table, expected)


@pytest.mark.parametrize("flavour", ["plain", "dv"])
def test_our_update_loses_to_delta_spark_update_of_the_same_file(
    ray_cluster: Any, spark: Any, tmp_path: Path, flavour: str
) -> None:
    table, expected = make(tmp_path, flavour, partitioned=True)
    before = data_files(_path(table))
    staged = stage_update(table, {"x": "x + 1000"}, predicate="id = 4")
    written = data_files(_path(table)) - before
    spark.sql(f"UPDATE delta.`{_path(table)}` SET x = -1 WHERE id = 7")
    with pytest.raises(DeltaConcurrentModificationException) as caught:
        staged.commit()
    # delta-spark checks the winner's adds first: its UPDATE re-added id 4's
    # row (copied, or the file again with a DV), which our predicate reads
    assert type(caught.value).__name__ == "ConcurrentAppendException"
    assert not (written & data_files(_path(table)))
    _both_read(spark, table, [{**r, "x": -1} if r["id"] == 7 else r for r in expected])


@pytest.mark.parametrize("flavour", ["plain", "dv"])
def test_delta_spark_merge_and_our_update_on_disjoint_partitions_both_commit(
    ray_cluster: Any, spark: Any, tmp_path: Path, flavour: str
) -> None:
    from delta.tables import DeltaTable

    table, expected = make(tmp_path, flavour, partitioned=True)
    staged = stage_update(table, {"x": "x + 1000"}, predicate="part = 'a' AND id < 12")
    theirs = [{"id": i, "part": "b", "x": 500 + i} for i in (0, 3, 90)]
    (
        DeltaTable.forPath(spark, _path(table))
        .alias("t")
        .merge(
            spark.createDataFrame(theirs, "id BIGINT, part STRING, x BIGINT").alias("s"),
            "t.part = 'b' AND t.id = s.id",
        )
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
    staged.commit()
    by_id = {r["id"]: r for r in expected}
    for row in theirs:
        by_id[row["id"]] = row
    for key, row in by_id.items():
        if row["part"] == "a" and key < 12:
            by_id[key] = {**row, "x": row["x"] + 1000}
    _both_read(spark, table, list(by_id.values()))


@pytest.mark.parametrize("flavour", ["plain", "dv"])
def test_delta_spark_delete_and_our_merge_on_disjoint_partitions_both_commit(
    ray_cluster: Any, spark: Any, tmp_path: Path, flavour: str
) -> None:
    table, expected = make(tmp_path, flavour, partitioned=True)
    ours = [{"id": i, "part": "a", "x": 700 + i} for i in (1, 2, 95)]
    staged = (
        table.merge(
            pa.Table.from_pylist(ours, schema=SCHEMA),
            "target.part = 'a' AND target.id = source.id",
        )
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .stage()
    )
    spark.sql(f"DELETE FROM delta.`{_path(table)}` WHERE part = 'b' AND x > 5")
    staged.commit()
    by_id = {r["id"]: r for r in expected if not (r["part"] == "b" and r["x"] > 5)}
    for row in ours:
        by_id[row["id"]] = row
    _both_read(spark, table, list(by_id.values()))
