"""Snapshots: the public read entry point, ``load_snapshot``.

A :class:`Snapshot` is a reconciled :class:`~raydelta.protocol.reconciliation.TableState`
plus where it came from (table URI, log segment) and when (commit timestamp).

Invariants:
- ``load_snapshot`` reads the table's ``_delta_log`` only: one listing, at
  most one ``_last_checkpoint`` read, the checkpoint (column-selectively)
  and the commits after it. Data files are never opened.
- A snapshot is only returned for a table raydelta can read
  (:func:`raydelta.protocol.table_features.ensure_readable`), holding exactly one
  protocol and one metadata action.
- A missing ``_delta_log`` raises :class:`TableNotFoundError`.
- ``_last_checkpoint`` is advisory: missing, empty, corrupt or pointing at a
  checkpoint that is gone, the listing decides.
- A checkpoint that breaks its spec (a V2 one without its one
  ``checkpointMetadata``...) is never read into a snapshot: the version is
  rebuilt from older files, or the load fails with
  :class:`~raydelta.protocol.errors.InvalidCheckpointError`
  (:func:`raydelta.storage.log.reader.read_valid_segment`).
- Catalog-managed tables (CATALOG_MANAGED.md, "Reading Catalog-managed
  Tables"): given what the catalog returned (``ratified_commits`` and
  ``latest_ratified_version``), a ratified commit replaces the published file
  of its version, published files past the latest ratified version are
  ignored, and the listing fills in the rest; staged commits are read from
  their files, inline ones come as actions (a table whose commits are all
  still in the catalog needs no ``_delta_log`` at all). Without that
  information a table whose protocol names ``catalogManaged`` is refused with
  :class:`~raydelta.protocol.errors.CatalogManagedTableError`, never returned
  stale.
"""

from __future__ import annotations

import html
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cached_property
from itertools import pairwise
from typing import Any

import pyarrow as pa

from raydelta.protocol.actions import (
    Action,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
)
from raydelta.protocol.catalog_managed import (
    RatifiedCommit,
    RatifiedCommits,
    ensure_catalog_access,
)
from raydelta.protocol.commit_timestamps import CommitTimestamp, monotonize, version_at_timestamp
from raydelta.protocol.errors import (
    CorruptLogError,
    InvalidTableError,
    MissingMetadataError,
    MissingProtocolError,
    RaydeltaError,
    TableNotFoundError,
    VersionNotFoundError,
    VersionsNotContiguousError,
)
from raydelta.protocol.file_names import LogFile, LogFileKind
from raydelta.protocol.last_checkpoint import LastCheckpointInfo
from raydelta.protocol.log_segment import LogSegment, build_log_segment
from raydelta.protocol.path_index import INDEX_MIN_ROWS, PathIndex
from raydelta.protocol.reconciliation import TableHead, TableState, apply_commits
from raydelta.protocol.schema import StructType
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.protocol.table_features import ensure_readable
from raydelta.storage.catalog.commits import (
    INLINE_PREFIX,
    InlineCommits,
    catalog_commit_timestamps,
    catalog_view,
    published_commits,
    ratified_files,
)
from raydelta.storage.compaction import replay_compactions_safely
from raydelta.storage.log.reader import (
    checkpoint_head,
    checkpoint_state,
    first_commit_info,
    read_commits,
    read_last_checkpoint,
    read_valid_segment,
)
from raydelta.storage.log.store import LogStore, log_store_for


