"""Automatic maintenance of a managed table under load (issue 27): many commits
from several Ray writers at once while the catalog checkpoints, cleans up,
compacts and vacuums it. Checkpoints appear at the policy's versions, cleanup
removes only what retention allows, VACUUM never deletes a file a published
or ratified version needs, and every acknowledged commit is there exactly once.

(delta-rs cannot be the independent reader here: deltalake refuses every
catalog-managed table, see tests/catalog_managed/test_peer.py; each checkpoint
is read back through raydelta's own reader at its version instead.)
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import ray

from raydelta.catalog import Catalog, CatalogTable
from raydelta.protocol.file_names import LogFileKind, parse_log_file_name
from raydelta.protocol.maintenance_policy import MaintenanceDefaults
from tests.catalog.test_catalog_auto_maintenance import checkpoint_versions

SCHEMA = pa.schema([("id", pa.int64())])
WRITERS = 4
COMMITS_PER_WRITER = 55  # 220 commits, plus the maintenance's own
INTERVAL = 10
NewCatalog = Callable[..., Catalog]


@ray.remote(max_retries=0)
def _writer(table: CatalogTable, writer: int, commits: int) -> list[tuple[int, int]]:
    """Append ``commits`` one-row commits; ``(id, version)`` of each acknowledged one."""
    acknowledged = []
    for i in range(commits):
        row_id = writer * 100_000 + i
        version = table.append(pa.table({"id": [row_id]}))
        acknowledged.append((row_id, int(version)))
    return acknowledged


def _commit_versions(table: CatalogTable) -> list[int]:
    log = Path(table.uri.removeprefix("file://")) / "_delta_log"
    found = []
    for path in log.iterdir():
        parsed = parse_log_file_name(path.name)
        if parsed is not None and parsed.kind is LogFileKind.COMMIT:
            found.append(parsed.require_version())
    return sorted(found)


def _runs(catalog: Catalog, name: str) -> list[dict[str, Any]]:
    rows = ray.get(catalog.actor.maintenance_status.remote())
    history: list[dict[str, Any]] = next(r for r in rows if r["table"] == name)["history"]
    return history


@pytest.mark.slow
def test_maintenance_under_many_concurrent_commits(new_catalog: NewCatalog) -> None:
    catalog = new_catalog(
        maintenance=MaintenanceDefaults(compaction_min_files=40, vacuum_interval_s=5)
    )
    catalog.create_table(
        "load",
        SCHEMA,
        properties={
            "delta.checkpointInterval": str(INTERVAL),
            "delta.deletedFileRetentionDuration": "interval 3 seconds",
        },
    )
    table = catalog.open_table("load")
    refs = [_writer.remote(table, w, COMMITS_PER_WRITER) for w in range(WRITERS)]
    acknowledged = [pair for part in ray.get(refs, timeout=900) for pair in part]
    assert table.maintenance_settled(timeout_s=300)
    # VACUUM is due by time (vacuum_interval_s after the catalog first saw the table),
    # not by a commit: on a fast run the burst settles before it is due, so wait for it
    deadline = time.monotonic() + 120
    while not any(r["kind"] == "vacuum" for r in _runs(catalog, "load")):
        assert time.monotonic() < deadline, "no automatic VACUUM within 120 s"
        time.sleep(0.5)
    assert table.maintenance_settled(timeout_s=300)

    # every acknowledged commit is there exactly once, at its own version
    assert len(acknowledged) == WRITERS * COMMITS_PER_WRITER
    versions = Counter(v for _, v in acknowledged)
    assert max(versions.values()) == 1
    ids = table.to_arrow().column("id").to_pylist()
    assert sorted(ids) == sorted(i for i, _ in acknowledged)

    runs = _runs(catalog, "load")
    assert all("error" not in run for run in runs), [r for r in runs if "error" in r]
    latest = table.version()
    history = table.history()
    operations = Counter(e.operation for e in history)
    assert operations["WRITE"] == WRITERS * COMMITS_PER_WRITER
    assert operations["OPTIMIZE"] >= 1  # 220 one-row files: compaction ran
    assert operations["VACUUM START"] == operations["VACUUM END"] >= 1, [
        (r["kind"], r["version"]) for r in runs
    ]

    # checkpoints at the policy's versions only, the newest published multiple among them
    checkpoints = checkpoint_versions(table)
    assert checkpoints and all(v % INTERVAL == 0 for v in checkpoints)
    assert checkpoints[-1] == latest - latest % INTERVAL
    # each checkpoint reads back at its version with every row acknowledged by then
    # (every commit is one row; OPTIMIZE and VACUUM change no rows). By the files'
    # statistics: VACUUM may rightly have deleted data files older versions need.
    for version in checkpoints:
        snapshot = table.client._load_snapshot(version=version)
        assert snapshot.log_segment is not None
        assert snapshot.log_segment.checkpoint_version == version
        rows = sum(1 for _, v in acknowledged if v <= version)
        stats = snapshot.files.column("stats").to_pylist()
        assert sum(json.loads(s)["numRecords"] for s in stats) == rows

    # metadata cleanup ran and kept every commit: all are inside the 30-day retention
    cleanups = [run for run in runs if run["kind"] == "cleanup"]
    assert cleanups and all(run["report"]["deleted"] == [] for run in cleanups)
    assert _commit_versions(table) == list(range(latest + 1))

    # VACUUM by the 3-second retention: the compacted-away files go, live ones stay
    time.sleep(3.5)
    vacuumed = table.maintain("vacuum")
    assert "error" not in vacuumed, vacuumed
    deleted = {
        Path(f).name
        for run in [*runs, vacuumed]
        if run["kind"] == "vacuum"
        for f in run["report"]["files"]
    }
    assert deleted  # tombstones of OPTIMIZE past the retention
    root = Path(table.uri.removeprefix("file://"))
    live = table.snapshot().files.column("path").to_pylist()
    assert all((root / path).exists() for path in live)
    assert not deleted & {Path(p).name for p in live}
    assert sorted(table.to_arrow().column("id").to_pylist()) == sorted(ids)
