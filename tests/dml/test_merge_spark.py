"""MERGE and OPTIMIZE next to delta-spark on the same tables: delta-spark reads
raydelta's results (rows equal, deletion vectors and the change data feed
honoured), raydelta reads delta-spark's MERGE with deletion vectors, and a
delta-spark MERGE committing while raydelta's is staged on the same file
makes raydelta's fail with delta-spark's exception class, its files gone and
delta-spark's commit intact."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raydelta
from raydelta.protocol.errors import DeltaConcurrentModificationException
from tests.dml.merge_reference import Clause, reference_merge
from tests.dml.test_merge import SCHEMA, make, rows, sort, upsert_reference

pytestmark = pytest.mark.spark


def spark_rows(spark: Any, path: str) -> list[dict[str, Any]]:
    frame = spark.read.format("delta").load(path).select("id", "part", "x")
    return sort([r.asDict() for r in frame.collect()])


def data_files(path: str) -> set[str]:
    return {
        os.path.join(d, n)
        for d, _, names in os.walk(path)
        if "_delta_log" not in d
        for n in names
        if not n.startswith(".")
    }


def test_delta_spark_reads_our_merge_and_its_change_feed(
    ray_cluster: Any, spark: Any, tmp_path: Path
) -> None:
    table, target = make(tmp_path, "dv_cdf")
    source = rows(26, 8, x_base=300)
    expected, _ = reference_merge(
        target,
        source,
        lambda t, s: t["id"] == s["id"],
        matched=[
            Clause("delete", when=lambda t, s: s["id"] == 27),
            Clause("update", make=lambda t, s: {"x": s["x"]}),
        ],
        not_matched=[Clause("insert", make=dict)],
    )
    (
        table.merge(pa.Table.from_pylist(source, schema=SCHEMA), "target.id = source.id")
        .when_matched_delete("source.id = 27")
        .when_matched_update({"x": "source.x"})
        .when_not_matched_insert_all()
        .execute()
    )
    path = table.uri.removeprefix("file://")
    assert spark_rows(spark, path) == sort(expected)
    version = table.snapshot().version
    feed = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", version)
        .option("endingVersion", version)
        .load(path)
        .collect()
    )
    theirs = sorted((r["id"], r["_change_type"], r["x"]) for r in feed)
    ours = sorted(
        (r["id"], r["_change_type"], r["x"]) for r in table.changes(version, version).to_pylist()
    )
    assert theirs == ours and len(ours) == 2 * 3 + 1 + 4  # 3 updates, 1 delete, 4 inserts
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").collect()[0]
    assert history["operation"] == "MERGE"
    assert history["operationMetrics"]["numTargetRowsInserted"] == "4"


def test_raydelta_reads_a_delta_spark_merge_with_deletion_vectors(
    ray_cluster: Any, spark: Any, tmp_path: Path
) -> None:
    from delta.tables import DeltaTable

    path = str(tmp_path / "spark_table")
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT, part STRING, x BIGINT) USING delta "
        "PARTITIONED BY (part) TBLPROPERTIES ('delta.enableDeletionVectors'='true')"
    )
    target = rows(0, 30)
    spark.createDataFrame(target, "id BIGINT, part STRING, x BIGINT").write.format("delta").mode(
        "append"
    ).save(path)
    source = rows(20, 15, x_base=500)
    (
        DeltaTable.forPath(spark, path)
        .alias("t")
        .merge(
            spark.createDataFrame(source, "id BIGINT, part STRING, x BIGINT").alias("s"),
            "t.id = s.id",
        )
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
    expected, _ = upsert_reference(target, source)
    table = raydelta.open_table(path)
    assert any(f["deletionVector"] for f in table.snapshot().files.to_pylist())
    assert sort(table.to_arrow().to_pylist()) == sort(expected)
    # and our MERGE on top of delta-spark's, read back by delta-spark
    second = rows(30, 10, x_base=900)
    (
        table.merge(pa.Table.from_pylist(second, schema=SCHEMA), "target.id = source.id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    expected, _ = upsert_reference(expected, second)
    assert spark_rows(spark, path) == sort(expected)
    table.optimize.compact()
    assert spark_rows(spark, path) == sort(expected)
    assert not any(f["deletionVector"] for f in table.snapshot().files.to_pylist())


def test_concurrent_merges_the_loser_gets_delta_sparks_conflict(
    ray_cluster: Any, spark: Any, tmp_path: Path
) -> None:
    from delta.tables import DeltaTable

    table, target = make(tmp_path, "dv", partitioned=False)
    path = table.uri.removeprefix("file://")
    before = data_files(path)
    ours = rows(5, 3, x_base=700)
    staged = (
        table.merge(pa.Table.from_pylist(ours, schema=SCHEMA), "target.id = source.id")
        .when_matched_update_all()
        .stage()
    )
    written = data_files(path) - before
    assert written
    theirs = rows(6, 1, x_base=800)  # the same file as ours
    (
        DeltaTable.forPath(spark, path)
        .alias("t")
        .merge(
            spark.createDataFrame(theirs, "id BIGINT, part STRING, x BIGINT").alias("s"),
            "t.id = s.id",
        )
        .whenMatchedUpdateAll()
        .execute()
    )
    with pytest.raises(DeltaConcurrentModificationException) as caught:
        staged.commit()
    assert type(caught.value).__name__ in (
        "ConcurrentDeleteReadException",
        "ConcurrentAppendException",
    )
    assert not (written & data_files(path))
    expected, _ = upsert_reference(target, theirs)  # delta-spark's commit intact
    assert spark_rows(spark, path) == sort(expected)
    assert sort(table.to_arrow().to_pylist()) == sort(expected)
