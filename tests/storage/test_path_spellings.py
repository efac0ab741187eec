"""A file named by a relative path and by an absolute URI under the table root
is one file for snapshots (reconciliation), VACUUM and data reads.

The tables are written by deltalake (delta-rs), which writes relative,
percent-encoded paths for partition values with special characters; a
foreign writer's commit (a JSON file put in ``_delta_log`` as any writer
would) then names the same files by absolute ``file://`` URIs, by plain
absolute paths, or with a different encoding. The expected file sets are
deltalake's own list, minus what the foreign commit removes. deltalake
encodes the ``%`` of a Hive-escaped directory name (``part=a%20b`` on disk)
as ``%25``, so decoding twice would name a file that does not exist.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from raydelta.protocol.actions import parse_actions
from raydelta.protocol.file_actions import canonical_path, table_root_key
from raydelta.protocol.file_names import commit_name
from raydelta.protocol.reconciliation import TableState, apply_commits
from raydelta.storage.checkpoint.sources import (
    checkpoint_pieces,
    read_log_delta,
    write_v1_streaming,
)
from raydelta.storage.checkpoint.writer import write_v1_checkpoint
from raydelta.storage.cleanup.vacuum import vacuum
from raydelta.storage.data.files import read_logical_file
from raydelta.storage.log.store import log_store_for
from raydelta.storage.snapshot import load_snapshot

VALUES = ["a b", "c%d", "e=f", "g#h", "ü/v"]


def _write(path: Path) -> DeltaTable:
    table = pa.table({"id": list(range(len(VALUES))), "part": VALUES})
    write_deltalake(str(path), table, partition_by=["part"])
    return DeltaTable(str(path))


def _spell(root: Path, raw: str, how: str) -> str:
    """``raw`` (a log path as deltalake wrote it) spelled another way."""
    decoded = canonical_path(raw)
    absolute = f"{root}/{decoded}"
    if how == "file-uri":
        return "file://" + quote(absolute, safe="/")
    if how == "file-colon":
        return "file:" + quote(absolute, safe="/")
    if how == "absolute":
        return quote(absolute, safe="/")
    if how == "every-byte":
        return "".join(f"%{b:02X}" for b in decoded.encode())
    raise AssertionError(how)


def _foreign_commit(root: Path, version: int, actions: list[dict[str, object]]) -> None:
    info = {"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "DELETE"}}
    lines = [json.dumps(info)] + [json.dumps(a) for a in actions]
    (root / "_delta_log" / commit_name(version)).write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("how", ["file-uri", "file-colon", "absolute", "every-byte"])
def test_a_remove_spelled_differently_removes_the_file(tmp_path: Path, how: str) -> None:
    root = tmp_path / "t"
    dt = _write(root)
    written = sorted(dt.file_uris())
    snap = load_snapshot(str(root))
    raw_paths = snap.files.column("path").to_pylist()
    assert len(raw_paths) == len(written) == len(VALUES)
    doomed = raw_paths[0]
    removed_as = _spell(root, doomed, how)
    assert removed_as != doomed
    _foreign_commit(
        root,
        snap.version + 1,
        [{"remove": {"path": removed_as, "deletionTimestamp": 1, "dataChange": True}}],
    )
    after = load_snapshot(str(root))
    assert sorted(after.files.column("path").to_pylist()) == sorted(raw_paths[1:])
    assert after.all_tombstones.column("path").to_pylist() == [removed_as]
    # the same file again, spelled as written: one logical file, re-added
    readd = snap.files.slice(0, 1).to_pylist()[0]
    readd = {k: v for k, v in readd.items() if v is not None}
    readd["partitionValues"] = dict(readd["partitionValues"])
    _foreign_commit(root, after.version + 1, [{"add": readd}])
    again = load_snapshot(str(root))
    assert sorted(again.files.column("path").to_pylist()) == sorted(raw_paths)
    assert again.all_tombstones.num_rows == 0


def test_vacuum_protects_a_file_named_by_an_absolute_uri_and_deletes_its_stale_twin(
    tmp_path: Path,
) -> None:
    root = tmp_path / "t"
    _write(root)
    snap = load_snapshot(str(root))
    first, second = snap.files.column("path").to_pylist()[:2]
    # re-reference `first` by an absolute URI (remove the relative spelling,
    # add the absolute one, as a writer relocating the reference would): the
    # file stays live and VACUUM must keep it.
    add = {k: v for k, v in snap.files.slice(0, 1).to_pylist()[0].items() if v is not None}
    add["partitionValues"] = dict(add["partitionValues"])
    add["path"] = _spell(root, first, "file-uri")
    _foreign_commit(
        root,
        snap.version + 1,
        [
            {"remove": {"path": first, "deletionTimestamp": 1, "dataChange": False}},
            {"add": add},
            {"remove": {"path": _spell(root, second, "absolute"), "deletionTimestamp": 1}},
        ],
    )
    after = load_snapshot(str(root))
    root_key = table_root_key(str(root))
    live = {canonical_path(p, root_key) for p in after.files.column("path").to_pylist()}
    assert canonical_path(first) in live and len(live) == len(VALUES) - 1
    report = vacuum(str(root), retention_hours=0, force=True, dry_run=True)
    assert report.files == [canonical_path(second)]
    store = log_store_for(str(root))
    for raw in after.files.column("path").to_pylist():
        assert Path(store.data_path(raw)).is_file()


def test_data_reads_decode_once(tmp_path: Path) -> None:
    root = tmp_path / "t"
    dt = _write(root)
    snap = load_snapshot(str(root))
    expected = dt.to_pyarrow_table().sort_by("id")
    rows = []
    for add in snap.files.to_pylist():
        for how in ("file-uri", "every-byte"):
            respelled = {
                **add,
                "path": _spell(root, add["path"], how),
                "partitionValues": dict(add["partitionValues"]),
            }
            rows.append(
                read_logical_file(
                    str(root), respelled, snap.schema, snap.metadata.partition_columns
                )
            )
    read = pa.concat_tables(rows).sort_by("id")
    assert read.column("id").to_pylist() == sorted(2 * expected.column("id").to_pylist())


def test_an_incremental_checkpoint_replaces_a_row_spelled_the_other_way(tmp_path: Path) -> None:
    """The previous checkpoint keys a file by an absolute URI; a later commit
    removes it by its relative path (and another the other way round): the
    streaming checkpoint built from the previous one plus the commits must
    not keep the stale row, so it reads like plain commit replay."""
    root = tmp_path / "t"
    _write(root)
    snap = load_snapshot(str(root))
    first, second = snap.files.column("path").to_pylist()[:2]
    add = {k: v for k, v in snap.files.slice(0, 1).to_pylist()[0].items() if v is not None}
    add["partitionValues"] = dict(add["partitionValues"])
    add["path"] = _spell(root, first, "file-uri")
    _foreign_commit(
        root,
        1,
        [{"remove": {"path": first, "deletionTimestamp": 1, "dataChange": False}}, {"add": add}],
    )
    store = log_store_for(str(root))
    now = int(time.time() * 1000)
    write_v1_checkpoint(store, load_snapshot(str(root)).state, now_ms=now)
    _foreign_commit(
        root,
        2,
        [
            {"remove": {"path": first, "deletionTimestamp": now, "dataChange": True}},
            {"remove": {"path": _spell(root, second, "file-uri"), "deletionTimestamp": now}},
        ],
    )
    root_key = table_root_key(str(root))
    # plain commit replay (no checkpoint), against the same root
    commits = [
        (v, parse_actions((root / "_delta_log" / commit_name(v)).read_bytes())) for v in range(3)
    ]
    expected = apply_commits(TableState(table_root=root_key), commits)
    delta = read_log_delta(store)
    assert delta.previous is not None and delta.previous.version == 1
    write_v1_streaming(store, delta, checkpoint_pieces(store, delta.previous), now_ms=now)
    got = load_snapshot(str(root))
    assert got.log_segment is not None and got.log_segment.checkpoint is not None
    assert got.log_segment.checkpoint.version == 2
    live = sorted(canonical_path(p, root_key) for p in got.files.column("path").to_pylist())
    assert live == sorted(
        canonical_path(p, root_key) for p in expected.adds.column("path").to_pylist()
    )
    assert canonical_path(first) not in live and canonical_path(second) not in live
    assert len(live) == len(VALUES) - 2
