"""What VACUUM needs from the log, read without loading a snapshot.

VACUUM decides with four columns per file action: ``path`` and
``deletionVector`` of the live files, plus ``deletionTimestamp`` and
``size`` of the tombstones. :func:`load_vacuum_view` reads only those
leaves from the checkpoint (parquet parts and their sidecars: no stats, no
partition values, no per-file Python object), the ``protocol`` and
``metaData`` of the top-level parts in the same read, and reconciles the
commits after it, so opening a 1M-file table for VACUUM costs one pass of
a few column reads instead of a full snapshot.

Invariants:
- The result reconciles exactly as a snapshot does: an action on a file
  key ``(canonical path, DV unique id)`` in a later commit replaces the
  checkpoint's row of that key (the spec's "last action wins"), and the
  non-file state (protocol, metadata) is replayed from the same segment.
- Nothing unusual takes the fast path: JSON checkpoint parts, log
  compaction files, a checkpoint that breaks its spec (the snapshot reader
  rebuilds the version without it, or refuses) and catalog-managed tables
  are read through
  :func:`raydelta.storage.snapshot.load_snapshot_from_store` (the same
  errors, the same result), which a :class:`VacuumLogView` stands in for.
- Nothing is written.

:func:`log_paths` then splits what the log names into the protected paths
and the expired tombstones' files, column-wise for plain relative paths
(no escapes, schemes or dot segments: what writers normally produce, found
by one scan of a column's bytes) and one by one through
:func:`raydelta.protocol.cleanup_rules.resolve_path` for the others.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from raydelta.protocol.actions import AddFile, RemoveFile, Sidecar
from raydelta.protocol.catalog_managed import ensure_catalog_access
from raydelta.protocol.checkpoint_plan import canonical_paths, dv_unique_ids
from raydelta.protocol.cleanup_rules import TableRoot, dv_file_path, resolve_path
from raydelta.protocol.errors import (
    CorruptLogError,
    InvalidCheckpointError,
    MissingMetadataError,
    MissingProtocolError,
    TableNotFoundError,
)
from raydelta.protocol.file_actions import (
    ADD_SCHEMA,
    REMOVE_SCHEMA,
    canonical_path,
    string_values_bytes,
)
from raydelta.protocol.file_names import LogFileKind
from raydelta.protocol.log_segment import LogSegment, build_log_segment, check_checkpoint_spec
from raydelta.protocol.reconciliation import TableState, apply_commits, state_from_checkpoint
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.protocol.table_features import ensure_readable
from raydelta.storage.log.reader import (
    CheckpointContents,
    read_commits,
    read_last_checkpoint,
    require_add_column,
    sidecar_path,
)
from raydelta.storage.log.store import LogStore
from raydelta.storage.snapshot import Snapshot, load_snapshot_from_store

DV_FIELDS = pa.struct(
    [
        pa.field("storageType", pa.string()),
        pa.field("pathOrInlineDv", pa.string()),
        pa.field("offset", pa.int32()),
    ]
)
LIVE_SCHEMA = pa.schema([pa.field("path", pa.string()), pa.field("deletionVector", DV_FIELDS)])
TOMBSTONE_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string()),
        pa.field("deletionTimestamp", pa.int64()),
        pa.field("size", pa.int64()),
        pa.field("deletionVector", DV_FIELDS),
    ]
)
_LEAVES = {
    "add": ("path", "deletionVector"),
    "remove": ("path", "deletionTimestamp", "size", "deletionVector"),
}
HEAD_COLUMNS = ("protocol", "metaData", "checkpointMetadata")
"""The non-file columns VACUUM reads: its :class:`TableConfiguration`, and
what judges the checkpoint's spec."""
# Paths that need the full resolver: escapes, URIs, absolute, dot segments, empty segments.
_NEEDS_RESOLVING = r"[%:\\]|^/|(^|/)\.\.?(/|$)|//"
# The same, over the bytes of all values at once (see values_may_match).
_ODD_BYTES = (b"%", b":", b"\\")
_ODD_AFTER_SLASH = re.compile(rb"/[/.]")
CANDIDATES_SCHEMA = pa.schema([pa.field("path", pa.string()), pa.field("size", pa.int64())])
"""VACUUM's candidate files: root-relative ``path``, ``size`` (null when unknown)."""


