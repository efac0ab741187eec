"""The README's "delta-spark writes, raydelta maintains" block, run as written
(with a temporary path and small frames): its ```py block needs a
SparkSession with delta-spark, so tests/test_readme.py cannot run it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raydelta
from tests.spark_delta.delta_spark_view import assert_same_as_delta_spark

pytestmark = pytest.mark.spark


def test_readme_delta_spark_pipeline_maintained_by_raydelta(delta: Any, tmp_path: Path) -> None:
    spark, path = delta, str(tmp_path / "events")
    df = spark.createDataFrame(
        [(1, "2026-11-24"), (2, "2026-11-24"), (3, "2026-11-25")], "id long, day string"
    )

    # --- the README block, unchanged but for `path` ---
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT, day STRING) USING delta PARTITIONED BY (day) "
        "TBLPROPERTIES ('delta.enableDeletionVectors'='true', 'delta.checkpointPolicy'='v2')"
    )
    df.write.format("delta").mode("append").save(path)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 3")

    table = raydelta.open_table(path)
    table.append(pa.table({"id": [4], "day": ["2026-11-25"]}))
    table.delete("day = '2026-11-24'")
    summary = table.checkpoint(kind="v2")
    spark.read.format("delta").load(path).count()
    table.cleanup_metadata()
    report = table.vacuum(dry_run=False)
    # --- end of the block ---

    ours = {
        e.operation: e.version
        for e in table.history()
        if (e.commit_info or {}).get("engineInfo") == "raydelta"
    }
    assert sorted(ours) == ["DELETE", "VACUUM END", "VACUUM START", "WRITE"]
    assert summary.kind == "v2" and summary.version == ours["DELETE"]
    assert not report.files  # nothing older than the retention yet
    assert_same_as_delta_spark(spark, path, table.version())
    # Spark deleted id 3, we appended 4 and deleted the 2026-11-24 rows (ids 1 and 2)
    assert sorted(spark.read.format("delta").load(path).toPandas()["id"]) == [4]
