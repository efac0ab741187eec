"""A real PySpark pipeline: Spark writes data files, commits through deltaray's
TableActor (Python Data Source API), and peers read the result."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest

from actors import create_table
from storage.snapshot import load_snapshot

pytestmark = pytest.mark.spark


@pytest.fixture
def deltaray_spark(spark: Any, ray_cluster: Any) -> Any:
    from actors.spark import register

    register(spark)
    return spark


def _kill(table: Any) -> None:
    import ray

    ray.kill(table.actor)


def test_spark_appends_and_overwrites_commit_through_the_actor(
    deltaray_spark: Any, tmp_path: Path
) -> None:
    spark = deltaray_spark
    uri = str(tmp_path / "events")
    table = create_table(
        uri,
        schema=pa.schema([("id", pa.int64()), ("name", pa.string()), ("day", pa.string())]),
        partition_by=["day"],
    )
    try:
        rows = [(i, f"n{i}", "2026-11-21" if i % 2 else "2026-11-22") for i in range(40)]
        frame = spark.createDataFrame(rows, "id long, name string, day string").repartition(3)
        frame.write.format("deltaray").mode("append").save(uri)

        snap = load_snapshot(uri)
        assert snap.version == 1
        assert {a.partition_values["day"] for a in snap.add_files()} == {"2026-11-21", "2026-11-22"}
        assert sum(a.num_records or 0 for a in snap.add_files()) == 40
        assert table.snapshot().version == 1  # the actor saw Spark's commit

        theirs = deltalake.DeltaTable(uri).to_pyarrow_table()
        assert sorted(theirs.column("id").to_pylist()) == list(range(40))
        back = spark.read.format("deltaray").load(uri)
        assert sorted(r.id for r in back.collect()) == list(range(40))
        assert back.filter("day = '2026-11-22'").count() == 20

        replacement = spark.createDataFrame(
            [(100, "x", "2026-11-23")], "id long, name string, day string"
        )
        replacement.write.format("deltaray").mode("overwrite").save(uri)
        snap = load_snapshot(uri)
        assert snap.version == 2
        assert [a.partition_values["day"] for a in snap.add_files()] == ["2026-11-23"]
        assert deltalake.DeltaTable(uri).to_pyarrow_table().column("id").to_pylist() == [100]
    finally:
        _kill(table)


def test_spark_reads_deletion_vectors_through_deltaray(
    deltaray_spark: Any, golden_root: Path, tmp_path: Path
) -> None:
    """35 live rows in delta-spark's DV table (README expectation)."""
    source = golden_root / "dv-partitioned-with-checkpoint"
    shutil.copytree(source, tmp_path / "dv")
    frame = deltaray_spark.read.format("deltaray").load(str(tmp_path / "dv"))
    assert frame.count() == 35


def test_time_travel_option(deltaray_spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    for i in range(2):
        deltalake.write_deltalake(uri, pa.table({"id": [i]}), mode="append")
    frame = deltaray_spark.read.format("deltaray").option("versionAsOf", 0).load(uri)
    assert [r.id for r in frame.collect()] == [0]