@dataclass(frozen=True)
class VacuumLogView:
    """The table as VACUUM sees it (the part of :class:`Snapshot` it uses)."""

    version: int
    table_configuration: TableConfiguration
    files: pa.Table
    """Live files: ``path``, ``deletionVector``."""
    all_tombstones: pa.Table
    """Every tombstone the log still holds: ``path``, ``deletionTimestamp``,
    ``size``, ``deletionVector``."""

    @property
    def num_files(self) -> int:
        return int(self.files.num_rows)


def load_vacuum_view(uri: str, store: LogStore) -> VacuumLogView | Snapshot:
    """The latest version of the table at ``uri`` for VACUUM (see module doc)."""
    if not store.log_exists():
        raise TableNotFoundError(f"no Delta table at {uri}: {store.log_dir} does not exist")
    listing = store.list_from(0)
    if not any(f.kind is LogFileKind.COMMIT or f.is_checkpoint for f in listing):
        raise TableNotFoundError(f"no Delta table at {uri}: {store.log_dir} holds no commits")
    segment = build_log_segment(listing, last_checkpoint_hint=read_last_checkpoint(store))
    checkpoint = segment.checkpoint
    if segment.compactions or (
        checkpoint is not None and any(not p.name.endswith(".parquet") for p in checkpoint.files)
    ):
        return load_snapshot_from_store(uri, store)
    root = store.table_root_key
    parts = _checkpoint_parts(store, segment)
    try:
        head = _checkpoint_head(segment, parts)
    except InvalidCheckpointError:
        # the snapshot reader rebuilds the version without it, or refuses
        return load_snapshot_from_store(uri, store)
    commits = read_commits(store, segment.commits)
    head = apply_commits(
        head,
        [
            (c.require_version(), [a for a in actions if not isinstance(a, (AddFile, RemoveFile))])
            for c, actions in zip(segment.commits, commits, strict=True)
        ],
    )
    if head.protocol is None:
        raise MissingProtocolError(f"no protocol action found replaying {uri} to v{head.version}")
    if head.metadata is None:
        raise MissingMetadataError(f"no metadata action found replaying {uri} to v{head.version}")
    ensure_readable(head.protocol)
    ensure_catalog_access(head.protocol, table_uri=uri, through_catalog=False)
    configuration = TableConfiguration(head.protocol, head.metadata)
    live = _concat_rows([p.table for p in parts], "add", LIVE_SCHEMA)
    tombstones = _concat_rows([p.table for p in parts], "remove", TOMBSTONE_SCHEMA)
    live, tombstones = _apply_commits(live, tombstones, commits, root)
    return VacuumLogView(segment.version, configuration, live, tombstones)


def _leaves(schema: pa.Schema, action: str) -> list[str]:
    """The leaves VACUUM reads of ``action``; none when the part has no such
    column (all null in that part), :class:`CorruptLogError` when the column
    is not a struct (read as "no files", VACUUM would delete live ones)."""
    if action not in schema.names:
        return []
    if not pa.types.is_struct(schema.field(action).type):
        raise CorruptLogError(f"the checkpoint column {action!r} is not a struct")
    struct = schema.field(action).type
    present = {struct.field(i).name for i in range(struct.num_fields)}
    out: list[str] = []
    for leaf in _LEAVES[action]:
        if leaf not in present:
            continue
        if leaf == "deletionVector":
            dv = struct.field(leaf).type
            dv_present = {dv.field(i).name for i in range(dv.num_fields)}
            out.extend(f"{action}.{leaf}.{f.name}" for f in DV_FIELDS if f.name in dv_present)
        else:
            out.append(f"{action}.{leaf}")
    return out


@dataclass(frozen=True)
class _Part:
    """The columns VACUUM reads from one checkpoint part or sidecar."""

    table: pa.Table
    sidecars: list[str]
    columns: frozenset[str] = frozenset()
    """The top-level columns the file has."""


def _read_part(store: LogStore, path: str, *, top_level: bool) -> _Part:
    """The file-action leaves (and, in a top-level part, ``protocol``,
    ``metaData`` and the sidecar paths) of one parquet file, in one read."""
    try:
        parquet = store.open_parquet(path, memory_map=True)
        schema = parquet.schema_arrow
        columns = _leaves(schema, "add") + _leaves(schema, "remove")
        sidecar = top_level and "sidecar" in schema.names
        if sidecar:
            columns.append("sidecar.path")
        if top_level:
            columns += [name for name in HEAD_COLUMNS if name in schema.names]
        table = parquet.read(columns=columns, use_threads=True)
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException) as exc:
        raise CorruptLogError(f"cannot read checkpoint file {path}: {exc}") from exc
    sidecars: list[str] = []
    if sidecar:
        names = pc.drop_null(pc.struct_field(table.column("sidecar"), "path")).to_pylist()
        sidecars = [
            sidecar_path(
                store, Sidecar.model_validate({"path": n, "sizeInBytes": 0, "modificationTime": 0})
            )
            for n in names
        ]
    return _Part(table, sidecars, frozenset(schema.names))


