"""The synthetic-table builder writes a log that delta-rs and raydelta read alike.

Small tables only (about 2k files, with real data files), so this stays fast;
the million-file table is exercised by ``benchmarks/snapshot_load.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from benchmarks.table_builder import CHECKPOINT_SCHEMA, BuiltTable, build_large_table

deltalake = pytest.importorskip("deltalake")


def _build(tmp_path: Path, **options: object) -> BuiltTable:
    return build_large_table(
        tmp_path / "table",
        seed=7,
        max_records_per_file=20,
        write_data_files=True,
        **options,  # type: ignore[arg-type]
    )


def _ours(built: BuiltTable) -> pa.Table:
    from raydelta.storage.snapshot import load_snapshot

    snapshot = load_snapshot(built.uri)
    assert snapshot.version == built.version
    return snapshot.files


def _by_path(paths: pa.ChunkedArray, values: pa.Array | pa.ChunkedArray) -> dict[str, object]:
    return dict(zip(paths.to_pylist(), values.to_pylist(), strict=True))


def _peer(built: BuiltTable) -> tuple[object, pa.Table]:
    table = deltalake.DeltaTable(built.path)
    return table, pa.table(table.get_add_actions(flatten=True))


@pytest.mark.parametrize(
    ("num_files", "options"),
    [
        (2000, {"num_commits": 20}),
        (600, {"num_commits": 8, "partitioned": True, "num_partitions": 7}),
        (600, {"num_commits": 8, "checkpoint_kind": "multipart", "checkpoint_parts": 3}),
    ],
    ids=["classic", "partitioned", "multipart"],
)
def test_deltalake_and_raydelta_agree(
    tmp_path: Path, num_files: int, options: dict[str, object]
) -> None:
    built = _build(tmp_path, num_files=num_files, **options)
    peer_table, peer_files = _peer(built)
    ours = _ours(built)

    assert peer_table.version() == built.version  # type: ignore[attr-defined]
    assert peer_files.num_rows == ours.num_rows == built.num_live_files
    peer_sizes = _by_path(peer_files["path"], peer_files["size_bytes"])
    our_sizes = _by_path(ours["path"], ours["size"])
    assert len(our_sizes) == built.num_live_files  # paths are unique
    assert peer_sizes == our_sizes
    if built.partitioned:
        our_parts = [dict(values)["part"] for values in ours["partitionValues"].to_pylist()]
        assert _by_path(peer_files["path"], peer_files["partition.part"]) == _by_path(
            ours["path"], pa.array(our_parts)
        )

    # The log's numRecords match the data delta-rs actually reads.
    assert pc.sum(peer_files["num_records"]).as_py() == built.num_live_records
    assert peer_table.to_pyarrow_table().num_rows == built.num_live_records  # type: ignore[attr-defined]


def test_stats_describe_the_data_files(tmp_path: Path) -> None:
    built = _build(tmp_path, num_files=50, num_commits=2, partitioned=True)
    _, files = _peer(built)
    for row in files.to_pylist():
        data = pq.read_table(Path(built.path) / row["path"])
        assert data.num_rows == row["num_records"]
        assert pc.min(data["id"]).as_py() == row["min.id"]
        assert pc.max(data["id"]).as_py() == row["max.id"]
        assert pc.min(data["value"]).as_py() == row["min.value"]
        assert pc.max(data["value"]).as_py() == row["max.value"]
        assert (Path(built.path) / row["path"]).stat().st_size == row["size_bytes"]


def test_checkpoint_layout(tmp_path: Path) -> None:
    built = build_large_table(tmp_path / "t", num_files=100, num_commits=3)
    log = Path(built.path) / "_delta_log"
    checkpoint = pq.read_table(log / built.checkpoint_files[0])
    assert checkpoint.schema.names == ["txn", "add", "remove", "metaData", "protocol"]
    assert checkpoint.schema.equals(CHECKPOINT_SCHEMA)
    assert checkpoint.num_rows == 100 + 2
    assert checkpoint["add"].null_count == 2
    assert checkpoint["protocol"].null_count == checkpoint.num_rows - 1
    stats = json.loads(checkpoint["add"].drop_null()[0]["stats"].as_py())
    assert set(stats) == {"numRecords", "minValues", "maxValues", "nullCount"}
    last = json.loads((log / "_last_checkpoint").read_text())
    assert last["version"] == built.checkpoint_version
    assert last["size"] == checkpoint.num_rows
    commits = sorted(p.name for p in log.glob("*.json"))
    assert commits[0] == f"{0:020d}.json"
    assert commits[-1] == f"{built.version:020d}.json"
    assert len(commits) == 1 + 3


def test_building_twice_is_deterministic(tmp_path: Path) -> None:
    first = build_large_table(tmp_path / "a", num_files=300, num_commits=4, seed=3)
    second = build_large_table(tmp_path / "b", num_files=300, num_commits=4, seed=3)
    for name in first.checkpoint_files:
        a = pq.read_table(Path(first.path) / "_delta_log" / name)
        b = pq.read_table(Path(second.path) / "_delta_log" / name)
        assert a.equals(b)
    assert first.num_live_records == second.num_live_records
