"""Exact conflicts of DML commits, the change data feed, RESTORE."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from raydelta.dml import stage_delete, stage_update
from raydelta.protocol.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteReadException,
    InvalidArgumentError,
)
from tests.dml.conftest import SCHEMA, rows_of


def _serializable(table: Any) -> None:
    txn = table.transaction()
    txn.set_metadata(properties={"delta.isolationLevel": "Serializable"})
    txn.commit(operation="SET TBLPROPERTIES")


def test_concurrent_append_same_partition_fails_serializable_delete(make_table: Any) -> None:
    table, _rows = make_table("dv")
    _serializable(table)
    staged = stage_delete(table, "part = 'a' AND x > 3")
    table.append(pa.table({"id": [100], "part": ["a"], "x": [9]}, schema=SCHEMA))
    version, files = table.version(), table.snapshot().num_files
    with pytest.raises(ConcurrentAppendException):
        staged.commit()
    assert table.version() == version and table.snapshot().num_files == files


def test_concurrent_append_elsewhere_does_not_conflict(make_table: Any) -> None:
    table, rows = make_table("plain")
    _serializable(table)
    staged = stage_delete(table, "part = 'a' AND x > 3")
    new = pa.table({"id": [100], "part": ["b"], "x": [9]}, schema=SCHEMA)
    table.append(new)
    staged.commit()
    expected = [r for r in rows if not (r["part"] == "a" and r["x"] > 3)] + new.to_pylist()
    assert rows_of(table.to_arrow()) == sorted(expected, key=lambda r: r["id"])


def test_concurrent_dml_on_the_same_file_conflicts(make_table: Any) -> None:
    """The winner re-adds the file with its DV: in an unpartitioned table the
    loser should have read that add (delta-spark checks appends first)."""
    table, rows = make_table("dv", partitioned=False)
    first = stage_delete(table, "id = 1")
    second = stage_update(table, {"x": "0"}, predicate="id = 2")
    first.commit()
    with pytest.raises(ConcurrentAppendException):
        second.commit()
    assert rows_of(table.to_arrow()) == [r for r in rows if r["id"] != 1]


def test_concurrent_removal_of_a_file_read_conflicts(make_table: Any) -> None:
    table, _rows = make_table("plain")
    staged = stage_update(table, {"x": "0"}, predicate="part = 'a' AND id = 1")
    table.delete("part = 'a'")  # whole files: removes only
    with pytest.raises(ConcurrentDeleteReadException):
        staged.commit()


@pytest.mark.parametrize("flavour", ["cdf", "dv_cdf", "mapped_dv_cdf"])
def test_change_data_feed(make_table: Any, flavour: str) -> None:
    table, rows = make_table(flavour)
    start = table.version()
    table.delete("x = 2")
    table.update({"x": "x + 50"}, predicate="id >= 25")
    new = pa.table({"id": [99], "part": ["a"], "x": [1]}, schema=SCHEMA)
    table.append(new)
    feed = table.changes(start + 1)
    got = sorted(
        (r["_commit_version"], r["_change_type"], r["id"], r["part"], r["x"])
        for r in feed.to_pylist()
    )
    after_delete = [r for r in rows if r["x"] != 2]
    expected = [(start + 1, "delete", r["id"], r["part"], r["x"]) for r in rows if r["x"] == 2]
    for r in after_delete:
        if r["id"] >= 25:
            expected.append((start + 2, "update_preimage", r["id"], r["part"], r["x"]))
            expected.append((start + 2, "update_postimage", r["id"], r["part"], r["x"] + 50))
    expected.append((start + 3, "insert", 99, "a", 1))
    assert got == sorted(expected)
    assert feed.schema.field("_commit_timestamp").type == pa.timestamp("us", tz="UTC")
    # the whole history: the appends of the fixture are inserts
    inserts = [r for r in table.changes(0).to_pylist() if r["_commit_version"] <= start]
    assert sorted(r["id"] for r in inserts) == [r["id"] for r in rows]


def test_changes_of_a_dv_delete_without_cdc_files(make_table: Any) -> None:
    """A DV delete on a table whose feed was turned on after: the difference
    of the deletion vectors gives the deleted rows."""
    table, rows = make_table("dv", partitioned=False)
    txn = table.transaction()
    txn.set_metadata(properties={"delta.enableChangeDataFeed": "true"})
    txn.upgrade_protocol(writer_features=["changeDataFeed"])
    txn.commit(operation="SET TBLPROPERTIES")
    start = table.version()
    staged = stage_delete(table, "id % 7 = 0")
    staged_no_cdc = staged  # written with the snapshot's CDF on: cdc files present
    staged_no_cdc.commit()
    got = sorted(r["id"] for r in table.changes(start + 1).to_pylist())
    assert got == [r["id"] for r in rows if r["id"] % 7 == 0]


def test_changes_refused_when_feed_is_off(make_table: Any) -> None:
    table, _ = make_table("plain")
    with pytest.raises(InvalidArgumentError):
        table.changes(0)


@pytest.mark.parametrize("flavour", ["plain", "dv_cdf"])
def test_restore_brings_a_version_back(make_table: Any, flavour: str) -> None:
    table, rows = make_table(flavour)
    version = table.version()
    files = table.snapshot().num_files
    table.delete("id < 12")
    table.update({"x": "0"})
    table.append(pa.table({"id": [500], "part": ["c"], "x": [5]}, schema=SCHEMA))
    metrics = table.restore(version)
    assert rows_of(table.to_arrow()) == rows
    assert metrics.num_of_files_after_restore == files
    assert metrics.num_restored_files > 0 and metrics.num_removed_files > 0
    info = table.history(limit=1)[0].commit_info
    assert info is not None and info["operation"] == "RESTORE"
    assert info["operationMetrics"]["numRestoredFiles"] == str(metrics.num_restored_files)
    assert info["operationParameters"]["version"] == version


def test_restore_by_timestamp_and_bad_targets(make_table: Any) -> None:
    table, rows = make_table("plain")
    history = {e.version: e.timestamp for e in table.history()}
    table.delete()
    from datetime import UTC, datetime

    when = datetime.fromtimestamp(history[table.version() - 1] / 1000, tz=UTC)
    table.restore(when)
    assert rows_of(table.to_arrow()) == rows
    with pytest.raises(InvalidArgumentError):
        table.restore(-1)
