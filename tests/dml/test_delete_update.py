"""DELETE and UPDATE against rows computed in Python: with and without
deletion vectors and change data, partitioned or not, column mapping, SQL
and pyarrow predicates, Ray tasks, metrics in commitInfo, typed errors that
leave the table unchanged, peers (deltalake, duckdb) reading the results."""

from __future__ import annotations

import json
import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from raydelta.dml import stage_delete, stage_update
from raydelta.protocol.errors import (
    DeltaInvariantViolationException,
    InvalidArgumentError,
    InvalidExpressionError,
    NonDeterministicExpressionError,
)
from tests.dml.conftest import rows_of


def _files_on_disk(uri: str) -> set[str]:
    out = set()
    for root, _dirs, names in os.walk(uri):
        if "_delta_log" in root:
            continue
        out.update(os.path.join(root, n) for n in names)
    return out


def _last_commit_info(table: Any) -> dict[str, Any]:
    info = table.history(limit=1)[0].commit_info
    assert info is not None
    return info


@pytest.mark.parametrize(
    ("flavour", "partitioned"),
    [("plain", True), ("plain", False), ("dv", True), ("dv_cdf", False), ("mapped_dv_cdf", True)],
)
def test_delete_matches_python(make_table: Any, flavour: str, partitioned: bool) -> None:
    table, rows = make_table(flavour, partitioned=partitioned)
    before_files, before_records = _paths(table), _records(table)
    metrics = table.delete("x > 5 AND id % 2 = 0")
    expected = [r for r in rows if not (r["x"] > 5 and r["id"] % 2 == 0)]
    assert rows_of(table.to_arrow()) == expected
    assert metrics.num_deleted_rows == len(rows) - len(expected)
    info = _last_commit_info(table)
    assert info["operation"] == "DELETE"
    assert json.loads(info["operationParameters"]["predicate"]) == ["x > 5 AND id % 2 = 0"]
    op = info["operationMetrics"]
    assert op["numDeletedRows"] == str(metrics.num_deleted_rows)
    assert op["numRemovedFiles"] == str(metrics.num_removed_files)
    assert "executionTimeMs" in op
    removed = before_files - _paths(table)
    rows_in_removed = sum(before_records[k] for k in removed)
    assert metrics.num_removed_files == len(removed)
    if "dv" in flavour:
        assert metrics.num_copied_rows == 0
        with_dv = [r for r in table.snapshot().files.to_pylist() if r["deletionVector"]]
        assert metrics.num_deletion_vectors_added == len(with_dv) > 0
    else:
        assert metrics.num_deletion_vectors_added == 0
        assert metrics.num_copied_rows + metrics.num_deleted_rows == rows_in_removed


def _key(row: dict[str, Any]) -> tuple[str, str]:
    return row["path"], json.dumps(row["deletionVector"], sort_keys=True)


def _paths(table: Any) -> set[tuple[str, str]]:
    """The logical files: (path, deletion vector)."""
    return {_key(r) for r in table.snapshot().files.to_pylist()}


def _records(table: Any) -> dict[tuple[str, str], int]:
    files = table.snapshot().files.to_pylist()
    return {_key(f): json.loads(f["stats"])["numRecords"] for f in files}


@pytest.mark.parametrize("flavour", ["plain", "dv", "mapped_dv_cdf"])
def test_update_matches_python(make_table: Any, flavour: str) -> None:
    table, rows = make_table(flavour)
    metrics = table.update({"x": "x * 100 + id"}, predicate="part = 'a' AND x < 4")
    expected = [
        {**r, "x": r["x"] * 100 + r["id"]} if r["part"] == "a" and r["x"] < 4 else r for r in rows
    ]
    assert rows_of(table.to_arrow()) == expected
    changed = sum(1 for r in rows if r["part"] == "a" and r["x"] < 4)
    assert metrics.num_updated_rows == changed
    info = _last_commit_info(table)
    assert info["operation"] == "UPDATE"
    assert info["operationMetrics"]["numUpdatedRows"] == str(changed)


def test_update_new_values_and_pyarrow_predicate(make_table: Any) -> None:
    table, rows = make_table("dv", partitioned=False)
    metrics = table.update(new_values={"part": "z"}, predicate=pc.field("id") >= 25)
    expected = [{**r, "part": "z"} if r["id"] >= 25 else r for r in rows]
    assert rows_of(table.to_arrow()) == expected
    assert metrics.num_updated_rows == 5
    table.delete(pc.field("x") == 0)
    expected = [r for r in expected if r["x"] != 0]
    assert rows_of(table.to_arrow()) == expected


def test_update_moves_rows_between_partitions(make_table: Any) -> None:
    table, rows = make_table("plain")
    table.update({"part": "'c'"}, predicate="id < 4")
    expected = [{**r, "part": "c"} if r["id"] < 4 else r for r in rows]
    assert rows_of(table.to_arrow()) == expected
    assert rows_of(table.to_arrow(filter="part = 'c'")) == [r for r in expected if r["part"] == "c"]


def test_delete_everything_and_partition_only_delete_remove_whole_files(make_table: Any) -> None:
    table, rows = make_table("dv")
    before = table.snapshot().num_files
    metrics = table.delete("part = 'b'")
    assert metrics.num_deleted_rows == sum(1 for r in rows if r["part"] == "b")
    assert metrics.num_added_files == 0 and metrics.num_removed_files < before
    metrics = table.delete()
    assert metrics.num_deleted_rows == sum(1 for r in rows if r["part"] == "a")
    assert table.to_arrow().num_rows == 0


