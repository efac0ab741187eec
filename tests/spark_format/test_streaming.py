"""Structured Streaming through the ``raydelta`` format: an exactly-once sink
(one commit per batch, ``txn`` = query id + batch id, a query killed after
its commit and restarted commits nothing twice) and a source
(``startingVersion``, ``maxFilesPerTrigger``, deletes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from raydelta.storage.history import load_history
from raydelta.storage.snapshot import load_snapshot

pytestmark = pytest.mark.spark


def input_files(folder: Path, batches: int, rows: int) -> list[int]:
    folder.mkdir()
    ids = []
    for b in range(batches):
        chunk = list(range(b * rows, (b + 1) * rows))
        pq.write_table(
            pa.table({"id": chunk, "day": [f"d{i % 2}" for i in chunk]}), folder / f"{b:03}.parquet"
        )
        ids.extend(chunk)
    return ids


def file_stream(spark: Any, folder: Path) -> Any:
    return (
        spark.readStream.schema("id long, day string")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(folder))
    )


def run_sink(frame: Any, uri: str, checkpoint: Path, **options: str) -> Any:
    writer = (
        frame.writeStream.format("raydelta")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer.start(uri)


def test_a_query_killed_after_its_commit_restarts_without_duplicates(
    rd_spark: Any, table_dir: str, tmp_path: Path
) -> None:
    from raydelta.actors.faults import arm

    ids = input_files(tmp_path / "in", 4, 3)
    fault = tmp_path / "fault.json"
    arm(str(fault), "spark_sink_after_commit")  # the worker dies after batch 0's commit
    stream = file_stream(rd_spark, tmp_path / "in")
    query = run_sink(stream, table_dir, tmp_path / "cp", **{"__raydelta.faultFile": str(fault)})
    with pytest.raises(Exception):  # noqa: B017 - Spark's wrapper of the worker's death
        query.awaitTermination()
    first = load_snapshot(table_dir)
    assert first.version == 0 and first.txns == {query.id: 0}  # committed, not checkpointed

    again = run_sink(file_stream(rd_spark, tmp_path / "in"), table_dir, tmp_path / "cp")
    again.awaitTermination()
    assert again.id == query.id
    snap = load_snapshot(table_dir)
    assert snap.txns == {query.id: 3}
    got = sorted(r.id for r in rd_spark.read.format("raydelta").load(table_dir).collect())
    assert got == ids  # batch 0 replayed by Spark, not committed twice
    assert snap.version == 3  # one commit per batch: 0 before the crash, 1-3 after
    history = load_history(table_dir)
    assert {e.operation for e in history} == {"STREAMING UPDATE"}
    assert [(e.commit_info or {})["operationParameters"]["epochId"] for e in reversed(history)] == [
        "0",
        "1",
        "2",
        "3",
    ]
    spark_ids = sorted(r.id for r in rd_spark.read.format("delta").load(table_dir).collect())
    assert spark_ids == ids


def test_complete_mode_replaces_the_table(rd_spark: Any, table_dir: str, tmp_path: Path) -> None:
    input_files(tmp_path / "in", 2, 4)
    counts = file_stream(rd_spark, tmp_path / "in").groupBy("day").count()
    query = (
        counts.writeStream.format("raydelta")
        .outputMode("complete")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start(table_dir)
    )
    query.awaitTermination()
    rows = sorted(tuple(r) for r in rd_spark.read.format("raydelta").load(table_dir).collect())
    assert rows == [("d0", 4), ("d1", 4)]
    assert load_snapshot(table_dir).num_files >= 1


def test_source_reads_new_files_in_bounded_batches(
    rd_spark: Any, table_dir: str, tmp_path: Path
) -> None:
    ddl = "id long, day string"
    for i in range(3):
        rd_spark.createDataFrame([(i, "d0"), (i + 10, "d1")], ddl).coalesce(1).write.format(
            "raydelta"
        ).mode("append").partitionBy("day").save(table_dir)

    def drain(name: str, **options: str) -> tuple[list[int], int]:
        reader = rd_spark.readStream.format("raydelta")
        for key, value in options.items():
            reader = reader.option(key, value)
        query = (
            reader.load(table_dir)
            .writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", str(tmp_path / name))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        batches = sum(1 for p in query.recentProgress if p["numInputRows"] > 0)
        return sorted(r.id for r in rd_spark.table(name).collect()), batches

    everything, batches = drain("all", maxFilesPerTrigger="2")
    assert everything == [0, 1, 2, 10, 11, 12] and batches == 3  # 6 files, 2 a batch

    rd_spark.createDataFrame([(5, "d0")], ddl).write.format("raydelta").mode("overwrite").option(
        "replaceWhere", "day = 'd0'"
    ).save(table_dir)  # version 3 removes files
    with pytest.raises(Exception, match="DELTA_SOURCE_TABLE_IGNORE_CHANGES"):
        drain("strict", startingVersion="3")
    # versions 1 and 2 from startingVersion=1 (not 0's rows), and version 3 skipped
    # whole (not its new row 5). Spark starts a fresh Python interpreter for each
    # query on a Python source and waits only 10 s for it: two checks, one query.
    later, _ = drain("later", startingVersion="1", skipChangeCommits="true")
    assert later == [1, 2, 11, 12]
