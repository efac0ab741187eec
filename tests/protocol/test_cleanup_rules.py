"""Tests for protocol.cleanup_rules: cutoffs, the metadata cleanup plan, VACUUM path rules."""

from __future__ import annotations

import posixpath
import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raydelta.protocol import z85
from raydelta.protocol.cleanup_rules import (
    DAY_MS,
    HOUR_MS,
    TableRoot,
    check_vacuum_retention,
    cutoff_commit_version,
    dv_file_path,
    is_hidden_name,
    is_hidden_path,
    is_partition_directory,
    log_cutoff_timestamp,
    midnight_utc,
    plan_log_cleanup,
    remaining_checkpoint_files,
    resolve_path,
    sidecar_cutoff_timestamp,
    unreferenced_sidecars,
)
from raydelta.protocol.commit_timestamps import CommitTimestamp
from raydelta.protocol.errors import RetentionTooShortError, VersionNotFoundError
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
from raydelta.protocol.last_checkpoint import LastCheckpointInfo
from raydelta.protocol.log_segment import build_log_segment

U1 = "016ae953-37a9-438e-8683-9a9a4a79a395"
U2 = "7d17ac10-5cc3-401b-bd1a-9c82dd2ea032"
U3 = "b91807ba-fe18-488c-a15e-c4807dbd2174"


def lf(name: str, size: int = 100, mtime: int = 1) -> LogFile:
    parsed = parse_log_file_name(name, size=size, modification_time=mtime)
    assert parsed is not None, name
    return parsed


def commits(versions: Iterable[int]) -> list[LogFile]:
    return [lf(commit_name(v)) for v in versions]


def names(files: Iterable[LogFile]) -> list[str]:
    return [f.name for f in files]


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


# --- clocks and cutoffs -------------------------------------------------------------------


def test_midnight_utc_floors_to_the_day() -> None:
    assert midnight_utc(ms("2024-03-05T17:45:12.345")) == ms("2024-03-05T00:00:00")
    assert midnight_utc(ms("2024-03-05T00:00:00")) == ms("2024-03-05T00:00:00")
    assert midnight_utc(ms("1969-12-31T23:00:00")) == ms("1969-12-31T00:00:00")


def test_log_cutoff_is_midnight_of_now_minus_retention() -> None:
    now = ms("2024-03-31T08:00:00")
    assert log_cutoff_timestamp(now, 30 * DAY_MS) == ms("2024-03-01T00:00:00")
    assert log_cutoff_timestamp(now, 0) == ms("2024-03-31T00:00:00")
    assert log_cutoff_timestamp(now, 9 * HOUR_MS) == ms("2024-03-30T00:00:00")
    with pytest.raises(ValueError):
        log_cutoff_timestamp(now, -1)


def test_sidecar_cutoff_is_a_day_before_midnight() -> None:
    now = ms("2024-03-31T08:00:00")
    assert sidecar_cutoff_timestamp(now) == ms("2024-03-30T00:00:00")


@given(st.integers(min_value=0, max_value=4_000_000_000_000), st.integers(0, 400 * DAY_MS))
@settings(max_examples=200, deadline=None)
def test_cutoff_matches_datetime_arithmetic(now: int, retention: int) -> None:
    moment = datetime.fromtimestamp(now / 1000, tz=UTC) - timedelta(milliseconds=retention)
    expected = datetime(moment.year, moment.month, moment.day, tzinfo=UTC)
    assert log_cutoff_timestamp(now, retention) == int(expected.timestamp() * 1000)


def stamps(*pairs: tuple[int, int]) -> list[CommitTimestamp]:
    return [CommitTimestamp(v, t, "fileModificationTime") for v, t in pairs]


def test_cutoff_commit_is_the_newest_not_newer_than_the_cutoff() -> None:
    timeline = stamps((0, 100), (1, 200), (2, 300), (3, 400))
    assert cutoff_commit_version(timeline, 300) == 2  # exactly at the cutoff counts
    assert cutoff_commit_version(timeline, 299) == 1
    assert cutoff_commit_version(timeline, 10_000) == 3
    assert cutoff_commit_version(timeline, 99) is None
    assert cutoff_commit_version([], 1_000) is None


