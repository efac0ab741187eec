"""OPTIMIZE: compaction bin-packs small files (per partition, partition
filters), purges rows deleted by deletion vectors, commits adds and removes
with dataChange=false and delta-spark's OPTIMIZE metrics; z-order gives
files tight min/max ranges; the rows never change; peers read the result."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raydelta
from raydelta.protocol.errors import InvalidArgumentError
from tests.dml.test_merge import make, sort


def log_actions(table: raydelta.Table, version: int) -> list[dict[str, Any]]:
    path = os.path.join(table.uri.removeprefix("file://"), "_delta_log", f"{version:020d}.json")
    with open(path) as log:
        return [json.loads(line) for line in log]


def small_files_table(
    tmp: Path, flavour: str = "plain"
) -> tuple[raydelta.Table, list[dict[str, Any]]]:
    table, expected = make(tmp, flavour)  # 3 appends: 3 files per partition
    return table, expected


def test_compact_bin_packs_each_partition(ray_cluster: Any, tmp_path: Path) -> None:
    import deltalake

    table, expected = small_files_table(tmp_path)
    before = table.snapshot().files.num_rows
    metrics = table.optimize.compact()
    after = table.snapshot().files.to_pylist()
    assert before == 6 and len(after) == 2
    assert metrics.num_removed_files == 6 and metrics.num_added_files == 2
    assert metrics.partitions_optimized == 2 and metrics.num_batches == 2
    assert sort(table.to_arrow().to_pylist()) == sort(expected)
    actions = log_actions(table, table.snapshot().version)
    assert all(a["add"]["dataChange"] is False for a in actions if "add" in a)
    assert all(a["remove"]["dataChange"] is False for a in actions if "remove" in a)
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info["operation"] == "OPTIMIZE"
    assert info["operationMetrics"]["numRemovedFiles"] == "6"
    assert info["operationMetrics"]["numAddedFiles"] == "2"
    assert json.loads(info["operationParameters"]["zOrderBy"]) == []
    path = table.uri.removeprefix("file://")
    assert sort(deltalake.DeltaTable(path).to_pyarrow_table().to_pylist()) == sort(expected)
    # nothing left to compact: no commit
    version = table.snapshot().version
    assert table.optimize.compact().num_removed_files == 0
    assert table.snapshot().version == version


def test_partition_filters_and_target_size(ray_cluster: Any, tmp_path: Path) -> None:
    table, expected = small_files_table(tmp_path)
    table.optimize.compact(partition_filters=[("part", "=", "a")])
    parts = [dict(f["partitionValues"])["part"] for f in table.snapshot().files.to_pylist()]
    assert sorted(parts) == ["a", "b", "b", "b"]
    assert sort(table.to_arrow().to_pylist()) == sort(expected)
    sizes = sorted(f["size"] for f in table.snapshot().files.to_pylist())
    table.optimize.compact(target_size=sizes[0] + 1)  # every b file is "big enough" but one
    assert table.snapshot().files.num_rows >= 3
    with pytest.raises(InvalidArgumentError):
        table.optimize.compact(partition_filters=[("x", "=", "1")])
    with pytest.raises(InvalidArgumentError):
        table.optimize.compact(target_size=0)


def test_compaction_purges_deleted_rows(ray_cluster: Any, tmp_path: Path) -> None:
    table, expected = small_files_table(tmp_path, "dv")
    table.delete("x > 5")
    expected = [r for r in expected if r["x"] <= 5]
    assert any(f["deletionVector"] for f in table.snapshot().files.to_pylist())
    metrics = table.optimize.compact()
    files = table.snapshot().files.to_pylist()
    assert not any(f["deletionVector"] for f in files)
    assert metrics.num_deletion_vectors_removed > 0
    assert sum(json.loads(f["stats"])["numRecords"] for f in files) == len(expected)
    assert sort(table.to_arrow().to_pylist()) == sort(expected)


def _total_span(table: raydelta.Table, columns: list[str]) -> int:
    total = 0
    for f in table.snapshot().files.to_pylist():
        stats = json.loads(f["stats"])
        total += sum(stats["maxValues"][c] - stats["minValues"][c] for c in columns)
    return total


def test_z_order_gives_tight_ranges(ray_cluster: Any, tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("a", pa.int64()), ("b", pa.int64())])
    table = raydelta.create_table(str(tmp_path / "z"), schema)
    expected = []
    for chunk in range(4):
        ids = range(chunk * 500, chunk * 500 + 500)
        batch = [{"id": i, "a": i * 37 % 1000, "b": i * 91 % 997} for i in ids]
        table.append(pa.Table.from_pylist(batch, schema=schema))
        expected += batch
    metrics = table.optimize.z_order(["a", "b"], target_size=2_000)
    files = table.snapshot().files.num_rows
    assert files >= 16 and metrics.num_added_files == files
    # the spans of the files, against files of the same count cut in id order
    by_id = sorted(expected, key=lambda r: r["id"])
    size = -(-len(by_id) // files)
    naive = sum(
        max(r[c] for r in by_id[i : i + size]) - min(r[c] for r in by_id[i : i + size])
        for i in range(0, len(by_id), size)
        for c in ("a", "b")
    )
    assert _total_span(table, ["a", "b"]) * 2 < naive
    got = sorted(table.to_arrow().to_pylist(), key=lambda r: r["id"])
    assert got == sorted(expected, key=lambda r: r["id"])
    info = table.history(limit=1)[0].commit_info
    assert info is not None and json.loads(info["operationParameters"]["zOrderBy"]) == ["a", "b"]


def test_z_order_bad_columns(ray_cluster: Any, tmp_path: Path) -> None:
    table, _ = small_files_table(tmp_path)
    version = table.snapshot().version
    for columns in (["nope"], ["part"], []):
        with pytest.raises(InvalidArgumentError):
            table.optimize.z_order(columns)
    assert table.snapshot().version == version