def _checkpoint_parts(store: LogStore, segment: LogSegment) -> list[_Part]:
    """Every parquet part of the segment's checkpoint, then every sidecar they name."""
    if segment.checkpoint is None:
        return []
    files = segment.checkpoint.files
    paths = [store.path_of(p.name) for p in files]
    if len(paths) == 1:  # a classic checkpoint: no thread to start
        part = _read_part(store, paths[0], top_level=True)
        if not part.sidecars:
            require_add_column(files, [part.columns], names_sidecars=False)
            return [part]
    with ThreadPoolExecutor(max_workers=8) as pool:
        parts = list(pool.map(lambda p: _read_part(store, p, top_level=True), paths))
        sidecars = [s for part in parts for s in part.sidecars]
        require_add_column(files, [p.columns for p in parts], names_sidecars=bool(sidecars))

        def read_sidecar(path: str) -> _Part:
            try:
                return _read_part(store, path, top_level=False)
            except FileNotFoundError as exc:
                raise CorruptLogError(f"sidecar file missing: {path}") from exc

        return parts + list(pool.map(read_sidecar, sidecars))


def _checkpoint_head(segment: LogSegment, parts: Sequence[_Part]) -> TableState:
    """The checkpoint's ``protocol`` and ``metaData`` (the rest of its non-file
    state, transactions and domains, VACUUM does not use);
    :class:`InvalidCheckpointError` when the checkpoint breaks its spec."""
    if segment.checkpoint is None:
        return TableState()
    contents = CheckpointContents()
    for part in parts:
        present = [name for name in HEAD_COLUMNS if name in part.table.column_names]
        if present:
            contents.add_parquet_table(part.table.select(present))
    contents.check_one_protocol_and_metadata()
    check_checkpoint_spec(
        segment.checkpoint,
        contents.non_file_actions,
        names_sidecars=any(part.sidecars for part in parts),
    )
    return state_from_checkpoint(
        segment.checkpoint.version,
        contents.non_file_actions,
        ADD_SCHEMA.empty_table(),
        REMOVE_SCHEMA.empty_table(),
    )


def _concat_rows(tables: Sequence[pa.Table], action: str, schema: pa.Schema) -> pa.Table:
    rows = [_rows(table, action, schema) for table in tables]
    return pa.concat_tables(rows) if rows else schema.empty_table()


def _rows(table: pa.Table, action: str, schema: pa.Schema) -> pa.Table:
    """The non-null ``action`` rows of a checkpoint table, in ``schema`` (none
    when the part has no ``action`` column: it is all null there)."""
    if action not in table.column_names:
        return schema.empty_table()
    chunked = table.column(action)
    column = chunked.chunk(0) if chunked.num_chunks == 1 else chunked.combine_chunks()
    arrays = []
    for field in schema:  # flat columns first: filtering them is cheaper than the struct
        if column.type.get_field_index(field.name) < 0:
            arrays.append(pa.nulls(len(column), field.type))
            continue
        value = column.field(field.name)
        if field.name == "deletionVector":
            if value.null_count == len(value):
                arrays.append(pa.nulls(len(value), field.type))
                continue
            value = _dv_struct(value)
        arrays.append(value.cast(field.type))
    flat = pa.table(arrays, schema=schema)
    # A row whose action is null holds no action, whatever its children say: a
    # required child (``path``) under a null struct reads back as "" (deltalake's
    # checkpoints), which must not stand for a live file or a tombstone.
    present = pc.is_valid(column)
    return flat.filter(pc.and_(present, pc.is_valid(flat.column("path"))))


def _dv_struct(value: pa.Array) -> pa.Array:
    children = []
    for field in DV_FIELDS:
        index = value.type.get_field_index(field.name)
        child = value.field(index) if index >= 0 else pa.nulls(len(value), field.type)
        children.append(child.cast(field.type))
    return pa.StructArray.from_arrays(children, fields=list(DV_FIELDS), mask=pc.is_null(value))


def _keys(table: pa.Table, root: str) -> pa.Array:
    """``canonical path`` + NUL + ``DV unique id`` of every row (a file's key)."""
    paths = canonical_paths(table.column("path").combine_chunks(), root)
    dv_ids = pc.fill_null(dv_unique_ids(table.column("deletionVector")), "")
    return pc.binary_join_element_wise(paths, dv_ids, "\x00")


