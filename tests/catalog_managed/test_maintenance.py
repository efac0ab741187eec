"""Maintenance of catalog-managed tables: checkpoints, log compaction files and
metadata cleanup only for published versions, and only with the catalog's word
on what is published (CATALOG_MANAGED.md, "Maintenance Operations", "Metadata
Cleanup")."""

from __future__ import annotations

from pathlib import Path

import pytest

from raydelta.protocol.errors import (
    CatalogManagedTableError,
    CheckpointWriteError,
    VersionNotFoundError,
)
from raydelta.protocol.file_names import LogFileKind, compaction_name, parse_log_file_name
from raydelta.storage.checkpoint.sources import read_log_delta
from raydelta.storage.checkpoint.writer import write_checkpoint
from raydelta.storage.cleanup.metadata import cleanup_metadata
from raydelta.storage.compaction import write_log_compaction
from raydelta.storage.log.store import log_store_for
from raydelta.storage.snapshot import load_snapshot
from tests.catalog_managed.managed_tables import (
    BASE_TIME,
    SpecExample,
    data_commit,
    expected_files,
    live_paths,
    publish,
)

DAY_MS = 24 * 3600 * 1000


@pytest.fixture
def example(tmp_path: Path) -> SpecExample:
    table = SpecExample(tmp_path / "table")
    publish(table.root, 10, data_commit(10, tag="-rogue"))  # a filesystem commit past the catalog
    return table


def test_checkpoints_only_for_published_versions(example: SpecExample) -> None:
    store = log_store_for(example.uri)
    with pytest.raises(CatalogManagedTableError):
        read_log_delta(store)
    delta = read_log_delta(store, max_published_version=7)
    assert delta.version == 7  # not the rogue 10, not the unpublished 8 and 9
    with pytest.raises(VersionNotFoundError):
        read_log_delta(store, 8, max_published_version=7)

    latest = load_snapshot(
        example.uri, ratified_commits=example.ratified, latest_ratified_version=9
    )
    with pytest.raises(CheckpointWriteError, match="not published"):
        write_checkpoint(store, latest.state, now_ms=BASE_TIME)
    at_7 = load_snapshot(example.uri, latest_ratified_version=7)
    info = write_checkpoint(store, at_7.state, now_ms=BASE_TIME)
    assert info.version == 7
    after = load_snapshot(example.uri, ratified_commits=example.ratified, latest_ratified_version=9)
    assert after.log_segment is not None and after.log_segment.checkpoint_version == 7
    assert live_paths(after) == expected_files(example.commits)


def test_compaction_only_for_published_versions(example: SpecExample) -> None:
    store = log_store_for(example.uri)
    with pytest.raises(CatalogManagedTableError):
        write_log_compaction(store, 6, 7)
    with pytest.raises(VersionNotFoundError, match="published only up to version 7"):
        write_log_compaction(store, 6, 8, max_published_version=7)
    assert write_log_compaction(store, 6, 7, max_published_version=7) == compaction_name(6, 7)
    snap = load_snapshot(example.uri, ratified_commits=example.ratified, latest_ratified_version=9)
    assert live_paths(snap) == expected_files(example.commits)


def _log_names(root: Path) -> set[str]:
    log = root / "_delta_log"
    names = {p.name for p in log.iterdir() if p.is_file()}
    return names | {f"_staged_commits/{p.name}" for p in (log / "_staged_commits").iterdir()}


def test_metadata_cleanup_removes_staged_commits_at_or_below_the_checkpoint(
    example: SpecExample,
) -> None:
    store = log_store_for(example.uri)
    write_checkpoint(store, load_snapshot(example.uri, latest_ratified_version=7).state, now_ms=0)
    now = BASE_TIME + 40 * DAY_MS  # every commit is past the 30-day retention
    with pytest.raises(CatalogManagedTableError):
        cleanup_metadata(example.uri, now_ms=now)
    before = _log_names(example.root)
    report = cleanup_metadata(example.uri, now_ms=now, max_published_version=7)
    assert report.kept_checkpoint_version == 7
    # The spec's rule, applied to the listing: older commits, checkpoints and
    # checksums; compactions and staged commits starting at or below 7.
    parsed = [
        f for f in map(parse_log_file_name, before) if f is not None and f.version is not None
    ]
    expected = {
        f.name
        for f in parsed
        if (
            (f.kind in (LogFileKind.COMMIT, LogFileKind.CHECKSUM) or f.is_checkpoint)
            and f.require_version() < 7
        )
        or (
            f.kind in (LogFileKind.COMPACTION, LogFileKind.STAGED_COMMIT)
            and f.require_version() <= 7
        )
    }
    assert set(report.deleted) == expected
    assert example.ratified[0].staged_name in expected  # staged 7: ratified and published
    assert _log_names(example.root) == before - expected
    # Held commits (staged 8) and files past the catalog's version stay.
    assert example.ratified[1].staged_name in _log_names(example.root)
    assert "00000000000000000010.json" in _log_names(example.root)
    snap = load_snapshot(
        example.uri, ratified_commits=example.ratified[1:], latest_ratified_version=9
    )
    assert (snap.version, live_paths(snap)) == (9, expected_files(example.commits))
