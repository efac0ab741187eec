"""Smoke test of ``benchmarks/huge_table.py``: every path at 100k files, results only.

The same code the size series runs (``benchmarks.huge_table_series``), on a
100k-file table built in ``tmp_path``; what each step returns is checked
against a replay derived here from the log files themselves (pyarrow over
the checkpoint, ``json`` over the commits), never against times. The peers
(delta-rs) and the 1/2/4-worker clusters are left to the benchmark: each is
one more fresh process or Ray cluster, and they add no path of ours.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from benchmarks.huge_table_build import DOMAIN, build, table_copy, table_params
from benchmarks.huge_table_series import (
    Series,
    measure_checkpoint,
    measure_commit,
    measure_snapshot_and_scan,
    measure_vacuum,
)
from raydelta.protocol.cleanup_rules import dv_file_path

NUM_FILES = 100_000
DAY_NS = 86_400 * 10**9

pytestmark = pytest.mark.slow


def _replay_from_files(root: Path) -> dict[str, Any]:
    """Live files, records, DVs, txns and domains replayed from the raw log files."""
    log = root / "_delta_log"
    checkpoint = pq.read_table(
        next(log.glob("*.checkpoint.parquet")),
        columns=["add"],
    ).column("add")
    adds = checkpoint.filter(pc.is_valid(checkpoint)).combine_chunks()
    live: dict[str, dict[str, Any]] = {}
    for path, stats, dv in zip(
        adds.field("path").to_pylist(),
        adds.field("stats").to_pylist(),
        adds.field("deletionVector").to_pylist(),
        strict=True,
    ):
        live[path] = {"records": json.loads(stats)["numRecords"], "dv": dv is not None}
        if dv is not None:
            live[path]["dv_file"] = dv_file_path(dv["storageType"], dv["pathOrInlineDv"])
    txns: dict[str, int] = {}
    domains: set[str] = set()
    removed: list[str] = []
    removed_dv_files: set[str] = set()
    commits = sorted(p for p in log.glob("*.json") if int(p.name.split(".")[0]) > 10)
    for commit in commits:
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                add = action["add"]
                live[add["path"]] = {"records": json.loads(add["stats"])["numRecords"], "dv": False}
            elif "remove" in action:
                removed.append(action["remove"]["path"])
                del live[action["remove"]["path"]]
                dv = action["remove"].get("deletionVector")
                if dv is not None:
                    removed_dv_files.add(dv_file_path(dv["storageType"], dv["pathOrInlineDv"]))
            elif "txn" in action:
                txns[action["txn"]["appId"]] = action["txn"]["version"]
            elif "domainMetadata" in action:
                domains.add(action["domainMetadata"]["domain"])
    return {
        "version": int(commits[-1].name.split(".")[0]),
        "live": live,
        "removed": removed,
        # DV files only removed files name (a lite VACUUM's candidates too)
        "removed_dv_files": removed_dv_files - {f.get("dv_file") for f in live.values()},
        "txns": txns,
        "domains": domains,
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("huge") / "table"
    return build(root, table_params(NUM_FILES))


def test_builder_describes_what_the_log_holds(built: dict[str, Any]) -> None:
    replay = _replay_from_files(Path(built["path"]))
    live = replay["live"]
    assert built["version"] == replay["version"] == 110
    assert built["num_live_files"] == len(live) == NUM_FILES + 100 * (10 - 5)
    assert built["num_live_records"] == sum(f["records"] for f in live.values())
    assert built["num_live_dv_files"] == sum(f["dv"] for f in live.values())
    assert 0 < built["num_live_dv_files"] < len(live)
    assert built["txns"] == replay["txns"]
    assert set(built["domains"]) == replay["domains"] == {DOMAIN}
    # every removed file had been a checkpoint file, DV ones included
    assert len(replay["removed"]) == len(set(replay["removed"])) == 500


def test_every_path_of_the_series_at_100k(built: dict[str, Any], tmp_path: Path) -> None:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    series = Series()
    measure_snapshot_and_scan(series, NUM_FILES, built, 1, peer=False)
    measure_commit(series, NUM_FILES, built, tmp_path, 3)
    checkpoints = measure_checkpoint(series, NUM_FILES, built, tmp_path, [])
    measure_vacuum(series, NUM_FILES, built, 1, peer=False)

    failed = [c for c in series.checks if not c["ok"]]
    assert failed == []
    what = {c["what"] for c in series.checks}
    # the checkpoint check compared full content with the replay, not just counts
    assert any("== full replay's" in w for w in what)
    steps = {(r["step"], r["engine"]): r for r in series.rows}
    assert {
        ("snapshot", "ours"),
        ("state", "ours"),
        ("snapshot_head", "ours"),
        ("scan", "ours"),
        ("commit", "ours"),
        ("checkpoint", "ours"),
        ("checkpoint_limit", "pyarrow"),
        ("vacuum_lite_log", "ours"),
        ("vacuum_full_log", "ours"),
    } <= set(steps)
    scan = steps[("scan", "ours")]["runs"][0]
    assert scan["num_files"] == built["num_live_files"]
    assert scan["num_records"] == built["num_live_records"]
    assert scan["num_dv_files"] == built["num_live_dv_files"]
    commit = steps[("commit", "ours")]["runs"][0]
    assert commit["version"] == built["version"] + 1 + 3
    assert commit["num_files"] == built["num_live_files"] + 1 + 3
    assert commit["actor"]["pid"] != os.getpid()
    limit = steps[("checkpoint_limit", "pyarrow")]["runs"][0]
    assert limit["rows"] == built["num_live_files"]
    local = checkpoints["local"]
    assert local["version"] == built["version"] + 1  # the commit turning on v2Checkpoint
    assert local["num_adds"] == built["num_live_files"]
    for row in series.rows:
        assert row["peak_rss_mb"] > 0


def _touch(path: Path, *, days_old: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    old = (int(os.path.getmtime(path)) * 10**9) - days_old * DAY_NS
    os.utime(path, ns=(old, old))


def test_vacuum_deletes_exactly_the_expected_files(built: dict[str, Any], tmp_path: Path) -> None:
    from benchmarks.huge_table import vacuum_run
    from raydelta.storage.cleanup.vacuum import vacuum

    root = table_copy(built, tmp_path / "vacuum")
    replay = _replay_from_files(root)
    removed = replay["removed"]
    live = sorted(replay["live"])[:300]
    orphans = [f"part=00001/orphan-{i}.snappy.parquet" for i in range(7)]
    young = "part=00002/young-orphan.snappy.parquet"
    for rel in [*removed, *live, *orphans]:
        _touch(root / rel, days_old=30)
    _touch(root / young, days_old=0)
    uri = root.as_uri()

    lite = vacuum_run(uri, "ours", "lite")
    full = vacuum_run(uri, "ours", "full")
    # A lite dry run does not look at the files (as delta-spark's): it also lists
    # the removed files' DV files, which this table does not write to disk.
    lite_expected = {*removed, *replay["removed_dv_files"]}
    assert replay["removed_dv_files"] and not any(
        (root / p).exists() for p in lite_expected - {*removed}
    )
    assert lite["num_files"] == len(lite_expected)
    assert lite["digest"] == hashlib.sha256("\n".join(sorted(lite_expected)).encode()).hexdigest()
    assert full["num_files"] == len(removed) + len(orphans)

    report = vacuum(uri)
    doomed = {*removed, *orphans}
    assert set(report.files) == doomed  # root-relative paths
    for rel in doomed:
        assert not (root / rel).exists()
    for rel in [*live, young]:
        assert (root / rel).exists()
    shutil.rmtree(root)
