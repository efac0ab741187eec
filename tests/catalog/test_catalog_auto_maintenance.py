"""The catalog maintains its managed tables itself (issue 27): checkpoints by
``delta.checkpointInterval``, metadata cleanup after them, auto-compaction
of small files and VACUUM, scheduled on the Ray cluster from the catalog's
"version v is published" hook; on request through the catalog; and refused
behind its back."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import ray

import raydelta
from raydelta.catalog import Catalog, CatalogTable
from raydelta.protocol.errors import CatalogManagedTableError
from raydelta.protocol.file_names import LogFileKind, parse_log_file_name
from raydelta.protocol.maintenance_policy import MaintenanceDefaults

REPO = Path(__file__).resolve().parents[2]
SCHEMA = pa.schema([("id", pa.int64())])
NewCatalog = Callable[..., Catalog]


def _log(table: CatalogTable) -> Path:
    return Path(table.uri.removeprefix("file://")) / "_delta_log"


def checkpoint_versions(table: CatalogTable) -> list[int]:
    found = set()
    for path in _log(table).iterdir():
        parsed = parse_log_file_name(path.name)
        if parsed is not None and parsed.kind in (
            LogFileKind.CHECKPOINT_CLASSIC,
            LogFileKind.CHECKPOINT_UUID,
            LogFileKind.CHECKPOINT_MULTIPART,
        ):
            found.add(parsed.require_version())
    return sorted(found)


def _status_of(catalog: Catalog, name: str) -> dict[str, Any]:
    rows = ray.get(catalog.actor.maintenance_status.remote())
    return next(r for r in rows if r["table"] == name)


def _create(catalog: Catalog, name: str, **properties: str) -> CatalogTable:
    catalog.create_table(name, SCHEMA, properties=properties or None)
    return catalog.open_table(name)


def test_checkpoints_and_cleanup_follow_the_interval(new_catalog: NewCatalog) -> None:
    catalog = new_catalog()
    table = _create(catalog, "t", **{"delta.checkpointInterval": "3"})
    for i in range(7):
        table.append(pa.table({"id": [i]}))
    assert table.maintenance_settled(timeout_s=60)
    versions = checkpoint_versions(table)
    assert versions and all(v % 3 == 0 for v in versions)
    assert 6 in versions  # the newest published multiple of the interval
    history = _status_of(catalog, "t")["history"]
    kinds = [run["kind"] for run in history]
    assert "checkpoint" in kinds and "cleanup" in kinds
    assert all("error" not in run for run in history)
    cleanup = next(run for run in history if run["kind"] == "cleanup")
    assert cleanup["report"]["deleted"] == []  # every commit is within the 30-day retention
    assert sorted(table.to_arrow().column("id").to_pylist()) == list(range(7))

    # `raydelta status` shows what ran, per managed table
    address = ray.get_runtime_context().gcs_address
    command = [sys.executable, "-m", "raydelta.cli", "status", "--address", address]
    listed = subprocess.run(
        [*command, "--json"], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert listed.returncode == 0, listed.stderr
    ours = [
        e
        for e in json.loads(listed.stdout)
        if e.get("catalog") == catalog.name and e.get("maintenance")
    ]
    assert [e["table"] for e in ours] == ["t"]
    assert ours[0]["maintenance"]["newest_checkpoint"] in versions
    assert {run["kind"] for run in ours[0]["maintenance"]["history"]} >= {"checkpoint", "cleanup"}
    text = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert "catalog maintenance of managed tables" in text.stdout
    assert any(
        line.startswith(catalog.name) and " t " in line for line in text.stdout.splitlines()
    ), text.stdout


def test_auto_compaction_commits_optimize_through_the_catalog(new_catalog: NewCatalog) -> None:
    catalog = new_catalog(maintenance=MaintenanceDefaults(compaction_min_files=4))
    table = _create(catalog, "t")
    for i in range(4):
        table.append(pa.table({"id": [i]}))
    assert table.maintenance_settled(timeout_s=60)
    operations = [e.operation for e in table.history()]
    assert operations.count("OPTIMIZE") == 1, _status_of(catalog, "t")
    optimize = next(e for e in table.history() if e.operation == "OPTIMIZE")
    assert optimize.commit_info is not None
    assert optimize.commit_info["operationParameters"]["auto"] == "true"
    assert table.snapshot().num_files == 1
    assert sorted(table.to_arrow().column("id").to_pylist()) == [0, 1, 2, 3]


def test_vacuum_by_policy_records_start_and_end(new_catalog: NewCatalog) -> None:
    catalog = new_catalog(maintenance=MaintenanceDefaults(vacuum_interval_s=0, auto_compact=False))
    table = _create(catalog, "t")
    table.append(pa.table({"id": [1]}))
    assert table.maintenance_settled(timeout_s=60)
    operations = [e.operation for e in table.history()]
    status = _status_of(catalog, "t")
    assert operations[:2] == ["VACUUM END", "VACUUM START"], (status["history"], status)
    # the maintenance's own commits do not trigger more of it
    assert operations.count("VACUUM START") == 1


def test_clients_ask_the_catalog_to_maintain(new_catalog: NewCatalog) -> None:
    catalog = new_catalog(authorization=True, maintenance=MaintenanceDefaults(enabled=False))
    table = _create(catalog, "t")
    for i in range(3):
        table.append(pa.table({"id": [i]}))
    optimized = table.maintain("optimize")
    assert "error" not in optimized, optimized
    assert optimized["report"]["num_removed_files"] == 3
    checkpoint = table.maintain("checkpoint")
    assert checkpoint["version"] == table.version()
    assert checkpoint_versions(table) == [table.version()]
    vacuumed = table.maintain("vacuum")
    assert "error" not in vacuumed, vacuumed
    assert [e.operation for e in table.history(limit=3)] == [
        "VACUUM END",
        "VACUUM START",
        "OPTIMIZE",
    ]
    reader = catalog.create_principal("reader")
    catalog.grant("reader", "t", [raydelta.Privilege.READ])
    table.token = reader
    with pytest.raises(raydelta.PermissionDeniedError):
        table.maintain("vacuum")


def test_maintenance_behind_the_catalogs_back_is_refused(new_catalog: NewCatalog) -> None:
    catalog = new_catalog()
    table = _create(catalog, "t")
    table.append(pa.table({"id": [1]}))
    # by path: no table actor, so no VACUUM, OPTIMIZE or cleanup behind the catalog
    with pytest.raises(CatalogManagedTableError):
        raydelta.open_table(table.uri)
    with pytest.raises(CatalogManagedTableError):
        _ = table.cleanup_actor  # the filesystem tables' maintenance actors


def test_a_table_property_turns_maintenance_off(new_catalog: NewCatalog) -> None:
    catalog = new_catalog()
    table = _create(
        catalog, "t", **{"delta.checkpointInterval": "2", "raydelta.maintenance.enabled": "false"}
    )
    for i in range(4):
        table.append(pa.table({"id": [i]}))
    assert table.maintenance_settled(timeout_s=60)
    time.sleep(0.5)
    assert checkpoint_versions(table) == []


def test_catalog_table_vacuum_records_start_and_end(new_catalog: NewCatalog) -> None:
    catalog = new_catalog(maintenance=MaintenanceDefaults(enabled=False))
    table = _create(catalog, "t")
    table.append(pa.table({"id": [1]}))
    table.vacuum()  # a dry run records nothing
    assert [e.operation for e in table.history(limit=1)] == ["WRITE"]
    report = table.vacuum(dry_run=False)
    assert report.files == []
    end, start = table.history(limit=2)
    assert (end.operation, start.operation) == ("VACUUM END", "VACUUM START")
    assert start.commit_info is not None
    parameters = start.commit_info["operationParameters"]
    assert parameters["retentionCheckEnabled"] is True
    assert parameters["defaultRetentionMillis"] == 7 * 24 * 3600 * 1000