def test_cutoff_commit_never_skips_a_newer_commit() -> None:
    # Not monotonic (e.g. across an ICT enablement): version 2 is newer than the
    # cutoff, so nothing from version 2 on may be treated as expired.
    timeline = stamps((0, 100), (1, 200), (2, 900), (3, 250))
    assert cutoff_commit_version(timeline, 300) == 1


# --- the metadata cleanup plan -------------------------------------------------------------


def rich_listing() -> list[LogFile]:
    """Commits 0..25, checkpoints of every kind, checksums, compactions, staged commits."""
    files = commits(range(26))
    files += [lf(checksum_name(v)) for v in range(26)]
    files += [lf(classic_checkpoint_name(5))]
    files += [lf(multipart_checkpoint_name(8, 1, 3))]  # incomplete
    files += [lf(multipart_checkpoint_name(10, p, 2)) for p in (1, 2)]
    files += [lf(uuid_checkpoint_name(15, U1, "json"))]
    files += [lf(classic_checkpoint_name(20))]
    files += [lf(compaction_name(2, 4)), lf(compaction_name(11, 13)), lf(compaction_name(9, 12))]
    files += [lf(compaction_name(21, 23))]
    files += [lf(staged_commit_name(3, U1)), lf(staged_commit_name(10, U2))]
    files += [lf(staged_commit_name(11, U3))]
    return files


def test_plan_keeps_newest_complete_checkpoint_at_or_before_cutoff_commit() -> None:
    listing = rich_listing()
    plan = plan_log_cleanup(listing, cutoff_version=13)
    assert plan.skipped is None
    assert plan.kept_version == 10
    assert plan.kept_checkpoint is not None
    assert plan.kept_checkpoint.kind is LogFileKind.CHECKPOINT_MULTIPART
    deleted = set(names(plan.to_delete))
    expected = {commit_name(v) for v in range(10)} | {checksum_name(v) for v in range(10)}
    expected |= {classic_checkpoint_name(5), multipart_checkpoint_name(8, 1, 3)}
    expected |= {compaction_name(2, 4), compaction_name(9, 12)}  # start <= 10
    expected |= {staged_commit_name(3, U1), staged_commit_name(10, U2)}  # version <= 10
    assert deleted == expected
    assert plan.classic_copy_name is None  # a multi-part checkpoint is found by old readers


def test_plan_deletes_oldest_first() -> None:
    plan = plan_log_cleanup(rich_listing(), cutoff_version=22)
    versions = [f.require_version() for f in plan.to_delete]
    assert versions == sorted(versions)
    assert plan.kept_version == 20


def test_plan_uuid_checkpoint_gets_a_classic_copy() -> None:
    plan = plan_log_cleanup(rich_listing(), cutoff_version=17)
    assert plan.kept_version == 15
    assert plan.classic_copy_name == classic_checkpoint_name(15)
    with_classic = [*rich_listing(), lf(classic_checkpoint_name(15))]
    assert plan_log_cleanup(with_classic, cutoff_version=17).classic_copy_name is None
    # An empty classic file at that version is not a checkpoint: still copy.
    with_empty = [*rich_listing(), lf(classic_checkpoint_name(15), size=0)]
    assert plan_log_cleanup(with_empty, cutoff_version=17).classic_copy_name is not None


def test_plan_skips_incomplete_and_empty_checkpoints() -> None:
    listing = [f for f in rich_listing() if f.name != multipart_checkpoint_name(10, 2, 2)]
    plan = plan_log_cleanup(listing, cutoff_version=13)
    assert plan.kept_version == 5
    assert multipart_checkpoint_name(10, 1, 2) not in names(plan.to_delete)  # version > kept
    listing = [
        lf(f.name, size=0) if f.name == classic_checkpoint_name(20) else f for f in rich_listing()
    ]
    assert plan_log_cleanup(listing, cutoff_version=21).kept_version == 15


