"""Writer-side rules a commit must satisfy before it is written.

:func:`validate_commit` checks one commit's actions against the table it
applies to (``table_configuration`` = the table before the commit, None when
the commit creates the table) and raises an
:class:`~raydelta.protocol.errors.InvalidCommitError` subclass for the first rule
broken. The rules (PROTOCOL.md sections in brackets):

- at most one ``metaData``, one ``protocol``, one ``commitInfo``; no two
  ``txn`` of one app id, no two ``domainMetadata`` of one domain; per file
  action type (``add``/``remove``/``cdc``) at most one action per path (so
  also per ``(path, dvId)``); no ``add`` and ``remove`` of the same
  ``(path, dvId)`` ["Add File and Remove File", "Delta Log Entries"]
  → :class:`DuplicateActionError`;
- no checkpoint-only actions (``sidecar``, ``checkpointMetadata``) and no
  action raydelta does not know ["Action Reconciliation"]
  → :class:`IllegalActionError`;
- a table creation carries both ``protocol`` and ``metaData``; the protocol
  (new or current) is one raydelta can write (``table_features.ensure_writable``);
  a protocol change never lowers a version nor drops a feature
  → :class:`ProtocolDowngradeError`;
- a protocol naming features raydelta cannot write (reader or writer) is
  refused (``ensure_writable``) → :class:`UnsupportedTableFeatureException`;
- a ``metaData`` action yields a valid table configuration: the schema
  parses into types raydelta knows, partition columns exist and are distinct, and every known table
  property with a parser parses (``TableConfiguration.validate_properties``:
  ``delta.logRetentionDuration = "soon"`` is refused)
  → :class:`InvalidMetadataChangeError`;
- every file action's values (``check_values``, the default): paths
  stay under ``table_root`` (:mod:`raydelta.protocol.commit_paths`; absolute
  URIs outside it only with ``raydelta.allowExternalFiles``)
  → :class:`UnsafePathError`; sizes, Long fields, partition values and
  deletion vectors (:mod:`raydelta.protocol.file_action_rules`)
  → :class:`InvalidFileActionError`; ``stats``
  → :class:`InvalidStatisticsError`. The duplicate rule above compares the
  paths' keys, so ``a%20b`` and ``a b`` (or a relative path and the absolute
  URI of the same file under the root) are one path;
- ``domainMetadata`` needs the ``domainMetadata`` feature; system domains
  (``delta.*``) other than those raydelta manages (:data:`MANAGED_SYSTEM_DOMAINS`)
  are refused ["Domain Metadata"] → :class:`IllegalActionError`;
- every ``add`` carries a value (possibly null) for every partition column
  (by physical name) and no other key ["Consistency Between Table Metadata
  and Data Files"]; an ``add`` with a deletion vector has ``numRecords``
  ["Per-file Statistics"]; deletion vectors only on tables supporting them;
  ``cdc`` actions have ``dataChange=false`` → :class:`InvalidFileActionError`;
- with ``delta.appendOnly`` in force, no ``remove`` with ``dataChange=true``
  ["Append-only Tables"] → :class:`AppendOnlyViolationError`;
- ``final=True`` (the commit as it will be written, after the coordinator
  filled in server-side fields): with In-Commit Timestamps enabled,
  ``commitInfo`` is present, first, and has ``inCommitTimestamp``
  ["In-Commit Timestamps"]; a catalog-managed table's ``commitInfo`` has a
  ``txnId`` → :class:`InvalidCommitInfoError`; with row tracking supported
  every ``add`` has ``baseRowId`` and ``defaultRowCommitVersion`` ["Row
  Tracking"] → :class:`InvalidFileActionError`.

The configuration after the commit (its own protocol/metadata, else the
table's) decides ICT, row tracking, partition columns and DV support;
append-only and ``raydelta.allowExternalFiles`` are judged on the table
*before* the commit, as delta-spark judges append-only (a commit cannot
grant itself the right it needs; at creation the new metadata decides).

Removes of files the table does not hold ("blind removes") are accepted and
not looked up: the spec makes a ``remove`` a tombstone keyed by
``(path, dvId)`` ["Action Reconciliation": the ``remove`` collection only
has to be disjoint from the ``add`` collection], nowhere requires its file to
be live, and delta-spark commits such removes (a file another transaction
removed first is a conflict, found by the conflict checker against the
winners, not a malformed commit). Checking them would also need the full
file list on every commit, which the coordinator avoids. Their paths,
sizes, stats and deletion vectors are checked like any file action's.

Everything here is a pure function of its arguments: the table root comes
in as ``table_root`` (None: no absolute URI counts as under the root).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TypeVar

from raydelta.protocol.actions import (
    Action,
    AddCDCFile,
    AddFile,
    CheckpointMetadata,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    Sidecar,
    Txn,
    UnknownAction,
)
from raydelta.protocol.errors import (
    AppendOnlyViolationError,
    DuplicateActionError,
    IllegalActionError,
    InvalidCommitError,
    InvalidCommitInfoError,
    InvalidFileActionError,
    InvalidMetadataChangeError,
    InvalidProtocolError,
    InvalidTableError,
    ProtocolDowngradeError,
    SchemaError,
)
from raydelta.protocol.file_action_rules import (
    FileAction,
    check_file_values,
    file_path_keys,
    files_by_kind,
)
from raydelta.protocol.row_tracking import ROW_TRACKING_DOMAIN
from raydelta.protocol.schema import ArrayType, DataType, MapType, StructType, UnknownType
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.protocol.table_features import (
    DELETION_VECTORS,
    DOMAIN_METADATA,
    ROW_TRACKING,
    ensure_writable,
    supported_features,
)

# System domains raydelta writes or carries with understanding of their rules:
# the row-id high-water mark (recomputed at commit) and clustering columns.
_A = TypeVar("_A", bound=Action)

MANAGED_SYSTEM_DOMAINS = frozenset({ROW_TRACKING_DOMAIN, "delta.clustering"})


def _kinds(actions: Sequence[Action]) -> Counter[type]:
    """How many actions of each class the commit holds (one C-speed pass; the
    rules below then visit only the classes present)."""
    return Counter(map(type, actions))


def _count(kinds: Counter[type], kind: type) -> int:
    return sum(n for cls, n in kinds.items() if issubclass(cls, kind))


def _check_shape(actions: Sequence[Action], kinds: Counter[type]) -> None:
    for cls in kinds:
        if issubclass(cls, (Sidecar, CheckpointMetadata, UnknownAction)):
            action: Action = next(a for a in actions if isinstance(a, cls))
            if isinstance(action, UnknownAction):
                raise IllegalActionError(
                    f"unknown action {action.name!r}: raydelta commits only actions it understands"
                )
            raise IllegalActionError(
                f"{action.action_name!r} actions belong in V2 checkpoints, never in a commit"
            )
    for kind, name in ((Metadata, "metaData"), (Protocol, "protocol"), (CommitInfo, "commitInfo")):
        count = _count(kinds, kind)
        if count > 1:
            raise DuplicateActionError(
                f"a commit may hold at most one {name} action, found {count}"
            )
    if not _count(kinds, Txn) and not _count(kinds, DomainMetadata):
        return

    app_ids: set[str] = set()
    domains: set[str] = set()
    for action in actions:
        if isinstance(action, Txn):
            if action.app_id in app_ids:
                raise DuplicateActionError(f"two txn actions for app id {action.app_id!r}")
            app_ids.add(action.app_id)
        elif isinstance(action, DomainMetadata):
            if action.domain in domains:
                raise DuplicateActionError(
                    f"two domainMetadata actions for domain {action.domain!r}"
                )
            domains.add(action.domain)


def _check_duplicate_files(
    by_kind: dict[str, list[FileAction]], keys: dict[str, list[str]] | None
) -> None:
    """At most one action per type and path key; no add and remove of one logical file.

    ``keys`` holds the path key of each action of ``by_kind`` (``file_path_keys``);
    None compares the paths as written. The common case (no path twice, no
    path both added and removed) is decided with sets; only a commit that
    repeats a path is walked action by action, to name it.
    """
    if keys is None:
        keys = {kind: [a.path for a in chosen] for kind, chosen in by_kind.items()}
    distinct = {kind: set(paths) for kind, paths in keys.items()}
    repeated = any(len(distinct[kind]) != len(paths) for kind, paths in keys.items())
    if not repeated and not (distinct["add"] & distinct["remove"]):
        return
    seen: dict[str, dict[str, str | None]] = {"add": {}, "remove": {}, "cdc": {}}
    for kind, chosen in by_kind.items():
        for action, path in zip(chosen, keys[kind], strict=True):
            dv_id = None if isinstance(action, AddCDCFile) else action.dv_unique_id
            if path in seen[kind]:
                previous = seen[kind][path]
                detail = (
                    "twice"
                    if previous == dv_id
                    else f"with deletion vectors {previous!r} and {dv_id!r}"
                )
                raise DuplicateActionError(
                    f"path {action.path!r} appears in two {kind} actions {detail}; a commit may "
                    f"hold at most one {kind} per path"
                )
            seen[kind][path] = dv_id
    for path, dv_id in seen["add"].items():
        if path in seen["remove"] and seen["remove"][path] == dv_id:
            raise DuplicateActionError(
                f"file {path!r} (deletion vector {dv_id!r}) is both added and removed"
            )


def _check_protocol_change(new: Protocol, current: Protocol | None) -> None:
    if current is None:
        return
    if (
        new.min_reader_version < current.min_reader_version
        or new.min_writer_version < current.min_writer_version
    ):
        raise ProtocolDowngradeError(
            f"the protocol may not be lowered from ({current.min_reader_version}, "
            f"{current.min_writer_version}) to ({new.min_reader_version}, "
            f"{new.min_writer_version})"
        )
    dropped = sorted(supported_features(current) - supported_features(new))
    if dropped:
        raise ProtocolDowngradeError(f"the protocol may not drop table features {dropped}")


def _check_known_types(dtype: DataType, path: tuple[str, ...]) -> None:
    """A schema a writer commits names only types raydelta knows (a reader keeps
    unknown ones as data; a writer that does not know a type cannot keep its rules)."""
    if isinstance(dtype, UnknownType):
        raise InvalidMetadataChangeError(
            f"invalid metadata: column {'.'.join(path) or '<root>'!r} has unknown type {dtype}"
        )
    if isinstance(dtype, StructType):
        for f in dtype.fields:
            _check_known_types(f.type, (*path, f.name))
    elif isinstance(dtype, ArrayType):
        _check_known_types(dtype.element_type, (*path, "element"))
    elif isinstance(dtype, MapType):
        _check_known_types(dtype.key_type, (*path, "key"))
        _check_known_types(dtype.value_type, (*path, "value"))


def _configuration(protocol: Protocol, metadata: Metadata) -> TableConfiguration:
    try:
        return TableConfiguration(protocol, metadata)
    except InvalidProtocolError as exc:
        raise InvalidCommitError(f"invalid protocol: {exc}") from exc
    except (InvalidTableError, SchemaError) as exc:
        raise InvalidMetadataChangeError(f"invalid metadata: {exc}") from exc


def validate_commit(
    actions: Sequence[Action],
    *,
    is_create: bool,
    table_configuration: TableConfiguration | None = None,
    protocol: Protocol | None = None,
    metadata: Metadata | None = None,
    final: bool = True,
    managed_system_domains: frozenset[str] = MANAGED_SYSTEM_DOMAINS,
    table_root: str | None = None,
    check_values: bool = True,
) -> TableConfiguration:
    """Check the writer rules (module docstring); return the configuration after it.

    The table before the commit is ``table_configuration``, or
    ``protocol``/``metadata``; both absent when ``is_create``. ``final=False``
    checks a request before the coordinator stamps it (skips the ICT,
    ``txnId`` and row-id presence rules). ``table_root`` is the table's URI,
    against which paths are judged. ``check_values=False`` skips the
    per-file value rules: for re-checking actions already checked against
    the same configuration (the coordinator's stamped commit).
    """
    if table_configuration is not None:
        protocol = protocol or table_configuration.protocol
        metadata = metadata or table_configuration.metadata
    kinds = _kinds(actions)
    _check_shape(actions, kinds)

    new_protocol = _first(actions, kinds, Protocol)
    new_metadata = _first(actions, kinds, Metadata)
    if is_create:
        if new_protocol is None or new_metadata is None:
            raise InvalidCommitError("a commit creating a table needs protocol and metaData")
        before: TableConfiguration | None = None
    else:
        if protocol is None or metadata is None:
            raise InvalidCommitError("the table's current protocol and metadata are required")
        before = table_configuration or TableConfiguration(protocol, metadata)
        if new_protocol is not None:
            _check_protocol_change(new_protocol, protocol)
    after_protocol = new_protocol or protocol
    after_metadata = new_metadata or metadata
    assert after_protocol is not None and after_metadata is not None
    after = (
        before
        if before is not None and new_protocol is None and new_metadata is None
        else _configuration(after_protocol, after_metadata)
    )
    ensure_writable(after.protocol)
    if new_metadata is not None:
        try:
            after.validate_properties()
        except InvalidTableError as exc:
            raise InvalidMetadataChangeError(f"invalid metadata: {exc}") from exc
        _check_known_types(after.schema, ())

    keys: dict[str, list[str]] | None = None
    allow_external = after.allow_external_files and (before is None or before.allow_external_files)
    by_kind = files_by_kind(actions)
    if check_values:
        keys = file_path_keys(by_kind, table_root=table_root, allow_external=allow_external)
    _check_duplicate_files(by_kind, keys)
    if check_values:
        check_file_values(by_kind, after, table_root=table_root, allow_external=allow_external)

    if _count(kinds, DomainMetadata):
        _check_domains(actions, after, managed_system_domains)
    _check_file_actions(actions, kinds, after, before, final=final)
    if final:
        _check_commit_info(actions, after)
    return after


def _check_domains(
    actions: Sequence[Action], after: TableConfiguration, managed_system_domains: frozenset[str]
) -> None:
    """``domainMetadata`` needs its table feature; of the ``delta.`` domains
    only ``managed_system_domains`` may be written."""
    supported = after.supported_features
    for action in actions:
        if isinstance(action, DomainMetadata):
            if DOMAIN_METADATA not in supported:
                raise IllegalActionError(
                    f"domainMetadata {action.domain!r} needs the domainMetadata table feature"
                )
            if action.domain.startswith("delta.") and action.domain not in managed_system_domains:
                raise IllegalActionError(
                    f"system domain {action.domain!r} is reserved to the Delta client; "
                    f"raydelta manages only {sorted(managed_system_domains)}"
                )


def _first(actions: Sequence[Action], kinds: Counter[type], kind: type[_A]) -> _A | None:
    if not _count(kinds, kind):
        return None
    return next(a for a in actions if isinstance(a, kind))


def _check_file_actions(
    actions: Sequence[Action],
    kinds: Counter[type],
    after: TableConfiguration,
    before: TableConfiguration | None,
    *,
    final: bool,
) -> None:
    dv_supported = DELETION_VECTORS in after.supported_features
    row_tracking = ROW_TRACKING in after.supported_features
    append_only = before.append_only if before is not None else after.append_only
    adds, removes, cdcs = (_count(kinds, k) for k in (AddFile, RemoveFile, AddCDCFile))
    if not (adds or removes or cdcs):
        return
    # Appends only: the rules left concern deletion vectors, which are rare.
    if (
        adds
        and not removes
        and not cdcs
        and not (final and row_tracking)
        and not any(a.deletion_vector is not None for a in actions if type(a) is AddFile)
    ):
        return
    for action in actions:
        if isinstance(action, AddFile):
            if action.deletion_vector is not None and action.num_records is None:
                raise InvalidFileActionError(
                    f"add {action.path!r} has a deletion vector but no numRecords in its stats"
                )
            if (
                final
                and row_tracking
                and (action.base_row_id is None or action.default_row_commit_version is None)
            ):
                raise InvalidFileActionError(
                    f"add {action.path!r} lacks baseRowId/defaultRowCommitVersion on a table "
                    "supporting row tracking"
                )
        if (
            isinstance(action, (AddFile, RemoveFile))
            and action.deletion_vector is not None
            and not dv_supported
        ):
            raise InvalidFileActionError(
                f"{action.action_name} {action.path!r} has a deletion vector but the table does "
                "not support the deletionVectors feature"
            )
        if isinstance(action, AddCDCFile) and action.data_change:
            raise InvalidFileActionError(f"cdc {action.path!r} must have dataChange=false")
        if isinstance(action, RemoveFile) and action.data_change and append_only:
            raise AppendOnlyViolationError(
                f"remove {action.path!r} deletes data from an append-only table "
                "(delta.appendOnly=true); only dataChange=false rearrangements are allowed"
            )


def _check_commit_info(actions: Sequence[Action], after: TableConfiguration) -> None:
    info = next((a for a in actions if isinstance(a, CommitInfo)), None)
    if after.in_commit_timestamps_enabled:
        if info is None:
            raise InvalidCommitInfoError("In-Commit Timestamps are enabled: commitInfo is required")
        if actions[0] is not info:
            raise InvalidCommitInfoError(
                "In-Commit Timestamps are enabled: commitInfo must be the first action"
            )
        if info.in_commit_timestamp is None:
            raise InvalidCommitInfoError(
                "In-Commit Timestamps are enabled: commitInfo needs inCommitTimestamp"
            )
    if after.is_catalog_managed and (info is None or not info.txn_id):
        raise InvalidCommitInfoError("a catalog-managed table's commitInfo needs a txnId")
