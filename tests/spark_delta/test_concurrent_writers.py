"""delta-spark jobs (append, replaceWhere, dynamic partition overwrite, MERGE,
DELETE with deletion vectors) and raydelta writers (Ray tasks through the
TableActor, and Transactions) on one table.

Checked against delta-spark's own reading of the log: every acknowledged
commit of either side is in the history exactly once, each logical conflict
surfaces on the losing side with delta-spark's exception class (the JVM's
``io.delta.exceptions.*`` on the Spark side, raydelta's classes of the same
names on ours), and at every version raydelta's snapshot (files, deletion
vectors, row ids, in-commit timestamps, domain metadata) and rows equal
delta-spark's. The interleavings are made deterministic with a gate inside
the Spark job (``delta_spark_view.Gate``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import ray
from delta.exceptions import ConcurrentAppendException, ConcurrentDeleteReadException

import raydelta
from raydelta.storage.data.writer import write_data
from tests.spark_delta.delta_spark_view import (
    Background,
    Gate,
    assert_same_as_delta_spark,
    assert_same_at_every_version,
    assert_same_at_versions,
    commits_by_txn_id,
    spark_history,
)

pytestmark = pytest.mark.spark

PROPERTIES = (
    "'delta.enableDeletionVectors'='true', 'delta.enableRowTracking'='true', "
    "'delta.enableInCommitTimestamps'='true'"
)


def _create(spark: Any, uri: str) -> None:
    spark.sql(
        f"CREATE TABLE delta.`{uri}` (id BIGINT, value STRING, part STRING) USING delta "
        f"PARTITIONED BY (part) TBLPROPERTIES ({PROPERTIES})"
    )


def _rows(ids: range, part: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "value": [f"r{i}" for i in ids],
            "part": [part] * len(ids),
        }
    )


def _spark_rows(spark: Any, ids: range, part: str) -> Any:
    return spark.createDataFrame(
        [(i, f"s{i}", part) for i in ids], "id long, value string, part string"
    ).coalesce(1)


@ray.remote
def _ray_append(uri: str, data: pa.Table) -> tuple[int, str]:
    table = raydelta.open_table(uri)
    version = table.append(data)
    assert table.last_commit is not None
    return version, table.last_commit.txn_id


def test_spark_dml_and_ray_appends_share_one_history(delta: Any, tmp_path: Path) -> None:
    spark, uri = delta, str(tmp_path / "events")
    _create(spark, uri)
    acknowledged: dict[str, int] = {}
    spark_ops: list[str] = ["CREATE TABLE"]

    def ray_appends(*batches: pa.Table) -> None:
        for version, txn_id in ray.get([_ray_append.remote(uri, b) for b in batches]):
            acknowledged[txn_id] = version

    ray_appends(_rows(range(0, 5), "a"), _rows(range(5, 10), "b"))
    _spark_rows(spark, range(10, 14), "a").write.format("delta").mode("append").save(uri)
    spark_ops.append("WRITE")
    # replaceWhere: Spark replaces partition b while Ray tasks append to a
    running = [_ray_append.remote(uri, _rows(range(20, 23), "a"))]
    (
        _spark_rows(spark, range(30, 33), "b")
        .write.format("delta")
        .mode("overwrite")
        .option("replaceWhere", "part = 'b'")
        .save(uri)
    )
    spark_ops.append("WRITE")
    for version, txn_id in ray.get(running):
        acknowledged[txn_id] = version
    spark.sql(
        f"MERGE INTO delta.`{uri}` t USING (SELECT 2L AS id, 'm' AS value, 'a' AS part) s "
        "ON t.id = s.id WHEN MATCHED THEN UPDATE SET value = s.value "
        "WHEN NOT MATCHED THEN INSERT *"
    )
    spark_ops.append("MERGE")
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE id IN (3, 31)")  # deletion vectors
    spark_ops.append("DELETE")
    ray_appends(_rows(range(40, 42), "c"))
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    try:
        _spark_rows(spark, range(50, 52), "c").write.format("delta").mode("overwrite").save(uri)
    finally:
        spark.conf.unset("spark.sql.sources.partitionOverwriteMode")
    spark_ops.append("WRITE")
    ray_appends(_rows(range(60, 62), "a"))

    latest = assert_same_at_every_version(spark, uri)
    history = spark_history(spark, uri)
    assert [v for v, _, _ in history] == list(range(latest + 1))
    ours = commits_by_txn_id(uri)
    # every acknowledged raydelta commit is in the log exactly once, at its version
    assert {t: ours.get(t) for t in acknowledged} == {t: [v] for t, v in acknowledged.items()}
    by_version = {v: (op, engine) for v, op, engine in history}
    for version in acknowledged.values():
        assert by_version[version][1].startswith("raydelta")
    spark_side = [op for v, (op, engine) in sorted(by_version.items()) if "Spark" in engine]
    assert spark_side == spark_ops  # every Spark commit once, in order
    assert len(history) == len(acknowledged) + len(spark_ops)
    # the DV-deleted rows are gone for both readers, the merged row updated
    rows = raydelta.open_table(uri).to_arrow().to_pylist()
    assert {r["id"] for r in rows}.isdisjoint({3, 31})
    assert [r["value"] for r in rows if r["id"] == 2] == ["m"]
    assert not [r for r in rows if r["id"] in (40, 41)]  # dynamic overwrite replaced part c


def test_spark_delete_loses_to_a_ray_append_it_read(delta: Any, tmp_path: Path) -> None:
    spark, uri = delta, str(tmp_path / "t")
    _create(spark, uri)
    table = raydelta.open_table(uri)
    table.append(_rows(range(0, 4), "a"))
    gate = Gate(spark, tmp_path / "gate", name="gate_delete")
    job = Background(
        lambda: spark.sql(
            f"DELETE FROM delta.`{uri}` WHERE part = 'a' AND id = 1 AND gate_delete(id)"
        )
    )
    gate.wait_entered()
    version, txn_id = ray.get(_ray_append.remote(uri, _rows(range(10, 12), "a")))
    gate.open()
    with pytest.raises(ConcurrentAppendException):
        job.result()
    assert commits_by_txn_id(uri)[txn_id] == [version]
    assert raydelta.load_snapshot(uri).version == version  # the DELETE committed nothing
    assert_same_as_delta_spark(spark, uri, version)


def test_spark_delete_commits_over_a_ray_append_it_did_not_read(delta: Any, tmp_path: Path) -> None:
    spark, uri = delta, str(tmp_path / "t")
    _create(spark, uri)
    table = raydelta.open_table(uri)
    table.append(_rows(range(0, 4), "a"))
    gate = Gate(spark, tmp_path / "gate", name="gate_other")
    job = Background(
        lambda: spark.sql(
            f"DELETE FROM delta.`{uri}` WHERE part = 'a' AND id = 1 AND gate_other(id)"
        )
    )
    gate.wait_entered()
    version, txn_id = ray.get(_ray_append.remote(uri, _rows(range(10, 12), "b")))
    gate.open()
    job.result()
    assert commits_by_txn_id(uri)[txn_id] == [version]
    assert raydelta.load_snapshot(uri).version == version + 1
    assert_same_at_versions(spark, uri, (version, version + 1))
    assert sorted(r["id"] for r in table.to_arrow().to_pylist()) == [0, 2, 3, 10, 11]


def test_spark_merge_loses_to_a_raydelta_delete_of_a_file_it_read(
    delta: Any, tmp_path: Path
) -> None:
    spark, uri = delta, str(tmp_path / "t")
    _create(spark, uri)
    table = raydelta.open_table(uri)
    table.append(_rows(range(0, 4), "a"))
    gate = Gate(spark, tmp_path / "gate", name="gate_merge")
    job = Background(
        lambda: spark.sql(
            f"MERGE INTO delta.`{uri}` t USING (SELECT 1L AS id, 'm' AS value, 'a' AS part) s "
            "ON t.id = s.id AND gate_merge(s.id) WHEN MATCHED THEN UPDATE SET value = s.value"
        )
    )
    gate.wait_entered()
    txn = table.transaction()
    for add in table.snapshot().add_files():
        txn.read_files([add]).remove(add)
    removed = txn.commit(operation="DELETE", operation_parameters={"predicate": "true"})
    gate.open()
    with pytest.raises(ConcurrentDeleteReadException):
        job.result()
    assert commits_by_txn_id(uri)[txn.txn_id] == [removed]
    assert raydelta.load_snapshot(uri).version == removed
    assert_same_as_delta_spark(spark, uri, removed)


def _written(table: raydelta.Table, data: pa.Table) -> Any:
    snap = table.snapshot()
    return write_data(table.uri, data, protocol=snap.protocol, metadata=snap.metadata).adds


def test_raydelta_transactions_lose_to_spark_with_delta_spark_exception_names(
    delta: Any, tmp_path: Path
) -> None:
    spark, uri = delta, str(tmp_path / "t")
    _create(spark, uri)
    table = raydelta.open_table(uri)
    acknowledged: dict[str, int] = {}
    refused: list[str] = []
    for part, ids in (("a", range(0, 4)), ("b", range(4, 8))):
        version = table.append(_rows(ids, part))
        assert table.last_commit is not None
        acknowledged[table.last_commit.txn_id] = version

    # ConcurrentAppendException: Spark's MERGE (not a blind append, so it
    # conflicts under WriteSerializable) added rows to the partition we read
    txn = table.transaction().read("part = 'a'")
    txn.add(*_written(table, _rows(range(100, 101), "a")))
    spark.sql(
        f"MERGE INTO delta.`{uri}` t USING (SELECT 10L AS id, 'n' AS value, 'a' AS part) s "
        "ON t.id = s.id WHEN NOT MATCHED THEN INSERT *"
    )
    with pytest.raises(raydelta.ConcurrentAppendException):
        txn.commit()
    refused.append(txn.txn_id)

    # rebased, not refused: Spark appended to a partition we did not read
    txn = table.transaction().read("part = 'b'")
    txn.add(*_written(table, _rows(range(101, 102), "b")))
    _spark_rows(spark, range(12, 14), "a").write.format("delta").mode("append").save(uri)
    rebased = txn.commit()
    assert txn.committed is not None and txn.committed.rebased_over == (rebased - 1,)
    acknowledged[txn.txn_id] = rebased

    # ConcurrentDeleteDeleteException: our blind remove of a file Spark's
    # partition DELETE removed too (a metadata-only delete: no file re-added)
    [target] = [
        a
        for a in table.snapshot().add_files()
        if a.partition_values["part"] == "b" and a.num_records == 4
    ]
    txn = table.transaction().remove(target)
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE part = 'b'")
    with pytest.raises(raydelta.ConcurrentDeleteDeleteException):
        txn.commit(operation="DELETE")
    refused.append(txn.txn_id)

    # MetadataChangedException: Spark changed the table's properties
    txn = table.transaction().read("part = 'b'")
    txn.add(*_written(table, _rows(range(102, 103), "b")))
    spark.sql(f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES ('team'='x')")
    with pytest.raises(raydelta.MetadataChangedException):
        txn.commit()

    refused.append(txn.txn_id)

    latest = assert_same_at_every_version(spark, uri)
    ours = commits_by_txn_id(uri)  # delta-spark's commits carry a txnId too
    assert {t: ours.get(t) for t in acknowledged} == {t: [v] for t, v in acknowledged.items()}
    assert not set(refused) & set(ours)  # refused ones left no trace
    history = spark_history(spark, uri)
    assert len([e for _, _, e in history if e.startswith("raydelta")]) == len(acknowledged)
    assert [v for v, _, _ in history] == list(range(latest + 1))
    spark_side = [op for _, op, engine in history if "Spark" in engine]
    assert spark_side == ["CREATE TABLE", "MERGE", "WRITE", "DELETE", "SET TBLPROPERTIES"]