def test_delta_rs_3692_no_checkpoint_before_cutoff_deletes_nothing() -> None:
    # delta-rs issue 3692: commits 0..9, the only checkpoint at 9, commits 0..4
    # expired. delta-rs deleted 0..4 and versions 5..8 lost protocol and metadata.
    listing = [*commits(range(10)), lf(classic_checkpoint_name(9))]
    plan = plan_log_cleanup(listing, cutoff_version=4)
    assert plan.to_delete == ()
    assert plan.kept_checkpoint is None
    assert plan.skipped is not None and "no complete checkpoint" in plan.skipped


def test_no_expired_commit_deletes_nothing() -> None:
    plan = plan_log_cleanup(rich_listing(), cutoff_version=None)
    assert plan.to_delete == ()
    assert plan.skipped is not None


def test_last_checkpoint_pointing_older_lowers_the_kept_checkpoint() -> None:
    hint = LastCheckpointInfo(version=10, size=4, parts=2)
    plan = plan_log_cleanup(rich_listing(), cutoff_version=22, last_checkpoint=hint)
    assert plan.kept_version == 10
    assert plan.notes
    # A stale hint naming a checkpoint that is gone changes nothing.
    stale = LastCheckpointInfo(version=7, size=4)
    assert (
        plan_log_cleanup(rich_listing(), cutoff_version=22, last_checkpoint=stale).kept_version
        == 20
    )


def test_checkpoint_protection_allows_only_all_at_once() -> None:
    blocked = plan_log_cleanup(rich_listing(), cutoff_version=13, checkpoint_protection_before=12)
    assert blocked.to_delete == ()
    assert blocked.skipped is not None and "checkpointProtection" in blocked.skipped
    allowed = plan_log_cleanup(rich_listing(), cutoff_version=22, checkpoint_protection_before=12)
    assert allowed.kept_version == 20
    assert all(
        f.require_version() < 20 or f.kind is not LogFileKind.COMMIT for f in allowed.to_delete
    )
    assert {commit_name(v) for v in range(12)} <= set(names(allowed.to_delete))


def test_remaining_checkpoints_exclude_the_deleted_ones() -> None:
    listing = rich_listing()
    plan = plan_log_cleanup(listing, cutoff_version=22)
    remaining = names(remaining_checkpoint_files(listing, plan))
    assert remaining == [classic_checkpoint_name(20)]


def test_unreferenced_sidecars() -> None:
    cutoff = 1_000
    old_ref = lf(sidecar_name(U1), mtime=10)
    old_orphan = lf(sidecar_name(U2), mtime=10)
    young_orphan = lf(sidecar_name(U3), mtime=5_000)
    unknown = lf(f"_sidecars/{uuid.UUID(int=7)}.parquet", mtime=0)
    doomed = unreferenced_sidecars(
        [old_ref, old_orphan, young_orphan, unknown], [old_ref.name], cutoff_ms=cutoff
    )
    assert names(doomed) == [old_orphan.name]


# --- property: every retained version stays readable, at every instant --------------------

KINDS = ("classic", "multipart", "multipart_incomplete", "uuid", "empty")


@st.composite
def logs(draw: st.DrawFn) -> tuple[list[LogFile], int]:
    latest = draw(st.integers(min_value=1, max_value=30))
    first = draw(st.integers(min_value=0, max_value=latest))
    files = commits(range(first, latest + 1))
    checkpoint_versions = draw(st.sets(st.integers(0, latest), max_size=5))
    if first > 0:
        checkpoint_versions.add(first)  # the log must be readable to begin with
    for version in sorted(checkpoint_versions):
        kind = "classic" if version == first and first > 0 else draw(st.sampled_from(KINDS))
        if kind == "classic":
            files.append(lf(classic_checkpoint_name(version)))
        elif kind == "multipart":
            files += [lf(multipart_checkpoint_name(version, p, 2)) for p in (1, 2)]
        elif kind == "multipart_incomplete":
            files.append(lf(multipart_checkpoint_name(version, 2, 3)))
        elif kind == "uuid":
            files.append(lf(uuid_checkpoint_name(version, str(uuid.uuid4()), "parquet")))
        else:
            files.append(lf(classic_checkpoint_name(version), size=0))
    for version in draw(st.sets(st.integers(first, latest), max_size=4)):
        files.append(lf(checksum_name(version)))
        end = draw(st.integers(version, latest))
        files.append(lf(compaction_name(version, end)))
        files.append(lf(staged_commit_name(version, str(uuid.uuid4()))))
    cutoff = draw(st.integers(min_value=-1, max_value=latest))
    return files, cutoff


