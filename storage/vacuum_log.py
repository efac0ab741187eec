"""What VACUUM needs from the log, read without loading a snapshot.

VACUUM decides with four columns per file action: ``path`` and
``deletionVector`` of the live files, plus ``deletionTimestamp`` and
``size`` of the tombstones. :func:`load_vacuum_view` reads only those
leaves from the checkpoint (parquet parts and their sidecars: no stats, no
partition values, no per-file Python object) and reconciles the commits
after it, so opening a 1M-file table for VACUUM costs a few column reads
instead of a full snapshot.

Invariants:
- The result reconciles exactly as a snapshot does: an action on a file
  key ``(canonical path, DV unique id)`` in a later commit replaces the
  checkpoint's row of that key (the spec's "last action wins"), and the
  non-file state (protocol, metadata) is replayed from the same segment.
- Nothing unusual takes the fast path: JSON checkpoint parts, log
  compaction files and catalog-managed tables are read through
  :func:`raydelta.storage.snapshot.load_snapshot_from_store` (the same
  errors, the same result), which a :class:`VacuumLogView` stands in for.
- Nothing is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raydelta.protocol.actions import AddFile, RemoveFile, Sidecar
from raydelta.protocol.catalog_managed import ensure_catalog_access
from raydelta.protocol.checkpoint_plan import canonical_paths, dv_unique_ids
from raydelta.protocol.errors import (
    CorruptLogError,
    MissingMetadataError,
    MissingProtocolError,
    TableNotFoundError,
)
from raydelta.protocol.file_actions import canonical_path
from raydelta.protocol.file_names import LogFileKind
from raydelta.protocol.log_segment import LogSegment, build_log_segment
from raydelta.protocol.reconciliation import TableState, apply_commits
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.protocol.table_features import ensure_readable
from raydelta.storage.data_files import table_root_key_of
from raydelta.storage.log_reader import (
    checkpoint_head,
    read_commits,
    read_last_checkpoint,
    sidecar_path,
)
from raydelta.storage.log_store import LogStore
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
    root = table_root_key_of(store.fs, store.table_root)
    head = (
        checkpoint_head(store, checkpoint.version, checkpoint.files)
        if checkpoint is not None
        else TableState()
    )
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
    live, tombstones = _checkpoint_file_columns(store, segment)
    live, tombstones = _apply_commits(live, tombstones, commits, root)
    return VacuumLogView(segment.version, configuration, live, tombstones)


def _leaves(schema: pa.Schema, action: str) -> list[str]:
    if action not in schema.names or not pa.types.is_struct(schema.field(action).type):
        return []
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


def _read_part(
    store: LogStore, path: str, *, top_level: bool
) -> tuple[pa.Table, pa.Table, list[str]]:
    """``(live rows, tombstone rows, sidecar paths)`` of one parquet file."""
    try:
        handle: Any = path if store.on_local_disk else store.fs.open(path, "rb")
        parquet = pq.ParquetFile(handle, memory_map=store.on_local_disk)
        schema = parquet.schema_arrow
        columns = _leaves(schema, "add") + _leaves(schema, "remove")
        sidecar = top_level and "sidecar" in schema.names
        if sidecar:
            columns.append("sidecar.path")
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
    return _rows(table, "add", LIVE_SCHEMA), _rows(table, "remove", TOMBSTONE_SCHEMA), sidecars


def _rows(table: pa.Table, action: str, schema: pa.Schema) -> pa.Table:
    """The non-null ``action`` rows of a checkpoint table, in ``schema``."""
    if action not in table.column_names:
        return schema.empty_table()
    column = table.column(action).combine_chunks()
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
    return flat.filter(pc.is_valid(flat.column("path")))


def _dv_struct(value: pa.Array) -> pa.Array:
    children = []
    for field in DV_FIELDS:
        index = value.type.get_field_index(field.name)
        child = value.field(index) if index >= 0 else pa.nulls(len(value), field.type)
        children.append(child.cast(field.type))
    return pa.StructArray.from_arrays(children, fields=list(DV_FIELDS), mask=pc.is_null(value))


def _checkpoint_file_columns(store: LogStore, segment: LogSegment) -> tuple[pa.Table, pa.Table]:
    if segment.checkpoint is None:
        return LIVE_SCHEMA.empty_table(), TOMBSTONE_SCHEMA.empty_table()
    paths = [store.path_of(p.name) for p in segment.checkpoint.files]
    with ThreadPoolExecutor(max_workers=8) as pool:
        parts = list(pool.map(lambda p: _read_part(store, p, top_level=True), paths))
        sidecars = [s for _, _, found in parts for s in found]

        def read_sidecar(path: str) -> tuple[pa.Table, pa.Table, list[str]]:
            try:
                return _read_part(store, path, top_level=False)
            except FileNotFoundError as exc:
                raise CorruptLogError(f"sidecar file missing: {path}") from exc

        parts += list(pool.map(read_sidecar, sidecars))
    live = pa.concat_tables([p[0] for p in parts])
    tombstones = pa.concat_tables([p[1] for p in parts])
    return live, tombstones


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
