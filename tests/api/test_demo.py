"""``raydelta demo``: the main job runs end to end and says what it did."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import raydelta
from raydelta.demo import run_demo


@pytest.mark.slow
def test_demo_runs_end_to_end_and_leaves_the_table(workdir: Path, spark: Any) -> None:
    lines: list[str] = []
    result = run_demo(
        str(workdir / "demo"), writers=3, commits_per_writer=3, rows_per_commit=50, say=lines.append
    )
    # 9 Ray commits after the create, then the Spark append
    assert result["version"] == 10 and result["commits"] == 9
    assert result["spark"].startswith("appended 50 rows")
    assert 0 <= result["rebased"] <= result["commits"]
    assert result["rows"] == 9 * 50 + 50
    assert result["sidecars"] >= 1 and result["vacuum_files"] == 0
    assert any("the same rows" in line for line in lines), lines
    table = raydelta.open_table(str(workdir / "demo" / "events"))
    assert table.to_arrow().num_rows == result["rows"]
    assert (workdir / "demo" / "events" / "_delta_log" / "_last_checkpoint").exists()

    again = run_demo(
        str(workdir / "demo"),
        writers=2,
        commits_per_writer=1,
        rows_per_commit=10,
        spark=False,
        say=lines.append,
    )
    assert again["version_before"] == 10 and again["version"] == 12
