"""delta-spark's Structured Streaming next to raydelta writers.

The source (``spark.readStream.format("delta")``) sees raydelta's commits,
each once, across restarts of the query. The sink writes each micro-batch
exactly once (its ``txn`` action: app id = the query's id, version = the
batch id) to a table raydelta writers also append to: a batch replayed
after a lost streaming-checkpoint commit is skipped by the sink, and
raydelta reads the same ``txn`` versions delta-spark does. Every run uses
``trigger(availableNow=True)``, so it is deterministic and ends by itself.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raydelta
from tests.spark_delta.delta_spark_view import assert_same_as_delta_spark, jvm_snapshot

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("origin", pa.string())])
STREAM_TIMEOUT_S = 1800


def _rows(ids: range, origin: str) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "origin": [origin] * len(ids)})


def _run_stream(spark: Any, source: str, sink: str, checkpoint: Path) -> None:
    query = (
        spark.readStream.format("delta")
        .load(source)
        .writeStream.format("delta")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(sink)
    )
    # Wait for the query to end, and know that it did: awaitTermination(timeout)
    # returns False on timeout, and a test that went on would delete the
    # checkpoint's last commit while that query was still writing it (under
    # load its ".1.crc" then appeared after the deletion, and the replay
    # failed with "Multiple streaming queries are concurrently using ...").
    if not query.awaitTermination(STREAM_TIMEOUT_S):
        query.stop()
        pytest.fail(f"the availableNow query did not end within {STREAM_TIMEOUT_S} s")
    assert query.exception() is None


def _spark_txns(spark: Any, uri: str) -> dict[str, int]:
    snapshot = jvm_snapshot(spark, uri)
    found = spark._jvm.scala.jdk.javaapi.CollectionConverters.asJava(snapshot.setTransactions())
    return {t.appId(): int(t.version()) for t in found}


def test_stream_from_and_to_tables_raydelta_writes(delta: Any, tmp_path: Path) -> None:
    spark = delta
    source, sink = str(tmp_path / "source"), str(tmp_path / "sink")
    checkpoint = tmp_path / "stream-checkpoint"
    source_table = raydelta.create_table(source, SCHEMA)
    sink_table = raydelta.create_table(sink, SCHEMA)
    source_table.append(_rows(range(0, 3), "ray"))
    source_table.append(_rows(range(3, 5), "ray"))

    _run_stream(spark, source, sink, checkpoint)  # sees both raydelta commits
    sink_table.append(_rows(range(100, 102), "direct"))  # a raydelta writer on the sink
    source_table.append(_rows(range(5, 7), "ray"))
    _run_stream(spark, source, sink, checkpoint)  # only the new commit

    # lose the streaming checkpoint's record of the last batch: Spark replays it,
    # and the sink's txn (query id, batch id) makes the replay commit nothing
    commits = sorted(
        (p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()),
        key=lambda p: int(p.name),
    )
    last_batch = int(commits[-1].name)
    commits[-1].unlink()
    (commits[-1].parent / f".{last_batch}.crc").unlink(missing_ok=True)  # Hadoop's checksum
    before_replay = sink_table.version()
    _run_stream(spark, source, sink, checkpoint)
    assert sink_table.version() == before_replay

    rows = sink_table.to_arrow().to_pylist()
    counts = Counter((r["id"], r["origin"]) for r in rows)
    expected = {(i, "ray") for i in range(7)} | {(100, "direct"), (101, "direct")}
    assert set(counts) == expected and set(counts.values()) == {1}
    spark_txns = _spark_txns(spark, sink)
    assert raydelta.load_snapshot(sink).txns == spark_txns
    assert list(spark_txns.values()) == [last_batch]
    assert_same_as_delta_spark(spark, sink, sink_table.version())

    # the stream's state is delta-spark's own reading of our source table
    source_rows = spark.read.format("delta").load(source).count()
    assert source_rows == source_table.to_arrow().num_rows == 7
