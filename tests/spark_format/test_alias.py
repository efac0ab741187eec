"""The ``delta`` alias: registered only where the session has no JVM Delta
source. With delta-spark's jars (the test session) ``format("delta")`` stays
delta-spark's; in a plain PySpark session (a subprocess without the jars) a
pipeline written for delta-spark runs unchanged through raydelta."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from raydelta.storage.history import load_history
from raydelta.storage.snapshot import load_snapshot

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_with_the_jars_delta_stays_delta_spark(rd_spark: Any, table_dir: str) -> None:
    from raydelta.spark import has_jvm_delta, register

    assert has_jvm_delta(rd_spark)
    assert "delta" not in register(rd_spark)
    rd_spark.createDataFrame([(1, "a")], "id long, name string").write.format("delta").save(
        table_dir
    )
    (entry,) = load_history(table_dir)
    assert entry.commit_info is not None
    assert "Delta-Lake" in entry.commit_info["engineInfo"]  # written by delta-spark's JVM


PIPELINE = """
import json, sys
import ray
from pyspark.sql import SparkSession

ray.init(address=sys.argv[2], log_to_driver=False, configure_logging=False)
spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.sql.shuffle.partitions", "1")
    .getOrCreate()
)
from raydelta.spark import has_jvm_delta, register

jvm = has_jvm_delta(spark)
names = register(spark)
uri = sys.argv[1]
frame = spark.createDataFrame([(1, "a", "x"), (2, "b", "y")], "id long, name string, day string")
# a delta-spark pipeline, unchanged: default save mode, partitionBy, then append
frame.write.format("delta").partitionBy("day").save(uri)
frame.write.format("delta").mode("append").save(uri)
try:
    frame.write.format("delta").save(uri)
    refused = None
except Exception as error:
    refused = type(error).__name__
rows = sorted(tuple(r) for r in spark.read.format("delta").load(uri).where("day = 'x'").collect())
print(json.dumps({"jvm": jvm, "names": names, "rows": rows, "refused": refused}))
spark.stop()
"""


def test_without_the_jars_delta_is_raydelta(
    ray_cluster: Any, table_dir: str, tmp_path: Path
) -> None:
    script = tmp_path / "pipeline.py"
    script.write_text(textwrap.dedent(PIPELINE))
    address = ray_cluster.get_runtime_context().gcs_address
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": "pyspark-shell"}
    done = subprocess.run(
        [sys.executable, str(script), table_dir, address],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {
        "jvm": False,
        "names": ["raydelta", "delta"],
        "rows": [[1, "a", "x"], [1, "a", "x"]],
        "refused": "TableAlreadyExistsError",
    }
    snap = load_snapshot(table_dir)
    assert snap.version == 1 and list(snap.metadata.partition_columns) == ["day"]
    assert {e.commit_info["engineInfo"] for e in load_history(table_dir) if e.commit_info} == {
        "raydelta"
    }
