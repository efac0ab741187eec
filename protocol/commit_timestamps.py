"""Commit timestamps and timestamp-to-version resolution (pure).

A commit's timestamp is its ``inCommitTimestamp`` when In-Commit Timestamps
(ICT) cover that commit, and the commit file's modification time otherwise
(PROTOCOL.md, "Recommendations for Readers of Tables with In-Commit
Timestamps"). All times are milliseconds since the Unix epoch.

Invariants:
- :func:`commit_timestamp` with ICT enabled uses ``inCommitTimestamp`` for
  versions ``>= enablement_version`` (all versions when the table had ICT
  from its first commit) and the file modification time below it; a covered
  commit without ``inCommitTimestamp`` is a :class:`CorruptLogError`. With ICT
  not enabled, the file modification time is used for every version.
- :func:`monotonize` makes file-modification timestamps strictly increasing
  the way delta-spark does (a commit at or before its predecessor's time
  gets the predecessor's time + 1). ICT timestamps are left alone: the
  spec already makes them strictly increasing, and they are authoritative.
  It is idempotent.
- :func:`version_at_timestamp` returns the newest version whose (monotonized)
  timestamp is ``<=`` the requested time, searching only the ICT side or
  the pre-ICT side of the enablement point as the spec prescribes. A time
  before every candidate raises :class:`VersionNotFoundError`; a time after
  the newest candidate returns it, except that a time after the table's
  newest commit raises when ``allow_after_latest=False`` (as delta-spark's
  timestamp time travel does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal

from raydelta.protocol.actions import Action, Metadata
from raydelta.protocol.errors import CorruptLogError, InvalidTableError, VersionNotFoundError
from raydelta.protocol.table_properties import ICT_ENABLEMENT_TIMESTAMP, ICT_ENABLEMENT_VERSION

TimestampSource = Literal["inCommitTimestamp", "fileModificationTime"]
IN_COMMIT_TIMESTAMP: TimestampSource = "inCommitTimestamp"
FILE_MODIFICATION_TIME: TimestampSource = "fileModificationTime"


@dataclass(frozen=True, slots=True)
class CommitTimestamp:
    """The timestamp of one commit and where it came from."""

    version: int
    timestamp_ms: int
    source: TimestampSource


def _check_enablement(enablement_version: int | None, enablement_timestamp: int | None) -> None:
    if (enablement_version is None) != (enablement_timestamp is None):
        raise InvalidTableError(
            f"{ICT_ENABLEMENT_VERSION} and {ICT_ENABLEMENT_TIMESTAMP} must be set together "
            f"(got version={enablement_version}, timestamp={enablement_timestamp})"
        )


def commit_timestamp(
    version: int,
    *,
    file_modification_time: int,
    in_commit_timestamp: int | None = None,
    enablement_version: int | None = None,
    enablement_timestamp: int | None = None,
    ict_enabled: bool = False,
) -> CommitTimestamp:
    """The timestamp readers must use for commit ``version``.

    ``ict_enabled`` is whether ICT is active in the table's current
    configuration; ``enablement_*`` are the table properties
    ``delta.inCommitTimestampEnablementVersion``/``...Timestamp`` (both
    absent when ICT was on from the table's first commit).
    """
    if ict_enabled:
        _check_enablement(enablement_version, enablement_timestamp)
        if enablement_version is None or version >= enablement_version:
            if in_commit_timestamp is None:
                raise CorruptLogError(
                    f"commit {version} has no inCommitTimestamp although In-Commit "
                    "Timestamps are enabled for it"
                )
            return CommitTimestamp(version, in_commit_timestamp, IN_COMMIT_TIMESTAMP)
    return CommitTimestamp(version, file_modification_time, FILE_MODIFICATION_TIME)


def monotonize(commits: Sequence[CommitTimestamp]) -> list[CommitTimestamp]:
    """Commits sorted by version with file-modification times made strictly increasing."""
    result: list[CommitTimestamp] = []
    previous: int | None = None
    for commit in sorted(commits, key=lambda c: c.version):
        if (
            commit.source == FILE_MODIFICATION_TIME
            and previous is not None
            and commit.timestamp_ms <= previous
        ):
            commit = replace(commit, timestamp_ms=previous + 1)
        result.append(commit)
        previous = commit.timestamp_ms
    return result


def _format_ms(timestamp_ms: int) -> str:
    try:
        moment = datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return f"{timestamp_ms} ms"
    return f"{moment.isoformat(timespec='milliseconds')} ({timestamp_ms} ms)"


def version_at_timestamp(
    commits: Sequence[CommitTimestamp],
    timestamp_ms: int,
    *,
    enablement_version: int | None = None,
    enablement_timestamp: int | None = None,
    allow_after_latest: bool = True,
) -> int:
    """Newest version committed at or before ``timestamp_ms`` (see module doc)."""
    _check_enablement(enablement_version, enablement_timestamp)
    ordered = monotonize(commits)
    table_latest = ordered[-1].version if ordered else None
    if enablement_version is not None and enablement_timestamp is not None:
        if timestamp_ms >= enablement_timestamp:
            ordered = [c for c in ordered if c.version >= enablement_version]
        else:
            ordered = [c for c in ordered if c.version < enablement_version]
    if not ordered:
        raise VersionNotFoundError(
            f"no commit is available to resolve timestamp {_format_ms(timestamp_ms)}"
        )
    earliest, newest = ordered[0], ordered[-1]
    found = max((c.version for c in ordered if c.timestamp_ms <= timestamp_ms), default=None)
    if found is None:
        raise VersionNotFoundError(
            f"timestamp {_format_ms(timestamp_ms)} is before the earliest available commit "
            f"(version {earliest.version} at {_format_ms(earliest.timestamp_ms)})"
        )
    after_latest = newest.version == table_latest and timestamp_ms > newest.timestamp_ms
    if after_latest and not allow_after_latest:
        raise VersionNotFoundError(
            f"timestamp {_format_ms(timestamp_ms)} is after the latest commit "
            f"(version {newest.version} at {_format_ms(newest.timestamp_ms)})"
        )
    return found


def with_ict_enablement(actions: Sequence[Action], version: int) -> list[Action]:
    """Record where In-Commit Timestamps start when a commit turns them on for a
    table with earlier commits (PROTOCOL.md, "Writer Requirements for In-Commit
    Timestamps", 4): ``rebase`` then stamps the enablement version and timestamp
    with the commit's final version and in-commit timestamp."""
    out: list[Action] = []
    for action in actions:
        if isinstance(action, Metadata) and ICT_ENABLEMENT_VERSION not in action.configuration:
            configuration = dict(action.configuration)
            configuration[ICT_ENABLEMENT_VERSION] = str(version)
            configuration[ICT_ENABLEMENT_TIMESTAMP] = "0"  # replaced by rebase
            action = action.model_copy(update={"configuration": configuration})
        out.append(action)
    return out
