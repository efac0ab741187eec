"""Tests for protocol.log_segment: choosing checkpoint, commits and compactions."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raydelta.protocol.actions import CheckpointMetadata, Sidecar
from raydelta.protocol.errors import (
    InvalidCheckpointError,
    InvalidTableError,
    TableNotFoundError,
    VersionNotFoundError,
    VersionsNotContiguousError,
)
from raydelta.protocol.file_names import (
    LogFile,
    LogFileKind,
    checksum_name,
    classic_checkpoint_name,
    commit_name,
    compaction_name,
    multipart_checkpoint_name,
    parse_log_file_name,
    sidecar_name,
    staged_commit_name,
    uuid_checkpoint_name,
)
from raydelta.protocol.last_checkpoint import LastCheckpointInfo, parse_last_checkpoint
from raydelta.protocol.log_segment import (
    CheckpointRef,
    LogSegment,
    build_log_segment,
    check_checkpoint_spec,
    complete_checkpoint_at,
    latest_commit_version,
)

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "delta-spark-golden"
U1 = "016ae953-37a9-438e-8683-9a9a4a79a395"
U2 = "7d17ac10-5cc3-401b-bd1a-9c82dd2ea032"
U3 = "b91807ba-fe18-488c-a15e-c4807dbd2174"


def lf(name: str, size: int = 100) -> LogFile:
    parsed = parse_log_file_name(name, size=size)
    assert parsed is not None, name
    return parsed


def commits(*versions: int) -> list[LogFile]:
    return [lf(commit_name(v)) for v in versions]


def names(files: Iterable[LogFile]) -> list[str]:
    return [f.name for f in files]


def versions_of(segment: LogSegment) -> list[int]:
    return segment.commit_versions


# --- basics -------------------------------------------------------------------------


def test_commits_only() -> None:
    seg = build_log_segment(commits(0, 1, 2, 3, 4))
    assert seg.version == 4
    assert seg.checkpoint is None and seg.checkpoint_version is None
    assert seg.start_version == 0
    assert versions_of(seg) == [0, 1, 2, 3, 4]
    assert seg.compactions == ()


def test_listing_order_and_duplicates_do_not_matter() -> None:
    listing = [*commits(3, 1, 0, 2), *commits(2, 1), lf(classic_checkpoint_name(1))]
    seg = build_log_segment(listing)
    assert (seg.version, seg.checkpoint_version, versions_of(seg)) == (3, 1, [2, 3])


def test_checkpoint_then_commits() -> None:
    listing = [*commits(*range(6)), lf(classic_checkpoint_name(2))]
    seg = build_log_segment(listing)
    assert seg.checkpoint is not None
    assert seg.checkpoint.kind is LogFileKind.CHECKPOINT_CLASSIC
    assert names(seg.checkpoint.files) == [classic_checkpoint_name(2)]
    assert seg.start_version == 3
    assert versions_of(seg) == [3, 4, 5]


def test_time_travel_before_checkpoint() -> None:
    listing = [*commits(*range(6)), lf(classic_checkpoint_name(2))]
    seg = build_log_segment(listing, target_version=1)
    assert (seg.version, seg.checkpoint, versions_of(seg)) == (1, None, [0, 1])


def test_target_at_checkpoint_has_no_commits() -> None:
    listing = [*commits(*range(6)), lf(classic_checkpoint_name(2))]
    seg = build_log_segment(listing, target_version=2)
    assert (seg.version, seg.checkpoint_version, versions_of(seg)) == (2, 2, [])


def test_newest_checkpoint_at_or_before_target_wins() -> None:
    listing = [*commits(*range(12)), *(lf(classic_checkpoint_name(v)) for v in (3, 6, 9))]
    assert build_log_segment(listing, target_version=8).checkpoint_version == 6
    assert build_log_segment(listing, target_version=9).checkpoint_version == 9
    assert build_log_segment(listing).checkpoint_version == 9


def test_checksum_file_of_target_is_attached() -> None:
    listing = [*commits(0, 1, 2), lf(checksum_name(1)), lf(checksum_name(2))]
    assert build_log_segment(listing).checksum == lf(checksum_name(2))
    assert build_log_segment(listing, target_version=0).checksum is None
    empty_crc = [*commits(0), lf(checksum_name(0), size=0)]
    assert build_log_segment(empty_crc).checksum is None


def test_files_that_are_not_commits_or_checkpoints_are_ignored() -> None:
    listing = [
        *commits(0, 1),
        lf("_last_checkpoint"),
        lf(sidecar_name(U1)),
        lf(staged_commit_name(2, U1)),  # staged but not ratified: not part of the table
        lf("00000000000000000005.json.tmp"),  # UNKNOWN
    ]
    seg = build_log_segment(listing)
    assert (seg.version, versions_of(seg)) == (1, [0, 1])


# --- checkpoint choice ----------------------------------------------------------------


def _multipart(version: int, parts: int, present: Iterable[int] | None = None) -> list[LogFile]:
    wanted = range(1, parts + 1) if present is None else present
    return [lf(multipart_checkpoint_name(version, p, parts)) for p in wanted]


def test_preference_uuid_over_multipart_over_classic() -> None:
    base = commits(*range(7))
    classic = [lf(classic_checkpoint_name(5))]
    multi = _multipart(5, 3)
    uuid = [lf(uuid_checkpoint_name(5, U1, "json"))]

    seg = build_log_segment(base + classic + multi + uuid)
    assert seg.checkpoint is not None
    assert seg.checkpoint.kind is LogFileKind.CHECKPOINT_UUID
    assert names(seg.checkpoint.files) == names(uuid)

    seg = build_log_segment(base + classic + multi)
    assert seg.checkpoint is not None
    assert seg.checkpoint.kind is LogFileKind.CHECKPOINT_MULTIPART
    assert names(seg.checkpoint.files) == names(multi)
    assert seg.checkpoint.num_parts == 3

    seg = build_log_segment(base + classic)
    assert seg.checkpoint is not None and seg.checkpoint.kind is LogFileKind.CHECKPOINT_CLASSIC


def test_incomplete_multipart_is_ignored() -> None:
    listing = [
        *commits(*range(7)),
        *_multipart(5, 3, present=[1, 3]),
        lf(classic_checkpoint_name(2)),
    ]
    seg = build_log_segment(listing)
    assert seg.checkpoint_version == 2
    assert versions_of(seg) == [3, 4, 5, 6]


def test_incomplete_multipart_falls_back_to_classic_at_same_version() -> None:
    listing = [
        *commits(*range(7)),
        *_multipart(5, 3, present=[1, 2]),
        lf(classic_checkpoint_name(5)),
    ]
    seg = build_log_segment(listing)
    assert seg.checkpoint is not None
    assert seg.checkpoint.kind is LogFileKind.CHECKPOINT_CLASSIC
    assert seg.checkpoint.version == 5


def test_mixed_part_counts_choose_a_complete_set() -> None:
    listing = [*commits(*range(6)), *_multipart(5, 2), *_multipart(5, 3, present=[1, 3])]
    seg = build_log_segment(listing)
    assert seg.checkpoint is not None
    assert names(seg.checkpoint.files) == names(_multipart(5, 2))


def test_two_complete_part_counts_fewest_parts_unless_hinted() -> None:
    listing = [*commits(*range(6)), *_multipart(5, 3), *_multipart(5, 2)]
    seg = build_log_segment(listing)
    assert seg.checkpoint is not None and seg.checkpoint.num_parts == 2
    hint = LastCheckpointInfo(version=5, size=10, parts=3)
    seg = build_log_segment(listing, last_checkpoint_hint=hint)
    assert seg.checkpoint is not None and seg.checkpoint.num_parts == 3
    assert [f.part for f in seg.checkpoint.files] == [1, 2, 3]


def test_zero_size_checkpoint_files_are_ignored_unknown_size_kept() -> None:
    listing = [
        *commits(*range(6)),
        lf(classic_checkpoint_name(2)),
        lf(classic_checkpoint_name(4), size=0),
    ]
    assert build_log_segment(listing).checkpoint_version == 2
    listing[-1] = lf(classic_checkpoint_name(4), size=-1)
    assert build_log_segment(listing).checkpoint_version == 4
    zero_part = [
        *commits(*range(6)),
        *_multipart(4, 2, present=[1]),
        lf(multipart_checkpoint_name(4, 2, 2), size=0),
    ]
    assert build_log_segment(zero_part).checkpoint_version is None


def test_zero_size_commit_is_kept() -> None:
    seg = build_log_segment([*commits(0), lf(commit_name(1), size=0)])
    assert versions_of(seg) == [0, 1]


def test_hint_selects_named_v2_checkpoint() -> None:
    a, b = uuid_checkpoint_name(5, U1, "json"), uuid_checkpoint_name(5, U2, "parquet")
    listing = [*commits(*range(6)), lf(a), lf(b)]
    default = build_log_segment(listing)
    assert default.checkpoint is not None and names(default.checkpoint.files) == [a]  # smallest
    hint = LastCheckpointInfo(version=5, size=3, v2Checkpoint={"path": b})
    seg = build_log_segment(listing, last_checkpoint_hint=hint)
    assert seg.checkpoint is not None and names(seg.checkpoint.files) == [b]


def test_hint_to_absent_checkpoint_is_ignored() -> None:
    listing = [*commits(*range(8)), lf(classic_checkpoint_name(3))]
    without = build_log_segment(listing)
    for hint in (
        LastCheckpointInfo(version=6, size=1),
        LastCheckpointInfo(version=3, size=1, parts=4),
        LastCheckpointInfo(version=3, size=1, v2Checkpoint={"path": "nope.json"}),
        LastCheckpointInfo(version=100, size=1),
    ):
        assert build_log_segment(listing, last_checkpoint_hint=hint) == without


def test_hint_newer_than_target_does_not_leak() -> None:
    listing = [*commits(*range(8)), lf(classic_checkpoint_name(3)), lf(classic_checkpoint_name(6))]
    hint = LastCheckpointInfo(version=6, size=1)
    seg = build_log_segment(listing, target_version=5, last_checkpoint_hint=hint)
    assert seg.checkpoint_version == 3


def test_checkpoint_usable_without_its_commit() -> None:
    # after metadata cleanup: 0..4 gone, including 5.json, checkpoint at 5 kept
    listing = [lf(classic_checkpoint_name(5)), *commits(6, 7)]
    seg = build_log_segment(listing)
    assert (seg.checkpoint_version, versions_of(seg)) == (5, [6, 7])
    only_cp = build_log_segment([lf(classic_checkpoint_name(5))])
    assert (only_cp.version, only_cp.checkpoint_version, versions_of(only_cp)) == (5, 5, [])


# --- errors -----------------------------------------------------------------------------


def test_gap_names_the_versions() -> None:
    with pytest.raises(VersionsNotContiguousError) as excinfo:
        build_log_segment(commits(0, 2))
    assert "versions are not contiguous" in str(excinfo.value)
    assert "[0, 2]" in str(excinfo.value)
    assert excinfo.value.versions == [0, 2]


def test_gap_right_after_checkpoint() -> None:
    listing = [lf(classic_checkpoint_name(5)), *commits(5, 7, 8)]
    with pytest.raises(VersionsNotContiguousError) as excinfo:
        build_log_segment(listing)
    assert "[5, 7, 8]" in str(excinfo.value)
    assert "missing version 6" in str(excinfo.value)


def test_gap_before_the_chosen_checkpoint_is_harmless() -> None:
    listing = [*commits(0, 3, 4, 5, 6), lf(classic_checkpoint_name(4))]
    assert versions_of(build_log_segment(listing)) == [5, 6]
    with pytest.raises(VersionsNotContiguousError):
        build_log_segment(listing, target_version=3)


def test_gap_beyond_target_is_harmless() -> None:
    assert versions_of(build_log_segment(commits(0, 1, 2, 5), target_version=2)) == [0, 1, 2]


def test_missing_target_commit_with_later_versions_is_a_gap() -> None:
    with pytest.raises(VersionsNotContiguousError) as excinfo:
        build_log_segment(commits(0, 1, 4), target_version=2)
    assert "[0, 1, 4]" in str(excinfo.value)


def test_long_gap_message_is_bounded() -> None:
    with pytest.raises(VersionsNotContiguousError) as excinfo:
        build_log_segment(commits(*range(500), *range(501, 1000)))
    message = str(excinfo.value)
    assert "versions are not contiguous" in message and "499, 501" in message
    assert len(message) < 300
    assert len(excinfo.value.versions) == 999


def test_target_beyond_latest() -> None:
    with pytest.raises(VersionNotFoundError, match="latest available version is 2"):
        build_log_segment(commits(0, 1, 2), target_version=3)
    with pytest.raises(VersionNotFoundError):
        build_log_segment(commits(0, 1, 2), target_version=-1)


@pytest.mark.parametrize(
    "listing",
    [
        [],
        [lf("_last_checkpoint")],
        [lf(staged_commit_name(0, U1))],
        [lf(classic_checkpoint_name(3), size=0)],
        [*_multipart(3, 2, present=[2])],
    ],
)
def test_no_commits_and_no_checkpoint(listing: list[LogFile]) -> None:
    with pytest.raises(TableNotFoundError):
        build_log_segment(listing)


def test_log_starting_late_without_checkpoint() -> None:
    with pytest.raises(InvalidTableError):
        build_log_segment(commits(3, 4, 5))
    with pytest.raises(VersionNotFoundError, match="earliest available commit is version 3"):
        build_log_segment(commits(3, 4, 5), target_version=4)


def test_time_travel_before_retained_history() -> None:
    listing = [*commits(3, 4, 5, 6, 7), lf(classic_checkpoint_name(5))]
    assert versions_of(build_log_segment(listing, target_version=6)) == [6]
    with pytest.raises(VersionNotFoundError, match="earliest checkpoint: version 5"):
        build_log_segment(listing, target_version=4)


# --- compactions ------------------------------------------------------------------------


def test_compactions_greedy_widest_non_overlapping() -> None:
    listing = [
        *commits(*range(11)),
        lf(compaction_name(1, 3)),
        lf(compaction_name(2, 6)),
        lf(compaction_name(5, 8)),
        lf(compaction_name(7, 9)),
    ]
    seg = build_log_segment(listing)
    assert names(seg.compactions) == [compaction_name(2, 6), compaction_name(7, 9)]
    assert names(seg.replay_units()) == [
        commit_name(0),
        commit_name(1),
        compaction_name(2, 6),
        compaction_name(7, 9),
        commit_name(10),
    ]


def test_compactions_must_lie_inside_the_segment() -> None:
    listing = [
        *commits(*range(11)),
        lf(classic_checkpoint_name(3)),
        lf(compaction_name(2, 5)),  # starts at/before the checkpoint
        lf(compaction_name(3, 5)),  # starts at the checkpoint
        lf(compaction_name(8, 12)),  # ends past the latest commit
        lf(compaction_name(4, 6), size=0),  # empty
        lf(compaction_name(4, 5)),
        lf(compaction_name(7, 9)),
    ]
    seg = build_log_segment(listing)
    assert names(seg.compactions) == [compaction_name(4, 5), compaction_name(7, 9)]
    seg = build_log_segment(listing, target_version=8)
    assert names(seg.compactions) == [compaction_name(4, 5)]
    units = seg.replay_units()
    assert names(units) == [compaction_name(4, 5), commit_name(6), commit_name(7), commit_name(8)]


# --- catalog-managed tables ---------------------------------------------------------------


def _spec_catalog_listing() -> list[LogFile]:
    # CATALOG_MANAGED.md, "Reading Catalog-managed Tables"
    return [
        *commits(*range(8)),
        lf(classic_checkpoint_name(2)),
        lf(compaction_name(3, 5)),
        lf(staged_commit_name(7, U1)),
        lf(staged_commit_name(8, U2)),
        lf(staged_commit_name(8, U3)),  # rejected attempt
    ]


def test_ratified_commits_replace_and_extend_published() -> None:
    ratified = [lf(staged_commit_name(7, U1)), lf(staged_commit_name(8, U2))]
    seg = build_log_segment(_spec_catalog_listing(), ratified_commits=ratified)
    assert seg.version == 8
    assert seg.checkpoint_version == 2
    assert names(seg.commits) == [
        commit_name(3),
        commit_name(4),
        commit_name(5),
        commit_name(6),
        staged_commit_name(7, U1),
        staged_commit_name(8, U2),
    ]
    assert names(seg.compactions) == [compaction_name(3, 5)]


def test_published_files_past_catalog_version_are_ignored() -> None:
    listing = [*commits(*range(10)), lf(classic_checkpoint_name(9)), lf(compaction_name(6, 9))]
    seg = build_log_segment(listing, catalog_latest_version=7)
    assert (seg.version, seg.checkpoint_version, versions_of(seg)) == (7, None, list(range(8)))
    assert seg.compactions == ()
    with pytest.raises(VersionNotFoundError):
        build_log_segment(listing, catalog_latest_version=7, target_version=8)


def test_compaction_never_covers_a_catalog_commit() -> None:
    listing = [*commits(*range(8)), lf(compaction_name(5, 7)), lf(compaction_name(4, 6))]
    ratified = [lf(staged_commit_name(7, U1))]
    seg = build_log_segment(listing, ratified_commits=ratified)
    assert names(seg.compactions) == [compaction_name(4, 6)]


def test_ratified_commits_must_be_contiguous_with_published() -> None:
    with pytest.raises(VersionsNotContiguousError):
        build_log_segment(commits(0, 1), ratified_commits=[lf(staged_commit_name(3, U1))])


def test_ratified_commit_validation() -> None:
    with pytest.raises(InvalidTableError):
        build_log_segment(
            commits(0),
            ratified_commits=[lf(staged_commit_name(1, U1)), lf(staged_commit_name(1, U2))],
        )
    with pytest.raises(ValueError):
        build_log_segment(commits(0), ratified_commits=[lf(classic_checkpoint_name(1))])
    with pytest.raises(InvalidTableError):
        build_log_segment(
            commits(0), ratified_commits=[lf(staged_commit_name(1, U1))], catalog_latest_version=0
        )
    # a published path returned by the catalog is a valid ratified commit
    seg = build_log_segment(commits(0, 1), ratified_commits=commits(1))
    assert versions_of(seg) == [0, 1]


def test_latest_commit_version() -> None:
    assert latest_commit_version([]) is None
    assert latest_commit_version([lf(classic_checkpoint_name(4))]) is None
    listing = [*commits(0, 3, 1), lf(classic_checkpoint_name(9)), lf(staged_commit_name(7, U1))]
    assert latest_commit_version(listing) == 3


# --- properties ------------------------------------------------------------------------------

CP_KINDS = ["classic", "multi_ok", "multi_missing", "uuid", "empty"]


@st.composite
def random_logs(draw: st.DrawFn) -> tuple[list[LogFile], set[int], set[int], int | None]:
    n = draw(st.integers(0, 25))
    present = {v for v in range(n) if draw(st.booleans()) or draw(st.booleans())}
    cps: dict[int, str] = draw(
        st.dictionaries(st.integers(0, max(n - 1, 0)), st.sampled_from(CP_KINDS), max_size=4)
    )
    listing = [lf(commit_name(v)) for v in present]
    complete: set[int] = set()
    for v, kind in cps.items():
        if kind == "classic":
            listing.append(lf(classic_checkpoint_name(v)))
        elif kind == "multi_ok":
            listing.extend(_multipart(v, 3))
        elif kind == "multi_missing":
            listing.extend(_multipart(v, 3, present=[1, 3]))
        elif kind == "uuid":
            listing.append(lf(uuid_checkpoint_name(v, U1, "parquet")))
        else:
            listing.append(lf(classic_checkpoint_name(v), size=0))
        if kind in ("classic", "multi_ok", "uuid"):
            complete.add(v)
    target = draw(st.none() | st.integers(0, n + 1))
    order = draw(st.permutations(listing))
    return order, present, complete, target


@settings(max_examples=200, deadline=None)
@given(log=random_logs())
def test_segment_matches_an_independent_reading(
    log: tuple[list[LogFile], set[int], set[int], int | None],
) -> None:
    listing, present, complete, target = log
    if not present and not complete:
        with pytest.raises(TableNotFoundError):
            build_log_segment(listing, target_version=target)
        return
    latest = max(present | complete)
    wanted = latest if target is None else target
    if wanted > latest:
        with pytest.raises(VersionNotFoundError):
            build_log_segment(listing, target_version=target)
        return
    cp = max((v for v in complete if v <= wanted), default=None)
    start = 0 if cp is None else cp + 1
    needed = set(range(start, wanted + 1))
    if cp is None and 0 not in present:
        with pytest.raises(VersionNotFoundError if target is not None else InvalidTableError):
            build_log_segment(listing, target_version=target)
        return
    if not needed <= present:
        with pytest.raises(VersionsNotContiguousError, match="versions are not contiguous"):
            build_log_segment(listing, target_version=target)
        return
    seg = build_log_segment(listing, target_version=target)
    assert seg.version == wanted
    assert seg.checkpoint_version == cp
    assert versions_of(seg) == list(range(start, wanted + 1))
    if seg.checkpoint is not None:
        assert all(f in listing for f in seg.checkpoint.files)
        assert all(f.size != 0 for f in seg.checkpoint.files)


@st.composite
def compaction_logs(draw: st.DrawFn) -> tuple[list[LogFile], int | None, int]:
    n = draw(st.integers(1, 30))
    listing = [lf(commit_name(v)) for v in range(n)]
    cp = draw(st.none() | st.integers(0, n - 1))
    if cp is not None:
        listing.append(lf(classic_checkpoint_name(cp)))
    for _ in range(draw(st.integers(0, 8))):
        a = draw(st.integers(0, n + 2))
        b = draw(st.integers(a, n + 3))
        listing.append(lf(compaction_name(a, b)))
    target = draw(st.integers(0, n - 1))
    return listing, cp, target


@settings(max_examples=200, deadline=None)
@given(log=compaction_logs())
def test_replay_units_cover_each_version_once(log: tuple[list[LogFile], int | None, int]) -> None:
    listing, _, target = log
    seg = build_log_segment(listing, target_version=target)
    covered: list[int] = []
    for unit in seg.replay_units():
        if unit.kind is LogFileKind.COMPACTION:
            assert unit.version is not None and unit.end_version is not None
            covered.extend(range(unit.version, unit.end_version + 1))
        else:
            covered.append(unit.require_version())
    assert covered == list(range(seg.start_version, seg.version + 1))
    spans = [(c.require_version(), c.end_version) for c in seg.compactions]
    assert spans == sorted(spans)


# --- real logs --------------------------------------------------------------------------------


def golden_listing(table: str) -> list[LogFile]:
    log = GOLDEN / table / "_delta_log"
    listing: list[LogFile] = []
    for entry in os.listdir(log):
        full = log / entry
        if full.is_dir():
            children = [(f"{entry}/{c}", full / c) for c in os.listdir(full)]
        else:
            children = [(entry, full)]
        for name, path in children:
            stat = path.stat()
            parsed = parse_log_file_name(
                name, size=stat.st_size, modification_time=int(stat.st_mtime * 1000)
            )
            if parsed is not None:
                listing.append(parsed)
    return listing


def golden_hint(table: str) -> LastCheckpointInfo | None:
    path = GOLDEN / table / "_delta_log" / "_last_checkpoint"
    return parse_last_checkpoint(path.read_bytes()) if path.exists() else None


needs_golden = pytest.mark.skipif(not GOLDEN.is_dir(), reason="golden tables not present")


@needs_golden
@pytest.mark.parametrize("use_hint", [False, True])
def test_golden_checkpoint(use_hint: bool) -> None:
    hint = golden_hint("checkpoint") if use_hint else None
    seg = build_log_segment(golden_listing("checkpoint"), last_checkpoint_hint=hint)
    assert seg.version == 14
    assert seg.checkpoint is not None
    assert seg.checkpoint.kind is LogFileKind.CHECKPOINT_CLASSIC
    assert names(seg.checkpoint.files) == ["00000000000000000010.checkpoint.parquet"]
    assert versions_of(seg) == [11, 12, 13, 14]
    assert build_log_segment(golden_listing("checkpoint"), target_version=9).checkpoint is None


@needs_golden
def test_golden_multi_part_checkpoint() -> None:
    hint = golden_hint("multi-part-checkpoint")
    assert hint is not None and hint.parts == 2
    seg = build_log_segment(golden_listing("multi-part-checkpoint"), last_checkpoint_hint=hint)
    assert seg.version == 1
    assert seg.checkpoint is not None
    assert seg.checkpoint.kind is LogFileKind.CHECKPOINT_MULTIPART
    assert names(seg.checkpoint.files) == [
        "00000000000000000001.checkpoint.0000000001.0000000002.parquet",
        "00000000000000000001.checkpoint.0000000002.0000000002.parquet",
    ]
    assert seg.checkpoint.files[0].size == 15741  # sizes carried from the listing
    assert versions_of(seg) == []


@needs_golden
@pytest.mark.parametrize(
    ("table", "fmt"), [("v2-checkpoint-json", "json"), ("v2-checkpoint-parquet", "parquet")]
)
def test_golden_v2_checkpoint(table: str, fmt: str) -> None:
    hint = golden_hint(table)
    assert hint is not None
    seg = build_log_segment(golden_listing(table), last_checkpoint_hint=hint)
    assert seg.version == 2
    assert seg.checkpoint is not None
    assert seg.checkpoint.kind is LogFileKind.CHECKPOINT_UUID
    (cp_file,) = seg.checkpoint.files
    assert cp_file.format == fmt
    assert cp_file.name == hint.v2_checkpoint_path
    assert versions_of(seg) == []
    before = build_log_segment(golden_listing(table), target_version=1)
    assert (before.checkpoint, versions_of(before)) == (None, [0, 1])


@needs_golden
def test_golden_only_checkpoint_files() -> None:
    listing = golden_listing("only-checkpoint-files")
    latest = build_log_segment(listing, last_checkpoint_hint=golden_hint("only-checkpoint-files"))
    assert (latest.version, latest.checkpoint_version, versions_of(latest)) == (2, 2, [])
    v1 = build_log_segment(listing, target_version=1)
    assert (v1.checkpoint_version, versions_of(v1)) == (1, [])
    v0 = build_log_segment(listing, target_version=0)
    assert (v0.checkpoint_version, versions_of(v0)) == (None, [0])
    # without the commits (as after cleanup) both checkpoints still serve
    no_commits = [f for f in listing if f.kind is not LogFileKind.COMMIT]
    assert build_log_segment(no_commits).checkpoint_version == 2
    assert build_log_segment(no_commits, target_version=1).checkpoint_version == 1


@needs_golden
def test_golden_versions_not_contiguous() -> None:
    with pytest.raises(VersionsNotContiguousError) as excinfo:
        build_log_segment(golden_listing("versions-not-contiguous"))
    assert "versions are not contiguous" in str(excinfo.value)
    assert "[0, 2]" in str(excinfo.value)


@needs_golden
def test_golden_corrupted_last_checkpoint_kernel() -> None:
    hint = golden_hint("corrupted-last-checkpoint-kernel")
    assert hint is None  # the file is empty: fall back to listing
    seg = build_log_segment(golden_listing("corrupted-last-checkpoint-kernel"))
    assert seg.version == 11
    assert seg.checkpoint_version == 10
    assert versions_of(seg) == [11]


# --- checkpoint spec (issue 25) ---------------------------------------------------------


def _ref(*names_: str) -> CheckpointRef:
    files = tuple(lf(n) for n in names_)
    return CheckpointRef(files[0].require_version(), files[0].kind, files)


_SIDECAR = Sidecar(path="s.parquet", sizeInBytes=1, modificationTime=1)
_UUID_NAMES = (uuid_checkpoint_name(5, U1, "json"), uuid_checkpoint_name(5, U1, "parquet"))


@pytest.mark.parametrize(
    ("files", "actions", "valid"),
    [
        # UUID-named: V2, exactly one checkpointMetadata of its version
        (_UUID_NAMES[:1], [CheckpointMetadata(version=5)], True),
        (_UUID_NAMES[1:], [CheckpointMetadata(version=5), _SIDECAR], True),
        (_UUID_NAMES[:1], [], False),
        (_UUID_NAMES[1:], [_SIDECAR], False),
        (_UUID_NAMES[:1], [CheckpointMetadata(version=5)] * 2, False),
        (_UUID_NAMES[:1], [CheckpointMetadata(version=4)], False),
        # classic-named: V1 (neither) or V2 (exactly one)
        ((classic_checkpoint_name(5),), [], True),
        ((classic_checkpoint_name(5),), [CheckpointMetadata(version=5), _SIDECAR], True),
        ((classic_checkpoint_name(5),), [_SIDECAR], False),
        ((classic_checkpoint_name(5),), [CheckpointMetadata(version=6)], False),
        # multi-part: always V1
        ((multipart_checkpoint_name(5, 1, 2), multipart_checkpoint_name(5, 2, 2)), [], True),
        (
            (multipart_checkpoint_name(5, 1, 2), multipart_checkpoint_name(5, 2, 2)),
            [CheckpointMetadata(version=5)],
            False,
        ),
    ],
)
def test_check_checkpoint_spec(files: tuple[str, ...], actions: list[Any], valid: bool) -> None:
    ref = _ref(*files)
    if valid:
        check_checkpoint_spec(ref, actions)
    else:
        with pytest.raises(InvalidCheckpointError):
            check_checkpoint_spec(ref, actions)
    # sidecars known apart from the actions count the same
    if not valid and actions == [_SIDECAR]:
        with pytest.raises(InvalidCheckpointError):
            check_checkpoint_spec(ref, [], names_sidecars=True)


def test_unusable_checkpoint_files_are_as_absent() -> None:
    uuid_top = uuid_checkpoint_name(5, U1, "json")
    listing = [*commits(*range(8)), lf(classic_checkpoint_name(3)), lf(uuid_top)]
    assert build_log_segment(listing).checkpoint_version == 5
    segment = build_log_segment(listing, unusable={uuid_top})
    assert segment.checkpoint_version == 3 and versions_of(segment) == [4, 5, 6, 7]
    segment = build_log_segment(listing, unusable={uuid_top, classic_checkpoint_name(3)})
    assert segment.checkpoint is None and versions_of(segment) == list(range(8))
    # the hint naming the unusable file does not bring it back
    hint = LastCheckpointInfo(version=5, size=1, v2Checkpoint={"path": uuid_top})
    assert (
        build_log_segment(
            listing, last_checkpoint_hint=hint, unusable={uuid_top}
        ).checkpoint_version
        == 3
    )
    with pytest.raises(InvalidTableError):
        build_log_segment([lf(uuid_top), *commits(6, 7)], unusable={uuid_top})


def test_complete_checkpoint_at_one_version() -> None:
    listing = [
        *commits(0, 1, 2, 3),
        lf(classic_checkpoint_name(1), size=0),  # empty: no checkpoint
        lf(multipart_checkpoint_name(2, 1, 2)),  # one part of two
        lf(classic_checkpoint_name(3)),
        lf(multipart_checkpoint_name(3, 1, 1)),
    ]
    assert complete_checkpoint_at(listing, 0) is None
    assert complete_checkpoint_at(listing, 1) is None
    assert complete_checkpoint_at(listing, 2) is None
    found = complete_checkpoint_at(listing, 3)
    assert found is not None and found.kind is LogFileKind.CHECKPOINT_MULTIPART
    uuid_named = lf(uuid_checkpoint_name(2, U1, "json"))
    found = complete_checkpoint_at([*listing, uuid_named], 2)
    assert found is not None and names(found.files) == [uuid_named.name]