def readable(listing: Sequence[LogFile], version: int) -> bool:
    try:
        segment = build_log_segment(listing, target_version=version)
    except (VersionNotFoundError, ValueError, Exception):
        return False
    return segment.version == version


@given(logs())
@settings(max_examples=200, deadline=None)
def test_plan_keeps_every_retained_version_readable_after_every_deletion(
    case: tuple[list[LogFile], int],
) -> None:
    listing, cutoff = case
    latest = max(f.require_version() for f in listing if f.kind is LogFileKind.COMMIT)
    plan = plan_log_cleanup(listing, cutoff_version=cutoff if cutoff >= 0 else None)
    if plan.kept_checkpoint is None:
        assert plan.to_delete == ()
        return
    kept = plan.kept_version
    assert kept is not None and kept <= cutoff
    kept_names = set(names(plan.kept_checkpoint.files))
    assert not kept_names & set(names(plan.to_delete))
    for file in plan.to_delete:
        version = file.require_version()
        if file.kind in (LogFileKind.COMPACTION, LogFileKind.STAGED_COMMIT):
            assert version <= kept
        else:
            assert version < kept
    retained = [v for v in range(kept, latest + 1) if readable(listing, v)]
    assert kept in retained and latest in retained
    # Killed after any number of deletions, the log still rebuilds every retained version.
    remaining = list(listing)
    for doomed in [None, *plan.to_delete]:
        if doomed is not None:
            remaining = [f for f in remaining if f.name != doomed.name]
        for version in retained:
            assert readable(remaining, version), (version, doomed)
        segment = build_log_segment(remaining, target_version=kept)
        assert segment.checkpoint is not None and segment.checkpoint.version == kept


# --- VACUUM: path resolution -----------------------------------------------------------

ROOT = TableRoot("/data/t", "file")


@pytest.mark.parametrize(
    ("raw", "relative", "deletable"),
    [
        ("part-0.parquet", "part-0.parquet", True),
        ("a=1/part-0.parquet", "a=1/part-0.parquet", True),
        ("a=x%20y/part%2D0.parquet", "a=x y/part-0.parquet", True),
        ("a=x%253Ay/p.parquet", "a=x%3Ay/p.parquet", True),
        ("./p.parquet", "p.parquet", True),
        ("a//p.parquet", "a/p.parquet", True),
        ("/data/t/p.parquet", "p.parquet", True),
        ("file:///data/t/a=1/p.parquet", "a=1/p.parquet", True),
        ("file:/data/t/p.parquet", "p.parquet", True),
        ("file://localhost/data/t/p.parquet", "p.parquet", True),
        ("file:///data/t/a%20b/p.parquet", "a b/p.parquet", True),
        # protects, but is never deleted: it spells a '..'
        ("a/../p.parquet", "p.parquet", False),
        ("/data/t/x/../p.parquet", "p.parquet", False),
        # outside
        ("../p.parquet", None, False),
        ("%2E%2E/p.parquet", None, False),
        ("..%2Fp.parquet", None, False),
        ("a/../../p.parquet", None, False),
        ("/data/t2/p.parquet", None, False),
        ("/data/p.parquet", None, False),
        ("/etc/passwd", None, False),
        ("file:///etc/passwd", None, False),
        ("file:/data/t/../x/p.parquet", None, False),
        ("file://otherhost/data/t/p.parquet", None, False),
        ("s3://bucket/t/p.parquet", None, False),
        ("/data/t", None, False),
        (".", None, False),
        ("", None, False),
    ],
)
def test_resolve_path_local(raw: str, relative: str | None, deletable: bool) -> None:
    resolved = resolve_path(raw, ROOT)
    assert resolved.relative == relative
    assert resolved.deletable is deletable


