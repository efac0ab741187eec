"""A classic multi-part checkpoint whose parts hold only some action columns.

The spec says a column a checkpoint does not have "should be treated as
null": a part holding only ``txn`` has no ``add`` rows, and deltalake
(delta-kernel-rs) reads such a table. The table is built here
(:mod:`tests.storage.partial_checkpoints`: parts holding only ``txn``,
others every column; the checkpoint is the only source of its version),
and every storage reader of checkpoint parts must read what deltalake
reads: ``load_snapshot`` (live files, app transactions, tombstones),
``load_table_head``, the streamed ``iter_live_files`` and VACUUM's own log
read (``load_vacuum_view``, and its dry run against deltalake's). A column
that is there with the wrong type is still refused by each of them, and so
is a checkpoint none of whose parts has an ``add`` column (it would read as
an empty table, and VACUUM would delete every live file).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote

import deltalake
import pyarrow as pa
import pytest

from raydelta.protocol.errors import CorruptLogError
from raydelta.storage.cleanup.log_references import load_vacuum_view
from raydelta.storage.cleanup.vacuum import vacuum
from raydelta.storage.live_files import iter_live_files
from raydelta.storage.log.store import log_store_for
from raydelta.storage.snapshot import load_snapshot, load_table_head
from tests.storage.partial_checkpoints import (
    CHECKPOINT_VERSION,
    build_partial_multipart,
    read_part,
    rewrite_part,
)

APPS = ("app0", "app1", "app2", "app3")


@pytest.fixture
def table(tmp_path: Path) -> Path:
    return build_partial_multipart(tmp_path / "partial")


def _peer_files(root: Path, version: int | None = None) -> dict[str, int]:
    adds = pa.table(deltalake.DeltaTable(str(root), version=version).get_add_actions(flatten=True))
    return {
        unquote(r["path"]): r["size_bytes"] for r in adds.select(["path", "size_bytes"]).to_pylist()
    }


def _files(files: pa.Table) -> dict[str, int]:
    return {unquote(r["path"]): r["size"] for r in files.select(["path", "size"]).to_pylist()}


def test_parts_holding_only_txn_read_as_deltalake_reads_them(table: Path) -> None:
    peer = deltalake.DeltaTable(str(table))
    for version in (None, CHECKPOINT_VERSION):
        snapshot = load_snapshot(str(table), version=version)
        assert snapshot.version == (peer.version() if version is None else version)
        assert _files(snapshot.files) == _peer_files(table, version)
    snapshot = load_snapshot(str(table))
    assert snapshot.txns == {app: peer.transaction_version(app) for app in APPS}
    assert snapshot.all_tombstones.num_rows == 1  # part 5's remove
    head = load_table_head(str(table))
    assert head.version == peer.version()
    assert {app: t.version for app, t in head.txns.items()} == snapshot.txns
    streamed = pa.concat_tables(list(iter_live_files(str(table), batch_rows=1)))
    assert _files(streamed) == _peer_files(table)


def test_vacuum_reads_the_parts_as_deltalake_does(table: Path) -> None:
    view = load_vacuum_view(str(table), log_store_for(str(table)))
    assert not isinstance(view, Exception)
    assert {unquote(p) for p in view.files.column("path").to_pylist()} == set(_peer_files(table))
    assert view.all_tombstones.num_rows == 1
    ours = vacuum(str(table), retention_hours=0, force=True, dry_run=True)
    theirs = deltalake.DeltaTable(str(table)).vacuum(
        retention_hours=0, dry_run=True, enforce_retention_duration=False
    )
    assert {unquote(p) for p in ours.files} == {unquote(p) for p in theirs}
    assert not set(ours.files) & set(_peer_files(table))  # no live file is a candidate


def _readers(root: Path) -> dict[str, Any]:
    uri = str(root)
    return {
        "snapshot": lambda: load_snapshot(uri),
        "live files": lambda: list(iter_live_files(uri)),
        "vacuum view": lambda: load_vacuum_view(uri, log_store_for(uri)),
        "vacuum": lambda: vacuum(uri, retention_hours=0, force=True, dry_run=True),
    }


def _int_column(table: pa.Table, name: str) -> pa.Table:
    position = table.schema.get_field_index(name)
    return table.set_column(position, name, pa.nulls(table.num_rows, pa.int64()))


def _damage(parts: tuple[int, ...], change: Any) -> Any:
    def damage(root: Path) -> None:
        for part in parts:
            rewrite_part(root, part, change(read_part(root, part)))

    return damage


DAMAGE = {
    # a txn-only part whose txn is not a struct
    "txn-column-int": (_damage((4,), lambda t: _int_column(t, "txn")), ("snapshot", "live files")),
    # the part with the adds, its add column of the wrong type
    "add-column-int": (
        _damage((3,), lambda t: _int_column(t, "add")),
        ("snapshot", "live files", "vacuum view", "vacuum"),
    ),
    # no part has an add column at all: the table would read as empty
    "no-part-has-add": (
        _damage((2, 3, 5), lambda t: t.drop_columns(["add"])),
        ("snapshot", "live files", "vacuum view", "vacuum"),
    ),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_mistyped_column_or_no_add_column_anywhere_is_refused(table: Path, case: str) -> None:
    damage, refused_by = DAMAGE[case]
    damage(table)
    for name, read in _readers(table).items():
        if name in refused_by:
            with pytest.raises(CorruptLogError):
                read()
        else:
            read()  # VACUUM reads no txn: its view of the table is unharmed