@dataclass(frozen=True)
class Snapshot:
    """A table at one version. Cheap to keep; files are Arrow tables."""

    table_uri: str
    state: TableState
    log_segment: LogSegment | None
    """The files it was read from; None when served from a coordinator's memory."""
    timestamp: int
    """Commit timestamp of ``version`` in ms (in-commit timestamp when enabled)."""
    commit_infos: dict[int, CommitInfo] = field(default_factory=dict, repr=False)
    """``commitInfo`` of the commits this snapshot replayed, by version."""

    @property
    def version(self) -> int:
        return self.state.version

    @property
    def protocol(self) -> Protocol:
        assert self.state.protocol is not None  # checked by load_snapshot
        return self.state.protocol

    @property
    def metadata(self) -> Metadata:
        assert self.state.metadata is not None  # checked by load_snapshot
        return self.state.metadata

    @cached_property
    def table_configuration(self) -> TableConfiguration:
        return TableConfiguration(self.protocol, self.metadata)

    @property
    def schema(self) -> StructType:
        """The table schema (logical names; column-mapping metadata kept)."""
        return self.table_configuration.schema

    @property
    def files(self) -> pa.Table:
        """Live files (``add`` actions) in the canonical Arrow layout."""
        return self.state.adds

    @property
    def num_files(self) -> int:
        return self.state.num_files

    def add_files(self) -> list[AddFile]:
        return self.state.add_files()

    @property
    def all_tombstones(self) -> pa.Table:
        """Every reconciled ``remove``, expired or not."""
        return self.state.removes

    def tombstones(self, *, now_ms: int | None = None) -> list[RemoveFile]:
        """Tombstones not yet expired under ``delta.deletedFileRetentionDuration``."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        cutoff = now - self.table_configuration.deleted_file_retention_ms
        return self.state.without_expired_tombstones(cutoff).remove_files()

    @property
    def txns(self) -> dict[str, int]:
        return {app_id: txn.version for app_id, txn in self.state.txns.items()}

    @property
    def domains(self) -> dict[str, DomainMetadata]:
        return self.state.domains

    def __repr__(self) -> str:
        return (
            f"Snapshot({self.table_uri!r}, version={self.version}, files={self.num_files},"
            f" columns={[f.name for f in self.schema.fields]})"
        )

    def _repr_html_(self) -> str:
        stamp = datetime.fromtimestamp(self.timestamp / 1000, tz=UTC).isoformat(timespec="seconds")
        rows = [
            ("table", self.table_uri),
            ("version", str(self.version)),
            ("timestamp", stamp),
            ("files", f"{self.num_files:,}"),
            ("columns", ", ".join(f.name for f in self.schema.fields)),
            ("partitioned by", ", ".join(self.metadata.partition_columns) or "-"),
            (
                "protocol",
                f"reader {self.protocol.min_reader_version},"
                f" writer {self.protocol.min_writer_version}",
            ),
        ]
        body = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
            for k, v in rows
        )
        return f"<table>{body}</table>"


def _commit_file(segment: LogSegment, listing: list[LogFile], version: int) -> LogFile | None:
    for file in segment.commits:
        if file.version == version:
            return file
    for file in listing:
        if file.kind is LogFileKind.COMMIT and file.version == version:
            return file
    return None


def _read_commit_units(
    store: LogStore, units: Sequence[LogFile], inline: InlineCommits
) -> list[list[Action]]:
    """:func:`read_commits`, with inline commits taken from ``inline``."""
    stored = iter(read_commits(store, [u for u in units if u.name not in inline]))
    return [list(inline[u.name]) if u.name in inline else next(stored) for u in units]


def _read_units(
    store: LogStore, segment: LogSegment, inline: InlineCommits | None = None
) -> list[tuple[LogFile, list[Action]]]:
    """Each replay unit of ``segment`` with its parsed actions.

    A log compaction file is an optimization over commits that are in the
    segment too: one that cannot be parsed, or that parses to no action at all
    (a whitespace-only file would silently drop every action of the commits
    it covers), or that is not reconciled and whose order would decide the
    state (:func:`raydelta.storage.compaction.replay_compactions_safely`),
    is replaced by those commits. A commit version holding two
    different ``metaData`` (or ``protocol``) actions breaks the spec ("at most
    one metadata action in a given version") and has no single meaning:
    :class:`CorruptLogError`.
    """
    inline = inline or {}
    units = segment.replay_units()
    compacted = any(u.kind is LogFileKind.COMPACTION for u in units)
    read: list[tuple[LogFile, list[Action]]] | None = None
    try:
        read = list(zip(units, _read_commit_units(store, units, inline), strict=True))
    except CorruptLogError:
        if not compacted:
            raise
    if read is None or any(u.kind is LogFileKind.COMPACTION and not a for u, a in read):
        units = list(segment.commits)
        read = list(zip(units, _read_commit_units(store, units, inline), strict=True))
    root = store.table_root_key
    read = replay_compactions_safely(store, segment, read, root)  # unreconciled: commits
    for unit, actions in read:
        if unit.kind is not LogFileKind.COMPACTION:
            _check_single_protocol_and_metadata(unit, actions)
    return read


def _check_single_protocol_and_metadata(unit: LogFile, actions: list[Action]) -> None:
    for kind in (Protocol, Metadata):
        found = [a for a in actions if isinstance(a, kind)]
        if len(found) > 1 and any(a != found[0] for a in found[1:]):
            raise CorruptLogError(
                f"{unit.name}: a version holds {len(found)} different {kind.action_name!r} actions"
            )


def replay_segment(
    store: LogStore, segment: LogSegment, *, inline: InlineCommits | None = None
) -> tuple[TableState, dict[int, Any]]:
    """The state a log segment describes, and the commitInfos it read
    (``inline``: a catalog's inline commits, see :func:`load_snapshot_from_store`)."""
    root = store.table_root_key
    if segment.checkpoint is not None:
        checkpoint = segment.checkpoint
        state = checkpoint_state(store, checkpoint.version, checkpoint.files, table_root=root)
    else:
        state = TableState(table_root=root)
    commit_infos: dict[int, CommitInfo] = {}
    batches = []
    for unit, actions in _read_units(store, segment, inline):
        version = unit.end_version if unit.end_version is not None else unit.require_version()
        batches.append((version, actions))
        if unit.kind is not LogFileKind.COMPACTION:
            for action in actions:
                if isinstance(action, CommitInfo):
                    commit_infos[version] = action
                    break
    state = apply_commits(state, batches, keep_index=True)
    return _indexed(state), commit_infos


def _indexed(state: TableState) -> TableState:
    """``state`` with a :class:`PathIndex` of each large file table, built now
    (while the freshly read rows are hot) so the first small commit folded
    into a loaded snapshot costs a binary search, not a sort of every path."""
    adds_index, removes_index = state.adds_index, state.removes_index
    if state.adds.num_rows >= INDEX_MIN_ROWS and (
        adds_index is None or not adds_index.describes(state.adds)
    ):
        adds_index = PathIndex.build(state.adds, state.table_root)
    if state.removes.num_rows >= INDEX_MIN_ROWS and (
        removes_index is None or not removes_index.describes(state.removes)
    ):
        removes_index = PathIndex.build(state.removes, state.table_root)
    if adds_index is state.adds_index and removes_index is state.removes_index:
        return state
    return replace(state, adds_index=adds_index, removes_index=removes_index)


def _version_timestamp(
    store: LogStore,
    listing: list[LogFile],
    segment: LogSegment,
    state: TableState,
    commit_infos: dict[int, CommitInfo],
) -> int:
    config = TableConfiguration(state.protocol, state.metadata)  # type: ignore[arg-type]
    version = state.version
    commit = _commit_file(segment, listing, version)
    enablement = config.in_commit_timestamp_enablement
    if config.in_commit_timestamps_enabled and version >= (enablement[0] if enablement else 0):
        info = commit_infos.get(version)
        if info is None and commit is not None and not commit.name.startswith(INLINE_PREFIX):
            body = first_commit_info(store.read(commit.name))
            try:
                info = CommitInfo.model_validate(body) if body else None
            except ValueError as exc:  # pydantic's ValidationError
                raise CorruptLogError(f"{commit.name}: invalid 'commitInfo': {exc}") from exc
        if info is not None and info.in_commit_timestamp is not None:
            return info.in_commit_timestamp
        if commit is not None:
            raise _missing_ict(commit, enablement)
    if commit is not None:
        return commit.modification_time
    checkpoint = segment.checkpoint
    return checkpoint.files[0].modification_time if checkpoint is not None else 0


def _missing_ict(commit: LogFile, enablement: tuple[int, int] | None) -> CorruptLogError:
    since = f"version {enablement[0]}" if enablement else "the table's creation"
    return CorruptLogError(
        f"{commit.name}: in-commit timestamps are enabled since {since}, but this commit"
        " has no integer inCommitTimestamp in its commitInfo"
    )


def commit_timestamps(
    store: LogStore, listing: list[LogFile], config: TableConfiguration
) -> list[CommitTimestamp]:
    """Commit timestamps of every published commit, ICT where enabled.

    A commit from the enablement version on without an integer
    ``inCommitTimestamp`` is a :class:`CorruptLogError` (delta-spark:
    DELTA_MISSING_COMMIT_TIMESTAMP): falling back to its file time would
    mix two clocks and could resolve a timestamp to the wrong version."""
    commits = [f for f in listing if f.kind is LogFileKind.COMMIT]
    enablement = (config.in_commit_timestamp_enablement or (None, None))[0]
    ict_enabled = config.in_commit_timestamps_enabled
    ict_commits = [c for c in commits if ict_enabled and c.require_version() >= (enablement or 0)]
    ict: dict[int, int] = {}
    for file, data in zip(ict_commits, store.read_many([c.name for c in ict_commits]), strict=True):
        body = first_commit_info(data)
        value = body.get("inCommitTimestamp") if body else None
        if type(value) is not int:  # absent, null, text, a bool...
            raise _missing_ict(file, config.in_commit_timestamp_enablement)
        ict[file.require_version()] = value
    file_times = monotonize(
        [
            CommitTimestamp(c.require_version(), c.modification_time, "fileModificationTime")
            for c in commits
            if c.require_version() not in ict
        ]
    )
    out = list(file_times) + [CommitTimestamp(v, t, "inCommitTimestamp") for v, t in ict.items()]
    out.sort(key=lambda c: c.version)
    return out


def _parse_timestamp_ms(timestamp: int | float | str | datetime) -> int:
    if isinstance(timestamp, datetime):
        return int(timestamp.timestamp() * 1000)
    if isinstance(timestamp, (int, float)):
        return int(timestamp)
    text = timestamp.strip().replace("Z", "+00:00")
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        from datetime import UTC

        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def load_table_head(
    uri: str,
    version: int | None = None,
    storage_options: dict[str, Any] | None = None,
    *,
    ratified_commits: Sequence[RatifiedCommit] | None = None,
    latest_ratified_version: int | None = None,
) -> TableHead:
    """Protocol, metadata, txns and domains at the latest version or ``version``,
    without reading a single file action: only the non-file columns of the
    checkpoint and the commits after it (what history, cleanup and timestamp
    resolution need; milliseconds where a full snapshot of a huge table takes
    seconds). The catalog arguments are :func:`load_snapshot`'s."""
    return load_head_from_store(
        uri,
        log_store_for(uri, storage_options),
        version=version,
        ratified_commits=ratified_commits,
        latest_ratified_version=latest_ratified_version,
    )


def load_head_from_store(
    uri: str,
    store: LogStore,
    *,
    version: int | None = None,
    ratified_commits: Sequence[RatifiedCommit] | None = None,
    latest_ratified_version: int | None = None,
) -> TableHead:
    view = catalog_view(ratified_commits, latest_ratified_version)
    listing = _listing(uri, store, view)
    return _load_head(uri, store, listing, read_last_checkpoint(store), version, view)


def _listing(uri: str, store: LogStore, view: RatifiedCommits | None = None) -> list[LogFile]:
    """The whole log listing; a missing or empty log is a table-not-found error
    (unless the catalog holds commits: then the log may not exist yet)."""
    held = view is not None and bool(view.commits)
    if not store.log_exists():
        if held:
            return []
        raise TableNotFoundError(f"no Delta table at {uri}: {store.log_dir} does not exist")
    listing = store.list_from(0)
    if not held and not any(f.kind is LogFileKind.COMMIT or f.is_checkpoint for f in listing):
        raise TableNotFoundError(f"no Delta table at {uri}: {store.log_dir} holds no commits")
    return listing


def _segment(
    uri: str,
    store: LogStore,
    listing: list[LogFile],
    hint: LastCheckpointInfo | None,
    version: int | None,
    view: RatifiedCommits | None,
    unusable: frozenset[str] = frozenset(),
) -> tuple[LogSegment, dict[str, list[Action]]]:
    files, inline = ratified_files(view)
    try:
        segment = build_log_segment(
            listing,
            target_version=version,
            last_checkpoint_hint=hint,
            ratified_commits=files,
            catalog_latest_version=None if view is None else view.latest_version,
            unusable=unusable,
        )
    except VersionsNotContiguousError as exc:
        if view is None:
            _refuse_if_catalog_managed(uri, store, listing, hint, exc)
        raise
    if view is not None and version is None and segment.version != view.latest_version:
        raise InvalidTableError(
            f"the catalog's latest version is {view.latest_version}, but the commits it "
            f"returned and the published log reach only version {segment.version}"
        )
    return segment, inline


def _refuse_if_catalog_managed(
    uri: str,
    store: LogStore,
    listing: list[LogFile],
    hint: LastCheckpointInfo | None,
    gap: VersionsNotContiguousError,
) -> None:
    """A log with a hole, read without a catalog: if the versions before the
    hole say the table is catalog-managed, that is the error to report (its
    missing versions may be ratified commits only the catalog holds)."""
    found = gap.versions
    end = next((a for a, b in pairwise(found) if b != a + 1), None)
    if end is None:
        return
    try:
        head = _load_head(uri, store, listing, hint, None, RatifiedCommits(latest_version=end))
    except RaydeltaError:
        return
    if head.protocol is not None:
        ensure_catalog_access(head.protocol, table_uri=uri, through_catalog=False)


def _load_head(
    uri: str,
    store: LogStore,
    listing: list[LogFile],
    hint: LastCheckpointInfo | None,
    version: int | None,
    view: RatifiedCommits | None = None,
) -> TableHead:
    def head_of(segment: LogSegment, _inline: InlineCommits) -> TableState:
        if segment.checkpoint is None:
            return TableState()
        return checkpoint_head(store, segment.checkpoint.version, segment.checkpoint.files)

    segment, inline, state = read_valid_segment(
        lambda unusable: _segment(uri, store, listing, hint, version, view, unusable), head_of
    )
    batches = []
    for unit, actions in _read_units(store, segment, inline):
        end = unit.end_version if unit.end_version is not None else unit.require_version()
        batches.append((end, [a for a in actions if not isinstance(a, (AddFile, RemoveFile))]))
    state = apply_commits(state, batches)
    _check_replayed(uri, state, version, through_catalog=view is not None)
    return state.head()


def _check_replayed(
    uri: str, state: TableState, version: int | None, *, through_catalog: bool
) -> None:
    """The replayed state has a protocol and metadata, is at ``version`` (when
    asked for one), its protocol is one we can read, and a catalog-managed
    table was read with its catalog's commits."""
    if state.protocol is None:
        raise MissingProtocolError(f"no protocol action found replaying {uri} to v{state.version}")
    if state.metadata is None:
        raise MissingMetadataError(f"no metadata action found replaying {uri} to v{state.version}")
    if version is not None and state.version != version:
        raise VersionNotFoundError(f"version {version} of {uri} cannot be reconstructed")
    ensure_readable(state.protocol)
    ensure_catalog_access(state.protocol, table_uri=uri, through_catalog=through_catalog)


def load_snapshot(
    uri: str,
    version: int | None = None,
    timestamp: int | float | str | datetime | None = None,
    storage_options: dict[str, Any] | None = None,
    *,
    ratified_commits: Sequence[RatifiedCommit] | None = None,
    latest_ratified_version: int | None = None,
) -> Snapshot:
    """Load the table at ``uri`` at its latest version, ``version``, or ``timestamp``.

    ``timestamp`` is ms since the epoch, an ISO-8601 string (UTC when no
    offset is given) or a ``datetime``; the snapshot is the newest version
    committed at or before it.

    A catalog-managed table is read from what its catalog returned:
    ``ratified_commits`` (the commits it still holds, ascending and
    contiguous, staged or inline) and ``latest_ratified_version`` (its
    latest version, authoritative). Without them such a table raises
    :class:`~raydelta.protocol.errors.CatalogManagedTableError`.

    >>> snap = load_snapshot("file:///tmp/events")          # doctest: +SKIP
    >>> snap.version, snap.num_files                          # doctest: +SKIP
    """
    if version is not None and timestamp is not None:
        raise ValueError("pass version or timestamp, not both")
    store = log_store_for(uri, storage_options)
    return load_snapshot_from_store(
        uri,
        store,
        version=version,
        timestamp=timestamp,
        ratified_commits=ratified_commits,
        latest_ratified_version=latest_ratified_version,
    )


def load_snapshot_from_store(
    uri: str,
    store: LogStore,
    *,
    version: int | None = None,
    timestamp: int | float | str | datetime | None = None,
    ratified_commits: Sequence[RatifiedCommit] | None = None,
    latest_ratified_version: int | None = None,
) -> Snapshot:
    view = catalog_view(ratified_commits, latest_ratified_version)
    listing = _listing(uri, store, view)
    hint = read_last_checkpoint(store)
    if timestamp is not None:
        config = _load_head(uri, store, listing, hint, None, view).table_configuration
        stamps = (
            commit_timestamps(store, listing, config)
            if view is None
            else catalog_commit_timestamps(
                store, view, commit_timestamps(store, published_commits(listing, view), config)
            )
        )
        version = version_at_timestamp(
            stamps,
            _parse_timestamp_ms(timestamp),
            enablement_version=(config.in_commit_timestamp_enablement or (None, None))[0],
            enablement_timestamp=(config.in_commit_timestamp_enablement or (None, None))[1],
        )
    segment, _inline, (state, commit_infos) = read_valid_segment(
        lambda unusable: _segment(uri, store, listing, hint, version, view, unusable),
        lambda segment, inline: replay_segment(store, segment, inline=inline),
    )
    _check_replayed(uri, state, version, through_catalog=view is not None)
    stamp = _version_timestamp(store, listing, segment, state, commit_infos)
    return Snapshot(uri, state, segment, stamp, commit_infos)