def test_resolve_path_object_store() -> None:
    root = TableRoot("bucket/t", "s3")
    assert resolve_path("s3://bucket/t/p.parquet", root).relative == "p.parquet"
    assert resolve_path("s3a://bucket/t/a=1/p.parquet", root).relative == "a=1/p.parquet"
    assert resolve_path("s3://other/t/p.parquet", root).relative is None
    assert resolve_path("s3://bucket/t2/p.parquet", root).relative is None
    assert resolve_path("gs://bucket/t/p.parquet", root).relative is None
    assert resolve_path("/bucket/t/p.parquet", root).relative is None  # no scheme: not ours
    assert resolve_path("file:///bucket/t/p.parquet", root).relative is None


SEGMENT = st.text(alphabet=st.sampled_from("abz019=-_.% /:"), min_size=1, max_size=6).filter(
    lambda s: s not in (".", "..")
)


@given(st.lists(st.one_of(SEGMENT, st.just(".."), st.just(".")), min_size=1, max_size=6))
@settings(max_examples=200, deadline=None)
def test_resolved_paths_never_leave_the_root(segments: list[str]) -> None:
    for raw in ("/".join(segments), "/data/t/" + "/".join(segments)):
        resolved = resolve_path(raw, ROOT)
        if resolved.relative is None:
            continue
        assert not resolved.relative.startswith("/")
        assert ".." not in resolved.relative.split("/")
        joined = posixpath.normpath(posixpath.join(ROOT.path, resolved.relative))
        assert joined.startswith(ROOT.path + "/")


@given(st.lists(st.text(alphabet="abcXYZ019=-", min_size=1, max_size=8), min_size=1, max_size=4))
@settings(max_examples=100, deadline=None)
def test_plain_relative_paths_resolve_to_themselves(segments: list[str]) -> None:
    raw = "/".join(segments)
    assert resolve_path(raw, ROOT).relative == raw
    assert resolve_path(raw, ROOT).deletable


# --- VACUUM: hidden names -----------------------------------------------------------------

PARTS = frozenset({"date", "_col"})


@pytest.mark.parametrize(
    ("name", "is_dir", "hidden"),
    [
        ("_delta_log", True, True),
        ("_change_data", True, False),
        ("_col=1", True, False),
        ("_other=1", True, True),
        ("date=2024-01-01", True, False),
        ("_tmp", True, True),
        (".hive-staging", True, True),
        ("sub", True, False),
        ("_SUCCESS", False, True),
        (".part-0.parquet.crc", False, True),
        ("_col=1", False, True),
        ("part-0.parquet", False, False),
    ],
)
def test_hidden_names(name: str, is_dir: bool, hidden: bool) -> None:
    assert is_hidden_name(name, PARTS, is_dir=is_dir) is hidden


def test_hidden_paths() -> None:
    assert is_hidden_path("_delta_log/00000000000000000000.json", PARTS)
    assert is_hidden_path("date=1/_tmp/p.parquet", PARTS)
    assert is_hidden_path("date=1/.p.parquet.crc", PARTS)
    assert not is_hidden_path("_col=1/date=2/p.parquet", PARTS)
    assert not is_hidden_path("_change_data/cdc-0.parquet", PARTS)
    assert is_partition_directory("date=", PARTS)
    assert not is_partition_directory("date", PARTS)


def test_dv_file_path() -> None:
    file_uuid = uuid.UUID("0c6cbaaf-5e04-4c9d-8959-1088814f58ef")
    encoded = z85.encode_uuid(file_uuid)
    assert dv_file_path("u", encoded) == f"deletion_vector_{file_uuid}.bin"
    assert dv_file_path("u", "ab" + encoded) == f"ab/deletion_vector_{file_uuid}.bin"
    assert dv_file_path("p", "s3://b/t/dv.bin") == "s3://b/t/dv.bin"
    assert dv_file_path("i", "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L") is None
    assert dv_file_path("u", "short") is None


def test_vacuum_retention_check() -> None:
    week = 7 * 24 * HOUR_MS
    assert check_vacuum_retention(None, week, force=False) == week
    assert check_vacuum_retention(8 * 24 * HOUR_MS, week, force=False) == 8 * 24 * HOUR_MS
    with pytest.raises(RetentionTooShortError, match="force"):
        check_vacuum_retention(0, week, force=False)
    assert check_vacuum_retention(0, week, force=True) == 0
    with pytest.raises(ValueError):
        check_vacuum_retention(-1, week, force=True)