def test_no_matching_row_commits_nothing(make_table: Any) -> None:
    table, _rows = make_table("plain")
    version = table.version()
    metrics = table.delete("x > 1000")
    assert metrics.num_deleted_rows == 0 and table.version() == version


@pytest.mark.parametrize("flavour", ["plain", "dv_cdf"])
def test_files_are_rewritten_by_ray_tasks(make_table: Any, flavour: str) -> None:
    table, rows = make_table(flavour, partitioned=False)
    staged = stage_update(table, {"x": "x + 1"}, predicate="id % 5 = 0", tasks=3)
    assert len(staged.results) == 3  # one result per Ray task
    staged.commit()
    expected = [{**r, "x": r["x"] + 1} if r["id"] % 5 == 0 else r for r in rows]
    assert rows_of(table.to_arrow()) == expected


def test_deletion_vectors_merge_with_existing_ones(make_table: Any) -> None:
    table, rows = make_table("dv", partitioned=False)
    table.delete("id = 3")
    m = table.delete("id = 4")
    assert m.num_deletion_vectors_updated == 1 and m.num_deletion_vectors_added == 0
    table.update({"x": "-1"}, predicate="id = 5")
    expected = [{**r, "x": -1} if r["id"] == 5 else r for r in rows if r["id"] not in (3, 4)]
    assert rows_of(table.to_arrow()) == expected


BAD_INPUT = [
    ("delete", {"predicate": "nope > 1"}, InvalidArgumentError),
    ("delete", {"predicate": "x > rand()"}, NonDeterministicExpressionError),
    ("delete", {"predicate": "x + 1"}, InvalidExpressionError),
    ("delete", {"predicate": 42}, InvalidArgumentError),
    ("update", {"updates": {"nope": "1"}}, InvalidArgumentError),
    ("update", {"updates": {"x": "uuid()"}}, NonDeterministicExpressionError),
    ("update", {"updates": {"x": "part"}}, InvalidExpressionError),
    ("update", {"new_values": {"x": "abc"}}, InvalidExpressionError),
    ("update", {}, InvalidArgumentError),
]


@pytest.mark.parametrize(("operation", "kwargs", "error"), BAD_INPUT)
def test_bad_input_is_refused_and_table_unchanged(
    make_table: Any, operation: str, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    table, rows = make_table("dv_cdf")
    version, files = table.version(), _files_on_disk(table.uri)
    with pytest.raises(error):
        getattr(table, operation)(**kwargs)
    assert table.version() == version
    assert _files_on_disk(table.uri) == files
    assert rows_of(table.to_arrow()) == rows


@pytest.mark.parametrize("properties", [{}, {"delta.enableDeletionVectors": "true"}])
def test_update_breaking_a_check_constraint_commits_nothing(
    ray_cluster: Any, tmp_path: Any, properties: dict[str, str]
) -> None:
    import raydelta

    table = raydelta.create_table(
        str(tmp_path / "c"),
        pa.schema([("id", pa.int64()), ("x", pa.int64())]),
        properties={"delta.constraints.positive": "x >= 0", **properties},
    )
    table.append(pa.table({"id": list(range(6)), "x": list(range(6))}))
    version, files = table.version(), _files_on_disk(table.uri)
    with pytest.raises(DeltaInvariantViolationException):
        table.update({"x": "x - 3"}, predicate="id > 0")
    assert table.version() == version and _files_on_disk(table.uri) == files
    table.update({"x": "x + 3"}, predicate="id > 0")
    assert sorted(table.to_arrow()["x"].to_pylist()) == [0] + [i + 3 for i in range(1, 6)]


def test_failed_ray_task_leaves_nothing(make_table: Any) -> None:
    """One task's rows break nothing, another's fail evaluation: no file stays."""
    table, rows = make_table("plain", partitioned=False)
    version, files = table.version(), _files_on_disk(table.uri)
    # integer overflow only in the rows of the last append (ANSI: an error)
    with pytest.raises(InvalidExpressionError):
        stage_update(
            table, {"x": "CASE WHEN id >= 20 THEN x + 9223372036854775807 ELSE x END"}, tasks=3
        )
    assert table.version() == version and _files_on_disk(table.uri) == files
    assert rows_of(table.to_arrow()) == rows


def test_peers_read_copy_on_write_results(make_table: Any, duck: Any) -> None:
    import deltalake

    table, rows = make_table("plain")
    table.delete("x = 3")
    table.update({"x": "x + 1000"}, predicate="id > 20")
    expected = [{**r, "x": r["x"] + 1000} if r["id"] > 20 else r for r in rows if r["x"] != 3]
    assert rows_of(deltalake.DeltaTable(table.uri).to_pyarrow_table()) == expected
    got = duck.execute(f"SELECT id, part, x FROM delta_scan('{table.uri}') ORDER BY id").arrow()
    assert rows_of(pa.table(got)) == expected


def test_duckdb_reads_deletion_vectors(make_table: Any, duck: Any) -> None:
    table, rows = make_table("dv")
    table.delete("id % 4 = 1")
    expected = [r for r in rows if r["id"] % 4 != 1]
    got = duck.execute(f"SELECT id, part, x FROM delta_scan('{table.uri}') ORDER BY id").arrow()
    assert rows_of(pa.table(got)) == expected


def test_stage_delete_then_commit_is_the_public_path(make_table: Any) -> None:
    table, rows = make_table("dv")
    staged = stage_delete(table, "id < 5")
    assert table.to_arrow().num_rows == len(rows)  # nothing committed yet
    staged.commit()
    assert rows_of(table.to_arrow()) == [r for r in rows if r["id"] >= 5]
