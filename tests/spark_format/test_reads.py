"""``spark.read.format("raydelta")``: pushed filters prune files (planned on
the driver), time travel, empty tables, deletion vectors, change feed."""

from __future__ import annotations

import re
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from raydelta.spark.options import ReadOptions
from raydelta.spark.reader import SnapshotReader
from raydelta.storage.snapshot import load_snapshot

pytestmark = pytest.mark.spark
DDL = "id long, name string, day string"


def has_filter_node(frame: Any) -> bool:
    """Whether Spark's physical plan still filters rows after the scan."""
    plan = str(frame._jdf.queryExecution().executedPlan().toString())
    return re.search(r"(^|[\s*+-])Filter\s", plan, re.MULTILINE) is not None


def test_filters_prune_files_on_the_driver(rd_spark: Any, table_dir: str) -> None:
    # 4 days x 2 files a day; ids grow with the file, so min/max skipping works
    rows = [(i, f"n{i}", f"2026-11-2{i // 10 % 4}") for i in range(80)]
    frame = rd_spark.createDataFrame(rows, DDL).repartition(8, "id").sortWithinPartitions("id")
    frame.write.format("raydelta").partitionBy("day").save(table_dir)
    files = load_snapshot(table_dir).num_files

    by_day = rd_spark.read.format("raydelta").load(table_dir).where("day = '2026-11-21'")
    assert sorted(r.id for r in by_day.collect()) == [i for i, _, d in rows if d == "2026-11-21"]
    assert not has_filter_node(by_day)  # fully pushed to the source
    parallelism = rd_spark.sparkContext.defaultParallelism
    reader = SnapshotReader(table_dir, ReadOptions.parse({}), min_splits=parallelism)
    from pyspark.sql.datasource import EqualTo, GreaterThan

    assert list(reader.pushFilters([EqualTo(("day",), "2026-11-21")])) == []
    planned = reader.planned_files().num_rows
    assert 0 < planned < files
    splits = reader.partitions()  # Spark's file-source packing, session parallelism
    assert by_day.rdd.getNumPartitions() == len(splits)
    paths = [add["path"] for split in splits for add in split.adds]  # type: ignore[attr-defined]
    assert len(paths) == len(set(paths)) == planned  # each planned file in exactly one task

    reader = SnapshotReader(table_dir, ReadOptions.parse({}))
    assert list(reader.pushFilters([GreaterThan(("id",), 75)])) == []
    assert reader.planned_files().num_rows < files  # min/max skipping
    high = rd_spark.read.format("raydelta").load(table_dir).where("id > 75")
    assert sorted(r.id for r in high.collect()) == [76, 77, 78, 79]

    # untranslatable filters stay with Spark and the answer is still right
    like = rd_spark.read.format("raydelta").load(table_dir).where("name LIKE 'n7%'")
    assert has_filter_node(like)
    assert sorted(r.id for r in like.collect()) == [7, *list(range(70, 80))]
    nulls = rd_spark.read.format("raydelta").load(table_dir).where("name IS NULL")
    assert nulls.count() == 0


def test_time_travel_and_empty_tables(rd_spark: Any, table_dir: str) -> None:
    rd_spark.createDataFrame([], DDL).write.format("raydelta").save(table_dir)
    assert load_snapshot(table_dir).num_files == 0
    empty = rd_spark.read.format("raydelta").load(table_dir)
    assert empty.count() == 0 and empty.columns == ["id", "name", "day"]
    rd_spark.createDataFrame([(1, "a", "x")], DDL).write.format("raydelta").mode("append").save(
        table_dir
    )
    stamp = load_snapshot(table_dir, version=0).timestamp
    assert stamp < load_snapshot(table_dir, version=1).timestamp  # a Spark job apart
    at = datetime.fromtimestamp(stamp / 1000, UTC).isoformat(timespec="milliseconds")
    reader = rd_spark.read.format("raydelta")
    assert reader.option("versionAsOf", 0).load(table_dir).count() == 0
    assert reader.option("versionAsOf", 1).load(table_dir).count() == 1
    at_zero = rd_spark.read.format("raydelta").option("timestampAsOf", at)
    assert at_zero.load(table_dir).count() == 0


def test_deletion_vectors(rd_spark: Any, golden_root: Path, tmp_path: Path) -> None:
    """35 live rows in delta-spark's DV table (golden README)."""
    shutil.copytree(golden_root / "dv-partitioned-with-checkpoint", tmp_path / "dv")
    frame = rd_spark.read.format("raydelta").load(str(tmp_path / "dv"))
    assert frame.count() == 35


def test_change_feed_derived_and_from_cdc_files(rd_spark: Any, table_dir: str) -> None:
    rd_spark.createDataFrame([(1, "a", "x"), (2, "b", "y")], DDL).write.format("raydelta").option(
        "delta.enableChangeDataFeed", "true"
    ).partitionBy("day").save(table_dir)
    rd_spark.createDataFrame([(3, "c", "x")], DDL).write.format("raydelta").mode("append").save(
        table_dir
    )
    rd_spark.createDataFrame([(4, "d", "y")], DDL).write.format("raydelta").mode(
        "overwrite"
    ).option("replaceWhere", "day = 'y'").save(table_dir)
    # delta-spark's UPDATE writes cdc files (version 3)
    rd_spark.sql(f"UPDATE delta.`{table_dir}` SET name = 'A' WHERE id = 1")

    changes = (
        rd_spark.read.format("raydelta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .load(table_dir)
    )
    assert changes.columns[-3:] == ["_change_type", "_commit_version", "_commit_timestamp"]
    changed = changes.collect()
    ours = sorted((r.id, r.name, r._change_type, r._commit_version) for r in changed)
    theirs = sorted(
        (r.id, r.name, r._change_type, r._commit_version)
        for r in rd_spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .load(table_dir)
        .collect()
    )
    assert ours == theirs
    assert (1, "A", "update_postimage", 3) in ours and (2, "b", "delete", 2) in ours
    bounded = (
        rd_spark.read.format("raydelta")
        .options(readChangeFeed="true", startingVersion="1", endingVersion="1")
        .load(table_dir)
    )
    assert [(r.id, r._change_type) for r in bounded.collect()] == [(3, "insert")]
    stamps = {r._commit_version: r._commit_timestamp for r in changed}
    history = {
        r.version: r.timestamp
        for r in rd_spark.sql(f"DESCRIBE HISTORY delta.`{table_dir}`").collect()
    }
    assert stamps == {v: history[v] for v in stamps}


def test_change_feed_needs_the_property(rd_spark: Any, table_dir: str) -> None:
    import deltalake

    deltalake.write_deltalake(table_dir, pa.table({"id": [1]}))
    frame = (
        rd_spark.read.format("raydelta")
        .options(readChangeFeed="true", startingVersion="0")
        .load(table_dir)
    )
    with pytest.raises(Exception, match="DELTA_MISSING_CHANGE_DATA"):
        frame.collect()
