"""Reading catalog-managed tables from what their catalog returned
(CATALOG_MANAGED.md, "Reading Catalog-managed Tables", "Reader Requirements").

The first test is the spec's worked example: published 0-7 with a checkpoint
at 2 and a compaction of 3-5; the catalog holds 7 (staged, also published),
8 (staged) and 9 (inline); a rejected staged 8 and two unratified staged 10s
(one of them a partial file) lie around. Expectations are folded from the
actions the test wrote.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import raydelta
from raydelta.protocol.actions import Action, CommitInfo
from raydelta.protocol.catalog_managed import RatifiedCommit
from raydelta.protocol.errors import (
    CatalogManagedTableError,
    InvalidArgumentError,
    InvalidTableError,
    TableNotFoundError,
)
from raydelta.protocol.file_names import classic_checkpoint_name, compaction_name
from raydelta.storage.snapshot import load_snapshot, load_table_head
from tests.catalog_managed.managed_tables import (
    BASE_TIME,
    SpecExample,
    creation,
    data_commit,
    expected_files,
    live_paths,
    publish,
    stage,
)


@pytest.fixture
def example(tmp_path: Path) -> SpecExample:
    return SpecExample(tmp_path / "table")


def test_spec_worked_example(example: SpecExample) -> None:
    log = example.root / "_delta_log"
    assert (log / classic_checkpoint_name(2)).exists()
    assert (log / compaction_name(3, 5)).exists()
    snap = load_snapshot(example.uri, ratified_commits=example.ratified, latest_ratified_version=9)
    assert snap.version == 9
    assert live_paths(snap) == expected_files(example.commits)
    assert "part-8-rejected.parquet" not in live_paths(snap)
    assert snap.metadata.configuration["owner"] == "catalog"
    inline_info = example.commits[9][0]
    assert snap.timestamp == inline_info.in_commit_timestamp  # type: ignore[union-attr]
    assert snap.commit_infos[9].txn_id == "txn-9"
    segment = snap.log_segment
    assert segment is not None and segment.checkpoint_version == 2
    names = [f.name for f in segment.commits]
    assert names[-3:-1] == [example.ratified[0].staged_name, example.ratified[1].staged_name]
    assert [f.name for f in segment.compactions] == [compaction_name(3, 5)]


def test_public_api_passes_catalog_commits_through(example: SpecExample) -> None:
    snap = raydelta.load_snapshot(
        str(example.root), ratified_commits=example.ratified, latest_ratified_version=9
    )
    assert snap.version == 9
    assert live_paths(snap) == expected_files(example.commits)


def test_time_travel_through_the_catalog(example: SpecExample) -> None:
    def load(*, version: int | None = None, timestamp: int | None = None) -> raydelta.Snapshot:
        return load_snapshot(
            example.uri,
            version=version,
            timestamp=timestamp,
            ratified_commits=example.ratified,
            latest_ratified_version=9,
        )

    assert live_paths(load(version=8)) == expected_files(example.commits[:9])
    info_8 = example.commits[8][0]
    assert isinstance(info_8, CommitInfo) and info_8.in_commit_timestamp is not None
    assert load(timestamp=info_8.in_commit_timestamp + 1).version == 8
    assert live_paths(load(version=5)) == expected_files(example.commits[:6])


def test_reading_without_the_catalog_is_refused(example: SpecExample) -> None:
    with pytest.raises(CatalogManagedTableError, match="catalog-managed") as caught:
        load_snapshot(example.uri)
    assert caught.value.table_uri == example.uri
    with pytest.raises(CatalogManagedTableError):
        raydelta.load_snapshot(str(example.root))
    with pytest.raises(CatalogManagedTableError):
        load_table_head(example.uri)
    assert issubclass(raydelta.CatalogManagedTableError, raydelta.RaydeltaError)
    # A filesystem commit past the unpublished ones leaves a hole in the
    # published log: still reported as a catalog-managed table, not a gap.
    publish(example.root, 10, data_commit(10, tag="-rogue"))
    with pytest.raises(CatalogManagedTableError):
        load_snapshot(example.uri)


def test_catalog_commit_wins_over_published_file(example: SpecExample) -> None:
    # A foreign filesystem writer put its own 8.json in place: the catalog's 8 wins.
    publish(example.root, 8, data_commit(8, tag="-foreign"))
    snap = load_snapshot(example.uri, ratified_commits=example.ratified, latest_ratified_version=9)
    assert live_paths(snap) == expected_files(example.commits)
    assert "part-8-foreign.parquet" not in live_paths(snap)


def test_published_files_past_latest_ratified_version_are_ignored(example: SpecExample) -> None:
    publish(example.root, 10, data_commit(10, tag="-rogue"))
    publish(example.root, 11, data_commit(11, tag="-rogue"))
    snap = load_snapshot(example.uri, ratified_commits=example.ratified, latest_ratified_version=9)
    assert snap.version == 9
    assert live_paths(snap) == expected_files(example.commits)
    # Once the catalog has published everything it returns no commit, only its latest version.
    for version in (8, 9):
        publish(example.root, version, example.commits[version])
    published = load_snapshot(example.uri, ratified_commits=[], latest_ratified_version=9)
    assert published.version == 9
    assert live_paths(published) == expected_files(example.commits)


def test_catalog_latest_version_is_authoritative(example: SpecExample) -> None:
    # The catalog says 9 but returns nothing past 7: the snapshot would be stale.
    with pytest.raises(InvalidTableError, match="latest version is 9"):
        load_snapshot(example.uri, ratified_commits=example.ratified[:1], latest_ratified_version=9)


def test_malformed_catalog_answers_are_refused(example: SpecExample) -> None:
    gap = [example.ratified[0], example.ratified[2]]
    with pytest.raises(InvalidArgumentError, match="contiguous"):
        load_snapshot(example.uri, ratified_commits=gap, latest_ratified_version=9)
    with pytest.raises(InvalidArgumentError, match="past the latest"):
        load_snapshot(example.uri, ratified_commits=example.ratified, latest_ratified_version=8)
    with pytest.raises(InvalidArgumentError, match="latest_ratified_version is required"):
        load_snapshot(example.uri, ratified_commits=[])


def test_table_held_only_by_the_catalog(tmp_path: Path) -> None:
    # Nothing published yet (no _delta_log at all): version 0 staged, 1 inline.
    root = tmp_path / "new"
    root.mkdir()
    commits: list[list[Action]] = [creation(), data_commit(1)]
    ratified = [RatifiedCommit.staged(0, stage(root, 0, commits[0]))]
    ratified.append(RatifiedCommit.inline(1, commits[1], timestamp=BASE_TIME + 1000))
    snap = load_snapshot(root.as_uri(), ratified_commits=ratified, latest_ratified_version=1)
    assert (snap.version, live_paths(snap)) == (1, expected_files(commits))
    inline_only = tmp_path / "inline-only"
    inline_only.mkdir()
    snap = load_snapshot(
        inline_only.as_uri(),
        ratified_commits=[RatifiedCommit.inline(v, c) for v, c in enumerate(commits)],
        latest_ratified_version=1,
    )
    assert (snap.version, live_paths(snap)) == (1, expected_files(commits))
    with pytest.raises(TableNotFoundError):
        load_snapshot(inline_only.as_uri(), ratified_commits=[], latest_ratified_version=0)
