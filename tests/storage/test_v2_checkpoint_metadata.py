"""A V2 checkpoint must hold exactly one ``checkpointMetadata`` of its version.

PROTOCOL.md, "V2 Spec": "Each v2 spec checkpoint includes exactly one
Checkpoint Metadata action"; a UUID-named checkpoint follows the V2 spec, and
so does a classic-named one that names sidecars. The tables are delta-spark's
golden V2 tables (JSON and parquet top-level files, with sidecars), copied
and damaged here: the ``checkpointMetadata`` dropped, doubled, or naming
another version, or a classic-named copy of the top-level file without it.

- With the commits that the checkpoint covers still there, every reader
  (``load_snapshot`` latest and at the checkpoint's version,
  ``load_table_head``, ``iter_live_files``, VACUUM's log view, the
  checkpoint driver's ``read_log_delta``) rebuilds the table from the
  commits, without the checkpoint, and reads what deltalake reads from the
  undamaged table.
- With the checkpoint the only source of its version (the commits gone),
  every reader raises :class:`InvalidCheckpointError`, where deltalake
  1.6.6 returns a snapshot read from the invalid checkpoint.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from raydelta.protocol.errors import InvalidCheckpointError
from raydelta.storage.checkpoint.sources import read_log_delta
from raydelta.storage.cleanup.log_references import load_vacuum_view
from raydelta.storage.live_files import iter_live_files
from raydelta.storage.log.store import log_store_for
from raydelta.storage.snapshot import Snapshot, load_snapshot, load_table_head

LOG = "_delta_log"
VERSION = 2


def _top(root: Path, suffix: str) -> Path:
    return next((root / LOG).glob(f"{VERSION:020d}.checkpoint.*-*.{suffix}"))


def _json_lines(change: Callable[[list[str]], list[str]]) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        top = _top(root, "json")
        top.write_text("".join(x + "\n" for x in change(top.read_text().splitlines()) if x))

    return mutate


def _is_metadata(line: str) -> bool:
    return '"checkpointMetadata"' in line


def _parquet_rows(change: Callable[[pa.Table], pa.Table], *, classic: bool = False) -> Any:
    def mutate(root: Path) -> None:
        top = _top(root, "parquet")
        table = change(pq.read_table(top))
        if classic:  # the same content under the classic name, the UUID one gone
            top.unlink()
            top = root / LOG / f"{VERSION:020d}.checkpoint.parquet"
        pq.write_table(table, top)

    return mutate


def _without_metadata_rows(table: pa.Table) -> pa.Table:
    return table.filter(pc.is_null(table.column("checkpointMetadata"))).drop_columns(
        ["checkpointMetadata"]
    )


DAMAGE: dict[str, tuple[str, Callable[[Path], None]]] = {
    "json-none": (
        "v2-checkpoint-json",
        _json_lines(lambda ls: [x for x in ls if not _is_metadata(x)]),
    ),
    "json-two": (
        "v2-checkpoint-json",
        _json_lines(lambda ls: ls + [x for x in ls if _is_metadata(x)]),
    ),
    "json-other-version": (
        "v2-checkpoint-json",
        _json_lines(
            lambda ls: [
                json.dumps({"checkpointMetadata": {"version": 7}}) if _is_metadata(x) else x
                for x in ls
            ]
        ),
    ),
    "parquet-none": ("v2-checkpoint-parquet", _parquet_rows(_without_metadata_rows)),
    "classic-named-with-sidecars-none": (
        "v2-checkpoint-parquet",
        _parquet_rows(_without_metadata_rows, classic=True),
    ),
}


def _copy(golden_root: Path, name: str, under: Path) -> Path:
    target = under / name
    shutil.copytree(golden_root / name, target)
    for path in target.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


def _files(table: pa.Table) -> dict[str, int]:
    return {unquote(r["path"]): r["size"] for r in table.select(["path", "size"]).to_pylist()}


def _peer(root: Path, version: int | None = None) -> dict[str, int]:
    adds = pa.table(deltalake.DeltaTable(str(root), version=version).get_add_actions(flatten=True))
    rows = adds.select(["path", "size_bytes"]).to_pylist()
    return {unquote(r["path"]): r["size_bytes"] for r in rows}


def _readers(root: Path) -> dict[str, Callable[[], Any]]:
    uri = str(root)
    return {
        "snapshot": lambda: load_snapshot(uri),
        "snapshot-at-checkpoint": lambda: load_snapshot(uri, version=VERSION),
        "head": lambda: load_table_head(uri),
        "live files": lambda: pa.concat_tables(list(iter_live_files(uri))),
        "vacuum view": lambda: load_vacuum_view(uri, log_store_for(uri)),
        "checkpoint driver": lambda: read_log_delta(log_store_for(uri)),
    }


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_with_older_commits_the_invalid_checkpoint_is_passed_over(
    golden_root: Path, tmp_path: Path, case: str
) -> None:
    name, damage = DAMAGE[case]
    root = _copy(golden_root, name, tmp_path)
    damage(root)
    expected = _peer(golden_root / name)
    out = {reader: read() for reader, read in _readers(root).items()}
    for reader in ("snapshot", "snapshot-at-checkpoint"):
        snapshot = out[reader]
        assert isinstance(snapshot, Snapshot)
        assert snapshot.log_segment is not None and snapshot.log_segment.checkpoint is None
        assert _files(snapshot.files) == _peer(golden_root / name, VERSION) == expected
    assert out["head"].version == VERSION
    assert _files(out["live files"]) == expected
    view = out["vacuum view"]
    assert {unquote(p) for p in view.files.column("path").to_pylist()} == set(expected)
    delta = out["checkpoint driver"]
    assert delta.previous is None and delta.version == VERSION  # built from the commits
    assert _files(delta.adds) == expected


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_as_the_only_source_of_its_version_it_is_a_typed_error(
    golden_root: Path, tmp_path: Path, case: str
) -> None:
    name, damage = DAMAGE[case]
    root = _copy(golden_root, name, tmp_path)
    damage(root)
    for version in range(VERSION + 1):
        (root / LOG / f"{version:020d}.json").unlink()
    for reader, read in _readers(root).items():
        with pytest.raises(InvalidCheckpointError, match="checkpointMetadata"):
            read()
            pytest.fail(f"{reader} read a table from an invalid checkpoint")
    if case == "json-none":
        # deltalake reads a snapshot from it all the same (not a behaviour to copy)
        assert len(deltalake.DeltaTable(str(root)).file_uris()) == len(_peer(golden_root / name))


def test_the_undamaged_v2_checkpoints_are_used(golden_root: Path, tmp_path: Path) -> None:
    for name in ("v2-checkpoint-json", "v2-checkpoint-parquet"):
        root = _copy(golden_root, name, tmp_path)
        for version in range(VERSION + 1):
            (root / LOG / f"{version:020d}.json").unlink()
        snapshot = load_snapshot(str(root))
        assert snapshot.log_segment is not None and snapshot.log_segment.checkpoint is not None
        assert _files(snapshot.files) == _peer(golden_root / name)
