"""Issue 31: delta-spark keeps reading a local table raydelta maintains.

delta-spark writes a local table through Hadoop's ``LocalFileSystem``, which
keeps a checksum file (``.<name>.crc``) beside every file it writes and
verifies it on every read. raydelta used to replace files under names
delta-spark had written (its classic checkpoint of a version delta-spark
had checkpointed, ``_last_checkpoint``) and to delete files without their
checksum files: delta-spark's next read of those files failed with
``ChecksumException`` (for ``_last_checkpoint``: three one-second retries,
then a listing), while every engine that ignores the checksum files read
the table fine.

The scenario, for classic, multi-part and V2 tables and delta-spark
checkpoint intervals 1, 2 and 10: delta-spark appends in a loop while
raydelta checkpoints on demand and by policy, cleans up metadata and
vacuums; then raydelta checkpoints the very version delta-spark has just
checkpointed, vacuums for real (its own commits, which its policy
checkpoints), cleans up history and checkpoints again over delta-spark's
``_last_checkpoint``. Afterwards delta-spark appends, reads the latest
version and time-travels to every retained version with the right row
counts (from the commits' own operation metrics), and so do deltalake and
raydelta; Hadoop itself reads every file of the log that has a checksum
file (verifying it), no checksum file disagrees with its file and none is
left whose file is gone. Checked on a local ext4 disk (Linux), through
Hadoop 3.5's ``LocalFileSystem``; HDFS-style paths are out of scope.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import ray

import raydelta
from tests.hadoop_crc import disagreeing_crcs, orphan_crcs
from tests.spark_delta.delta_spark_view import Background, spark_rows_at

deltalake = pytest.importorskip("deltalake")

pytestmark = pytest.mark.spark

PART_SIZE = "spark.databricks.delta.checkpoint.partSize"
"""delta-spark writes multi-part checkpoints of this many actions per part when set."""
ROW_CHANGES = {"WRITE": "numOutputRows", "DELETE": "numDeletedRows"}
NO_ROW_CHANGE = {"CREATE TABLE", "VACUUM START", "VACUUM END"}


def _append(spark: Any, uri: str, first: int) -> None:
    spark.range(first, first + 2, 1, 1).write.format("delta").mode("append").save(uri)


def _spark_version(spark: Any, uri: str) -> int:
    log = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, uri)
    none = spark._jvm.scala.Option.empty()
    return int(log.update(False, none, none).version())


def _fresh(spark: Any) -> None:
    """A new delta-spark reader: nothing cached, the snapshot loaded from
    ``_last_checkpoint`` and the checkpoint it names."""
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()


def _row_change(log: Path, version: int) -> int:
    """Rows a commit added (or deleted), from its ``commitInfo`` alone."""
    for line in (log / f"{version:020d}.json").read_text().splitlines():
        info = json.loads(line).get("commitInfo")
        if info is not None:
            operation = info.get("operation")
            if operation in ROW_CHANGES:
                change = int(info["operationMetrics"][ROW_CHANGES[operation]])
                return -change if operation == "DELETE" else change
            assert operation in NO_ROW_CHANGE, operation
            return 0
    raise AssertionError(f"commit {version} has no commitInfo")


def _deltalake_count(uri: str, version: int) -> int:
    """Rows deltalake reads at ``version`` (through DataFusion: its pyarrow reader
    refuses ``v2Checkpoint`` tables)."""
    table = deltalake.DeltaTable(uri, version=version)
    query = deltalake.QueryBuilder().register("t", table).execute("select count(*) as n from t")
    count: int = pa.table(query.read_all()).column("n")[0].as_py()
    return count


def _hadoop_reads_every_checksummed_file(spark: Any, root: Path) -> int:
    """Read, through Hadoop's checksumming local file system, every file under
    ``root`` that has a checksum file: a disagreeing one raises ChecksumException."""
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    buffer = spark.sparkContext._gateway.new_array(jvm.byte, 1 << 16)
    checksumming = jvm.java.lang.Class.forName("org.apache.hadoop.fs.ChecksumFileSystem")
    read = 0
    for directory, _, names in os.walk(root):
        for name in names:
            if not (name.startswith(".") and name.endswith(".crc")):
                continue
            target = Path(directory, name[1 : -len(".crc")])
            if not target.is_file():
                continue
            path = jvm.org.apache.hadoop.fs.Path(target.as_uri())
            fs = path.getFileSystem(conf)
            assert checksumming.isInstance(fs), fs.getClass().getName()  # it verifies
            stream = fs.open(path)
            try:
                while stream.read(buffer) >= 0:
                    pass
            finally:
                stream.close()
            read += 1
    return read


@pytest.fixture
def part_size(delta: Any) -> Iterator[Any]:
    """``set(n)`` makes the session's delta-spark write multi-part checkpoints;
    unset again at teardown (the session is shared)."""

    def set_part_size(actions: int) -> None:
        delta.conf.set(PART_SIZE, str(actions))

    yield set_part_size
    delta.conf.unset(PART_SIZE)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("layout", "interval"),
    # each layout and each interval once (the whole grid costs twice the CI time for
    # no new path): classic at 10 is the run the issue filed, and at 1 delta-spark
    # checkpoints every version while raydelta's policy checkpoints its own commits
    [("classic", 10), ("classic", 1), ("multipart", 2), ("v2", 1)],
)
def test_delta_spark_reads_every_version_of_a_table_we_maintain(
    delta: Any, part_size: Any, tmp_path: Path, layout: str, interval: int
) -> None:
    spark = delta
    uri = str(tmp_path / "t")
    root, log = Path(uri), Path(uri, "_delta_log")
    properties = f"'delta.checkpointInterval'='{interval}'"
    if layout == "v2":
        properties += ", 'delta.checkpointPolicy'='v2'"
    if layout == "multipart":
        part_size(2)
    kind = "auto" if layout == "v2" else "classic"
    spark.sql(f"CREATE TABLE delta.`{uri}` (id BIGINT) USING delta TBLPROPERTIES ({properties})")
    _append(spark, uri, 0)
    _append(spark, uri, 10)
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE id < 2")  # v3: tombstones v1's file
    table = raydelta.open_table(uri)
    assert table.checkpoint_actor is not None and table.cleanup_actor is not None  # policies on

    # delta-spark appends up to a version it checkpoints (a multiple of the interval)
    # while raydelta maintains the table: every raydelta call here only reads or
    # checkpoints, so every version is delta-spark's
    target = max(6, interval)
    target += -target % interval

    def appends() -> None:
        first = 20
        while _spark_version(spark, uri) < target:
            _append(spark, uri, first)
            first += 10

    writing = Background(appends)
    seen = table.version()
    while writing.thread.is_alive():
        now = table.version()  # the TableActor picks up delta-spark's commits: policy events
        if now == seen:
            time.sleep(0.1)
            continue
        seen = now
        table.checkpoint(kind=kind)
        table.cleanup_metadata()
        table.vacuum(lite=True)  # a dry run
    writing.result()
    assert table.version() == target
    spark_checkpoint = {
        "classic": f"{target:020d}.checkpoint.parquet",
        "multipart": f"{target:020d}.checkpoint.0000000001.",
        "v2": f"{target:020d}.checkpoint.",
    }[layout]
    assert any(p.name.startswith(spark_checkpoint) for p in log.iterdir())

    # the collision of the issue: raydelta checkpoints what delta-spark just checkpointed
    summary = table.checkpoint(kind=kind)
    assert summary.version == target
    if layout == "classic":  # delta-spark's, and it is left alone
        assert summary.skipped is not None and not summary.files_written
    elif layout == "v2":  # UUID-named: never the same name
        assert summary.skipped is None
    # real VACUUMs commit (VACUUM START / END): raydelta's own versions, which its
    # policy checkpoints at intervals 1 and 2, over delta-spark's _last_checkpoint
    lite = table.vacuum(
        retention="0 hours", lite=True, dry_run=False, enforce_retention_duration=False
    )
    assert len(lite.files) == 1 and not lite.files[0].endswith(".crc")
    rows_before = {v: _row_change(log, v) for v in range(table.version() + 1)}

    then = time.time() - 3 * 24 * 3600  # without in-commit timestamps, a commit's time
    for version in range(target + 1):  # is its file's modification time
        os.utime(log / f"{version:020d}.json", (then, then))
    cleanup = table.cleanup_metadata(retention="1 day")
    assert cleanup.kept_checkpoint_version == target
    assert all(not Path(name).name.startswith(".") for name in cleanup.deleted)
    full = table.vacuum(retention="0 hours", dry_run=False, enforce_retention_duration=False)
    assert not any(Path(name).name.startswith(".") for name in full.files)
    # a raydelta commit checkpointed (on demand, or already by policy): delta-spark's
    # _last_checkpoint (and its checksum file) replaced by ours
    again = table.checkpoint(kind=kind)
    assert again.version == table.version() > target
    assert not (log / "._last_checkpoint.crc").exists()
    assert _hadoop_reads_every_checksummed_file(spark, root) > 0
    assert disagreeing_crcs(root) == []
    assert ray.get(table.checkpoint_actor.status.remote())["errors"] == []

    _fresh(spark)
    _append(spark, uri, 1000)  # the append the issue saw fail
    latest = table.version()
    assert latest == again.version + 1
    changes = {v: _row_change(log, v) for v in range(max(rows_before) + 1, latest + 1)}
    changes.update(rows_before)
    expected = {v: sum(changes[u] for u in range(v + 1)) for v in range(target, latest + 1)}

    _fresh(spark)
    assert spark.read.format("delta").load(uri).count() == expected[latest]
    theirs = spark_rows_at(spark, uri, list(expected))  # time travel to every retained version
    assert {v: len(rows) for v, rows in theirs.items()} == expected
    assert {v: table.to_arrow(version=v).num_rows for v in expected} == expected
    assert {v: _deltalake_count(uri, v) for v in expected} == expected
    with pytest.raises(raydelta.VersionNotFoundError):
        raydelta.load_snapshot(uri, version=target - 1)

    assert _hadoop_reads_every_checksummed_file(spark, root) > 0
    assert disagreeing_crcs(root) == []
    assert orphan_crcs(root) == []
