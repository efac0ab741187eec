"""The last commit that changed a catalog-managed table's metadata, for the Delta
REST API's ``loadTable`` (``metadata.last-commit-version`` and
``last-commit-timestamp-ms``, Unity Catalog's ``delta.lastUpdateVersion`` and
``delta.lastCommitTimestamp``): :class:`LastMetadataCommits`.

Invariants:
- The answer is the newest version ``<= latest`` holding a ``metaData``
  action, and its in-commit timestamp (None when its ``commitInfo`` has
  none); data-only commits never move it.
- Versions are immutable once ratified, so what was found is remembered per
  table and only newer versions are read the next time; the first time, the
  log is read backwards in chunks from the latest version.
- When the commits holding the answer can no longer be read (metadata
  cleanup removed them) the answer is unknown (None), never a guess: the
  fields are optional in the Delta REST API and are then left out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from raydelta.protocol.actions import Action, CommitInfo, Metadata

CHUNK = 64
"""Versions read per step of the backwards scan."""

ReadCommits = Callable[[range], Sequence[Sequence[Action]]]


@dataclass(frozen=True)
class MetadataCommit:
    version: int
    timestamp_ms: int | None


@dataclass(frozen=True)
class _Known:
    through: int
    found: MetadataCommit | None


def metadata_commit(version: int, actions: Sequence[Action]) -> MetadataCommit | None:
    """``version`` as a metadata-changing commit, if its ``actions`` are one."""
    if not any(isinstance(a, Metadata) for a in actions):
        return None
    info = next((a for a in actions if isinstance(a, CommitInfo)), None)
    stamp = None if info is None else info.in_commit_timestamp
    return MetadataCommit(version, None if stamp is None else int(stamp))


class LastMetadataCommits:
    """Per table id, the last metadata-changing commit (module docstring)."""

    def __init__(self) -> None:
        self._known: dict[str, _Known] = {}

    def find(self, table_id: str, latest: int, read: ReadCommits) -> MetadataCommit | None:
        """The last metadata-changing version ``<= latest`` of ``table_id``,
        reading commits with ``read`` (a range of versions to their actions;
        ``FileNotFoundError`` for one that is gone)."""
        known = self._known.get(table_id)
        if known is not None and known.through > latest:
            known = None  # another table under the id (dropped and created again)
        floor = -1 if known is None else known.through
        found = self._scan(latest, floor, read)
        if found is None and known is not None:
            found = known.found
        self._known[table_id] = _Known(latest, found)
        return found

    @staticmethod
    def _scan(latest: int, floor: int, read: ReadCommits) -> MetadataCommit | None:
        """The newest metadata commit in ``(floor, latest]`` (None: none, or unreadable)."""
        high = latest
        while high > floor:
            low = max(floor + 1, high - CHUNK + 1)
            try:
                commits = read(range(low, high + 1))
            except FileNotFoundError:  # the oldest ones are gone: one by one, newest first
                for version in range(high, low - 1, -1):
                    try:
                        (actions,) = read(range(version, version + 1))
                    except FileNotFoundError:
                        return None
                    hit = metadata_commit(version, actions)
                    if hit is not None:
                        return hit
                return None
            for version in range(high, low - 1, -1):
                hit = metadata_commit(version, commits[version - low])
                if hit is not None:
                    return hit
            high = low - 1
        return None


__all__ = ["LastMetadataCommits", "MetadataCommit", "metadata_commit"]
