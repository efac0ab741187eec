"""raydelta maintains a table delta-spark writes: checkpoints, metadata
cleanup and VACUUM run while Spark commits.

delta-spark reads every checkpoint kind raydelta writes (classic single
file; V2 with sidecars, top-level file in JSON and in parquet), loads its
snapshot from them (its checkpoint provider names our version), and
time-travels across them to the same state raydelta reads. VACUUM never
deletes a file of a Spark commit in flight: the full mode keeps untracked
files younger than the retention (a shorter one is refused unless forced),
and the lite mode only ever deletes expired tombstones.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import ray

import raydelta
from tests.spark_delta.delta_spark_view import (
    Background,
    Gate,
    assert_same_as_delta_spark,
    assert_same_at_versions,
    jvm_snapshot,
)

pytestmark = pytest.mark.spark


def _fresh_delta_log_cache(spark: Any) -> None:
    """Make delta-spark load the next snapshot from storage (its checkpoint
    hint and listing), not from the DeltaLog it cached."""
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()


def _spark_checkpoint_version(spark: Any, uri: str) -> int:
    _fresh_delta_log_cache(spark)
    return int(jvm_snapshot(spark, uri).checkpointProvider().version())


def _append(spark: Any, uri: str, first: int, count: int = 2) -> None:
    spark.range(first, first + count, 1, 1).selectExpr(
        "id", "cast(id % 2 as string) as part"
    ).write.format("delta").mode("append").save(uri)


def test_spark_reads_every_checkpoint_kind_we_write(delta: Any, tmp_path: Path) -> None:
    spark = delta
    uri = str(tmp_path / "v2")
    spark.sql(
        f"CREATE TABLE delta.`{uri}` (id BIGINT, part STRING) USING delta PARTITIONED BY (part) "
        "TBLPROPERTIES ('delta.checkpointPolicy'='v2', 'delta.enableDeletionVectors'='true')"
    )
    for first in (0, 10, 20):
        _append(spark, uri, first)
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE id = 11")
    table = raydelta.open_table(uri)
    checkpointer = table.checkpoint_actor

    # a V2 checkpoint (JSON top-level file, sidecars) built while Spark appends
    building = Background(
        lambda: ray.get(
            checkpointer.checkpoint.remote(
                kind="v2", top_level="json", target_actions_per_sidecar=2
            )
        )
    )
    _append(spark, uri, 30)
    json_v2 = building.result()
    assert json_v2.kind == "v2" and json_v2.top_level.endswith(".json")
    assert json_v2.sidecars_written >= 2
    assert _spark_checkpoint_version(spark, uri) == json_v2.version

    _append(spark, uri, 40)
    parquet_v2 = ray.get(
        checkpointer.checkpoint.remote(kind="v2", top_level="parquet", target_actions_per_sidecar=2)
    )
    assert parquet_v2.top_level.endswith(".parquet") and parquet_v2.sidecars_written >= 1
    assert _spark_checkpoint_version(spark, uri) == parquet_v2.version
    _append(spark, uri, 50)

    latest = table.version()
    _fresh_delta_log_cache(spark)
    # time travel before, at and after each checkpoint (each historical
    # snapshot is loaded from the log's listing: the newest checkpoint <= it)
    assert_same_at_versions(spark, uri, range(latest + 1))

    # a classic checkpoint, on a table without v2Checkpoint
    classic_uri = str(tmp_path / "classic")
    spark.sql(f"CREATE TABLE delta.`{classic_uri}` (id BIGINT, part STRING) USING delta")
    _append(spark, classic_uri, 0)
    classic = raydelta.open_table(classic_uri).checkpoint(kind="classic")
    assert classic.kind == "classic"
    assert Path(classic_uri, "_delta_log", classic.top_level).is_file()
    _append(spark, classic_uri, 10)
    assert _spark_checkpoint_version(spark, classic_uri) == classic.version
    assert_same_at_versions(spark, classic_uri, range(classic.version + 2))


def _age_commits(uri: str, versions: range, days: int) -> None:
    """Let time pass for these commits: without in-commit timestamps a
    commit's time is its file's modification time, for both engines."""
    then = time.time() - days * 24 * 3600
    for version in versions:
        os.utime(Path(uri, "_delta_log", f"{version:020d}.json"), (then, then))


def test_metadata_cleanup_while_spark_writes(delta: Any, tmp_path: Path) -> None:
    spark = delta
    uri = str(tmp_path / "t")
    spark.sql(
        f"CREATE TABLE delta.`{uri}` (id BIGINT, part STRING) USING delta "
        "TBLPROPERTIES ('delta.checkpointPolicy'='v2')"
    )
    for first in (0, 10):
        _append(spark, uri, first)
    table = raydelta.open_table(uri)
    summary = table.checkpoint(kind="v2")
    # cleanup's cutoff is midnight UTC of now - retention (as delta-spark's):
    # the commits up to the checkpoint are made three days old
    _age_commits(uri, range(summary.version + 1), days=3)
    cleaning = Background(lambda: table.cleanup_metadata(retention="1 day"))
    _append(spark, uri, 20)  # Spark commits while the cleanup runs
    report = cleaning.result()
    deleted = {Path(name).name for name in report.deleted}
    assert {f"{v:020d}.json" for v in range(summary.version)} <= deleted
    assert f"{summary.version:020d}.json" not in deleted
    _append(spark, uri, 30)
    _fresh_delta_log_cache(spark)
    latest = table.version()
    assert_same_at_versions(spark, uri, range(summary.version, latest + 1))
    # both engines agree on where the retained history starts
    with pytest.raises(raydelta.VersionNotFoundError):
        raydelta.load_snapshot(uri, version=0)
    with pytest.raises(Exception, match=r"(?i)version|log|checkpoint"):
        spark.read.format("delta").option("versionAsOf", 0).load(uri).collect()


def test_vacuum_never_deletes_a_file_of_a_spark_commit_in_flight(
    delta: Any, tmp_path: Path
) -> None:
    spark = delta
    uri = str(tmp_path / "t")
    spark.sql(f"CREATE TABLE delta.`{uri}` (id BIGINT, part STRING) USING delta")
    _append(spark, uri, 0)
    spark.sql(f"INSERT OVERWRITE delta.`{uri}` SELECT 100L, 'x'")  # tombstones the first file
    table = raydelta.open_table(uri)
    tombstoned = {r.path for r in table.snapshot(version=1).add_files()}
    before = set(Path(uri).rglob("*.parquet"))

    # a Spark append whose first task has written its file and whose second
    # task waits at the gate: a file on disk the log does not know yet
    gate = Gate(spark, tmp_path / "gate", name="gate_write")
    job = Background(
        lambda: (
            spark.range(200, 204, 1, 2)
            .selectExpr("id", "cast(id % 2 as string) as part")
            .where("gate_write(id >= 202)")
            .write.format("delta")
            .mode("append")
            .save(uri)
        )
    )
    gate.wait_entered()
    deadline = time.monotonic() + 120
    while not (set(Path(uri).rglob("*.parquet")) - before):
        assert time.monotonic() < deadline, "the first task never wrote its file"
        time.sleep(0.05)
    in_flight = set(Path(uri).rglob("*.parquet")) - before

    with pytest.raises(raydelta.RetentionTooShortError):
        table.vacuum(retention="0 hours", dry_run=False)
    full = table.vacuum(dry_run=False)  # the table's retention: nothing young goes
    assert not full.files
    lite = table.vacuum(
        retention="0 hours", dry_run=False, lite=True, enforce_retention_duration=False
    )
    assert set(lite.files) == tombstoned  # expired tombstones only
    assert all(path.exists() for path in in_flight)

    gate.open()
    job.result()
    latest = table.version()
    assert_same_as_delta_spark(spark, uri, latest)
    assert sorted(r["id"] for r in table.to_arrow().to_pylist()) == [100, 200, 201, 202, 203]


def test_vacuum_lite_dry_run_lists_what_delta_spark_lists(delta: Any, tmp_path: Path) -> None:
    """Our lite dry run and delta-spark's ``VACUUM ... LITE DRY RUN`` list the same
    files, the expired tombstones' files already gone from disk included: neither
    looks at the files (delta-spark takes its candidates from the commits alone)."""
    from raydelta.storage.cleanup.vacuum import vacuum

    spark = delta
    uri = str(tmp_path / "t")
    spark.sql(
        f"CREATE TABLE delta.`{uri}` (id BIGINT, part STRING) USING delta PARTITIONED BY (part)"
    )
    for first in (0, 10, 20):
        _append(spark, uri, first)
    before = {r.path for r in raydelta.open_table(uri).snapshot().add_files()}
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE id < 15")  # whole files: tombstones
    tombstoned = sorted(before - {r.path for r in raydelta.open_table(uri).snapshot().add_files()})
    assert len(tombstoned) >= 2
    gone = tombstoned[::2]
    for name in gone:
        Path(uri, name).unlink()

    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        rows = spark.sql(f"VACUUM delta.`{uri}` LITE RETAIN 0 HOURS DRY RUN").collect()
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    root = Path(uri).resolve()
    theirs = {str(Path(r.path.removeprefix("file:")).resolve().relative_to(root)) for r in rows}
    ours = vacuum(uri, retention_hours=0, force=True, lite=True, dry_run=True)
    assert set(ours.files) == theirs == set(tombstoned)
    real = vacuum(uri, retention_hours=0, force=True, lite=True)
    assert real.files == tombstoned[1::2]  # a real run reports what it deleted
