"""What delta-spark itself reads from a table, for comparison with raydelta.

Every expectation in ``tests/spark_delta`` is derived from delta-spark's own
reading of the table (never written by hand): its ``Snapshot`` at a version
(through py4j: ``DeltaLog.getSnapshotAt``: live files with deletion vectors
and row-tracking fields, domain metadata, the version's timestamp, which is
the in-commit timestamp when ICT is on) and its DataFrame reads
(``versionAsOf``).

:class:`Gate` makes an interleaving of a Spark job and a raydelta commit
deterministic: a Python UDF inside the Spark job blocks until the test opens
the gate, so the test knows the job has read the table and not yet committed.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

import raydelta
from raydelta.storage.history import load_history

FILE_FIELDS = (
    "path",
    "partitionValues",
    "size",
    "deletionVector",
    "baseRowId",
    "defaultRowCommitVersion",
)


def _none(spark: Any) -> Any:
    return spark._jvm.scala.Option.empty()


def jvm_delta_log(spark: Any, uri: str) -> Any:
    return spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, uri)


def jvm_snapshot(spark: Any, uri: str, version: int | None = None) -> Any:
    """delta-spark's ``Snapshot`` of the table (latest after an update, or at ``version``)."""
    log = jvm_delta_log(spark, uri)
    none = _none(spark)
    if version is None:
        return log.update(False, none, none)
    return log.getSnapshotAt(version, none, none, False)


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if v is not None}
    return value


def spark_files(snapshot: Any) -> dict[str, dict[str, Any]]:
    """Live files of a delta-spark snapshot, keyed by path (file fields only)."""
    out = {}
    for text in snapshot.allFiles().toJSON().collectAsList():
        row = json.loads(text)
        out[row["path"]] = _clean({k: row.get(k) for k in FILE_FIELDS})
    return out


def our_files(snapshot: raydelta.Snapshot) -> dict[str, dict[str, Any]]:
    out = {}
    for row in snapshot.files.to_pylist():
        row = dict(row)
        row["partitionValues"] = dict(row["partitionValues"] or [])
        out[row["path"]] = _clean({k: row.get(k) for k in FILE_FIELDS})
    return out


def spark_domains(spark: Any, snapshot: Any) -> dict[str, str]:
    found = spark._jvm.scala.jdk.javaapi.CollectionConverters.asJava(snapshot.domainMetadata())
    return {d.domain(): d.configuration() for d in found if not d.removed()}


def spark_rows(spark: Any, uri: str, version: int | None = None) -> list[tuple[Any, ...]]:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    frame = reader.load(uri)
    columns = sorted(frame.columns)
    return sorted(tuple(row[c] for c in columns) for row in frame.collect())


VERSION_COLUMN = "__raydelta_test_version"


def _union_all(frames: Sequence[Any]) -> Any:
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def spark_rows_at(spark: Any, uri: str, versions: Sequence[int]) -> dict[int, list[Any]]:
    """:func:`spark_rows` of each version (``versionAsOf``), collected in one
    Spark job per distinct schema: the versions' reads are unioned, each row
    tagged with its version."""
    from pyspark.sql import functions as F

    groups: dict[str, list[Any]] = {}
    columns_of: dict[str, list[str]] = {}
    for version in versions:
        frame = spark.read.format("delta").option("versionAsOf", version).load(uri)
        columns = sorted(frame.columns)
        tagged = frame.select(*columns, F.lit(version).alias(VERSION_COLUMN))
        key = tagged.schema.simpleString()
        groups.setdefault(key, []).append(tagged)
        columns_of[key] = columns
    out: dict[int, list[Any]] = {version: [] for version in versions}
    for key, frames in groups.items():
        for row in _union_all(frames).collect():
            out[row[VERSION_COLUMN]].append(tuple(row[c] for c in columns_of[key]))
    return {version: sorted(rows) for version, rows in out.items()}


