"""The ``raydelta`` CLI contract: snapshot and history, JSON and text, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import deltalake
import pyarrow as pa

from raydelta.protocol.file_names import commit_name


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "raydelta.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )


def _table(path: Path, commits: int) -> None:
    for i in range(commits):
        deltalake.write_deltalake(str(path), pa.table({"id": [i]}), mode="append")


def test_history_json_lists_every_version_newest_first(tmp_path: Path) -> None:
    _table(tmp_path, 3)
    result = run_cli("history", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    entries = json.loads(result.stdout)
    assert [e["version"] for e in entries] == [2, 1, 0]
    for entry in entries:
        info = json.loads(
            (tmp_path / "_delta_log" / commit_name(entry["version"])).read_text().splitlines()[0]
        )["commitInfo"]
        assert entry["commitInfo"] == info
        assert entry["operation"] == info["operation"]
        mtime = int(
            os.stat(tmp_path / "_delta_log" / commit_name(entry["version"])).st_mtime * 1000
        )
        assert entry["timestamp"] >= mtime  # monotonized file times never go backwards
    limited = json.loads(run_cli("history", str(tmp_path), "--json", "--limit", "1").stdout)
    assert [e["version"] for e in limited] == [2]


def test_snapshot_time_travel_by_version_and_text_output(tmp_path: Path) -> None:
    _table(tmp_path, 3)
    document = json.loads(run_cli("snapshot", str(tmp_path), "--version", "1", "--json").stdout)
    assert document["version"] == 1
    assert len(document["files"]) == 2
    assert [f["path"] for f in document["files"]] == sorted(f["path"] for f in document["files"])
    text = run_cli("snapshot", str(tmp_path))
    assert text.returncode == 0 and "version    2" in text.stdout


def test_the_bundled_example_is_the_main_job() -> None:
    result = run_cli("snapshot", "example", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["version"] == 2
    assert "v2Checkpoint" in document["protocol"]["readerFeatures"]
    assert sum(f["numRecords"] for f in document["files"]) == 10


def test_errors_exit_non_zero_with_the_class_name_first(tmp_path: Path) -> None:
    result = run_cli("snapshot", str(tmp_path / "missing"), "--json")
    assert result.returncode != 0
    assert result.stderr.startswith("TableNotFoundError")
    assert result.stdout == ""
    _table(tmp_path / "t", 1)
    result = run_cli("snapshot", str(tmp_path / "t"), "--version", "9")
    assert result.returncode != 0 and result.stderr.startswith("VersionNotFoundError")
