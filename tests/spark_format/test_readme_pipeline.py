"""The README's Spark section (the ```py block of "the same pipeline through
the raydelta format") runs here as written, on a temporary directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark


def test_readme_pipeline(rd_spark: Any, tmp_path: Path, table_dir: str) -> None:
    spark, base = rd_spark, str(tmp_path)
    # --- the README block, with "/data" spelled `base` ---
    from raydelta.spark import register

    register(spark)  # once per session: "raydelta" (+ "delta" where delta-spark is absent)

    events = spark.createDataFrame(
        [(1, "click", "2026-11-24"), (2, "view", "2026-11-25")], "id long, kind string, day string"
    )
    uri = f"{base}/events"
    events.write.format("raydelta").partitionBy("day").option(
        "delta.enableChangeDataFeed", "true"
    ).save(uri)  # Spark's default mode: creates the table, refuses an existing one
    late = spark.createDataFrame([(3, "click", "2026-11-25")], "id long, kind string, day string")
    late.write.format("raydelta").mode("append").option("txnAppId", "nightly").option(
        "txnVersion", 7
    ).save(uri)  # idempotent: a rerun of run 7 commits nothing

    day = spark.read.format("raydelta").load(uri).where("day = '2026-11-25'")  # pruned files
    first = spark.read.format("raydelta").option("versionAsOf", 0).load(uri)
    changes = (
        spark.read.format("raydelta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 1)
        .load(uri)
    )
    copy = (
        spark.readStream.format("raydelta")
        .load(uri)
        .writeStream.format("raydelta")
        .option("checkpointLocation", f"{base}/_checkpoints/events_copy")
        .trigger(availableNow=True)
        .start(f"{base}/events_copy")
    )
    copy.awaitTermination()
    # --- end of the README block ---
    assert sorted(r.id for r in day.collect()) == [2, 3]
    assert first.count() == 2
    assert [(r.id, r._change_type) for r in changes.collect()] == [(3, "insert")]
    assert sorted(
        r.id for r in spark.read.format("delta").load(f"{base}/events_copy").collect()
    ) == [1, 2, 3]
