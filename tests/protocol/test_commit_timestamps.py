"""Tests for protocol.commit_timestamps: ICT rules, monotonizing, timestamp lookup."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raydelta.protocol.commit_timestamps import (
    FILE_MODIFICATION_TIME,
    IN_COMMIT_TIMESTAMP,
    CommitTimestamp,
    commit_timestamp,
    monotonize,
    version_at_timestamp,
)
from raydelta.protocol.errors import CorruptLogError, InvalidTableError, VersionNotFoundError

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "delta-spark-golden"


def mtime(version: int, ts: int) -> CommitTimestamp:
    return CommitTimestamp(version, ts, FILE_MODIFICATION_TIME)


def ict(version: int, ts: int) -> CommitTimestamp:
    return CommitTimestamp(version, ts, IN_COMMIT_TIMESTAMP)


# --- commit_timestamp ------------------------------------------------------------------


def test_without_ict_file_modification_time_is_used() -> None:
    got = commit_timestamp(3, file_modification_time=1000, in_commit_timestamp=5000)
    assert got == mtime(3, 1000)


def test_ict_from_the_start() -> None:
    got = commit_timestamp(
        0, file_modification_time=1000, in_commit_timestamp=5000, ict_enabled=True
    )
    assert got == ict(0, 5000)


def test_ict_enabled_later_splits_at_enablement_version() -> None:
    def at_version(version: int, ict_ms: int | None) -> CommitTimestamp:
        return commit_timestamp(
            version,
            file_modification_time=1000,
            in_commit_timestamp=ict_ms,
            enablement_version=5,
            enablement_timestamp=9000,
            ict_enabled=True,
        )

    before, at, after = at_version(4, None), at_version(5, 9000), at_version(6, 9500)
    assert before == mtime(4, 1000)
    assert at == ict(5, 9000)
    assert after == ict(6, 9500)


def test_missing_ict_where_required_is_corrupt() -> None:
    with pytest.raises(CorruptLogError, match="inCommitTimestamp"):
        commit_timestamp(2, file_modification_time=1, ict_enabled=True)
    with pytest.raises(CorruptLogError):
        commit_timestamp(
            7,
            file_modification_time=1,
            enablement_version=5,
            enablement_timestamp=10,
            ict_enabled=True,
        )


def test_enablement_properties_must_come_together() -> None:
    with pytest.raises(InvalidTableError):
        commit_timestamp(
            1,
            file_modification_time=1,
            in_commit_timestamp=2,
            enablement_version=1,
            ict_enabled=True,
        )
    with pytest.raises(InvalidTableError):
        version_at_timestamp([mtime(0, 1)], 5, enablement_timestamp=3)


# --- monotonize ------------------------------------------------------------------------------


def test_monotonize_bumps_non_increasing_mtimes() -> None:
    raw = [mtime(0, 100), mtime(1, 100), mtime(2, 50), mtime(3, 200), mtime(4, 150)]
    assert monotonize(raw) == [
        mtime(0, 100),
        mtime(1, 101),
        mtime(2, 102),
        mtime(3, 200),
        mtime(4, 201),
    ]


def test_monotonize_sorts_by_version_and_leaves_ict_alone() -> None:
    raw = [ict(3, 500), mtime(1, 400), mtime(0, 450), ict(2, 460)]
    assert monotonize(raw) == [mtime(0, 450), mtime(1, 451), ict(2, 460), ict(3, 500)]


timestamps = st.lists(st.integers(0, 10**13), max_size=30)


@settings(max_examples=200, deadline=None)
@given(ts=timestamps)
def test_monotonize_properties(ts: list[int]) -> None:
    raw = [mtime(v, t) for v, t in enumerate(ts)]
    out = monotonize(raw)
    assert [c.version for c in out] == list(range(len(ts)))
    assert all(b.timestamp_ms > a.timestamp_ms for a, b in pairwise(out))
    assert all(o.timestamp_ms >= r.timestamp_ms for o, r in zip(out, raw, strict=True))
    # untouched where already increasing
    for i, (o, r) in enumerate(zip(out, raw, strict=True)):
        if i == 0 or r.timestamp_ms > out[i - 1].timestamp_ms:
            assert o == r
    assert monotonize(out) == out


# --- version_at_timestamp -------------------------------------------------------------------


COMMITS = [mtime(0, 1000), mtime(1, 2000), mtime(2, 3000)]


@pytest.mark.parametrize(
    ("ts", "version"),
    [(1000, 0), (1999, 0), (2000, 1), (2500, 1), (3000, 2), (10**12, 2)],
)
def test_version_at_timestamp(ts: int, version: int) -> None:
    assert version_at_timestamp(COMMITS, ts) == version


def test_before_earliest_names_the_earliest_commit() -> None:
    with pytest.raises(VersionNotFoundError) as excinfo:
        version_at_timestamp(COMMITS, 999)
    message = str(excinfo.value)
    assert "before the earliest" in message
    assert "version 0" in message and "1970-01-01T00:00:01.000+00:00" in message


def test_after_latest_can_be_refused() -> None:
    assert version_at_timestamp(COMMITS, 3001) == 2
    with pytest.raises(VersionNotFoundError, match="after the latest"):
        version_at_timestamp(COMMITS, 3001, allow_after_latest=False)
    assert version_at_timestamp(COMMITS, 3000, allow_after_latest=False) == 2


def test_empty_history() -> None:
    with pytest.raises(VersionNotFoundError):
        version_at_timestamp([], 5)


def test_non_monotonic_mtimes_resolve_like_delta_spark() -> None:
    # v1's file is older than v0's: monotonized it sits at 1001, so 1000 -> v0, 1001 -> v1
    raw = [mtime(0, 1000), mtime(1, 500), mtime(2, 3000)]
    assert version_at_timestamp(raw, 1000) == 0
    assert version_at_timestamp(raw, 1001) == 1
    with pytest.raises(VersionNotFoundError):
        version_at_timestamp(raw, 600)  # raw v1 mtime, but before v0 once monotonized


def test_ict_search_space_rule() -> None:
    # versions 0-2 pre-ICT (mtimes), ICT enabled at v3 with ICT 10_000. v2's mtime
    # (20_000) is later than the ICTs (writer rule 5 broken on purpose, e.g. a log copied
    # later): only the search-space rule keeps the two sides apart.
    history = [mtime(0, 1000), mtime(1, 2000), mtime(2, 20_000), ict(3, 10_000), ict(4, 11_000)]

    def lookup(ts: int) -> int:
        return version_at_timestamp(history, ts, enablement_version=3, enablement_timestamp=10_000)

    assert lookup(10_000) == 3
    assert lookup(10_500) == 3
    assert lookup(11_000) == 4
    assert lookup(9_999) == 1  # v2 (20_000) is after 9_999
    assert lookup(1500) == 0
    # before enablement and after the last pre-ICT commit is not "after latest"
    short = [mtime(0, 1000), ict(1, 10_000)]
    assert (
        version_at_timestamp(
            short,
            5000,
            enablement_version=1,
            enablement_timestamp=10_000,
            allow_after_latest=False,
        )
        == 0
    )
    with pytest.raises(VersionNotFoundError):
        lookup(500)


def test_ict_enabled_at_version_zero_with_properties() -> None:
    history = [ict(0, 100), ict(1, 200)]
    with pytest.raises(VersionNotFoundError):
        version_at_timestamp(history, 50, enablement_version=0, enablement_timestamp=100)


@settings(max_examples=200, deadline=None)
@given(ts=st.lists(st.integers(0, 10**6), min_size=1, max_size=20), probe=st.integers(0, 10**6))
def test_lookup_is_newest_commit_at_or_before(ts: list[int], probe: int) -> None:
    raw = [mtime(v, t) for v, t in enumerate(ts)]
    mono = monotonize(raw)
    at_or_before = [c.version for c in mono if c.timestamp_ms <= probe]
    if not at_or_before:
        with pytest.raises(VersionNotFoundError):
            version_at_timestamp(raw, probe)
        return
    found = version_at_timestamp(raw, probe)
    assert found == max(at_or_before)
    assert mono[found].timestamp_ms <= probe
    if found + 1 < len(mono):
        assert mono[found + 1].timestamp_ms > probe


# --- real commits --------------------------------------------------------------------------


TIME_TRAVEL = GOLDEN / "time-travel-start-start20-start40" / "_delta_log"
needs_time_travel = pytest.mark.skipif(not TIME_TRAVEL.is_dir(), reason="golden table absent")


def _golden_commits() -> list[Path]:
    return sorted(p for p in TIME_TRAVEL.iterdir() if p.name.endswith(".json"))


@needs_time_travel
def test_golden_commit_info_timestamps() -> None:
    # Use the commitInfo.timestamp each writer recorded as the commit time.
    history: list[CommitTimestamp] = []
    for path in _golden_commits():
        for line in path.read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                history.append(mtime(int(path.name[:20]), action["commitInfo"]["timestamp"]))
    assert [c.version for c in history] == [0, 1, 2]
    for c in history:
        assert version_at_timestamp(history, c.timestamp_ms) == c.version
        assert version_at_timestamp(history, c.timestamp_ms + 1) == c.version
    with pytest.raises(VersionNotFoundError):
        version_at_timestamp(history, history[0].timestamp_ms - 1)


@needs_time_travel
def test_golden_file_mtimes_are_monotonized() -> None:
    # Copies of a log often share one mtime; monotonizing keeps the versions apart.
    raw = [mtime(int(p.name[:20]), int(p.stat().st_mtime * 1000)) for p in _golden_commits()]
    mono = monotonize(raw)
    assert all(b.timestamp_ms > a.timestamp_ms for a, b in pairwise(mono))
    for c in mono:
        assert version_at_timestamp(raw, c.timestamp_ms) == c.version
