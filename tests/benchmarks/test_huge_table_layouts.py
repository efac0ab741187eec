"""The huge-table builder lays its checkpoint out as asked (issue 32): rows per
row group and one file or a multi-part checkpoint; every layout reads as
the same table (raydelta and deltalake), and the series records the layout
in its rows and goals. Small tables only (3,000 files)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmarks.huge_table_build import build, table_params
from benchmarks.huge_table_report import goals, render_markdown
from benchmarks.huge_table_series import Series, parse_layout
from raydelta.storage.snapshot import load_snapshot

deltalake = pytest.importorskip("deltalake")

NUM_FILES = 3_000


@pytest.mark.parametrize(
    ("rows_per_group", "parts"), [(None, 1), (256, 1), (NUM_FILES * 2, 1), (500, 3)]
)
def test_each_layout_is_the_same_table(
    tmp_path: Path, rows_per_group: int | None, parts: int
) -> None:
    params = table_params(
        NUM_FILES, num_commits=3, rows_per_group=rows_per_group, checkpoint_parts=parts
    )
    built = build(tmp_path / "table", params)
    layout = built["checkpoint_layout"]
    assert layout["parts"] == len(built["checkpoint_files"]) == parts
    groups = [
        meta.row_group(i).num_rows
        for meta in (pq.ParquetFile(p).metadata for p in built["checkpoint_files"])
        for i in range(meta.num_row_groups)
    ]
    assert sum(groups) == NUM_FILES + 2 and layout["row_groups"] == len(groups)
    if rows_per_group is not None:
        assert max(groups) == layout["max_rows_per_group"] == min(rows_per_group, NUM_FILES + 2)
    snapshot = load_snapshot(built["uri"])
    assert snapshot.version == built["version"]
    assert snapshot.num_files == built["num_live_files"]
    assert snapshot.log_segment is not None and snapshot.log_segment.checkpoint is not None
    assert len(snapshot.log_segment.checkpoint.files) == parts
    peer = pa.table(deltalake.DeltaTable(built["uri"]).get_add_actions(flatten=True))
    assert sorted(peer.column("path").to_pylist()) == sorted(
        snapshot.files.column("path").to_pylist()
    )


def test_defaults_keep_the_cache_key() -> None:
    assert "rows_per_group" not in table_params(10) and "checkpoint_parts" not in table_params(10)
    with pytest.raises(ValueError):
        table_params(10, checkpoint_parts=0)


def test_layouts_parse_and_label_rows() -> None:
    assert parse_layout("auto")["rows_per_group"] is None
    assert parse_layout("1m") == {
        "label": "1m",
        "rows_per_group": 1_000_000,
        "checkpoint_parts": 1,
    }
    assert parse_layout("64kx10")["checkpoint_parts"] == 10
    with pytest.raises(ValueError):
        parse_layout("0x2")
    series = Series()
    run = [{"seconds": 2.0, "peak_rss_mb": 100.0}]
    series.row(10_000_000, "checkpoint", "ours", run)
    series.layout = "1m"
    series.row(10_000_000, "checkpoint", "ours", run)
    series.row(10_000_000, "checkpoint_limit", "pyarrow", [{"seconds": 1.0, "peak_rss_mb": 1.0}])
    assert [r["step"] for r in series.rows] == [
        "checkpoint",
        "checkpoint@1m",
        "checkpoint_limit@1m",
    ]
    assert series.rows[1]["checkpoint_layout"] == "1m"
    found = goals(series.rows)
    assert found["checkpoint_10000000@1m_over_pyarrow<=2"]["value"] == 2.0
    assert found["10m@1m_every_process_rss_mb<=2GB"]["met"] is True
    table = {
        "10m": {
            f"{r['step']}/{r['engine']}": {"s": r["seconds"], "peak_rss_mb": r["peak_rss_mb"]}
            for r in series.rows
        }
    }
    assert "| 10m | 1m |" in render_markdown({"table": table})
