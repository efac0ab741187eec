"""Log compaction files: ``<x>.<y>.compacted.json`` for a range of commits
(PROTOCOL.md, "Log Compaction Files").

Invariants:
- A compaction file holds the reconciled actions of its published commits
  (:func:`compacted_actions`), so replaying it equals replaying the range.
- It is created with put-if-absent: an existing file is left as it is.
- On a catalog-managed table only published versions are compacted: the
  caller passes ``max_published_version`` from the catalog, else
  :class:`~raydelta.protocol.errors.CatalogManagedTableError`.
- A range with a missing commit is refused, never compacted partially.
- Reading: a compaction file is replayed only when its actions may stand for
  the commits it covers in any order
  (:func:`raydelta.protocol.log_compaction.compaction_replacement`); an
  unreconciled file with two different actions for one key is replaced by
  those commits (:func:`replay_compactions_safely`), which the log segment
  always holds.
"""

from __future__ import annotations

from collections.abc import Sequence

from raydelta.protocol.actions import (
    Action,
    AddFile,
    CommitInfo,
    RemoveFile,
    parse_actions,
    serialize_actions,
)
from raydelta.protocol.errors import FileAlreadyExistsError, VersionNotFoundError
from raydelta.protocol.file_names import LogFile, LogFileKind, commit_name, compaction_name
from raydelta.protocol.log_compaction import compaction_replacement
from raydelta.protocol.log_segment import LogSegment
from raydelta.protocol.reconciliation import fold_actions
from raydelta.storage.log.reader import read_commits
from raydelta.storage.log.store import LogStore


def compacted_actions(commits: Sequence[Sequence[Action]]) -> list[Action]:
    """The reconciled actions of consecutive commits (spec, "Log Compaction Files").

    The latest ``protocol`` / ``metaData`` (if any changed), the latest
    ``txn`` per app id, the latest ``domainMetadata`` per domain (removed
    ones kept: they must still suppress earlier versions), the newest
    ``remove`` / ``add`` per logical file (tombstones kept: they cancel adds
    before the range). ``commitInfo`` and ``cdc`` are dropped.
    """
    folded = fold_actions(commits)
    protocol, metadata, txns, domains = (
        folded.protocol,
        folded.metadata,
        folded.txns,
        folded.domains,
    )
    newest = folded.newest
    out: list[Action] = []
    if protocol is not None:
        out.append(protocol)
    if metadata is not None:
        out.append(metadata)
    out.extend(txns[k] for k in sorted(txns))
    out.extend(domains[k] for k in sorted(domains))
    out.extend(a for a in newest.values() if isinstance(a, RemoveFile))
    out.extend(a for a in newest.values() if isinstance(a, AddFile))
    return out


def write_log_compaction(
    store: LogStore, start: int, end: int, *, max_published_version: int | None = None
) -> str | None:
    """Write ``<start>.<end>.compacted.json`` from the published commits of the range.

    Returns its name, or None when it already exists. Raises
    :class:`VersionNotFoundError` when a commit of the range is missing, or
    (catalog-managed tables) past ``max_published_version``, what the catalog
    says is published.
    """
    if start > end:
        raise ValueError(f"empty compaction range [{start}, {end}]")
    if max_published_version is not None and end > max_published_version:
        raise VersionNotFoundError(
            f"cannot compact [{start}, {end}]: the catalog has published only up to "
            f"version {max_published_version}"
        )
    if max_published_version is None:
        from raydelta.storage.snapshot import load_head_from_store  # imports this module

        # A catalog-managed table raises CatalogManagedTableError here.
        load_head_from_store(store.table_root, store, version=end)
    names = [commit_name(v) for v in range(start, end + 1)]
    try:
        bodies = store.read_many(names)
    except FileNotFoundError as exc:
        raise VersionNotFoundError(f"cannot compact [{start}, {end}]: {exc}") from exc
    commits = [[a for a in parse_actions(body) if not isinstance(a, CommitInfo)] for body in bodies]
    name = compaction_name(start, end)
    try:
        store.put_if_absent(name, serialize_actions(compacted_actions(commits)))
    except FileAlreadyExistsError:
        return None
    return name


def replay_compactions_safely(
    store: LogStore,
    segment: LogSegment,
    read: Sequence[tuple[LogFile, list[Action]]],
    table_root: str | None,
) -> list[tuple[LogFile, list[Action]]]:
    """``read`` (replay units with their parsed actions) with every compaction
    file either reduced to its reconciled actions or, when that is ambiguous,
    replaced by the commits of its range read from ``segment``."""
    out: list[tuple[LogFile, list[Action]]] = []
    for unit, actions in read:
        if unit.kind is not LogFileKind.COMPACTION:
            out.append((unit, actions))
            continue
        usable = compaction_replacement(actions, table_root)
        if usable is not None:
            out.append((unit, usable))
            continue
        start, end = unit.require_version(), unit.end_version
        assert end is not None  # a COMPACTION file names its range
        covered = [c for c in segment.commits if start <= c.require_version() <= end]
        out.extend(zip(covered, read_commits(store, covered), strict=True))
    return out
