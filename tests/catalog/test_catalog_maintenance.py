"""Maintenance of catalog-managed tables through their catalog (CATALOG_MANAGED.md,
"Maintenance Operations", "Metadata Cleanup"): checkpoints and metadata cleanup
only for versions the catalog says are published, vacuum that keeps the files
of ratified commits not yet published, history with those commits, and the
catalog's privilege check before any of it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import ray

import raydelta
from raydelta.catalog import Catalog, CatalogTable
from raydelta.protocol.file_names import LogFileKind, commit_name, parse_log_file_name

SCHEMA = pa.schema([("id", pa.int64())])
NewCatalog = Callable[..., Catalog]


def _log(table: CatalogTable) -> Path:
    return Path(table.uri.removeprefix("file://")) / "_delta_log"


def _versions(table: CatalogTable, kind: LogFileKind) -> list[int]:
    found = []
    for path in _log(table).iterdir():
        parsed = parse_log_file_name(path.name)
        if parsed is not None and parsed.kind is kind:
            found.append(parsed.require_version())
    return sorted(found)


def _pause(catalog: Catalog, paused: bool) -> None:
    ray.get(catalog.actor.pause_publishing.remote(paused))


def _published_through(catalog: Catalog, name: str, version: int) -> None:
    assert ray.get(catalog.actor.wait_published.remote(name, version, 60.0))


def _table_with_unpublished(
    new_catalog: NewCatalog, commit_mode: str = "inline"
) -> tuple[Catalog, CatalogTable]:
    """Versions 0..3 published, 4 and 5 ratified and held back by the catalog."""
    catalog = new_catalog()
    catalog.create_table("m", SCHEMA)
    table = catalog.open_table("m", commit_mode=commit_mode)  # type: ignore[arg-type]
    for i in range(3):
        table.append(pa.table({"id": [i]}))
    _published_through(catalog, "m", 3)
    _pause(catalog, True)
    table.append(pa.table({"id": [3]}))
    table.append(pa.table({"id": [4]}))
    table.maintenance_wait_s = 0.2  # publishing is paused: do not wait for it
    return catalog, table


def test_checkpoint_covers_only_published_versions(new_catalog: NewCatalog) -> None:
    catalog, table = _table_with_unpublished(new_catalog)
    assert table.version() == 5
    summary = table.checkpoint(kind="classic")
    assert summary.version == 3  # the newest published version, not the latest ratified 5
    assert _versions(table, LogFileKind.CHECKPOINT_CLASSIC) == [3]
    assert not (_log(table) / commit_name(4)).exists()

    _pause(catalog, False)
    _published_through(catalog, "m", 5)
    reread = catalog.open_table("m")
    snapshot = reread.snapshot()
    assert snapshot.version == 5
    assert snapshot.log_segment is not None and snapshot.log_segment.checkpoint_version == 3
    assert sorted(reread.to_arrow().column("id").to_pylist()) == [0, 1, 2, 3, 4]

    table.maintenance_wait_s = 30.0  # publishing caught up: the latest version is covered
    assert table.checkpoint(kind="classic").version == 5


def _staged_versions(table: CatalogTable) -> list[int]:
    staged = _log(table) / "_staged_commits"
    return sorted(int(p.name.split(".")[0]) for p in staged.iterdir()) if staged.exists() else []


def test_cleanup_metadata_stops_at_the_published_checkpoint(new_catalog: NewCatalog) -> None:
    catalog, table = _table_with_unpublished(new_catalog, commit_mode="staged")
    assert _staged_versions(table) == [1, 2, 3, 4, 5]  # ratified as staged, as they were
    table.checkpoint(kind="classic")  # at 3
    tomorrow = int(time.time() * 1000) + 2 * 24 * 3600 * 1000  # every commit expired
    report = table.cleanup_metadata(retention=timedelta(0), now_ms=tomorrow)
    assert report.kept_checkpoint_version == 3
    deleted = {parse_log_file_name(n) for n in report.deleted}
    assert {f.require_version() for f in deleted if f is not None} <= {0, 1, 2, 3}
    assert commit_name(3) not in report.deleted
    assert _versions(table, LogFileKind.COMMIT) == [3]  # 4 and 5 are not published yet
    # staged commits at or below the kept checkpoint go; 4 and 5 are what the catalog serves
    assert _staged_versions(table) == [4, 5]
    assert sorted(table.to_arrow().column("id").to_pylist()) == [0, 1, 2, 3, 4]

    _pause(catalog, False)
    _published_through(catalog, "m", 5)
    assert sorted(catalog.open_table("m").to_arrow().column("id").to_pylist()) == [0, 1, 2, 3, 4]
    assert [e.version for e in table.history()] == [5, 4, 3]


def test_vacuum_keeps_files_of_unpublished_commits(new_catalog: NewCatalog) -> None:
    catalog, table = _table_with_unpublished(new_catalog)
    root = Path(table.uri.removeprefix("file://"))
    orphan = root / "part-orphan.parquet"
    orphan.write_bytes(b"not referenced by any version")
    old = time.time() - 3600
    os.utime(orphan, (old, old))
    live = {Path(p).name for p in table.snapshot().files.column("path").to_pylist()}
    assert len(live) == 5  # one data file per append, two of them not published yet
    for path in root.glob("*.parquet"):  # every data file old enough to be deleted
        os.utime(path, (old, old))

    planned = table.vacuum(retention=timedelta(0), enforce_retention_duration=False)
    assert [Path(f).name for f in planned.files] == ["part-orphan.parquet"]
    report = table.vacuum(retention=timedelta(0), enforce_retention_duration=False, dry_run=False)
    assert [Path(f).name for f in report.files] == ["part-orphan.parquet"]
    assert not orphan.exists()
    assert live <= {p.name for p in root.glob("*.parquet")}
    rows = table.to_arrow()  # versions 4 and 5 are still only in the catalog
    assert pc.sum(rows.column("id")).as_py() == 0 + 1 + 2 + 3 + 4
    _pause(catalog, False)


def test_history_shows_ratified_unpublished_commits(new_catalog: NewCatalog) -> None:
    catalog, table = _table_with_unpublished(new_catalog)
    history = table.history()
    assert [e.version for e in history] == [5, 4, 3, 2, 1, 0]
    assert history[0].operation == history[1].operation == "WRITE"
    assert history[-1].operation == "CREATE TABLE"
    stamps = [e.timestamp for e in history]
    assert stamps == sorted(stamps, reverse=True)
    assert [e.version for e in table.history(limit=2)] == [5, 4]
    _pause(catalog, False)
    _published_through(catalog, "m", 5)
    assert [e.version for e in table.history()] == [5, 4, 3, 2, 1, 0]


def test_maintenance_needs_write_on_the_table(new_catalog: NewCatalog) -> None:
    catalog = new_catalog(authorization=True)
    catalog.create_table("p", SCHEMA)
    reader = catalog.create_principal("reader")
    catalog.grant("reader", "p", ["read"])
    table = catalog.open_table("p", token=reader)
    before = sorted(p.name for p in _log(table).iterdir())
    for run in (table.checkpoint, table.cleanup_metadata, table.vacuum):
        with pytest.raises(raydelta.PermissionDeniedError):
            run()
    assert sorted(p.name for p in _log(table).iterdir()) == before
    assert [e.version for e in table.history()] == [0]  # reading needs READ only