def _apply_commits(
    live: pa.Table, tombstones: pa.Table, commits: Sequence[list[Any]], root: str
) -> tuple[pa.Table, pa.Table]:
    """Replay the file actions of ``commits`` (in order) over the checkpoint's rows."""
    last: dict[str, AddFile | RemoveFile] = {}
    for actions in commits:
        for action in actions:
            if isinstance(action, (AddFile, RemoveFile)):
                key = f"{canonical_path(action.path, root)}\x00{action.dv_unique_id or ''}"
                last.pop(key, None)  # keep the order of the last action
                last[key] = action
    if not last:
        return live, tombstones
    touched = pa.array(list(last), pa.string())
    live = live.filter(pc.invert(pc.is_in(_keys(live, root), value_set=touched)))
    tombstones = tombstones.filter(pc.invert(pc.is_in(_keys(tombstones, root), value_set=touched)))
    adds = [a for a in last.values() if isinstance(a, AddFile)]
    removes = [a for a in last.values() if isinstance(a, RemoveFile)]
    new_live = pa.table(
        [pa.array([a.path for a in adds], pa.string()), _dv_array(adds)], schema=LIVE_SCHEMA
    )
    new_tombstones = pa.table(
        [
            pa.array([r.path for r in removes], pa.string()),
            pa.array([r.deletion_timestamp for r in removes], pa.int64()),
            pa.array([r.size for r in removes], pa.int64()),
            _dv_array(removes),
        ],
        schema=TOMBSTONE_SCHEMA,
    )
    return pa.concat_tables([live, new_live]), pa.concat_tables([tombstones, new_tombstones])


def _dv_array(actions: Sequence[AddFile | RemoveFile]) -> pa.Array:
    rows = []
    for action in actions:
        dv = action.deletion_vector
        rows.append(
            None
            if dv is None
            else {
                "storageType": dv.storage_type,
                "pathOrInlineDv": dv.path_or_inline_dv,
                "offset": dv.offset,
            }
        )
    return pa.array(rows, DV_FIELDS)


# --- what the log protects, and what it lets VACUUM delete ------------------------------------


@dataclass
class LogPaths:
    """What the log protects from VACUUM, and which of its files VACUUM may delete."""

    protected_paths: pa.ChunkedArray = dataclass_field(
        default_factory=lambda: pa.chunked_array([], pa.string())
    )
    """Root-relative paths of live files, unexpired tombstones and their DVs."""
    expired: pa.Table = dataclass_field(default_factory=lambda: CANDIDATES_SCHEMA.empty_table())
    """Expired tombstones' files and DVs that may be deleted: ``path``, ``size``
    (as the log records it; null when it does not)."""
    ignored: dict[str, str] = dataclass_field(default_factory=dict)
    expired_unique: bool = False
    """Whether ``expired`` holds each path once (plain paths of tombstones without
    deletion vectors: one row per path in a reconciled state)."""

    @cached_property
    def protected(self) -> frozenset[str]:
        return frozenset(self.protected_paths.to_pylist())


def values_may_match(
    paths: pa.ChunkedArray | pa.Array,
    *,
    anywhere: tuple[bytes, ...],
    after_slash: re.Pattern[bytes],
    starts: tuple[str, ...],
) -> bool:
    """False only if no value contains a byte of ``anywhere`` or a match of
    ``after_slash``, and none starts with one of ``starts``: a few scans of the
    values' bytes at ``memchr`` speed instead of a regex per row. (Bytes
    straddling two values can only raise a false alarm.)"""
    arrays = paths.chunks if isinstance(paths, pa.ChunkedArray) else [paths]
    for array in arrays:
        if array.null_count == len(array):
            continue
        data = string_values_bytes(array)
        if data is None or any(byte in data for byte in anywhere):
            return True
        if after_slash.search(data) is not None:
            return True
        if any(pc.any(pc.starts_with(array, prefix)).as_py() for prefix in starts):
            return True
    return False


def _split_rows(table: pa.Table) -> tuple[pa.Table, pa.Table]:
    """``(rows with plain relative paths, rows whose paths need the full resolver)``;
    rows without a path are in neither. No copy when every path is plain."""
    column = table.column("path")
    if not values_may_match(
        column, anywhere=_ODD_BYTES, after_slash=_ODD_AFTER_SLASH, starts=("/", ".")
    ):
        plain = table if column.null_count == 0 else table.filter(pc.is_valid(column))
        return plain, table.slice(0, 0)
    hard = pc.fill_null(pc.match_substring_regex(column, _NEEDS_RESOLVING), False)
    easy = pc.and_(pc.is_valid(column), pc.invert(hard))
    return table.filter(easy), table.filter(hard)


