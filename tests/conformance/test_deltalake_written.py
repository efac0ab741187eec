"""Tables written by deltalake (delta-rs) load identically in raydelta and deltalake.

Each test builds a table in ``tmp_path`` with deltalake's writer and
maintenance operations, then, at *every* version, compares the two engines
with ``conftest.check_matches_deltalake`` (version, protocol, metadata, live
files with sizes / mtimes / numRecords / typed partition values, DV rows).
Removed files must show up as raydelta tombstones. Timestamp time travel is
compared with ``DeltaTable.load_as_version(datetime)``, which (like raydelta
without in-commit timestamps) resolves timestamps by commit file mtimes: the
tests space those mtimes an hour apart with ``os.utime``.

Observed deltalake 1.x behaviour these tests rely on (checked, not assumed):
- ``DeltaTable.delete`` rewrites the files holding matching rows (remove +
  add) or drops whole files; it writes no deletion vectors, even with
  ``delta.enableDeletionVectors=true`` (the DV test asserts that the table
  gets the ``deletionVectors`` feature and compares whatever was written);
- creating a table adds the ``variantType`` reader/writer feature.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from raydelta.protocol.errors import VersionNotFoundError
from raydelta.protocol.file_names import LogFileKind
from raydelta.storage.snapshot import load_snapshot

Check = Callable[..., None]
HOUR_MS = 3_600_000
BASE_MS = 1_600_000_000_000


def ids(*values: int, part: str | None = None, **columns: list[object]) -> pa.Table:
    data: dict[str, object] = {"id": pa.array(values, pa.int64())}
    if part is not None:
        data["part"] = [part] * len(values)
    data.update(columns)
    return pa.table(data)


def theirs_live(path: Path, version: int) -> set[str]:
    actions = pa.table(DeltaTable(str(path), version=version).get_add_actions(flatten=True))
    return {unquote(p) for p in actions.column("path").to_pylist()}


def assert_every_version_agrees(path: Path, check: Check) -> int:
    """Both engines agree at every version; removed files are our tombstones.

    Returns the latest version.
    """
    latest = DeltaTable(str(path)).version()
    check(path)
    previous: set[str] = set()
    for version in range(latest + 1):
        check(path, version)
        live = theirs_live(path, version)
        snap = load_snapshot(str(path), version=version)
        tombstones = {unquote(p) for p in snap.all_tombstones.column("path").to_pylist()}
        assert previous - live <= tombstones, version
        assert not tombstones & live, version
        previous = live
    return latest


def space_commit_mtimes(path: Path) -> dict[int, int]:
    """Give commit ``v`` the mtime ``BASE_MS + v hours``; returns version -> ms."""
    stamps = {}
    for commit in sorted((path / "_delta_log").glob("*.json")):
        version = int(commit.name.split(".")[0])
        stamps[version] = BASE_MS + version * HOUR_MS
        os.utime(commit, ns=(stamps[version] * 1_000_000,) * 2)
    return stamps


def test_appends_overwrite_partitioned(tmp_path: Path, assert_matches_deltalake: Check) -> None:
    path = tmp_path / "events"
    write_deltalake(str(path), ids(1, 2, 3, part="a"), partition_by=["part"])
    write_deltalake(str(path), ids(4, 5, part="b"), mode="append")
    write_deltalake(str(path), ids(6, part="c d/e%f"), mode="append")  # escaped partition dir
    write_deltalake(str(path), ids(7, 8, part="a"), mode="overwrite")
    null_part = pa.table({"id": pa.array([9], pa.int64()), "part": pa.array([None], pa.string())})
    write_deltalake(str(path), null_part, mode="append")  # null partition value
    write_deltalake(str(path), ids(10, part="b"), mode="append")
    latest = assert_every_version_agrees(path, assert_matches_deltalake)
    assert latest == 5
    snap = load_snapshot(str(path))
    assert {a.partition_values["part"] for a in snap.add_files()} == {"a", None, "b"}

    stamps = space_commit_mtimes(path)
    for version in (1, 4):
        for offset in (0, HOUR_MS // 2):
            when = stamps[version] + offset
            theirs = DeltaTable(str(path))
            theirs.load_as_version(datetime.fromtimestamp(when / 1000, tz=UTC))
            ours = load_snapshot(str(path), timestamp=when)
            assert ours.version == theirs.version() == version
            assert {unquote(a.path) for a in ours.add_files()} == theirs_live(path, version)
    with pytest.raises(VersionNotFoundError):  # deltalake answers version 0 here
        load_snapshot(str(path), timestamp=BASE_MS - 1)


def test_unpartitioned_overwrite_replaces_every_file(
    tmp_path: Path, assert_matches_deltalake: Check
) -> None:
    path = tmp_path / "plain"
    write_deltalake(str(path), ids(1, 2))
    write_deltalake(str(path), ids(3), mode="append")
    write_deltalake(str(path), ids(4, 5, 6), mode="overwrite")
    assert assert_every_version_agrees(path, assert_matches_deltalake) == 2
    assert load_snapshot(str(path)).num_files == 1


def test_delete_with_predicate(tmp_path: Path, assert_matches_deltalake: Check) -> None:
    path = tmp_path / "deletes"
    write_deltalake(str(path), ids(*range(10), part="x"), partition_by=["part"])
    write_deltalake(str(path), ids(*range(10, 20), part="y"), mode="append")
    DeltaTable(str(path)).delete("id = 3")  # rewrites the x file without row 3
    DeltaTable(str(path)).delete("part = 'y'")  # drops the y file whole
    assert assert_every_version_agrees(path, assert_matches_deltalake) == 3
    snap = load_snapshot(str(path))
    assert sum(a.num_records or 0 for a in snap.add_files()) == 9


def test_deletion_vectors_enabled(tmp_path: Path, assert_matches_deltalake: Check) -> None:
    path = tmp_path / "dvs"
    write_deltalake(
        str(path),
        ids(*range(20)),
        configuration={"delta.enableDeletionVectors": "true"},
    )
    write_deltalake(str(path), ids(*range(20, 30)), mode="append")
    DeltaTable(str(path)).delete("id % 3 = 0")
    assert assert_every_version_agrees(path, assert_matches_deltalake) == 2
    snap = load_snapshot(str(path))
    assert "deletionVectors" in (snap.protocol.reader_features or [])
    live = 0
    for add in snap.add_files():
        assert add.num_records is not None
        live += add.num_records - (add.deletion_vector.cardinality if add.deletion_vector else 0)
    assert live == 30 - 10  # ids 0..29 minus the multiples of 3


def test_checkpoint_then_more_commits(tmp_path: Path, assert_matches_deltalake: Check) -> None:
    path = tmp_path / "checkpointed"
    write_deltalake(str(path), ids(1, part="a"), partition_by=["part"])
    write_deltalake(str(path), ids(2, part="b"), mode="append")
    DeltaTable(str(path)).delete("part = 'a'")
    DeltaTable(str(path)).create_checkpoint()
    write_deltalake(str(path), ids(3, part="a"), mode="append")
    write_deltalake(str(path), ids(4, part="c"), mode="append")
    assert assert_every_version_agrees(path, assert_matches_deltalake) == 4
    segment = load_snapshot(str(path)).log_segment
    assert segment is not None and segment.checkpoint is not None
    assert (segment.checkpoint.version, segment.checkpoint.kind) == (
        2,
        LogFileKind.CHECKPOINT_CLASSIC,
    )
    assert segment.commit_versions == [3, 4]


def test_cleanup_metadata(tmp_path: Path, assert_matches_deltalake: Check) -> None:
    path = tmp_path / "cleaned"
    write_deltalake(
        str(path), ids(0), configuration={"delta.logRetentionDuration": "interval 1 days"}
    )
    for value in range(1, 5):
        write_deltalake(str(path), ids(value), mode="append")
    month_ago = time.time() - 30 * 86400
    for version in range(5):
        stamp = month_ago + version
        os.utime(path / "_delta_log" / f"{version:020d}.json", (stamp, stamp))
    DeltaTable(str(path)).create_checkpoint()
    write_deltalake(str(path), ids(5), mode="append")
    DeltaTable(str(path)).cleanup_metadata()

    remaining = sorted(p.name for p in (path / "_delta_log").glob("*.json"))
    assert remaining == [f"{4:020d}.json", f"{5:020d}.json"]  # older than the checkpoint: gone
    assert_matches_deltalake(path)
    for version in (4, 5):
        assert_matches_deltalake(path, version)
    for version in range(4):
        with pytest.raises(Exception):  # noqa: B017 - deltalake's own error type
            DeltaTable(str(path), version=version)
        with pytest.raises(VersionNotFoundError):
            load_snapshot(str(path), version=version)


def test_optimize_compact(tmp_path: Path, assert_matches_deltalake: Check) -> None:
    path = tmp_path / "compacted"
    write_deltalake(str(path), ids(1, part="a"), partition_by=["part"])
    for value in range(2, 6):
        write_deltalake(str(path), ids(value, part="a"), mode="append")
    write_deltalake(str(path), ids(6, part="b"), mode="append")
    metrics = DeltaTable(str(path)).optimize.compact()
    assert metrics["numFilesRemoved"] == 5 and metrics["numFilesAdded"] == 1
    assert assert_every_version_agrees(path, assert_matches_deltalake) == 6
    snap = load_snapshot(str(path))
    assert snap.num_files == 2
    assert all(not r["dataChange"] for r in snap.all_tombstones.to_pylist())


def test_schema_evolution_merge(tmp_path: Path, assert_matches_deltalake: Check) -> None:
    path = tmp_path / "evolving"
    write_deltalake(str(path), ids(1, 2))
    write_deltalake(str(path), ids(3, extra=["x"]), mode="append", schema_mode="merge")
    write_deltalake(str(path), ids(4, extra=["y"], more=[1.5]), mode="append", schema_mode="merge")
    assert assert_every_version_agrees(path, assert_matches_deltalake) == 2
    for version, names in ((0, ["id"]), (1, ["id", "extra"]), (2, ["id", "extra", "more"])):
        schema = load_snapshot(str(path), version=version).metadata.schema_string
        assert schema is not None
        assert [f["name"] for f in json.loads(schema)["fields"]] == names
