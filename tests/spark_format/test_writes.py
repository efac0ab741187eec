"""``df.write.format("raydelta")``: every save mode, create on write,
schema enforcement on the driver, schema evolution, replaceWhere, dynamic
partition overwrite, userMetadata, txn idempotence. Peers (delta-spark,
deltalake, duckdb) read every table written here identically."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from raydelta.protocol.errors import (
    DeltaInvariantViolationException,
    SchemaMismatchError,
    TableAlreadyExistsError,
)
from raydelta.storage.history import load_history
from raydelta.storage.snapshot import load_snapshot

pytestmark = pytest.mark.spark

ROWS = [(i, f"n{i}", "2026-11-21" if i % 2 else "2026-11-22") for i in range(20)]
DDL = "id long, name string, day string"


def data_files(uri: str) -> set[str]:
    root = Path(uri)
    if not root.exists():
        return set()
    return {
        str(p.relative_to(root)) for p in root.rglob("*.parquet") if "_delta_log" not in p.parts
    }


def test_default_mode_creates_the_table_and_then_refuses_it(
    rd_spark: Any, table_dir: str, peers_read: Callable[..., Any]
) -> None:
    frame = rd_spark.createDataFrame(ROWS, DDL).repartition(2)
    frame.write.format("raydelta").partitionBy("day").save(table_dir)  # Spark's default mode

    snap = load_snapshot(table_dir)
    assert snap.version == 0  # created by the commit that holds the data
    assert list(snap.metadata.partition_columns) == ["day"]
    assert sum(a.num_records or 0 for a in snap.add_files()) == len(ROWS)
    for add in snap.add_files():
        stats = json.loads(add.stats or "{}")
        assert set(stats["minValues"]) == {"id", "name"} and stats["nullCount"] == {
            "id": 0,
            "name": 0,
        }
    (entry,) = load_history(table_dir)
    assert entry.commit_info is not None
    assert entry.commit_info["operationParameters"]["mode"] == "ErrorIfExists"
    reads = peers_read(table_dir, ["id", "name", "day"])
    assert reads["raydelta"] == sorted(ROWS, key=repr)
    assert {name: rows == reads["raydelta"] for name, rows in reads.items()} == dict.fromkeys(
        reads, True
    )

    files = data_files(table_dir)
    with pytest.raises(TableAlreadyExistsError, match="DELTA_PATH_EXISTS") as caught:
        frame.write.format("raydelta").mode("errorifexists").save(table_dir)
    assert "\n" not in str(caught.value)
    assert load_snapshot(table_dir).version == 0 and data_files(table_dir) == files


def test_ignore_mode(rd_spark: Any, table_dir: str) -> None:
    frame = rd_spark.createDataFrame(ROWS[:3], DDL)
    frame.write.format("raydelta").mode("ignore").save(table_dir)  # creates
    assert load_snapshot(table_dir).version == 0
    files = data_files(table_dir)
    frame.write.format("raydelta").mode("ignore").save(table_dir)  # exists: nothing happens
    assert load_snapshot(table_dir).version == 0 and data_files(table_dir) == files


def test_save_keywords_and_the_path_option(rd_spark: Any, table_dir: str) -> None:
    frame = rd_spark.createDataFrame(ROWS, DDL)
    frame.write.save(table_dir, format="raydelta", mode="append", partitionBy=["day"])
    frame.write.format("raydelta").mode("append").option("path", table_dir).save()
    snap = load_snapshot(table_dir)
    assert snap.version == 1 and list(snap.metadata.partition_columns) == ["day"]
    assert rd_spark.read.format("raydelta").load(table_dir).count() == 2 * len(ROWS)


def test_schema_mismatch_is_one_line_on_the_driver_and_writes_nothing(
    rd_spark: Any, table_dir: str
) -> None:
    rd_spark.createDataFrame(ROWS, DDL).write.format("raydelta").save(table_dir)
    files = data_files(table_dir)
    wrong = rd_spark.createDataFrame([(1, 2, "x")], "id long, name long, day string")
    with pytest.raises(SchemaMismatchError, match="name") as caught:
        wrong.write.format("raydelta").mode("append").save(table_dir)
    assert "\n" not in str(caught.value) and "PYTHON_DATA_SOURCE" not in str(caught.value)
    extra = rd_spark.createDataFrame([(1, "a", "x", 2.0)], DDL + ", score double")
    with pytest.raises(SchemaMismatchError, match="score"):
        extra.write.format("raydelta").mode("append").save(table_dir)
    assert load_snapshot(table_dir).version == 0 and data_files(table_dir) == files


def test_missing_nullable_columns_are_written_as_nulls(rd_spark: Any, table_dir: str) -> None:
    rd_spark.createDataFrame(ROWS[:2], DDL).write.format("raydelta").save(table_dir)
    rd_spark.createDataFrame([(7, "2026-11-23")], "id long, day string").write.format(
        "raydelta"
    ).mode("append").save(table_dir)
    rows = rd_spark.read.format("raydelta").load(table_dir).where("id = 7").collect()
    assert [tuple(r) for r in rows] == [(7, None, "2026-11-23")]


def test_merge_schema_and_overwrite_schema(
    rd_spark: Any, table_dir: str, peers_read: Callable[..., Any]
) -> None:
    rd_spark.createDataFrame(ROWS[:4], DDL).write.format("raydelta").save(table_dir)
    wider = rd_spark.createDataFrame([(100, "w", "2026-11-23", 1.5)], DDL + ", score double")
    wider.write.format("raydelta").mode("append").option("mergeSchema", "true").save(table_dir)
    snap = load_snapshot(table_dir)
    assert [f.name for f in snap.schema.fields] == ["id", "name", "day", "score"]
    reads = peers_read(table_dir, ["id", "score"])
    expected = sorted([(i, None) for i, _, _ in ROWS[:4]] + [(100, 1.5)], key=repr)
    assert all(rows == expected for rows in reads.values()), reads

    other = rd_spark.createDataFrame([("a", 1)], "key string, value int")
    with pytest.raises(SchemaMismatchError):
        other.write.format("raydelta").mode("overwrite").save(table_dir)
    other.write.format("raydelta").mode("overwrite").option("overwriteSchema", "true").save(
        table_dir
    )
    snap = load_snapshot(table_dir)
    assert [f.name for f in snap.schema.fields] == ["key", "value"]
    assert peers_read(table_dir, ["key", "value"])["delta-spark"] == [("a", 1)]


def test_replace_where_on_partition_and_data_columns(
    rd_spark: Any, table_dir: str, peers_read: Callable[..., Any]
) -> None:
    rd_spark.createDataFrame(ROWS, DDL).write.format("raydelta").partitionBy("day").save(table_dir)
    new_day = rd_spark.createDataFrame([(500, "r", "2026-11-21")], DDL)
    new_day.write.format("raydelta").mode("overwrite").option(
        "replaceWhere", "day = '2026-11-21'"
    ).save(table_dir)
    expected = [r for r in ROWS if r[2] != "2026-11-21"] + [(500, "r", "2026-11-21")]
    reads = peers_read(table_dir, ["id", "name", "day"])
    assert all(rows == sorted(expected, key=repr) for rows in reads.values()), reads

    outside = rd_spark.createDataFrame([(501, "x", "2026-11-22")], DDL)
    version = load_snapshot(table_dir).version
    with pytest.raises(DeltaInvariantViolationException, match="DELTA_REPLACE_WHERE_MISMATCH"):
        outside.write.format("raydelta").mode("overwrite").option(
            "replaceWhere", "day = '2026-11-21'"
        ).save(table_dir)
    assert load_snapshot(table_dir).version == version

    # a data column: matching rows go, the rest of their files stays
    rd_spark.createDataFrame([(1000, "big", "2026-11-22")], DDL).write.format("raydelta").mode(
        "overwrite"
    ).option("replaceWhere", "id >= 10").save(table_dir)
    expected = [r for r in expected if r[0] < 10] + [(1000, "big", "2026-11-22")]
    reads = peers_read(table_dir, ["id", "name", "day"])
    assert all(rows == sorted(expected, key=repr) for rows in reads.values()), reads


def test_dynamic_partition_overwrite(rd_spark: Any, table_dir: str) -> None:
    rd_spark.createDataFrame(ROWS, DDL).write.format("raydelta").partitionBy("day").save(table_dir)
    new_rows = [(900, "d", "2026-11-22"), (901, "e", "2026-11-30")]
    fresh = rd_spark.createDataFrame(new_rows, DDL)
    fresh.write.format("raydelta").mode("overwrite").option(
        "partitionOverwriteMode", "dynamic"
    ).save(table_dir)
    rows = sorted(tuple(r) for r in rd_spark.read.format("delta").load(table_dir).collect())
    expected = sorted([r for r in ROWS if r[2] == "2026-11-21"] + new_rows)
    assert rows == expected


def test_user_metadata_and_txn_idempotence(rd_spark: Any, table_dir: str) -> None:
    frame = rd_spark.createDataFrame(ROWS[:3], DDL)
    for _ in range(2):  # the second run of version 1 of the app is skipped
        frame.write.format("raydelta").mode("append").option("txnAppId", "app").option(
            "txnVersion", 1
        ).option("userMetadata", "nightly load").save(table_dir)
    snap = load_snapshot(table_dir)
    assert snap.version == 0 and snap.txns == {"app": 1}
    frame.write.format("raydelta").mode("append").options(txnAppId="app", txnVersion="2").save(
        table_dir
    )
    assert load_snapshot(table_dir).txns == {"app": 2}
    assert rd_spark.read.format("raydelta").load(table_dir).count() == 6
    history = load_history(table_dir)
    assert history[-1].commit_info is not None
    assert history[-1].commit_info["userMetadata"] == "nightly load"
    spark_history = rd_spark.sql(f"DESCRIBE HISTORY delta.`{table_dir}`").collect()
    assert {r.version: r.userMetadata for r in spark_history} == {0: "nightly load", 1: None}


def test_table_properties_on_create(rd_spark: Any, table_dir: str) -> None:
    rd_spark.createDataFrame(ROWS[:2], DDL).write.format("raydelta").option(
        "delta.enableChangeDataFeed", "true"
    ).save(table_dir)
    assert load_snapshot(table_dir).metadata.configuration["delta.enableChangeDataFeed"] == "true"
