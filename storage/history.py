"""Table history: one entry per retained commit, newest first.

Invariants:
- Entries come from the published commits present in ``_delta_log``, and for
  a catalog-managed table also from the ratified commits its catalog still
  holds (not yet published); commits removed by metadata cleanup are not
  reported (they cannot be read).
- ``timestamp`` follows the in-commit-timestamp rules (``inCommitTimestamp``
  from the version the feature was enabled, file modification time before),
  with file times made monotonic the way delta-spark does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from raydelta.protocol.actions import CommitInfo
from raydelta.protocol.catalog_managed import RatifiedCommit
from raydelta.protocol.commit_timestamps import CommitTimestamp, monotonize
from raydelta.protocol.file_names import LogFileKind
from raydelta.storage.log.reader import first_commit_info
from raydelta.storage.log.store import LogStore, log_store_for
from raydelta.storage.snapshot import load_head_from_store


@dataclass(frozen=True)
class HistoryEntry:
    version: int
    timestamp: int
    operation: str | None
    commit_info: dict[str, Any] | None

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "timestamp": self.timestamp,
            "operation": self.operation,
            "commitInfo": self.commit_info,
        }


def history_from_store(
    uri: str,
    store: LogStore,
    *,
    limit: int | None = None,
    ratified_commits: Sequence[RatifiedCommit] | None = None,
    latest_ratified_version: int | None = None,
) -> list[HistoryEntry]:
    """Each shown commit is read once: its ``commitInfo`` gives the in-commit
    timestamp; file times (monotonized over the whole listing) cover the rest.

    A catalog-managed table's history is read through its catalog's view
    (``ratified_commits``, ``latest_ratified_version``): the ratified commits
    it still holds are shown (the catalog's copy wins over a published file
    of the same version), published files past its latest version are not."""
    latest = load_head_from_store(
        uri,
        store,
        ratified_commits=ratified_commits,
        latest_ratified_version=latest_ratified_version,
    )
    config = latest.table_configuration
    enablement = (config.in_commit_timestamp_enablement or (0, 0))[0]
    held = {c.version: c for c in ratified_commits or ()}
    listing = store.list_from(0)
    published = [
        f
        for f in listing
        if f.kind is LogFileKind.COMMIT
        and f.require_version() <= latest.version
        and f.require_version() not in held
    ]
    file_times = {
        c.version: c.timestamp_ms
        for c in monotonize(
            [
                CommitTimestamp(f.require_version(), f.modification_time, "fileModificationTime")
                for f in published
            ]
        )
    }
    for version in held:  # not listed yet: after the published ones, in order
        file_times[version] = max(file_times.values(), default=0)
    commits: list[tuple[int, str | RatifiedCommit]] = sorted(
        [(f.require_version(), f.name) for f in published]
        + [(v, c) for v, c in held.items() if v <= latest.version],
        key=lambda item: item[0],
        reverse=True,
    )
    if limit is not None:
        commits = commits[:limit]
    names = [c for _, c in commits if isinstance(c, str)]
    blobs = dict(zip(names, store.read_many(names), strict=True))
    entries = []
    for version, commit in commits:
        info = _info_of(store, blobs, commit)
        timestamp = file_times[version]
        ict = info.get("inCommitTimestamp") if info else None
        if config.in_commit_timestamps_enabled and version >= enablement and isinstance(ict, int):
            timestamp = ict
        operation = info.get("operation") if info else None
        entries.append(
            HistoryEntry(
                version=version,
                timestamp=timestamp,
                operation=operation if isinstance(operation, str) else None,
                commit_info=info,
            )
        )
    return entries


def _info_of(
    store: LogStore, blobs: dict[str, bytes], commit: str | RatifiedCommit
) -> dict[str, Any] | None:
    """The ``commitInfo`` of a published file (read already) or a ratified commit."""
    if isinstance(commit, str):
        return first_commit_info(blobs[commit])
    if commit.actions is None:
        return first_commit_info(store.read(commit.staged_name or ""))
    for action in commit.actions:
        if isinstance(action, CommitInfo):
            return action.to_json_dict()
    return None


def load_history(
    uri: str,
    *,
    limit: int | None = None,
    storage_options: dict[str, Any] | None = None,
    ratified_commits: Sequence[RatifiedCommit] | None = None,
    latest_ratified_version: int | None = None,
) -> list[HistoryEntry]:
    """History of the table at ``uri``, newest first, at most ``limit`` entries
    (a catalog-managed table: through its catalog's view, see
    :func:`history_from_store`)."""
    return history_from_store(
        uri,
        log_store_for(uri, storage_options),
        limit=limit,
        ratified_commits=ratified_commits,
        latest_ratified_version=latest_ratified_version,
    )
