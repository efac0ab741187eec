"""Tables delta-spark creates with a table feature: raydelta reads them and
appends to them, delta-spark reads back what raydelta wrote.

One table per feature (column mapping, deletion vectors, row tracking,
liquid clustering, CHECK constraints, generated and identity columns, type
widening, variant, in-commit timestamps, change data feed). For each: Spark
creates the table and writes (and, where the feature needs it, deletes or
alters); raydelta's snapshot and rows equal delta-spark's; ``Table.append``
honours the feature's data rules (or refuses with a typed error and writes
nothing); delta-spark's snapshot and rows equal raydelta's after the append;
then the feature's own check, its expectation read from delta-spark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raydelta
from raydelta.protocol.errors import DeltaInvariantViolationException
from raydelta.protocol.schema import parse_schema
from tests.spark_delta.delta_spark_view import (
    assert_same_as_delta_spark,
    assert_same_at_versions,
    jvm_snapshot,
    our_files,
    spark_files,
)

pytestmark = pytest.mark.spark

Check = Callable[[Any, str, raydelta.Table, int, int], None]


@dataclass(frozen=True)
class Feature:
    columns: str
    properties: dict[str, str] = field(default_factory=dict)
    spark_sql: tuple[str, ...] = ()
    ours: pa.Table | None = None
    check: Check | None = None
    refused: type[Exception] | None = None
    clause: str = ""
    compare_rows: bool = True


def _identity_mark(snapshot: raydelta.Snapshot, column: str) -> int | None:
    schema = parse_schema(snapshot.metadata.schema_string)
    found = schema.get(column)
    assert found is not None
    mark = found.metadata.get("delta.identity.highWaterMark")
    return None if mark is None else int(mark)


def check_column_mapping(spark: Any, uri: str, table: raydelta.Table, before: int, v: int) -> None:
    # the renamed column holds our rows under its new name, for delta-spark too
    labels = {r.label for r in spark.read.format("delta").load(uri).collect()}
    assert {"ours-1", "ours-2"} <= labels


def check_row_tracking(spark: Any, uri: str, table: raydelta.Table, before: int, v: int) -> None:
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (100, 'after')")
    rows = spark.read.format("delta").load(uri).select("id", "_metadata.row_id").collect()
    ids = [r.row_id for r in rows]
    assert len(ids) == len(set(ids))  # no row id handed out twice across both engines
    ours = {r.id: r.row_id for r in rows if r.id in (7, 8)}
    [add] = [a for a in table.snapshot(version=v).add_files() if a.default_row_commit_version == v]
    assert sorted(ours.values()) == [add.base_row_id, (add.base_row_id or 0) + 1]


def check_clustering(spark: Any, uri: str, table: raydelta.Table, before: int, v: int) -> None:
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{uri}`").collect()[0]
    assert list(detail.clusteringColumns) == ["id"]
    assert "delta.clustering" in table.snapshot().domains


def check_constraint(spark: Any, uri: str, table: raydelta.Table, before: int, v: int) -> None:
    files = {p for p in Path(uri).rglob("*.parquet")}
    with pytest.raises(DeltaInvariantViolationException):
        table.append(pa.table({"id": pa.array([-1], pa.int64()), "name": ["bad"]}))
    assert table.version() == v
    assert {p for p in Path(uri).rglob("*.parquet")} == files  # nothing written


def check_generated(spark: Any, uri: str, table: raydelta.Table, before: int, v: int) -> None:
    rows = spark.read.format("delta").load(uri).collect()
    assert all(r.doubled == r.id * 2 for r in rows)
    with pytest.raises(DeltaInvariantViolationException):
        table.append(
            pa.table({"id": pa.array([9], pa.int64()), "doubled": pa.array([1], pa.int64())})
        )
    assert table.version() == v


def check_identity(spark: Any, uri: str, table: raydelta.Table, before: int, v: int) -> None:
    mark_before = _identity_mark(table.snapshot(version=before), "id")
    assert mark_before is not None  # delta-spark's inserts moved it
    after = spark.read.format("delta").load(uri).collect()
    ours = sorted(r.id for r in after if r.name.startswith("ours"))
    assert len(ours) == 2 and min(ours) > mark_before
    assert _identity_mark(table.snapshot(version=v), "id") == max(ours)
    spark.sql(f"INSERT INTO delta.`{uri}` (name) VALUES ('spark-after')")
    last = [r.id for r in spark.read.format("delta").load(uri).collect() if r.name == "spark-after"]
    assert last[0] > max(ours)  # delta-spark continues above the mark we wrote
    everything = [r.id for r in spark.read.format("delta").load(uri).collect()]
    assert len(everything) == len(set(everything))


def check_widened(spark: Any, uri: str, table: raydelta.Table, before: int, v: int) -> None:
    values = {r.value for r in spark.read.format("delta").load(uri).collect()}
    assert 2**40 in values


def check_ict(spark: Any, uri: str, table: raydelta.Table, before: int, v: int) -> None:
    ours = jvm_snapshot(spark, uri, v).timestamp()
    assert ours > jvm_snapshot(spark, uri, before).timestamp()
    info = table.history(limit=1)[0].commit_info or {}
    assert info["inCommitTimestamp"] == ours


def check_cdf(spark: Any, uri: str, table: raydelta.Table, before: int, v: int) -> None:
    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", v)
        .load(uri)
        .collect()
    )
    assert sorted((r.id, r._change_type, r._commit_version) for r in changes) == [
        (7, "insert", v),
        (8, "insert", v),
    ]


def _ours(**columns: Any) -> pa.Table:
    return pa.table(columns)


ID_NAME = "id BIGINT, name STRING"
OURS = _ours(id=pa.array([7, 8], pa.int64()), name=["ours-1", "ours-2"])

FEATURES: dict[str, Feature] = {
    "column_mapping": Feature(
        ID_NAME,
        {"delta.columnMapping.mode": "name"},
        ("INSERT INTO {t} VALUES (1, 'a')", "ALTER TABLE {t} RENAME COLUMN name TO label"),
        ours=_ours(id=pa.array([7, 8], pa.int64()), label=["ours-1", "ours-2"]),
        check=check_column_mapping,
    ),
    "deletion_vectors": Feature(
        ID_NAME,
        {"delta.enableDeletionVectors": "true"},
        ("INSERT INTO {t} VALUES (1, 'a'), (2, 'b'), (3, 'c')", "DELETE FROM {t} WHERE id = 2"),
        ours=OURS,
    ),
    "row_tracking": Feature(
        ID_NAME,
        {"delta.enableRowTracking": "true"},
        ("INSERT INTO {t} VALUES (1, 'a'), (2, 'b')",),
        ours=OURS,
        check=check_row_tracking,
    ),
    "liquid_clustering": Feature(
        ID_NAME,
        clause="CLUSTER BY (id)",
        spark_sql=("INSERT INTO {t} VALUES (1, 'a')",),
        ours=OURS,
        check=check_clustering,
    ),
    "check_constraints": Feature(
        ID_NAME,
        spark_sql=(
            "INSERT INTO {t} VALUES (1, 'a')",
            "ALTER TABLE {t} ADD CONSTRAINT positive CHECK (id > 0)",
        ),
        ours=OURS,
        check=check_constraint,
    ),
    "generated_columns": Feature(
        "id BIGINT, doubled BIGINT GENERATED ALWAYS AS (id * 2)",
        spark_sql=("INSERT INTO {t} (id) VALUES (1)",),
        ours=_ours(id=pa.array([7, 8], pa.int64())),
        check=check_generated,
    ),
    "identity_columns": Feature(
        "id BIGINT GENERATED ALWAYS AS IDENTITY (START WITH 1 INCREMENT BY 1), name STRING",
        spark_sql=("INSERT INTO {t} (name) VALUES ('spark-1'), ('spark-2')",),
        ours=_ours(name=["ours-1", "ours-2"]),
        check=check_identity,
    ),
    "type_widening": Feature(
        "id BIGINT, value INT",
        {"delta.enableTypeWidening": "true"},
        ("INSERT INTO {t} VALUES (1, 5)", "ALTER TABLE {t} ALTER COLUMN value TYPE BIGINT"),
        ours=_ours(id=pa.array([7, 8], pa.int64()), value=pa.array([2**40, 3], pa.int64())),
        check=check_widened,
    ),
    "variant": Feature(
        "id BIGINT, v VARIANT",
        spark_sql=("INSERT INTO {t} SELECT 1, parse_json('{{\"a\": 1}}')",),
        ours=None,
        refused=raydelta.UnsupportedTableFeatureException,
        compare_rows=False,
    ),
    "in_commit_timestamps": Feature(
        ID_NAME,
        {"delta.enableInCommitTimestamps": "true"},
        ("INSERT INTO {t} VALUES (1, 'a')",),
        ours=OURS,
        check=check_ict,
    ),
    "change_data_feed": Feature(
        ID_NAME,
        {"delta.enableChangeDataFeed": "true"},
        ("INSERT INTO {t} VALUES (1, 'a')", "UPDATE {t} SET name = 'b' WHERE id = 1"),
        ours=OURS,
        check=check_cdf,
    ),
}


@pytest.mark.parametrize("name", sorted(FEATURES))
def test_feature_table_both_ways(delta: Any, tmp_path: Path, name: str) -> None:
    spark, feature = delta, FEATURES[name]
    uri = str(tmp_path / name)
    target = f"delta.`{uri}`"
    properties = ", ".join(f"'{k}'='{v}'" for k, v in feature.properties.items())
    spark.sql(
        f"CREATE TABLE {target} ({feature.columns}) USING delta {feature.clause} "
        + (f"TBLPROPERTIES ({properties})" if properties else "")
    )
    for statement in feature.spark_sql:
        spark.sql(statement.format(t=target))
    table = raydelta.open_table(uri)
    before = table.version()

    if feature.refused is not None:
        assert_same_as_delta_spark(spark, uri, before, rows=feature.compare_rows)
        files = set(Path(uri).rglob("*.parquet"))
        data = _ours(id=pa.array([7], pa.int64()), v=pa.array([b"x"], pa.binary()))
        with pytest.raises(feature.refused):
            table.append(data)
        assert table.version() == before
        assert set(Path(uri).rglob("*.parquet")) == files
        assert our_files(raydelta.load_snapshot(uri)) == spark_files(jvm_snapshot(spark, uri))
        return

    assert feature.ours is not None
    version = table.append(feature.ours)
    assert version == before + 1
    # delta-spark's table as raydelta read it (v before) and after our append,
    # compared in one pass (versions are immutable)
    assert_same_at_versions(spark, uri, (before, version), rows=feature.compare_rows)
    if feature.check is not None:
        feature.check(spark, uri, table, before, version)