def _split_by_age(removes: pa.Table, cutoff_ms: int) -> tuple[pa.Table, pa.Table]:
    """``(unexpired, expired)`` tombstones (no deletion time counts as expired); no
    copy when all are on one side."""
    stamps = pc.fill_null(removes.column("deletionTimestamp"), 0)
    expired = pc.less(stamps, pa.scalar(cutoff_ms, pa.int64()))
    count = pc.sum(expired).as_py() or 0
    if count == removes.num_rows:
        return removes.slice(0, 0), removes
    if count == 0:
        return removes, removes.slice(0, 0)
    return removes.filter(pc.invert(expired)), removes.filter(expired)


def _string_chunks(columns: list[pa.ChunkedArray | pa.Array]) -> pa.ChunkedArray:
    """One chunked string array of the values of ``columns`` (no copy of string chunks)."""
    chunks: list[pa.Array] = []
    for column in columns:
        for chunk in column.chunks if isinstance(column, pa.ChunkedArray) else [column]:
            if len(chunk):
                chunks.append(chunk if chunk.type == pa.string() else chunk.cast(pa.string()))
    return pa.chunked_array(chunks, type=pa.string())


def _dv_paths(table: pa.Table) -> list[str]:
    """The file paths of the non-inline deletion vectors in a file-action table."""
    if "deletionVector" not in table.column_names or table.num_rows == 0:
        return []
    column = table.column("deletionVector")
    if column.null_count == len(column):
        return []
    present = pc.drop_null(column)
    storage_types = pc.struct_field(present, "storageType").to_pylist()
    payloads = pc.struct_field(present, "pathOrInlineDv").to_pylist()
    out = []
    for storage_type, payload in zip(storage_types, payloads, strict=True):
        if storage_type is None or payload is None:
            continue
        path = dv_file_path(storage_type, payload)
        if path is not None:
            out.append(path)
    return out


def log_paths(snapshot: Snapshot | VacuumLogView, root: TableRoot, *, cutoff_ms: int) -> LogPaths:
    """Protected relative paths, and the expired tombstones' files (and DVs).

    Plain relative paths (no escapes, no scheme, no dot segments: what writers
    normally produce) are taken as they are, column-wise; the others go
    through :func:`raydelta.protocol.cleanup_rules.resolve_path` one by one.
    """
    unexpired, expired = _split_by_age(snapshot.all_tombstones, cutoff_ms)
    protected: list[pa.ChunkedArray | pa.Array] = []
    extra: list[str] = []
    for table in (snapshot.files, unexpired):
        easy_rows, hard_rows = _split_rows(table)
        protected.append(easy_rows.column("path"))
        for raw in hard_rows.column("path").to_pylist() + _dv_paths(table):
            relative = resolve_path(raw, root).relative
            if relative is not None:
                extra.append(relative)
    protected.append(pa.array(extra, pa.string()))
    ignored: dict[str, str] = {}
    easy_rows, hard_rows = _split_rows(expired)
    deletable: list[str] = []
    deletable_sizes: list[int | None] = []
    dv_paths = _dv_paths(expired)
    for raw, size in zip(
        hard_rows.column("path").to_pylist() + dv_paths,
        hard_rows.column("size").to_pylist() + [None] * len(dv_paths),
        strict=True,
    ):
        resolved = resolve_path(raw, root)
        if resolved.deletable and resolved.relative is not None:
            deletable.append(resolved.relative)
            deletable_sizes.append(size)  # a DV file's size is not in the log
        else:
            ignored.setdefault(raw, resolved.issue or "unresolvable")
    candidates = pa.concat_tables(
        [
            pa.table(
                [easy_rows.column("path"), pc.cast(easy_rows.column("size"), pa.int64())],
                schema=CANDIDATES_SCHEMA,
            ),
            pa.table(
                [pa.array(deletable, pa.string()), pa.array(deletable_sizes, pa.int64())],
                schema=CANDIDATES_SCHEMA,
            ),
        ]
    )
    unique = not deletable and not ignored and _no_dvs(expired)
    return LogPaths(_string_chunks(protected), candidates, ignored, unique)


def _no_dvs(table: pa.Table) -> bool:
    if "deletionVector" not in table.column_names:
        return True
    column = table.column("deletionVector")
    return bool(column.null_count == len(column))
