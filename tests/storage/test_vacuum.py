"""VACUUM deletes what the table no longer needs, agrees with deltalake (delta-rs) where
their semantics agree, and never touches live, protected, hidden or outside files.

Two kinds of tables: written by deltalake (for the side-by-side comparisons), and
written by hand (JSON commits + empty files aged with ``os.utime``) for deletion
vectors, hostile paths, hidden names and retention edges.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pytest

from raydelta.protocol import z85
from raydelta.protocol.errors import RetentionTooShortError, UnsupportedTableFeatureException
from raydelta.protocol.file_names import commit_name
from raydelta.storage.cleanup.listing import (
    DirectoryListing,
    list_sequential,
    list_top_level,
    list_tree,
)
from raydelta.storage.cleanup.vacuum import vacuum
from raydelta.storage.log.store import log_store_for
from raydelta.storage.snapshot import load_snapshot
from tests.hadoop_crc import crc_matches, disagreeing_crcs, orphan_crcs, write_crc

deltalake = pytest.importorskip("deltalake")

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
NOW = int(time.time() * 1000)
OLD = NOW - 30 * DAY_MS


def schema_string(partition_columns: tuple[str, ...]) -> str:
    fields = [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]
    fields += [
        {"name": c, "type": "string", "nullable": True, "metadata": {}} for c in partition_columns
    ]
    return json.dumps({"type": "struct", "fields": fields})


# --- helpers ---------------------------------------------------------------------------------


def touch(path: Path, at_ms: int = OLD, data: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, ns=(at_ms * 1_000_000, at_ms * 1_000_000))
    return path


def add(path: str, **fields: Any) -> dict[str, Any]:
    body = {
        "path": path,
        "partitionValues": {},
        "size": 1,
        "modificationTime": OLD,
        "dataChange": True,
    }
    body.update(fields)
    return {"add": body}


def remove(path: str, deleted_ms: int, **fields: Any) -> dict[str, Any]:
    body = {"path": path, "deletionTimestamp": deleted_ms, "dataChange": True}
    body.update(fields)
    return {"remove": body}


def write_log(
    root: Path,
    commits: list[list[dict[str, Any]]],
    *,
    partition_columns: tuple[str, ...] = (),
    properties: dict[str, str] | None = None,
    protocol: dict[str, Any] | None = None,
) -> Path:
    """``commits[i]`` become version ``i + 1`` after a version 0 with protocol + metadata."""
    log = root / "_delta_log"
    log.mkdir(parents=True)
    metadata = {
        "id": str(uuid.uuid4()),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": schema_string(partition_columns),
        "partitionColumns": list(partition_columns),
        "configuration": properties or {},
        "createdTime": OLD,
    }
    first = [
        {"commitInfo": {"timestamp": OLD, "operation": "CREATE TABLE"}},
        {"protocol": protocol or {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": metadata},
    ]
    for version, actions in enumerate([first, *commits]):
        lines = actions if version == 0 else [{"commitInfo": {"timestamp": OLD}}, *actions]
        (log / commit_name(version)).write_text("".join(json.dumps(a) + "\n" for a in lines))
    return root


def files_under(root: Path) -> set[str]:
    out = set()
    for directory, _, names in os.walk(root):
        for name in names:
            out.add(os.path.relpath(os.path.join(directory, name), root))
    return out


def dv(file_uuid: uuid.UUID, prefix: str = "") -> dict[str, Any]:
    return {
        "storageType": "u",
        "pathOrInlineDv": prefix + z85.encode_uuid(file_uuid),
        "offset": 1,
        "sizeInBytes": 10,
        "cardinality": 1,
    }


def dv_name(file_uuid: uuid.UUID, prefix: str = "") -> str:
    name = f"deletion_vector_{file_uuid}.bin"
    return f"{prefix}/{name}" if prefix else name


DV_PROTOCOL = {
    "minReaderVersion": 3,
    "minWriterVersion": 7,
    "readerFeatures": ["deletionVectors"],
    "writerFeatures": ["deletionVectors"],
}


# --- side by side with deltalake ---------------------------------------------------------------


def deltalake_table(path: Path) -> Any:
    values = ["plain", "a b", "c:d", "e%f"]
    for round_ in range(4):
        data = pa.table(
            {"id": [round_ * 10 + i for i in range(4)], "part": values},
        )
        deltalake.write_deltalake(str(path), data, mode="append", partition_by=["part"])
    table = deltalake.DeltaTable(str(path))
    table.delete("id < 12")  # rewrites files: removes with data change
    deltalake.DeltaTable(str(path)).optimize.compact()  # removes without data change
    return deltalake.DeltaTable(str(path))


def peer_vacuum(path: Path, *, full: bool, retention_hours: int = 0) -> set[str]:
    table = deltalake.DeltaTable(str(path))
    found = table.vacuum(
        retention_hours=retention_hours,
        dry_run=True,
        enforce_retention_duration=False,
        full=full,
    )
    # delta-rs returns object-store paths relative to the root, as on disk (a
    # partition value "a b" lives in directory ``part=a%20b``): our form too.
    return set(found)


def test_dry_runs_match_deltalake_lite_and_full(tmp_path: Path) -> None:
    path = tmp_path / "t"
    deltalake_table(path)
    touch(path / "stray.parquet")
    touch(path / "part=plain" / "stray-in-partition.parquet")
    time.sleep(0.01)

    ours_lite = vacuum(str(path), retention_hours=0, force=True, lite=True, dry_run=True)
    ours_full = vacuum(str(path), retention_hours=0, force=True, dry_run=True)
    theirs_lite = peer_vacuum(path, full=False)
    theirs_full = peer_vacuum(path, full=True)

    assert ours_lite.mode == "lite" and ours_full.mode == "full"
    assert theirs_lite  # the table has expired tombstones
    assert set(ours_lite.files) == theirs_lite
    assert set(ours_full.files) == theirs_full
    assert set(ours_full.files) == theirs_lite | {
        "stray.parquet",
        "part=plain/stray-in-partition.parquet",
    }
    assert ours_full.num_listed is not None and ours_full.num_listed > len(ours_full.files)
    on_disk = files_under(path)
    assert ours_full.total_bytes == sum((path / f).stat().st_size for f in ours_full.files)
    assert set(ours_full.files) <= on_disk


def test_real_runs_leave_nothing_for_deltalake_and_keep_the_table_readable(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t"
    deltalake_table(path)
    touch(path / "stray.parquet")
    expected_rows = deltalake.DeltaTable(str(path)).to_pyarrow_table().sort_by("id")
    time.sleep(0.01)

    planned = vacuum(str(path), retention_hours=0, force=True, lite=True, dry_run=True)
    lite = vacuum(str(path), retention_hours=0, force=True, lite=True)
    assert lite.files == planned.files and lite.dry_run is False
    # delta-rs' lite mode lists the expired tombstones without checking the disk:
    # after our run none of them exists any more.
    assert peer_vacuum(path, full=False) == set(lite.files)
    assert not set(lite.files) & files_under(path)
    assert vacuum(str(path), retention_hours=0, force=True, lite=True).files == []

    full = vacuum(str(path), retention_hours=0, force=True)
    assert full.files == ["stray.parquet"]
    # Again only the expired tombstones, none of which is on disk any more.
    assert peer_vacuum(path, full=True) == set(lite.files)
    rows = deltalake.DeltaTable(str(path)).to_pyarrow_table().sort_by("id")
    assert rows.equals(expected_rows)
    snapshot = load_snapshot(str(path))
    for live in snapshot.files.column("path").to_pylist():
        assert (path / unquote(live)).exists()


def test_where_semantics_differ_from_deltalake(tmp_path: Path) -> None:
    """Documented differences (deltalake 1.6.6):

    - full mode: delta-rs only treats a path as hidden when its *first* segment
      starts with ``_``/``.``; we (like delta-spark) apply the rule to every
      segment, so hidden files inside partition directories (``_tmp`` staging
      files) survive, and a Hadoop ``.crc`` checksum file is never a data file:
      it goes with its file, or alone once its file is gone (see
      test_hadoop_checksum_files_go_with_their_files).
    - Both keep unreferenced files younger than the retention in full mode.

    (Lite dry runs agree: both list every expired tombstone, present on disk or
    not; see test_lite_dry_run_lists_files_already_gone.)
    """
    path = tmp_path / "t"
    deltalake_table(path)
    young = touch(path / "young.parquet", at_ms=int(time.time() * 1000))
    hidden = [
        touch(path / "part=plain" / "_tmp.parquet"),
        touch(path / "part=plain" / ".x.parquet.crc"),
    ]
    ours = vacuum(str(path), retention_hours=1, force=True, dry_run=True)
    theirs = peer_vacuum(path, full=True, retention_hours=1)
    assert "young.parquet" not in ours.files and "young.parquet" not in theirs
    assert not {"part=plain/_tmp.parquet", "part=plain/.x.parquet.crc"} & set(ours.files)
    # The peer's behaviour, pinned here so a change in deltalake shows up:
    assert {"part=plain/_tmp.parquet", "part=plain/.x.parquet.crc"} <= theirs
    assert set(ours.files) == theirs - {"part=plain/_tmp.parquet", "part=plain/.x.parquet.crc"}
    real = vacuum(str(path), retention_hours=1, force=True)
    assert young.exists() and hidden[0].exists()
    assert not hidden[1].exists() and real.orphan_crcs_deleted == 1  # its file is gone


def test_lite_dry_run_lists_files_already_gone(tmp_path: Path) -> None:
    """A lite dry run lists the expired tombstones' files without looking at the
    disk, as delta-spark's ``VACUUM ... LITE DRY RUN`` (its candidates come from
    the log alone; tests/spark_delta/test_maintenance_under_spark.py compares the
    two) and delta-rs' default dry run do; a real run deletes, and reports, only
    the files that are still there."""
    path = tmp_path / "t"
    deltalake_table(path)
    before = vacuum(str(path), retention_hours=0, force=True, lite=True, dry_run=True)
    assert before.files and before.total_bytes > 0
    gone, kept = before.files[::2], before.files[1::2]
    for name in gone:
        (path / name).unlink()

    after = vacuum(str(path), retention_hours=0, force=True, lite=True, dry_run=True)
    assert after.files == before.files and after.total_bytes == before.total_bytes
    assert peer_vacuum(path, full=False) == set(after.files)
    # Full mode lists the disk: the gone files are not in it.
    full = vacuum(str(path), retention_hours=0, force=True, dry_run=True)
    assert not set(gone) & set(full.files) and set(kept) <= set(full.files)

    sizes = {name: (path / name).stat().st_size for name in kept}
    real = vacuum(str(path), retention_hours=0, force=True, lite=True)
    assert real.files == kept and real.total_bytes == sum(sizes.values())
    assert not set(before.files) & files_under(path)
    again = vacuum(str(path), retention_hours=0, force=True, lite=True)
    assert again.files == [] and again.total_bytes == 0


# --- retention ----------------------------------------------------------------------------------


def retention_table(tmp_path: Path, properties: dict[str, str] | None = None) -> Path:
    root = tmp_path / "t"
    write_log(
        root,
        [
            [add("live.parquet"), add("gone-8d.parquet"), add("gone-6d.parquet")],
            [
                remove("gone-8d.parquet", NOW - 8 * DAY_MS),
                remove("gone-6d.parquet", NOW - 6 * DAY_MS),
            ],
        ],
        properties=properties,
    )
    for name in ("live.parquet", "gone-8d.parquet", "gone-6d.parquet", "old-stray.parquet"):
        touch(root / name)
    touch(root / "young-stray.parquet", at_ms=NOW - HOUR_MS)
    return root


def test_default_retention_is_a_week(tmp_path: Path) -> None:
    root = retention_table(tmp_path)
    lite = vacuum(str(root), lite=True, dry_run=True, now_ms=NOW)
    full = vacuum(str(root), dry_run=True, now_ms=NOW)
    assert lite.retention_ms == 7 * DAY_MS
    assert lite.files == ["gone-8d.parquet"]
    assert full.files == ["gone-8d.parquet", "old-stray.parquet"]
    assert full.cutoff_timestamp == NOW - 7 * DAY_MS


def test_table_retention_property(tmp_path: Path) -> None:
    root = retention_table(tmp_path, {"delta.deletedFileRetentionDuration": "interval 1 day"})
    full = vacuum(str(root), dry_run=True, now_ms=NOW)
    assert full.files == ["gone-6d.parquet", "gone-8d.parquet", "old-stray.parquet"]


def test_shorter_retention_needs_force(tmp_path: Path) -> None:
    root = retention_table(tmp_path)
    with pytest.raises(RetentionTooShortError):
        vacuum(str(root), retention_hours=24, dry_run=True, now_ms=NOW)
    before = files_under(root)
    with pytest.raises(RetentionTooShortError):
        vacuum(str(root), retention_hours=0, now_ms=NOW)
    assert files_under(root) == before
    forced = vacuum(str(root), retention_hours=0.5, force=True, dry_run=True, now_ms=NOW)
    assert forced.files == [
        "gone-6d.parquet",
        "gone-8d.parquet",
        "old-stray.parquet",
        "young-stray.parquet",
    ]
    longer = vacuum(str(root), retention_hours=24 * 9, dry_run=True, now_ms=NOW)
    assert longer.files == ["old-stray.parquet"]  # 30 days old, referenced by nothing


# --- deletion vectors ---------------------------------------------------------------------------


def test_deletion_vector_files_still_referenced_survive(tmp_path: Path) -> None:
    live_dv, shared_dv, expired_dv, fresh_dv = (uuid.uuid4() for _ in range(4))
    root = tmp_path / "t"
    write_log(
        root,
        [
            [
                add("a.parquet", deletionVector=dv(expired_dv)),
                add("b.parquet", deletionVector=dv(shared_dv)),
                add("c.parquet", deletionVector=dv(fresh_dv, "ab")),
            ],
            # a.parquet gets a new DV; its old (path, DV) is tombstoned long ago
            [
                remove("a.parquet", OLD, deletionVector=dv(expired_dv)),
                add("a.parquet", deletionVector=dv(live_dv)),
            ],
            # b.parquet is removed with a DV also used by a live file
            [
                add("d.parquet", deletionVector=dv(shared_dv)),
                remove("b.parquet", OLD, deletionVector=dv(shared_dv)),
            ],
            # c.parquet removed just now: its file and DV are protected
            [remove("c.parquet", NOW, deletionVector=dv(fresh_dv, "ab"))],
        ],
        protocol=DV_PROTOCOL,
    )
    for name in ("a.parquet", "b.parquet", "c.parquet", "d.parquet"):
        touch(root / name)
    for file_uuid, prefix in ((live_dv, ""), (shared_dv, ""), (expired_dv, ""), (fresh_dv, "ab")):
        touch(root / dv_name(file_uuid, prefix))

    for lite in (True, False):
        report = vacuum(str(root), lite=lite, dry_run=True, now_ms=NOW)
        assert set(report.files) == {"b.parquet", dv_name(expired_dv)}, lite
    vacuum(str(root), now_ms=NOW)
    left = files_under(root)
    assert {dv_name(live_dv), dv_name(shared_dv), dv_name(fresh_dv, "ab")} <= left
    assert {"a.parquet", "c.parquet", "d.parquet"} <= left
    assert dv_name(expired_dv) not in left and "b.parquet" not in left


# --- nothing outside the root -------------------------------------------------------------------


def hostile_table(tmp_path: Path) -> tuple[Path, Path, list[Path]]:
    root = tmp_path / "table"
    outside = tmp_path / "outside"
    sentinels = [
        touch(outside / "s1.parquet"),
        touch(outside / "s2.parquet"),
        touch(outside / "s3.parquet"),
        touch(outside / "s4.parquet"),
        touch(outside / "s5.parquet"),
        touch(outside / "dir" / "s6.parquet"),
        touch(outside / "dv" / dv_name(uuid.UUID(int=9))),
        touch(outside / "linked.parquet"),
        touch(tmp_path / "table2" / "sibling.parquet"),
    ]
    outside_dv = {
        **dv(uuid.UUID(int=9)),
        "storageType": "p",
        "pathOrInlineDv": (outside / "dv" / dv_name(uuid.UUID(int=9))).as_uri(),
    }
    inside_abs = (root / "inside-abs.parquet").as_uri()
    write_log(
        root,
        [
            [
                add("inside.parquet", deletionVector=outside_dv),
                add(inside_abs),
                add("kept.parquet"),
            ],
            [
                remove("../outside/s1.parquet", OLD),
                remove("%2E%2E/outside/s2.parquet", OLD),
                remove("sub/../../outside/s3.parquet", OLD),
                remove(str(outside / "s4.parquet"), OLD),
                remove((outside / "s5.parquet").as_uri(), OLD),
                remove("file:" + str(outside / "dir" / "s6.parquet"), OLD),
                remove("file://otherhost" + str(outside / "s1.parquet"), OLD),
                remove("../table2/sibling.parquet", OLD),
                remove(str(tmp_path / "table2" / "sibling.parquet"), OLD),
                remove("inside.parquet", OLD, deletionVector=outside_dv),
                remove("link/s6.parquet", OLD),
                remove("linkfile.parquet", OLD),
                remove(inside_abs, OLD),
            ],
            # a live file outside the root: never ours to delete either
            [add(str(outside / "s1.parquet"))],
        ],
    )
    touch(root / "inside.parquet")
    touch(root / "inside-abs.parquet")
    touch(root / "kept.parquet")
    (root / "link").symlink_to(outside / "dir", target_is_directory=True)
    (root / "linkfile.parquet").symlink_to(outside / "linked.parquet")
    return root, outside, sentinels


@pytest.mark.parametrize("lite", [True, False])
def test_nothing_outside_the_root_is_deleted(
    tmp_path: Path, lite: bool, caplog: pytest.LogCaptureFixture
) -> None:
    root, _, sentinels = hostile_table(tmp_path)
    dry = vacuum(str(root), lite=lite, dry_run=True, now_ms=NOW)
    # A lite dry run does not look at the files (module doc): it lists the
    # tombstoned name that is now a symlink; no real run deletes it (below).
    listed_unchecked = {"linkfile.parquet"} if lite else set()
    assert set(dry.files) == {"inside.parquet", "inside-abs.parquet"} | listed_unchecked
    ignored = {i.path for i in dry.ignored}
    assert "../outside/s1.parquet" in ignored
    assert "%2E%2E/outside/s2.parquet" in ignored
    assert "sub/../../outside/s3.parquet" in ignored
    assert str(tmp_path / "outside" / "s4.parquet") in ignored
    assert "outside the table root" in {i.reason.split(" (")[0] for i in dry.ignored}
    with caplog.at_level("WARNING", logger="storage.vacuum"):
        real = vacuum(str(root), lite=lite, now_ms=NOW)
    assert any("ignoring" in r.getMessage() for r in caplog.records)
    assert set(real.files) == {"inside.parquet", "inside-abs.parquet"}
    for sentinel in sentinels:
        assert sentinel.exists(), sentinel
    assert (root / "link").is_symlink() and (root / "linkfile.parquet").is_symlink()
    assert (root / "kept.parquet").exists()


def test_lite_mode_refuses_nested_symlinked_directories(tmp_path: Path) -> None:
    """A tombstone's directory is checked level by level: a symlink anywhere below
    the root that leads outside it is refused (dry run and real run); one that
    stays inside the root is followed like any directory."""
    root = tmp_path / "t"
    outside = tmp_path / "outside"
    sentinel = touch(outside / "x.parquet")
    names = ["p=1/q=1/a.parquet", "p=1/q=2/x.parquet", "p=3/q=1/a.parquet", "p=4/b.parquet"]
    write_log(
        root,
        [[add(n) for n in names], [remove(n, OLD, size=1) for n in names]],
        partition_columns=("p", "q"),
    )
    touch(root / names[0])
    touch(root / names[3])
    (root / "p=1" / "q=2").symlink_to(outside, target_is_directory=True)  # leaves the root
    (root / "p=3").symlink_to(root / "p=1", target_is_directory=True)  # stays inside
    for dry_run in (True, False):
        report = vacuum(str(root), lite=True, dry_run=dry_run, now_ms=NOW)
        assert {i.path for i in report.ignored} == {"p=1/q=2/x.parquet"}, dry_run
        expected = ["p=1/q=1/a.parquet", "p=3/q=1/a.parquet", "p=4/b.parquet"]
        # the real run finds p=3/q=1/a.parquet gone: it was p=1/q=1/a.parquet
        assert report.files == (expected if dry_run else [expected[0], expected[2]]), dry_run
    assert sentinel.exists() and (root / "p=1" / "q=2").is_symlink()


def test_lite_mode_on_an_object_store(tmp_path: Path) -> None:
    """Through fsspec (``memory://``): a dry run asks the store only for the size
    of a candidate the log gives none; a real run deletes the files still there."""
    local = write_log(
        tmp_path / "t",
        [
            [add("a.parquet"), add("b.parquet"), add("c.parquet")],
            [remove("a.parquet", OLD, size=1), remove("b.parquet", OLD), remove("c.parquet", OLD)],
        ],
    )
    uri = f"memory://raydelta-vacuum-{uuid.uuid4().hex}/t"
    store = log_store_for(uri)
    for commit in (local / "_delta_log").iterdir():
        store.fs.pipe(f"{store.table_root}/_delta_log/{commit.name}", commit.read_bytes())
    store.fs.pipe(f"{store.table_root}/a.parquet", b"12345")
    store.fs.pipe(f"{store.table_root}/b.parquet", b"123")  # c.parquet is gone
    dry = vacuum(uri, lite=True, dry_run=True, now_ms=NOW)
    assert dry.files == ["a.parquet", "b.parquet", "c.parquet"]
    assert dry.total_bytes == 1 + 3 + 0  # logged; b's from the store; c has none
    real = vacuum(uri, lite=True, now_ms=NOW)
    assert real.files == ["a.parquet", "b.parquet"] and real.total_bytes == 1 + 3
    assert not store.fs.exists(f"{store.table_root}/a.parquet")
    assert not store.fs.exists(f"{store.table_root}/b.parquet")


# --- hidden names -----------------------------------------------------------------------------


def test_hidden_files_survive_change_data_and_partition_dirs_do_not(tmp_path: Path) -> None:
    root = tmp_path / "t"
    write_log(
        root,
        [
            [add("_col=1/live.parquet", partitionValues={"_col": "1"})],
            [
                remove("_delta_log/00000000000000000000.json", OLD),
                remove("_hidden/tombstoned.parquet", OLD),
                remove("_col=1/gone.parquet", OLD, partitionValues={"_col": "1"}),
            ],
        ],
        partition_columns=("_col",),
    )
    hidden = [
        touch(root / "_hidden" / "tombstoned.parquet"),
        touch(root / "_hidden" / "x.parquet"),
        touch(root / ".hidden.parquet"),
        touch(root / "_SUCCESS"),
        touch(root / "_other=1" / "x.parquet"),
        touch(root / "_col=1" / "_tmp.parquet"),
        touch(root / "_col=1" / ".live.parquet.crc"),
    ]
    touch(root / "_col=1" / "live.parquet")
    touch(root / "_col=1" / "gone.parquet")
    touch(root / "_change_data" / "cdc-0.parquet")
    log_before = {p.name: p.read_bytes() for p in (root / "_delta_log").iterdir()}
    for name in log_before:
        touch(root / "_delta_log" / name, data=log_before[name])  # old, still untouchable

    lite = vacuum(str(root), lite=True, dry_run=True, now_ms=NOW)
    assert lite.files == ["_col=1/gone.parquet"]
    assert {i.path for i in lite.ignored} >= {
        "_delta_log/00000000000000000000.json",
        "_hidden/tombstoned.parquet",
    }
    full = vacuum(str(root), now_ms=NOW)
    assert full.files == ["_change_data/cdc-0.parquet", "_col=1/gone.parquet"]
    assert all(p.exists() for p in hidden)
    assert (root / "_col=1" / "live.parquet").exists()
    assert {p.name: p.read_bytes() for p in (root / "_delta_log").iterdir()} == log_before


def test_emptied_old_directories_are_removed(tmp_path: Path) -> None:
    root = tmp_path / "t"
    write_log(
        root,
        [
            [add("p=1/a.parquet"), add("p=2/b.parquet"), add("p=3/c.parquet")],
            [remove("p=1/a.parquet", OLD), remove("p=2/b.parquet", OLD)],
        ],
        partition_columns=("p",),
    )
    for name in ("p=1/a.parquet", "p=2/b.parquet", "p=3/c.parquet", "p=2/_tmp", "q/r/s.parquet"):
        touch(root / name)
    for directory in ("p=1", "p=2", "p=3", "q/r", "q"):
        os.utime(root / directory, ns=(OLD * 1_000_000, OLD * 1_000_000))
    dry = vacuum(str(root), dry_run=True, now_ms=NOW)
    assert dry.dirs == ["q/r", "p=1", "q"]
    real = vacuum(str(root), now_ms=NOW)
    assert real.dirs == dry.dirs
    assert not (root / "p=1").exists() and not (root / "q").exists()
    assert (root / "p=2" / "_tmp").exists() and (root / "p=3" / "c.parquet").exists()


# --- protocol check -----------------------------------------------------------------------------


def test_vacuum_protocol_check_refuses_unknown_writer_features(tmp_path: Path) -> None:
    root = retention_table(tmp_path)
    (root / "_delta_log" / commit_name(3)).write_text(
        json.dumps({"commitInfo": {"timestamp": OLD}})
        + "\n"
        + json.dumps(
            {
                "protocol": {
                    "minReaderVersion": 3,
                    "minWriterVersion": 7,
                    "readerFeatures": ["vacuumProtocolCheck"],
                    "writerFeatures": ["vacuumProtocolCheck", "someFutureFeature"],
                }
            }
        )
        + "\n"
    )
    before = files_under(root)
    for lite in (True, False):
        with pytest.raises(UnsupportedTableFeatureException, match="someFutureFeature"):
            vacuum(str(root), lite=lite, now_ms=NOW)
    assert files_under(root) == before


def test_vacuum_protocol_check_feature_is_supported(tmp_path: Path) -> None:
    root = retention_table(tmp_path)
    (root / "_delta_log" / commit_name(3)).write_text(
        json.dumps({"commitInfo": {"timestamp": OLD}})
        + "\n"
        + json.dumps(
            {
                "protocol": {
                    "minReaderVersion": 3,
                    "minWriterVersion": 7,
                    "readerFeatures": ["vacuumProtocolCheck"],
                    "writerFeatures": ["vacuumProtocolCheck"],
                }
            }
        )
        + "\n"
    )
    assert vacuum(str(root), now_ms=NOW).files == ["gone-8d.parquet", "old-stray.parquet"]


# --- listing ------------------------------------------------------------------------------------


def test_prefix_listings_add_up_to_the_whole_listing(tmp_path: Path) -> None:
    root = tmp_path / "t"
    root.mkdir()
    for name in ("a.parquet", "p=1/b.parquet", "p=1/q=2/c.parquet", "p=2/d.parquet", "_h/e"):
        touch(root / name)
    store = log_store_for(str(root))
    partitions = frozenset({"p", "q"})
    protected = {"p=2/d.parquet"}
    whole = list_sequential(store, partitions, protected)
    top, subdirs = list_top_level(store, partitions, protected)
    assert sorted(subdirs) == ["p=1", "p=2"]
    parts = DirectoryListing.merge(
        [top, *(list_tree(store, [d], partitions, protected) for d in subdirs)]
    )
    assert (
        sorted(whole.files.column("path").to_pylist())
        == sorted(parts.files.column("path").to_pylist())
        == ["a.parquet", "p=1/b.parquet", "p=1/q=2/c.parquet"]
    )
    assert whole.num_seen == parts.num_seen == 4
    assert sorted(d[0] for d in whole.dirs) == sorted(d[0] for d in parts.dirs)


def test_lite_mode_scans_crowded_directories_exactly(tmp_path: Path) -> None:
    """A directory with many candidates is scanned once instead of stat'ed per file:
    the outcome must be the same (missing files, symlinks and directories are not
    files to delete; a tombstone without a size gets the file's). A dry run does
    not look: it lists every candidate, sized by the log (else the file)."""
    root = tmp_path / "t"
    outside = touch(tmp_path / "outside" / "target.parquet")
    names = [f"p=1/f{i:03d}.parquet" for i in range(80)]
    removes = [remove(n, OLD, size=1) for n in names]
    removes[0]["remove"].pop("size")
    write_log(
        root,
        [[add(n, size=1) for n in names], removes],
        partition_columns=("p",),
    )
    for name in names[:-3]:
        touch(root / name, data=b"12345")
    (root / names[-3]).symlink_to(outside)  # a symlink named by a tombstone
    (root / names[-2]).mkdir()  # a directory named by a tombstone
    # names[-1] is missing
    report = vacuum(str(root), lite=True, dry_run=True, now_ms=NOW)
    assert report.files == names
    assert report.total_bytes == 5 + (len(names) - 1) * 1  # logged sizes; the file's for f000
    done = vacuum(str(root), lite=True, now_ms=NOW)
    assert done.files == names[:-3]
    assert done.total_bytes == 5 + (len(names) - 4) * 1
    assert outside.exists() and (root / names[-3]).is_symlink() and (root / names[-2]).is_dir()


# --- Hadoop checksum files (issue 31) -----------------------------------------------------------


def test_hadoop_checksum_files_go_with_their_files(tmp_path: Path) -> None:
    """delta-spark writes its data files through Hadoop's local file system, which
    keeps a checksum file (``.<name>.crc``) beside each. VACUUM never lists, counts
    or reports one as a data file; deletes it with its file in both modes (as
    delta-spark's VACUUM does, through Hadoop); deletes one whose file is gone once
    it is older than the retention; keeps those of files that stay and of hidden
    files; and removes a directory left holding nothing but such leftovers."""
    root = tmp_path / "t"
    write_log(
        root,
        [
            [add("p=1/live.parquet"), add("p=1/tombstoned.parquet"), add("p=2/b.parquet")],
            [remove("p=1/tombstoned.parquet", OLD), remove("p=2/b.parquet", OLD)],
        ],
        partition_columns=("p",),
    )
    names = ["p=1/live.parquet", "p=1/tombstoned.parquet", "p=2/b.parquet", "p=1/stray.parquet"]
    crcs = {}
    for name in [*names, "p=1/_tmp.parquet"]:
        crcs[name] = write_crc(touch(root / name, data=b"bytes of " + name.encode()))
        os.utime(crcs[name], ns=(OLD * 1_000_000, OLD * 1_000_000))
    touch(root / "p=1" / ".gone.parquet.crc")  # its file deleted by another tool, long ago
    young = touch(root / "p=1" / ".young.parquet.crc", at_ms=NOW)  # maybe a writer's: kept
    touch(root / "p=3" / ".x.parquet.crc")  # a directory holding only a leftover

    def age_directories() -> None:
        for directory in ("p=1", "p=2", "p=3"):
            os.utime(root / directory, ns=(OLD * 1_000_000, OLD * 1_000_000))

    age_directories()
    lite = vacuum(str(root), lite=True, now_ms=NOW)
    assert lite.files == ["p=1/tombstoned.parquet", "p=2/b.parquet"]
    assert not crcs["p=1/tombstoned.parquet"].exists() and not crcs["p=2/b.parquet"].exists()
    age_directories()  # the deletions touched them

    dry = vacuum(str(root), dry_run=True, now_ms=NOW)
    assert dry.files == ["p=1/stray.parquet"]
    assert dry.num_listed == 2  # live and stray: no checksum file, no hidden file
    assert dry.orphan_crcs_deleted == 2 and dry.dirs == ["p=2", "p=3"]
    real = vacuum(str(root), now_ms=NOW)
    assert real.files == dry.files and real.total_bytes == dry.total_bytes
    assert real.orphan_crcs_deleted == 2 and real.dirs == dry.dirs
    assert not crcs["p=1/stray.parquet"].exists()
    assert crc_matches(crcs["p=1/live.parquet"]) and crc_matches(crcs["p=1/_tmp.parquet"])
    assert orphan_crcs(root) == [str(young.relative_to(root))]
    assert disagreeing_crcs(root) == []
    assert not (root / "p=2").exists() and not (root / "p=3").exists()
