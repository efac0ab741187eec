"""Row tracking through DML: with ``delta.enableRowTracking``, DELETE, UPDATE,
MERGE and OPTIMIZE keep every surviving row's stable row id (copied and
updated rows) and every copied row's stable row commit version, as the spec
asks and delta-spark does; updated rows take the DML's commit version,
inserted rows fresh ids. Checked with a reader written here from the spec
(materialized column, else ``baseRowId + position``) and with delta-spark's
``_metadata.row_id`` / ``_metadata.row_commit_version`` (spark tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import raydelta
from raydelta.protocol.errors import InvalidTableError
from raydelta.protocol.file_actions import row_to_add
from raydelta.storage.data.deletion_vectors import read_deleted_rows

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("x", pa.int64())])
TRACKING = {"delta.enableRowTracking": "true"}
DV = {**TRACKING, "delta.enableDeletionVectors": "true"}


def _batch(ids: list[int]) -> pa.Table:
    return pa.table(
        {"id": ids, "part": ["a" if i % 2 else "b" for i in ids], "x": [i * 3 for i in ids]},
        schema=SCHEMA,
    )


def stable_values(table: raydelta.Table) -> dict[int, tuple[int, int, int]]:
    """id -> (stable row id, stable row commit version, x), read per the spec."""
    snapshot = table.snapshot()
    config = snapshot.metadata.configuration
    id_column = config["delta.rowTracking.materializedRowIdColumnName"]
    version_column = config["delta.rowTracking.materializedRowCommitVersionColumnName"]
    out: dict[int, tuple[int, int, int]] = {}
    for row in snapshot.files.to_pylist():
        add = row_to_add(row)
        data = pq.read_table(str(Path(table.uri.removeprefix("file://")) / add.path))
        count = data.num_rows
        ids = data.column("id").to_pylist()
        xs = data.column("x").to_pylist()
        materialized_ids = (
            data.column(id_column).to_pylist() if id_column in data.column_names else [None] * count
        )
        materialized_versions = (
            data.column(version_column).to_pylist()
            if version_column in data.column_names
            else [None] * count
        )
        deleted = set()
        if add.deletion_vector is not None:
            deleted = set(read_deleted_rows(add.deletion_vector, table.uri))
        assert add.base_row_id is not None and add.default_row_commit_version is not None
        for position in range(count):
            if position in deleted:
                continue
            row_id = materialized_ids[position]
            version = materialized_versions[position]
            assert ids[position] not in out
            out[ids[position]] = (
                add.base_row_id + position if row_id is None else row_id,
                add.default_row_commit_version if version is None else version,
                xs[position],
            )
    assert len({v[0] for v in out.values()}) == len(out), "stable row ids are not unique"
    return out


def _last_tags(table: raydelta.Table) -> dict[str, str]:
    log = Path(table.uri.removeprefix("file://")) / "_delta_log" / f"{table.version():020d}.json"
    for line in log.read_text().splitlines():
        action = json.loads(line)
        if "commitInfo" in action:
            return dict(action["commitInfo"].get("tags") or {})
    raise AssertionError("no commitInfo")


def _check(
    before: dict[int, tuple[int, int, int]],
    after: dict[int, tuple[int, int, int]],
    *,
    version: int,
    updated: set[int],
    deleted: set[int] = frozenset(),  # type: ignore[assignment]
    inserted: set[int] = frozenset(),  # type: ignore[assignment]
) -> None:
    assert set(after) == (set(before) - deleted) | inserted
    for key, (row_id, commit_version, _) in after.items():
        if key in inserted:
            assert row_id not in {v[0] for v in before.values()}
            assert commit_version == version
        elif key in updated:
            assert (row_id, commit_version) == (before[key][0], version)
        else:
            assert (row_id, commit_version) == before[key][:2]


@pytest.mark.parametrize("properties", [TRACKING, DV], ids=["copy_on_write", "dv"])
@pytest.mark.parametrize("partitioned", [False, True], ids=["flat", "partitioned"])
def test_dml_preserves_stable_row_ids(
    ray_cluster: Any, tmp_path: Path, properties: dict[str, str], partitioned: bool
) -> None:
    table = raydelta.create_table(
        str(tmp_path / "t"),
        SCHEMA,
        partition_by=["part"] if partitioned else [],
        properties=properties,
    )
    for start in (0, 10, 20):
        table.append(_batch(list(range(start, start + 10))))
    before = stable_values(table)

    table.update({"x": "x + 1000"}, predicate="id % 4 = 1")
    after = stable_values(table)
    _check(before, after, version=table.version(), updated={i for i in before if i % 4 == 1})
    assert _last_tags(table)["delta.rowTracking.preserved"] == "true"

    before = after
    table.delete("id % 5 = 2")
    after = stable_values(table)
    _check(before, after, version=table.version(), updated=set(), deleted={2, 7, 12, 17, 22, 27})

    before = after
    source = _batch([3, 8, 40, 41])
    (
        table.merge(source, "target.id = source.id")
        .when_matched_update({"x": "source.x + 1"})
        .when_not_matched_insert_all()
        .execute()
    )
    after = stable_values(table)
    _check(before, after, version=table.version(), updated={3, 8}, inserted={40, 41})
    assert after[3][2] == 10 and after[41][2] == 123
    assert _last_tags(table)["delta.rowTracking.preserved"] == "true"

    before = after
    table.optimize.compact()
    after = stable_values(table)
    _check(before, after, version=table.version(), updated=set())
    assert {k: v[2] for k, v in after.items()} == {k: v[2] for k, v in before.items()}


def test_rewrite_refused_without_materialized_column_names(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """Row tracking enabled but no materialized column names in the metadata:
    ids cannot be preserved, so a rewriting DML refuses and leaves the table."""
    table = raydelta.create_table(str(tmp_path / "t"), SCHEMA, properties=TRACKING)
    table.append(_batch(list(range(6))))
    snapshot = table.snapshot()
    configuration = {
        k: v
        for k, v in snapshot.metadata.configuration.items()
        if not k.startswith("delta.rowTracking.materialized")
    }
    txn = table.transaction()
    txn.replace_metadata(snapshot.metadata.model_copy(update={"configuration": configuration}))
    txn.commit(operation="SET TBLPROPERTIES")
    version = table.version()
    with pytest.raises(InvalidTableError, match="materialized"):
        table.update({"x": "x + 1"}, predicate="id = 1")
    assert table.version() == version
    assert sorted(table.to_arrow().column("x").to_pylist()) == [i * 3 for i in range(6)]


# --- delta-spark reads the same ids --------------------------------------------------


def _spark_ids(spark: Any, uri: str) -> dict[int, tuple[int, int, int]]:
    frame = spark.read.format("delta").load(uri)
    rows = frame.select("id", "x", "_metadata.row_id", "_metadata.row_commit_version").collect()
    return {r["id"]: (r["row_id"], r["row_commit_version"], r["x"]) for r in rows}


@pytest.mark.spark
@pytest.mark.parametrize("properties", [TRACKING, DV], ids=["copy_on_write", "dv"])
def test_delta_spark_sees_row_ids_kept_by_our_update_and_merge(
    ray_cluster: Any, spark: Any, tmp_path: Path, properties: dict[str, str]
) -> None:
    table = raydelta.create_table(str(tmp_path / "t"), SCHEMA, properties=properties)
    for start in (0, 10):
        table.append(_batch(list(range(start, start + 10))))
    before = _spark_ids(spark, table.uri)
    assert before == stable_values(table)

    table.update({"x": "x + 1"}, predicate="id % 3 = 0")
    after = _spark_ids(spark, table.uri)
    _check(before, after, version=table.version(), updated={i for i in before if i % 3 == 0})
    assert after == stable_values(table)

    before = after
    source = _batch([4, 5, 30])
    (
        table.merge(source, "target.id = source.id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    after = _spark_ids(spark, table.uri)
    _check(before, after, version=table.version(), updated={4, 5}, inserted={30})
    assert after == stable_values(table)


@pytest.mark.spark
def test_we_keep_row_ids_delta_spark_materialized(
    ray_cluster: Any, spark: Any, tmp_path: Path
) -> None:
    """delta-spark's UPDATE materializes ids; our UPDATE and OPTIMIZE of the
    same rows keep them, and delta-spark reads them back."""
    uri = str(tmp_path / "theirs")
    spark.createDataFrame(_batch(list(range(12))).to_pandas()).coalesce(2).write.format(
        "delta"
    ).option("delta.enableRowTracking", "true").save(uri)
    spark.sql(f"UPDATE delta.`{uri}` SET x = x + 500 WHERE id % 2 = 0")
    before = _spark_ids(spark, uri)
    table = raydelta.open_table(uri)
    assert stable_values(table) == before
    table.update({"x": "x + 1"}, predicate="id < 6")
    after = _spark_ids(spark, uri)
    _check(before, after, version=table.version(), updated=set(range(6)))
    before = after
    table.optimize.compact()
    after = _spark_ids(spark, uri)
    _check(before, after, version=table.version(), updated=set())
    assert pc.sum(pa.array([v[2] for v in after.values()])).as_py() == sum(
        v[2] for v in before.values()
    )
