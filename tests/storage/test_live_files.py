"""Bounded-memory reading: streamed checkpoints, live files in batches, the
path index a loaded snapshot carries.

Every streamed result is compared with what :func:`load_snapshot` (the whole
state in memory) gives for the same table and version.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from benchmarks.table_builder import build_large_table
from raydelta.protocol import path_index
from raydelta.protocol.actions import Action, AddFile, RemoveFile
from raydelta.protocol.file_actions import ADD_SCHEMA, table_keys
from raydelta.protocol.reconciliation import apply_commits
from raydelta.storage import snapshot
from raydelta.storage.checkpoint.writer import write_v2_checkpoint_single_process
from raydelta.storage.live_files import count_live_files, iter_live_files
from raydelta.storage.log import reader as log_reader
from raydelta.storage.log.store import log_store_for
from raydelta.storage.snapshot import load_snapshot

deltalake = pytest.importorskip("deltalake")


def rows_by_path(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: (r["path"], json.dumps(r, sort_keys=True)))


def streamed(uri: str, **options: Any) -> pa.Table:
    batches = list(iter_live_files(uri, **options))
    assert all(b.num_rows <= options.get("batch_rows", 1 << 30) for b in batches)
    return pa.concat_tables(batches) if batches else ADD_SCHEMA.empty_table()


@pytest.fixture(params=["classic", "multipart", "partitioned"])
def built(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    kind = "multipart" if request.param == "multipart" else "classic"
    build_large_table(
        tmp_path / "t",
        num_files=1_500,
        num_commits=6,
        partitioned=request.param == "partitioned",
        checkpoint_kind=kind,
        adds_per_commit=7,
        removes_per_commit=11,
    )
    return str(tmp_path / "t")


def test_streamed_checkpoint_equals_the_whole_file_read(
    built: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = load_snapshot(built)
    monkeypatch.setattr(log_reader, "STREAM_BATCH_ROWS", 97)
    # the default of iter_parquet_actions was bound at definition: pass it through
    original = log_reader.iter_parquet_actions

    def small_batches(*args: Any, **kwargs: Any) -> Any:
        kwargs["batch_rows"] = 97
        return original(*args, **kwargs)

    monkeypatch.setattr(log_reader, "iter_parquet_actions", small_batches)
    batched = load_snapshot(built)
    assert batched.num_files == whole.num_files
    assert rows_by_path(batched.files) == rows_by_path(whole.files)
    assert rows_by_path(batched.all_tombstones) == rows_by_path(whole.all_tombstones)


def test_live_files_stream_equals_the_snapshot(built: str) -> None:
    snap = load_snapshot(built)
    got = streamed(built, batch_rows=200)
    assert got.schema == ADD_SCHEMA
    assert rows_by_path(got) == rows_by_path(snap.files)
    assert count_live_files(built) == snap.num_files


def test_live_files_at_an_older_version(built: str) -> None:
    snap = load_snapshot(built, version=13)
    assert rows_by_path(streamed(built, version=13, batch_rows=333)) == rows_by_path(snap.files)


def test_columns_narrow_what_is_returned(built: str) -> None:
    snap = load_snapshot(built)
    got = streamed(built, columns=["path", "size"], batch_rows=500)
    assert got.column_names == ["path", "size"]
    assert rows_by_path(got) == rows_by_path(snap.files.select(["path", "size"]))
    with pytest.raises(ValueError, match="unknown add columns"):
        iter_live_files(built, columns=["nope"])


def test_a_commit_that_re_adds_a_file_with_a_deletion_vector_supersedes_it(
    tmp_path: Path,
) -> None:
    built = build_large_table(tmp_path / "t", num_files=300, num_commits=2)
    uri = str(tmp_path / "t")
    victim = load_snapshot(uri).files.slice(5, 1).to_pylist()[0]
    dv = {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f", "sizeInBytes": 6}
    dv["cardinality"] = 1
    version = built.version + 1
    lines = [
        {"commitInfo": {"timestamp": 1_700_000_100_000, "operation": "DELETE"}},
        {"remove": {"path": victim["path"], "deletionTimestamp": 1, "dataChange": True}},
        {
            "add": {
                "path": victim["path"],
                "partitionValues": {},
                "size": victim["size"],
                "modificationTime": victim["modificationTime"],
                "dataChange": True,
                "deletionVector": dv,
            }
        },
    ]
    name = tmp_path / "t" / "_delta_log" / f"{version:020d}.json"
    name.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    snap = load_snapshot(uri)
    assert snap.version == version
    got = streamed(uri, batch_rows=50)
    assert rows_by_path(got) == rows_by_path(snap.files)
    mine = [r for r in got.to_pylist() if r["path"] == victim["path"]]
    assert [r["deletionVector"]["cardinality"] for r in mine] == [1]


def _batch(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "part": pa.array([i % 3 for i in ids])})


def test_live_files_of_a_v2_checkpoint_with_sidecars(tmp_path: Path) -> None:
    path = tmp_path / "v2"
    write = deltalake.write_deltalake
    write(str(path), _batch(0, 30), partition_by=["part"], configuration={})
    deltalake.DeltaTable(str(path)).alter.add_feature(
        [deltalake.TableFeatures.V2Checkpoint], allow_protocol_versions_increase=True
    )
    for start in range(100, 400, 100):
        write(str(path), _batch(start, 5), partition_by=["part"], mode="append")
    first = load_snapshot(str(path))
    write_v2_checkpoint_single_process(
        log_store_for(str(path)),
        first.state,
        now_ms=int(time.time() * 1000),
        target_actions_per_sidecar=2,
        fmt="parquet",
    )
    deltalake.DeltaTable(str(path)).delete("id = 101 or id = 3")
    write(str(path), _batch(900, 2), partition_by=["part"], mode="append")
    snap = load_snapshot(str(path))
    assert snap.log_segment is not None and snap.log_segment.checkpoint is not None
    assert rows_by_path(streamed(str(path), batch_rows=3)) == rows_by_path(snap.files)


def test_a_loaded_snapshot_carries_a_path_index_and_folds_like_a_reload(
    built: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(path_index, "INDEX_MIN_ROWS", 100)
    monkeypatch.setattr(snapshot, "INDEX_MIN_ROWS", 100)
    snap = load_snapshot(built)
    index = snap.state.adds_index
    assert index is not None and index.describes(snap.state.adds)
    current = snap.files.column("path").to_pylist()
    probe = set(current[::37]) | set(current[-30:]) | {"absent.parquet"}
    assert index.rows_with_paths(probe) == [i for i, p in enumerate(current) if p in probe]
    gone = snap.files.slice(3, 2).column("path").to_pylist()
    actions: list[Action] = [
        RemoveFile(path=gone[0], deletionTimestamp=5, dataChange=True),
        RemoveFile(path=gone[1], deletionTimestamp=5, dataChange=True),
        AddFile(
            path="new.parquet",
            partitionValues=dict(snap.files.column("partitionValues")[0].as_py() or []),
            size=1,
            modificationTime=1,
            dataChange=True,
        ),
    ]
    folded = apply_commits(snap.state, [(snap.version + 1, actions)], keep_index=True)
    assert folded.adds_index is not None and folded.adds_index.describes(folded.adds)
    paths = set(folded.adds.column("path").to_pylist())
    assert not paths & set(gone) and "new.parquet" in paths
    assert folded.num_files == snap.num_files - 1


def test_table_keys_of_a_few_rows_equal_a_take(built: str) -> None:
    adds = load_snapshot(built).files
    assert adds.column("path").num_chunks >= 1
    rows = [0, 7, adds.num_rows - 1]
    taken = adds.take(pa.array(rows, pa.int64()))
    assert table_keys(adds, rows) == table_keys(taken)
    assert table_keys(adds, []) == []


def test_reading_modules_import_neither_ray_nor_the_catalog() -> None:
    """``raydelta``'s public names are imported on first use: a process that only
    reads snapshots does not pay for Ray or the catalog at import. (pandas comes
    with pyarrow's first ``pa.array``/``pa.scalar`` of Python values anyway.)"""
    import subprocess
    import sys

    code = (
        "import sys, raydelta.storage.snapshot, raydelta.storage.live_files, raydelta;"
        "print(sorted(m for m in ('ray', 'raydelta.catalog', 'raydelta.table')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_streamed_part_shows_its_columns_even_when_they_hold_no_row(tmp_path: Path) -> None:
    build_large_table(tmp_path / "t", num_files=50, num_commits=1)
    store = log_store_for(str(tmp_path / "t"))
    (part,) = [f for f in store.list_from(0) if f.is_checkpoint]
    tables = list(log_reader.iter_parquet_actions(store, store.path_of(part.name)))
    assert tables[0].num_rows == 0
    assert {"add", "remove", "metaData", "protocol"} <= set(tables[0].column_names)
    assert sum(t.num_rows for t in tables) >= 50
