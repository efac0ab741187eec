"""Table history: one entry per retained commit, newest first.

Invariants:
- Entries come from the published commits present in ``_delta_log``; commits
  removed by metadata cleanup are not reported (they cannot be read).
- ``timestamp`` follows the in-commit-timestamp rules (``inCommitTimestamp``
  from the version the feature was enabled, file modification time before),
  with file times made monotonic the way delta-spark does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from raydelta.protocol.commit_timestamps import CommitTimestamp, monotonize
from raydelta.protocol.file_names import LogFileKind
from raydelta.storage.log_reader import first_commit_info
from raydelta.storage.log_store import LogStore, log_store_for
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
    uri: str, store: LogStore, *, limit: int | None = None
) -> list[HistoryEntry]:
    """Each shown commit is read once: its ``commitInfo`` gives the in-commit
    timestamp; file times (monotonized over the whole listing) cover the rest."""
    latest = load_head_from_store(uri, store)
    config = latest.table_configuration
    enablement = (config.in_commit_timestamp_enablement or (0, 0))[0]
    listing = store.list_from(0)
    published = [
        f for f in listing if f.kind is LogFileKind.COMMIT and f.require_version() <= latest.version
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
    commits = sorted(published, key=lambda f: f.require_version(), reverse=True)
    if limit is not None:
        commits = commits[:limit]
    entries = []
    for file, data in zip(commits, store.read_many([c.name for c in commits]), strict=True):
        info = first_commit_info(data)
        version = file.require_version()
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


def load_history(
    uri: str, *, limit: int | None = None, storage_options: dict[str, Any] | None = None
) -> list[HistoryEntry]:
    """History of the table at ``uri``, newest first, at most ``limit`` entries."""
    return history_from_store(uri, log_store_for(uri, storage_options), limit=limit)