def spark_files_at(spark: Any, snapshots: Mapping[int, Any]) -> dict[int, dict[str, Any]]:
    """:func:`spark_files` of each snapshot, collected in one Spark job."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    frames = [
        DataFrame(snapshot.allFiles().toDF(), spark).withColumn(VERSION_COLUMN, F.lit(version))
        for version, snapshot in snapshots.items()
    ]
    out: dict[int, dict[str, Any]] = {version: {} for version in snapshots}
    for text in _union_all(frames)._jdf.toJSON().collectAsList():
        row = json.loads(text)
        files = out[row.pop(VERSION_COLUMN)]
        files[row["path"]] = _clean({k: row.get(k) for k in FILE_FIELDS})
    return out


def arrow_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    columns = sorted(table.column_names)
    return sorted(tuple(row[c] for c in columns) for row in table.to_pylist())


def assert_same_at_versions(
    spark: Any,
    uri: str,
    versions: Iterable[int],
    *,
    rows: bool = True,
    storage_options: dict[str, Any] | None = None,
) -> None:
    """At each of ``versions``, raydelta's snapshot (files, deletion vectors,
    row ids, domain metadata, timestamp) and rows equal delta-spark's
    (``rows=False``: the snapshot only, for types whose Arrow form differs
    from PySpark's, such as variant). delta-spark's files and rows of all the
    versions are collected in one Spark job each (per schema, for rows)."""
    wanted = list(versions)
    snapshots = {version: jvm_snapshot(spark, uri, version) for version in wanted}
    their_files = spark_files_at(spark, snapshots)
    for version in wanted:
        theirs = snapshots[version]
        ours = raydelta.load_snapshot(uri, version=version, storage_options=storage_options)
        assert ours.version == theirs.version() == version
        assert our_files(ours) == their_files[version], f"files differ at v{version}"
        domains = {d: m.configuration for d, m in ours.domains.items()}
        assert domains == spark_domains(spark, theirs), f"domains differ at v{version}"
        assert ours.timestamp == theirs.timestamp(), f"timestamp differs at v{version}"
    if rows:
        table = raydelta.open_table(uri, storage_options=storage_options)
        their_rows = spark_rows_at(spark, uri, wanted)
        for version in wanted:
            ours_rows = arrow_rows(table.to_arrow(version=version))
            assert ours_rows == their_rows[version], f"rows differ at v{version}"


def assert_same_as_delta_spark(spark: Any, uri: str, version: int, *, rows: bool = True) -> None:
    """:func:`assert_same_at_versions` at one version."""
    assert_same_at_versions(spark, uri, [version], rows=rows)


def assert_same_at_every_version(spark: Any, uri: str) -> int:
    latest = raydelta.load_snapshot(uri).version
    assert_same_at_versions(spark, uri, range(latest + 1))
    return latest


def commits_by_txn_id(uri: str) -> dict[str, list[int]]:
    """Every ``commitInfo.txnId`` of the log and the versions carrying it."""
    found: dict[str, list[int]] = {}
    for entry in load_history(uri):
        txn_id = (entry.commit_info or {}).get("txnId")
        if txn_id:
            found.setdefault(txn_id, []).append(entry.version)
    return found


def spark_history(spark: Any, uri: str) -> list[tuple[int, str, str]]:
    """``(version, operation, engineInfo)`` as delta-spark's DeltaTable.history reads them."""
    from delta.tables import DeltaTable

    rows = DeltaTable.forPath(spark, uri).history().select("version", "operation", "engineInfo")
    return sorted((r.version, r.operation, r.engineInfo or "") for r in rows.collect())


class Gate:
    """A Spark-side barrier: ``gate(x)`` in a Spark job returns True, but a
    call with a true ``x`` blocks until :meth:`open` (files in ``folder``
    carry the signal across Spark's Python worker processes)."""

    def __init__(self, spark: Any, folder: Path, name: str = "gate") -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.entered = folder / "entered"
        self.go = folder / "go"
        self.name = name
        entered, go = str(self.entered), str(self.go)

        def gate(block: Any) -> bool:
            import os
            import time

            if block and not os.path.exists(go):
                with open(entered, "a"):
                    pass
                deadline = time.monotonic() + 300
                while not os.path.exists(go) and time.monotonic() < deadline:
                    time.sleep(0.02)
            return True

        spark.udf.register(name, gate, "boolean")

    def wait_entered(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while not self.entered.exists():
            if time.monotonic() > deadline:
                raise TimeoutError("the Spark job never reached the gate")
            time.sleep(0.02)

    def open(self) -> None:
        self.go.touch()


class Background:
    """Run a Spark call in a thread; :meth:`result` re-raises its error."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.value = call()
            except BaseException as error:
                self.error = error

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def result(self, timeout: float = 300) -> Any:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise TimeoutError("the Spark call did not finish")
        if self.error is not None:
            raise self.error
        return self.value
