"""Reading the commits a managing catalog returned (CATALOG_MANAGED.md, "Reading
Catalog-managed Tables"), for :mod:`raydelta.storage.snapshot`.

A catalog answers with :class:`~raydelta.protocol.catalog_managed.RatifiedCommits`:
the commits it still holds (staged files or inline actions) and its latest
ratified version. This module turns that answer into what the log segment
builder and the replay take:

- :func:`catalog_view` checks the answer (ascending, contiguous, none past the
  latest version) and turns a malformed one into
  :class:`~raydelta.protocol.errors.InvalidArgumentError`;
- :func:`ratified_files` gives each ratified commit a
  :class:`~raydelta.protocol.file_names.LogFile`: a staged commit its own file
  (name relative to ``_delta_log``), an inline commit a name starting with
  :data:`INLINE_PREFIX`, which no listing can hold, mapped to its actions;
- :func:`published_commits` and :func:`catalog_commit_timestamps`: commit
  timestamps of a managed table, published files up to the latest ratified
  version and every ratified commit's own in-commit timestamp in place of
  its published file's.

Invariants: nothing here lists; staged files are read only for timestamps of
commits whose catalog record carries none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from raydelta.protocol.actions import Action, CommitInfo
from raydelta.protocol.catalog_managed import (
    RatifiedCommit,
    RatifiedCommits,
    parse_staged_commit_path,
)
from raydelta.protocol.commit_timestamps import CommitTimestamp
from raydelta.protocol.errors import CorruptLogError, InvalidArgumentError
from raydelta.protocol.file_names import LogFile, LogFileKind, commit_name
from raydelta.storage.log.reader import first_commit_info
from raydelta.storage.log.store import LogStore

InlineCommits = Mapping[str, Sequence[Action]]
"""Inline commits of a catalog, by the :class:`LogFile` name standing for each."""

INLINE_PREFIX = "<inline>/"


def catalog_view(
    ratified_commits: Sequence[RatifiedCommit] | None, latest_ratified_version: int | None
) -> RatifiedCommits | None:
    """What the catalog said, checked (None: the caller has no catalog information).

    ``latest_ratified_version`` defaults to the newest commit given; with no
    commit it is required.
    """
    if ratified_commits is None and latest_ratified_version is None:
        return None
    commits = tuple(ratified_commits or ())
    latest = latest_ratified_version
    if latest is None:
        if not commits:
            raise InvalidArgumentError(
                "latest_ratified_version is required when the catalog returned no commit"
            )
        latest = commits[-1].version
    try:
        return RatifiedCommits(commits=commits, latest_version=latest)
    except ValueError as exc:  # pydantic's ValidationError
        raise InvalidArgumentError(f"inconsistent catalog commits: {exc}") from exc


def ratified_files(view: RatifiedCommits | None) -> tuple[list[LogFile], dict[str, list[Action]]]:
    """A :class:`LogFile` per ratified commit and the inline commits' actions by name."""
    files: list[LogFile] = []
    inline: dict[str, list[Action]] = {}
    for commit in () if view is None else view.commits:
        if commit.path is not None:
            staged = parse_staged_commit_path(commit.path)
            assert staged is not None  # RatifiedCommit validated it
            files.append(staged)
        else:
            name = INLINE_PREFIX + commit_name(commit.version)
            files.append(LogFile(name, LogFileKind.STAGED_COMMIT, commit.version, format="json"))
            inline[name] = list(commit.actions or ())
    return files, inline


def published_commits(listing: Sequence[LogFile], view: RatifiedCommits) -> list[LogFile]:
    """Published commits the catalog's answer leaves in force: not past its
    latest version, not a version it returned a commit for."""
    held = {c.version for c in view.commits}
    latest = view.latest_version
    return [
        f
        for f in listing
        if f.kind is LogFileKind.COMMIT
        and f.require_version() not in held
        and (latest is None or f.require_version() <= latest)
    ]


def _ratified_timestamp(store: LogStore, commit: RatifiedCommit) -> int:
    stamp = commit.timestamp
    if stamp is None and commit.actions is not None:
        infos = [a for a in commit.actions if isinstance(a, CommitInfo)]
        stamp = infos[0].in_commit_timestamp if infos else None
    elif stamp is None and commit.staged_name is not None:
        body = first_commit_info(store.read(commit.staged_name))
        value = body.get("inCommitTimestamp") if body else None
        stamp = value if type(value) is int else None
    if stamp is None:
        raise CorruptLogError(
            f"ratified commit {commit.version} has no inCommitTimestamp (a catalog-managed "
            "table must use in-commit timestamps)"
        )
    return stamp


def catalog_commit_timestamps(
    store: LogStore, view: RatifiedCommits, published: Sequence[CommitTimestamp]
) -> list[CommitTimestamp]:
    """``published`` (timestamps of :func:`published_commits`) plus each
    ratified commit's in-commit timestamp, by version."""
    stamps = list(published)
    stamps.extend(
        CommitTimestamp(c.version, _ratified_timestamp(store, c), "inCommitTimestamp")
        for c in view.commits
    )
    stamps.sort(key=lambda c: c.version)
    return stamps
