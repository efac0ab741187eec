"""Commit conflicts: delta-spark's conflict rules.

A transaction read the table at ``read_version``; since then other commits
(the *winners*) took versions ``read_version + 1 ..``. Before the
transaction can take the next version, :func:`check_conflicts` decides
whether it still means the same thing after the winners, following
delta-spark's ``ConflictChecker`` (described here by behaviour; nothing is
copied). Winners are checked one by one in version order, each in this
order, and the first conflict raises:

1. **Protocol** (:class:`ProtocolChangedException`). A winner's protocol
   change conflicts when this transaction also changes the protocol, when
   the winner removes a feature or lowers a version, or when it adds a
   feature whose writer rules a transaction prepared without it cannot
   meet (:data:`FEATURES_FAILING_CONCURRENT_COMMITS`, or a feature raydelta
   does not know). Other upgrades (e.g. adding ``deletionVectors``,
   ``rowTracking``, ``inCommitTimestamp``, ``v2Checkpoint``) are absorbed:
   the rebase assigns row ids and in-commit timestamps under the new protocol.
   When the read protocol is not given, any protocol change conflicts.
2. **Metadata** (:class:`MetadataChangedException`). A winner's metadata
   change conflicts, except when this transaction changes no metadata and
   the winner's change is one delta-spark merges:

   - a metadata update tagged as an IDENTITY high-water-mark update only
     (``commitInfo.tags["delta.identity.schemaUpdate"] = "true"``);
   - a change of table properties only, adding or changing (never removing)
     keys of an allow-list, each with its own condition, checked against the
     protocol in force after the winner: enabling row tracking
     (``delta.enableRowTracking=true`` on a table supporting ``rowTracking``,
     with its materialized column names), enabling column mapping in
     ``name`` mode from ``none`` (``delta.columnMapping.mode``,
     ``delta.columnMapping.maxColumnId``) together with the schema
     change that only adds column-mapping metadata to fields, enabling
     deletion vectors (``delta.enableDeletionVectors=true``), enabling V2
     checkpoints (``delta.checkpointPolicy=v2``), enabling in-commit
     timestamps (``delta.enableInCommitTimestamps=true`` and *adding* its
     enablement version/timestamp properties). Each requires the matching
     feature to be supported. Disabling any of them conflicts.

   When the read metadata is not given, any metadata change conflicts.
3. **Domains** (:class:`ConcurrentTransactionException`). Both commits write
   the same metadata domain, or the winner writes a domain this transaction
   read. ``delta.rowTracking`` is exempt: the rebase recomputes it.
4. **App ids** (:class:`ConcurrentTransactionException`). The winner sets the
   ``txn`` version of an app id this transaction read or writes.
5. **Appends** (:class:`ConcurrentAppendException`). The winner added
   data-changing files this transaction should have read:
   ``Serializable``: every such add; ``WriteSerializable``: only adds of
   winners that are not blind appends (all of them when this transaction
   changes metadata); ``SnapshotIsolation``: none. A file "should have been
   read" when the transaction read the whole table, or read anything from
   an unpartitioned table, or recorded files read without predicates (its
   selection is unknown), or when one of its partition predicates may match
   the file's partition values (:func:`raydelta.protocol.predicate_evaluation.matches`,
   conservative for non-partition columns). delta-spark also counts
   ``dataChange=false`` adds of non-blind winners; raydelta does not: such
   adds only rearrange rows the same commit removes, and the removal is
   caught by the checks below.
6. **Delete/read** (:class:`ConcurrentDeleteReadException`). The winner
   removed (with or without ``dataChange``) a file this transaction read
   (``files_read``, by path), or removed anything while it read the whole
   table. When the transaction recorded predicates but no files, a
   data-changing removal whose partition values may match a predicate (any
   one, for an unpartitioned table) also conflicts.
7. **Delete/delete** (:class:`ConcurrentDeleteDeleteException`). Both remove
   the same path.

The isolation level a commit is checked at is the requested one, except
that a commit changing no data (only ``dataChange=false`` file actions, plus
``commitInfo`` and ``delta.rowTracking``) runs at ``SnapshotIsolation``, as
delta-spark downgrades compaction (:func:`effective_isolation_level`).

:mod:`raydelta.protocol.rebase` then rewrites a transaction that passed for its
new version.

Invariants:
- Pure: values in, values out; messages name the winning version and the
  conflicting file or partition.
- Winners are checked in version order whatever order they are given in;
  the protocol and metadata each winner is judged against are the ones in
  force after the winners before it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from raydelta.protocol.actions import (
    Action,
    AddCDCFile,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    Txn,
)
from raydelta.protocol.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    MetadataChangedException,
    ProtocolChangedException,
)
from raydelta.protocol.events import IsolationLevel, ReadSet
from raydelta.protocol.file_actions import canonical_path
from raydelta.protocol.predicate_evaluation import matches
from raydelta.protocol.row_tracking import ROW_TRACKING_DOMAIN
from raydelta.protocol.schema import (
    COLUMN_MAPPING_ID_KEY,
    COLUMN_MAPPING_PHYSICAL_NAME_KEY,
    NESTED_IDS_KEYS,
    DataType,
)
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.protocol.table_features import (
    CATALOG_MANAGED,
    CATALOG_OWNED_PREVIEW,
    CLUSTERING,
    COLUMN_MAPPING,
    COORDINATED_COMMITS_PREVIEW,
    DELETION_VECTORS,
    IN_COMMIT_TIMESTAMP,
    MATERIALIZE_PARTITION_COLUMNS,
    ROW_TRACKING,
    V2_CHECKPOINT,
    ensure_writable,
    feature,
    supported_features,
)
from raydelta.protocol.table_properties import (
    CHECKPOINT_POLICY,
    COLUMN_MAPPING_MAX_ID,
    COLUMN_MAPPING_MODE,
    DEFAULT_COLUMN_MAPPING_MODE,
    ENABLE_DELETION_VECTORS,
    ENABLE_IN_COMMIT_TIMESTAMPS,
    ENABLE_ROW_TRACKING,
    ICT_ENABLEMENT_TIMESTAMP,
    ICT_ENABLEMENT_VERSION,
    MATERIALIZED_ROW_COMMIT_VERSION_COLUMN,
    MATERIALIZED_ROW_ID_COLUMN,
    is_true,
)
from raydelta.protocol.winning_commits import WinningCommit

# Field-metadata keys that enabling column mapping adds to a schema.
COLUMN_MAPPING_FIELD_KEYS = frozenset(
    {COLUMN_MAPPING_ID_KEY, COLUMN_MAPPING_PHYSICAL_NAME_KEY, *NESTED_IDS_KEYS, "parquet.field.id"}
)

# Features a concurrent upgrade may not add under a transaction prepared
# without them: their writer rules hold for every commit once supported
# (not only once a table property turns them on, which the metadata check
# sees) and a rebase cannot meet them: clustering (stats and the
# delta.clustering domain on every write), materializePartitionColumns
# (partition columns inside data files), and the commit-path features.
FEATURES_FAILING_CONCURRENT_COMMITS = frozenset(
    {
        CLUSTERING,
        MATERIALIZE_PARTITION_COLUMNS,
        CATALOG_MANAGED,
        CATALOG_OWNED_PREVIEW,
        COORDINATED_COMMITS_PREVIEW,
    }
)


# --- winning commits ------------------------------------------------------------------------


# --- isolation --------------------------------------------------------------------------------


def effective_isolation_level(
    requested: IsolationLevel, own_actions: Sequence[Action]
) -> IsolationLevel:
    """``SnapshotIsolation`` for a commit that changes no data, else ``requested``.

    Only file actions (``add``/``remove``/``cdc``), ``commitInfo`` and the
    ``delta.rowTracking`` domain may be present for the downgrade, and none
    of the file actions may change data (delta-spark's rule for compaction).
    """
    if requested is IsolationLevel.SNAPSHOT_ISOLATION:
        return requested
    data_changed = False
    for action in own_actions:
        if isinstance(action, (AddFile, RemoveFile, AddCDCFile)):
            data_changed = data_changed or action.data_change
        elif isinstance(action, CommitInfo) or (
            isinstance(action, DomainMetadata) and action.domain == ROW_TRACKING_DOMAIN
        ):
            continue
        else:
            return requested
    return requested if data_changed else IsolationLevel.SNAPSHOT_ISOLATION


# --- the checks ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Own:
    protocol: Protocol | None
    metadata: Metadata | None
    removed: dict[str, RemoveFile]
    app_ids: frozenset[str]
    domains: frozenset[str]

    @classmethod
    def of(cls, actions: Sequence[Action], table_root: str | None) -> _Own:
        return cls(
            protocol=next((a for a in actions if isinstance(a, Protocol)), None),
            metadata=next((a for a in actions if isinstance(a, Metadata)), None),
            removed={
                canonical_path(a.path, table_root): a for a in actions if isinstance(a, RemoveFile)
            },
            app_ids=frozenset(a.app_id for a in actions if isinstance(a, Txn)),
            domains=frozenset(a.domain for a in actions if isinstance(a, DomainMetadata)),
        )


@dataclass(frozen=True)
class _Context:
    read_set: ReadSet
    own: _Own
    isolation: IsolationLevel
    partition_columns: tuple[str, ...]
    column_types: Mapping[str, DataType]
    logical_names: Mapping[str, str]  # physical partition key -> logical column name
    table_root: str | None = None  # file_actions.table_root_key spelling, when known

    def logical(self, values: Mapping[str, str | None] | None) -> dict[str, str | None] | None:
        if values is None:
            return None
        return {self.logical_names.get(k, k): v for k, v in values.items()}

    def where(self, values: Mapping[str, str | None] | None) -> str:
        """``partition [a=1, b=null]`` (or ``the table`` when unpartitioned or unknown)."""
        logical = self.logical(values)
        if not self.partition_columns or not logical:
            return "the table"
        parts = [
            f"{name}={'null' if logical.get(name) is None else logical.get(name)}"
            for name in self.partition_columns
        ]
        return f"partition [{', '.join(parts)}]"


def _protocol_change_error(
    winner: WinningCommit, own: _Own, current: Protocol | None
) -> tuple[str | None, Protocol | None]:
    """(why it conflicts, or None; the protocol in force after the winner)."""
    new = winner.protocol
    if new is None:
        return None, current
    if own.protocol is not None:
        return "this transaction changes the protocol too", new
    if current is None:
        return "the protocol this transaction read is unknown", new
    ensure_writable(new)
    if (
        new.min_reader_version < current.min_reader_version
        or new.min_writer_version < current.min_writer_version
    ):
        return (
            f"it lowered the protocol versions from ({current.min_reader_version}, "
            f"{current.min_writer_version}) to ({new.min_reader_version}, "
            f"{new.min_writer_version})"
        ), new
    before, after = supported_features(current), supported_features(new)
    removed = sorted(before - after)
    if removed:
        return f"it removed table features {removed}", new
    unsafe = sorted(
        name
        for name in after - before
        if feature(name) is None or name in FEATURES_FAILING_CONCURRENT_COMMITS
    )
    if unsafe:
        return f"it added table features {unsafe} a concurrent commit cannot adopt", new
    return None, new


def _mapping_mode(configuration: Mapping[str, str]) -> str:
    return configuration.get(COLUMN_MAPPING_MODE, DEFAULT_COLUMN_MAPPING_MODE).strip().lower()


def _strip_column_mapping(raw: Any) -> Any:
    if isinstance(raw, dict):
        out = {}
        for key, value in raw.items():
            if key == "metadata" and isinstance(value, dict):
                value = {k: v for k, v in value.items() if k not in COLUMN_MAPPING_FIELD_KEYS}
            out[key] = _strip_column_mapping(value)
        return out
    if isinstance(raw, list):
        return [_strip_column_mapping(v) for v in raw]
    return raw


def _configuration_change_error(
    current: Metadata, winning: Metadata, protocol: Protocol | None
) -> str | None:
    before, after = current.configuration, winning.configuration
    removed = sorted(set(before) - set(after))
    if removed:
        return f"it removed table properties {removed}"
    supported = supported_features(protocol) if protocol is not None else frozenset()
    for key in sorted(k for k in after if before.get(k) != after[k]):
        value, is_new = after[key], key not in before
        if key == ENABLE_ROW_TRACKING:
            ok = is_true(value) and ROW_TRACKING in supported
        elif key in (MATERIALIZED_ROW_ID_COLUMN, MATERIALIZED_ROW_COMMIT_VERSION_COLUMN):
            ok = is_true(after.get(ENABLE_ROW_TRACKING))
        elif key == COLUMN_MAPPING_MODE:
            ok = (
                _mapping_mode(before) == "none"
                and _mapping_mode(after) == "name"
                and COLUMN_MAPPING in supported
            )
        elif key == COLUMN_MAPPING_MAX_ID:
            ok = True
        elif key == ENABLE_DELETION_VECTORS:
            ok = is_true(value) and DELETION_VECTORS in supported
        elif key == CHECKPOINT_POLICY:
            ok = value.strip().lower() == "v2" and V2_CHECKPOINT in supported
        elif key == ENABLE_IN_COMMIT_TIMESTAMPS:
            ok = is_true(value) and IN_COMMIT_TIMESTAMP in supported
        elif key in (ICT_ENABLEMENT_VERSION, ICT_ENABLEMENT_TIMESTAMP):
            ok = is_new
        else:
            ok = False
        if not ok:
            return f"it set table property {key}={value!r}, which cannot be merged"
    return None


def _schema_change_error(current: Metadata, winning: Metadata) -> str | None:
    if not (
        _mapping_mode(current.configuration) == "none"
        and _mapping_mode(winning.configuration) == "name"
    ):
        return "it changed the schema"
    try:
        before = _strip_column_mapping(json.loads(current.schema_string or "null"))
        after = _strip_column_mapping(json.loads(winning.schema_string or "null"))
    except (TypeError, ValueError):
        return "it changed the schema"
    if before != after:
        return "it changed the schema beyond column-mapping metadata"
    return None


_METADATA_FIELDS = (
    "id",
    "name",
    "description",
    "format",
    "schema_string",
    "partition_columns",
    "created_time",
)


def _metadata_change_error(
    winner: WinningCommit, own: _Own, current: Metadata | None, protocol: Protocol | None
) -> str | None:
    new = winner.metadata
    assert new is not None
    if own.metadata is not None:
        return "this transaction changes the metadata too"
    if winner.identity_only_metadata_update:
        return None
    if current is None:
        return "the metadata this transaction read is unknown"
    changed = [f for f in _METADATA_FIELDS if getattr(current, f) != getattr(new, f)]
    if (current.model_extra or {}) != (new.model_extra or {}):
        changed.append("extra fields")
    if current.configuration != new.configuration:
        reason = _configuration_change_error(current, new, protocol)
        if reason:
            return reason
    for name in changed:
        if name == "schema_string":
            reason = _schema_change_error(current, new)
            if reason:
                return reason
        else:
            return f"it changed {name.replace('_', ' ')}"
    return None


def _file_label(path: str, where: str) -> str:
    return f"{path!r}" if where == "the table" else f"{path!r} in {where}"


def _first_read_add(files: Sequence[AddFile], ctx: _Context) -> AddFile | None:
    read = ctx.read_set
    if not files:
        return None
    if read.read_whole_table:
        return files[0]
    if not read.predicates and not read.files_read:
        return None  # read nothing: a blind append does not depend on other appends
    if not ctx.partition_columns or not read.predicates:
        return files[0]
    for add in files:
        values = ctx.logical(add.partition_values)
        if any(matches(p, values, ctx.column_types) for p in read.predicates):
            return add
    return None


def _check_winner(
    winner: WinningCommit,
    ctx: _Context,
    protocol: Protocol | None,
    metadata: Metadata | None,
) -> tuple[Protocol | None, Metadata | None]:
    version, read_version = winner.version, ctx.read_set.read_version
    after = f"after this transaction read version {read_version}; retry the operation"

    reason, protocol = _protocol_change_error(winner, ctx.own, protocol)
    if reason:
        raise ProtocolChangedException(
            f"the protocol was changed by a concurrent commit at version {version}: "
            f"{reason}, {after}",
            version,
        )

    if winner.metadata is not None:
        reason = _metadata_change_error(winner, ctx.own, metadata, protocol)
        if reason:
            raise MetadataChangedException(
                f"the table metadata was changed by a concurrent commit at version {version}: "
                f"{reason}, {after}",
                version,
            )
        metadata = winner.metadata

    domains_read = set(ctx.read_set.domains_read)
    for domain in winner.domains:
        name = domain.domain
        if name == ROW_TRACKING_DOMAIN:
            continue
        if name in ctx.own.domains or name in domains_read:
            how = "writes" if name in ctx.own.domains else "read"
            raise ConcurrentTransactionException(
                f"a concurrent commit at version {version} wrote metadata domain {name!r}, "
                f"which this transaction {how}, {after}",
                version,
            )

    app_ids = winner.app_ids & (set(ctx.read_set.app_ids_read) | ctx.own.app_ids)
    if app_ids:
        raise ConcurrentTransactionException(
            f"a concurrent commit at version {version} set the transaction version of "
            f"app id(s) {sorted(app_ids)}, which this transaction depends on, {after}",
            version,
        )

    _check_appends(winner, ctx, after)
    _check_removes(winner, ctx, after)
    return protocol, metadata


def _check_appends(winner: WinningCommit, ctx: _Context, after: str) -> None:
    """Rule 5 (module docstring): files added that this transaction should have read."""
    version = winner.version
    if ctx.isolation is not IsolationLevel.SNAPSHOT_ISOLATION and not (
        ctx.isolation is IsolationLevel.WRITE_SERIALIZABLE
        and winner.is_blind_append
        and ctx.own.metadata is None
    ):
        added = [a for a in winner.added_files if a.data_change]
        hit = _first_read_add(added, ctx)
        if hit is not None:
            where = ctx.where(hit.partition_values)
            raise ConcurrentAppendException(
                f"files were added to {where} by a concurrent commit at version {version} "
                f"(for example {hit.path!r}) that this transaction should have read at "
                f"{ctx.isolation.value} isolation, {after}",
                version,
            )


def _check_removes(winner: WinningCommit, ctx: _Context, after: str) -> None:
    """Rules 6 and 7 (module docstring): files removed that this transaction
    read, or removes too."""
    version = winner.version
    read = ctx.read_set
    root = ctx.table_root
    read_paths = {canonical_path(f.path, root): f for f in read.files_read}
    for removed in winner.removed_files:
        ref = read_paths.get(canonical_path(removed.path, root))
        if ref is not None:
            where = ctx.where(ref.partition_values or removed.partition_values)
            raise ConcurrentDeleteReadException(
                f"a concurrent commit at version {version} removed file "
                f"{_file_label(removed.path, where)}, which this transaction read, {after}",
                version,
            )
    if winner.removed_files and read.read_whole_table:
        removed = winner.removed_files[0]
        where = ctx.where(removed.partition_values)
        raise ConcurrentDeleteReadException(
            f"a concurrent commit at version {version} removed file "
            f"{_file_label(removed.path, where)} from the table this transaction read "
            f"entirely, {after}",
            version,
        )
    if read.predicates and not read.files_read:
        for removed in winner.removed_files:
            if not removed.data_change:
                continue
            values = ctx.logical(removed.partition_values)
            if not ctx.partition_columns or any(
                matches(p, values, ctx.column_types) for p in read.predicates
            ):
                where = ctx.where(removed.partition_values)
                raise ConcurrentDeleteReadException(
                    f"a concurrent commit at version {version} removed file "
                    f"{_file_label(removed.path, where)}, which this transaction's read "
                    f"predicates select, {after}",
                    version,
                )

    for removed in winner.removed_files:
        mine = ctx.own.removed.get(canonical_path(removed.path, root))
        if mine is not None:
            where = ctx.where(mine.partition_values or removed.partition_values)
            raise ConcurrentDeleteDeleteException(
                f"a concurrent commit at version {version} already removed file "
                f"{_file_label(removed.path, where)}, which this transaction removes too, {after}",
                version,
            )


def check_conflicts(
    read_set: ReadSet,
    own_actions: Sequence[Action],
    winners: Sequence[WinningCommit],
    *,
    partition_columns: Sequence[str] | None = None,
    column_types: Mapping[str, DataType] | None = None,
    read_configuration: TableConfiguration | None = None,
    read_protocol: Protocol | None = None,
    read_metadata: Metadata | None = None,
    table_root: str | None = None,
) -> None:
    """Raise the typed exception of the first conflict with ``winners``, or return.

    Paths are compared in their canonical spelling
    (:func:`raydelta.protocol.file_actions.canonical_path`, decoded once);
    with ``table_root`` (``file_actions.table_root_key``), an absolute URI
    under the root and the relative path name one file.

    ``winners`` are the commits after ``read_set.read_version`` (any order;
    checked ascending). ``read_configuration`` is the table at the read
    version: it gives the read protocol and metadata (needed to merge a
    winner's protocol or metadata change; without them any such change
    conflicts), the partition columns, their types and their physical names
    (partition values are keyed by physical name under column mapping).
    ``partition_columns`` / ``column_types`` / ``read_protocol`` /
    ``read_metadata`` override or replace it, and predicates name logical
    columns.

    Raises one of delta-spark's concurrency exceptions (see the module
    docstring), or ``UnsupportedTableFeatureException`` /
    ``InvalidProtocolVersionException`` when a winner moved the table to a
    protocol raydelta cannot write.
    """
    logical_names: dict[str, str] = {}
    if read_configuration is not None:
        read_protocol = read_protocol or read_configuration.protocol
        read_metadata = read_metadata or read_configuration.metadata
        fields = read_configuration.partition_fields
        if partition_columns is None:
            partition_columns = [f.name for f in fields]
        if column_types is None:
            column_types = {f.name: f.type for f in fields}
        for f in fields:
            logical_names[read_configuration.physical_name(f)] = f.name
    elif partition_columns is None and read_metadata is not None:
        partition_columns = read_metadata.partition_columns
    ctx = _Context(
        read_set=read_set,
        own=_Own.of(own_actions, table_root),
        isolation=effective_isolation_level(read_set.isolation_level, own_actions),
        partition_columns=tuple(partition_columns or ()),
        column_types=dict(column_types or {}),
        logical_names=logical_names,
        table_root=table_root,
    )
    protocol, metadata = read_protocol, read_metadata
    for winner in sorted(winners, key=lambda w: w.version):
        protocol, metadata = _check_winner(winner, ctx, protocol, metadata)
