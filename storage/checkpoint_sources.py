"""Where a new checkpoint's rows come from, read a hash partition at a time.

A checkpoint of version ``v`` is the previous checkpoint (version ``p``,
possibly none) plus the commits ``p+1 .. v``. This module splits that work
so that no process ever holds the whole table:

- :func:`read_log_delta` (the driver): the non-file state at ``v``
  (protocol, metadata, txns, domains: from the previous checkpoint's
  non-file columns or top-level file, then the commits) and the newest
  file action of every logical file the commits touched. Only the file
  actions committed since ``p`` are held; the previous checkpoint's file
  actions are never read here.
- :class:`PreviousCheckpoint`: how the previous checkpoint's file actions
  are stored. When it is a V2 checkpoint whose sidecars carry shard tags
  for the hash and shard count in use, shard ``s`` is read from its own
  sidecar(s) only (:meth:`PreviousCheckpoint.aligned_sidecars`); otherwise
  its files are cut into :class:`SourcePiece`s (row groups) that map tasks
  read and split by shard (:func:`partition_rows`).
- :func:`merge_shard_rows`: a shard's rows = its previous rows minus every
  key the commits touched, plus the commits' newest actions, minus the
  tombstones older than the retention cutoff.
- Incremental checkpoints (:func:`plan_aligned`): each shard sidecar's
  parquet footer indexes the fingerprints of its keys
  (:func:`fingerprint_footer`), so the driver learns from footers alone
  which shards a commit touches; actions on keys held by no sidecar go to
  one overflow sidecar instead of rewriting a 50,000-action shard.
- :func:`write_v1_streaming`: a classic single-file V1 checkpoint written
  piece by piece (one row group per piece), so the writer holds one piece
  of decoded rows and the compressed output, never the whole table decoded.
- :func:`write_log_compaction`: ``<x>.<y>.compacted.json`` for a commit range.

Invariants:
- Every logical file of a V2 checkpoint is in exactly one sidecar: its
  shard's sidecar or the overflow sidecar. A fingerprint match can only
  cause an unneeded rewrite, never a missed one: a sidecar without an index
  is treated as holding every key.
- A logical file (``(path, deletionVector.uniqueId)``) the commits touched
  appears in the result exactly as its newest committed action says (or
  not at all for an expired tombstone); every other row of the previous
  checkpoint is kept as it is, except expired tombstones.
- Rows are canonical (:mod:`raydelta.protocol.file_actions`) everywhere in between.
- Nothing here writes ``_last_checkpoint``: callers do, last.
"""

from __future__ import annotations

import base64
import json
import resource
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raydelta.protocol.actions import (
    Action,
    AddFile,
    CheckpointMetadata,
    CommitInfo,
    RemoveFile,
    Sidecar,
    parse_actions,
    serialize_actions,
)
from raydelta.protocol.checkpoint_plan import (
    SHARD_HASH,
    TAG_LAYOUT,
    TAG_MIN_DELETION_TIMESTAMP,
    TAG_NUM_SHARDS,
    TAG_SHARD,
    TAG_SHARD_HASH,
    checkpoint_view,
    key_strings,
    non_file_actions,
    shard_hash,
    shard_of,
    shard_tags,
    sidecar_counts,
    sidecar_shard,
    split_by_shard_ids,
    table_configuration,
)
from raydelta.protocol.checkpoint_schema import CheckpointLayout, assemble_rows, non_file_rows
from raydelta.protocol.errors import FileAlreadyExistsError, VersionNotFoundError
from raydelta.protocol.file_actions import (
    ADD_SCHEMA,
    REMOVE_SCHEMA,
    FileKey,
    conform_table,
    table_keys,
)
from raydelta.protocol.file_names import (
    LAST_CHECKPOINT_NAME,
    LogFileKind,
    classic_checkpoint_name,
    commit_name,
    compaction_name,
)
from raydelta.protocol.last_checkpoint import LastCheckpointInfo, parse_last_checkpoint
from raydelta.protocol.log_segment import CheckpointRef, build_log_segment
from raydelta.protocol.reconciliation import TableState, apply_commits, fold_actions
from raydelta.storage.checkpoint_writer import parquet_write_options
from raydelta.storage.log_reader import (
    NON_FILE_COLUMNS,
    CheckpointContents,
    _parquet_columns,
    read_commits,
    read_rows_of_columns,
    sidecar_path,
)
from raydelta.storage.log_store import LogStore

ROWS_PER_PIECE = 250_000
"""Row groups of one previous-checkpoint file are grouped into pieces of about this many rows."""

TAG_OVERFLOW = "raydelta.overflow"
"""``"true"`` on the overflow sidecar (see :func:`plan_aligned`)."""
TAG_OVERFLOW_SHARDS = "raydelta.overflowShards"
"""Comma-separated shards the overflow sidecar holds rows of."""
FOOTER_KEY_FINGERPRINTS = "raydelta.keyFingerprints"
"""Parquet footer key of a shard sidecar: base64 of the little-endian ``uint32``
fingerprints (:func:`key_fingerprints`) of every row's key."""
FOOTER_FINGERPRINT_HASH = "raydelta.keyFingerprintHash"
FINGERPRINT_COLUMN = "_fingerprint"
"""Extra column carried with rows between tasks (never written to a sidecar)."""


# --- the previous checkpoint ------------------------------------------------------------


@dataclass(frozen=True)
class SourcePiece:
    """Part of the previous checkpoint's file actions, read by one task.

    ``path`` is a filesystem path (as the store's filesystem names it);
    ``row_groups`` None means the whole file. A ``json`` piece is a V2
    top-level JSON file that embeds its file actions.
    """

    path: str
    format: str = "parquet"
    row_groups: tuple[int, ...] | None = None
    num_rows: int = -1


@dataclass(frozen=True)
class AlignedSidecars:
    """A V2 checkpoint's sidecars by shard, and its overflow sidecar if any."""

    base: dict[int, Sidecar]
    overflow: Sidecar | None = None

    @property
    def overflow_shards(self) -> frozenset[int]:
        return overflow_shards(self.overflow) if self.overflow is not None else frozenset()


def is_overflow(sidecar: Sidecar, num_shards: int, *, hash_name: str = SHARD_HASH) -> bool:
    """An overflow sidecar written for ``num_shards`` shards by ``hash_name``."""
    tags = sidecar.tags or {}
    return (
        tags.get(TAG_OVERFLOW) == "true"
        and tags.get(TAG_SHARD_HASH) == hash_name
        and tags.get(TAG_NUM_SHARDS) == str(num_shards)
        and sidecar_counts(sidecar) is not None
    )


def overflow_shards(sidecar: Sidecar) -> frozenset[int]:
    """The shards an overflow sidecar holds rows of (from its tags)."""
    text = (sidecar.tags or {}).get(TAG_OVERFLOW_SHARDS) or ""
    return frozenset(int(part) for part in text.split(",") if part)


@dataclass(frozen=True)
class PreviousCheckpoint:
    """The checkpoint a new one starts from (see the module docstring)."""

    version: int
    kind: LogFileKind
    paths: tuple[str, ...]
    """Filesystem paths of its top-level file(s)."""
    v2: bool
    """It follows the V2 spec (has ``checkpointMetadata``)."""
    sidecars: tuple[Sidecar, ...] = ()
    embedded_file_actions: bool = False
    """Its file actions are in its top-level file(s): always for V1, and for a
    V2 checkpoint without sidecars."""

    def aligned_sidecars(
        self, num_shards: int, *, hash_name: str = SHARD_HASH
    ) -> AlignedSidecars | None:
        """Its sidecars by shard when every file action lives in one sidecar per
        shard (sharded by ``hash_name`` into ``num_shards``) or in one overflow
        sidecar of the same sharding; None otherwise (read it with map tasks)."""
        if not self.v2 or self.embedded_file_actions:
            return None
        by_shard: dict[int, Sidecar] = {}
        overflow: Sidecar | None = None
        for sidecar in self.sidecars:
            if is_overflow(sidecar, num_shards, hash_name=hash_name):
                if overflow is not None:
                    return None
                overflow = sidecar
                continue
            located = sidecar_shard(sidecar, hash_name=hash_name)
            if located is None or located[1] != num_shards or located[0] in by_shard:
                return None
            by_shard[located[0]] = sidecar
        return AlignedSidecars(by_shard, overflow)

    def previous_num_shards(self, *, hash_name: str = SHARD_HASH) -> int | None:
        """The shard count its sidecars were written with, if they agree on one."""
        counts = {
            located[1]
            for located in (sidecar_shard(s, hash_name=hash_name) for s in self.sidecars)
            if located is not None
        }
        for sidecar in self.sidecars:
            tags = sidecar.tags or {}
            if tags.get(TAG_OVERFLOW) == "true" and tags.get(TAG_SHARD_HASH) == hash_name:
                try:
                    counts.add(int(tags.get(TAG_NUM_SHARDS) or ""))
                except ValueError:
                    return None
        return counts.pop() if len(counts) == 1 else None


@dataclass(frozen=True)
class LogDelta:
    """What a checkpoint driver holds: everything but the previous checkpoint's files.

    ``head`` is the state at ``version`` without file actions (protocol,
    metadata, txns, domains). ``adds`` / ``removes`` are the newest action of
    each logical file the commits after ``previous`` touched (canonical
    rows, unique keys, no key in both).
    """

    version: int
    head: TableState
    adds: pa.Table
    removes: pa.Table
    previous: PreviousCheckpoint | None
    num_commits: int
    commit_versions: tuple[int, ...] = field(default=(), repr=False)

    @property
    def touched_keys(self) -> set[FileKey]:
        return set(table_keys(self.adds)) | set(table_keys(self.removes))

    def touched_key_strings(self) -> pa.Array:
        """Key strings (:func:`raydelta.protocol.checkpoint_plan.key_strings`) of touched files."""
        parts = [key_strings(t) for t in (self.adds, self.removes) if t.num_rows]
        if not parts:
            return pa.array([], type=pa.string())
        return pc.unique(pa.concat_arrays([p.cast(pa.string()) for p in parts]))


def _read_last_checkpoint(store: LogStore) -> LastCheckpointInfo | None:
    try:
        return parse_last_checkpoint(store.read(LAST_CHECKPOINT_NAME))
    except FileNotFoundError:
        return None


def _parquet_has_rows(path: str, store: LogStore, column: str) -> bool:
    """Whether a parquet file has a non-null row in struct column ``column``."""
    with store.fs.open(path, "rb") as handle:
        parquet = pq.ParquetFile(handle)
        if column not in parquet.schema_arrow.names:
            return False
        table = parquet.read(columns=[f"{column}.path"])
    return bool(table.num_rows) and table.column(0).null_count < table.num_rows


def _describe_checkpoint(
    store: LogStore, ref: CheckpointRef
) -> tuple[PreviousCheckpoint, list[Action]]:
    """The previous checkpoint's storage description and its non-file actions."""
    paths = tuple(store.path_of(f.name) for f in ref.files)
    contents = CheckpointContents()
    embedded = False
    for file, path in zip(ref.files, paths, strict=True):
        if file.name.endswith(".json"):
            actions = parse_actions(store.read(file.name))
            embedded = embedded or any(isinstance(a, (AddFile, RemoveFile)) for a in actions)
            contents.add_json_actions(
                [a for a in actions if not isinstance(a, (AddFile, RemoveFile))]
            )
        else:
            contents.add_parquet_table(
                read_rows_of_columns(store, path, (*NON_FILE_COLUMNS, "sidecar"))
            )
    actions = contents.non_file_actions
    v2 = any(isinstance(a, CheckpointMetadata) for a in actions)
    if v2 and not embedded:
        for file, path in zip(ref.files, paths, strict=True):
            if file.name.endswith(".parquet") and (
                _parquet_has_rows(path, store, "add") or _parquet_has_rows(path, store, "remove")
            ):
                embedded = True
    previous = PreviousCheckpoint(
        version=ref.version,
        kind=ref.kind,
        paths=paths,
        v2=v2,
        sidecars=tuple(contents.sidecars),
        embedded_file_actions=embedded or not v2,
    )
    return previous, actions


def read_log_delta(store: LogStore, version: int | None = None) -> LogDelta:
    """The driver's view of the checkpoint of ``version`` (latest published when None).

    Reads one listing, ``_last_checkpoint``, the previous checkpoint's
    non-file rows only, and the commits (or compactions) after it.
    """
    listing = store.list_from(0)
    segment = build_log_segment(
        listing, target_version=version, last_checkpoint_hint=_read_last_checkpoint(store)
    )
    base = TableState()
    previous: PreviousCheckpoint | None = None
    if segment.checkpoint is not None:
        previous, non_file = _describe_checkpoint(store, segment.checkpoint)
        base = apply_commits(TableState(version=previous.version), [(previous.version, non_file)])
    units = segment.replay_units()
    batches = []
    for unit, actions in zip(units, read_commits(store, units), strict=True):
        end = unit.end_version if unit.end_version is not None else unit.require_version()
        batches.append((end, actions))
    state = apply_commits(base, batches)
    if state.version != segment.version:
        raise VersionNotFoundError(f"cannot rebuild version {segment.version} of the table")
    head = replace(state, adds=ADD_SCHEMA.empty_table(), removes=REMOVE_SCHEMA.empty_table())
    return LogDelta(
        version=segment.version,
        head=head,
        adds=state.adds,
        removes=state.removes,
        previous=previous,
        num_commits=len(segment.commits),
        commit_versions=tuple(segment.commit_versions),
    )


def checkpoint_pieces(
    store: LogStore,
    previous: PreviousCheckpoint,
    *,
    rows_per_piece: int = ROWS_PER_PIECE,
) -> list[SourcePiece]:
    """Every file action of ``previous``, cut into pieces of about ``rows_per_piece``."""
    pieces: list[SourcePiece] = []
    if previous.v2 and not previous.embedded_file_actions:
        for sidecar in previous.sidecars:
            pieces.append(SourcePiece(sidecar_path(store, sidecar)))
        return pieces
    for path in previous.paths:
        if path.endswith(".json"):
            pieces.append(SourcePiece(path, format="json"))
            continue
        with store.fs.open(path, "rb") as handle:
            metadata = pq.ParquetFile(handle).metadata
        group: list[int] = []
        rows = 0
        for index in range(metadata.num_row_groups):
            group.append(index)
            rows += metadata.row_group(index).num_rows
            if rows >= rows_per_piece:
                pieces.append(SourcePiece(path, row_groups=tuple(group), num_rows=rows))
                group, rows = [], 0
        if group:
            pieces.append(SourcePiece(path, row_groups=tuple(group), num_rows=rows))
    return pieces


def estimated_file_actions(store: LogStore, previous: PreviousCheckpoint | None) -> int:
    """About how many file actions the previous checkpoint holds (from tags or footers)."""
    if previous is None:
        return 0
    total = 0
    if previous.v2 and not previous.embedded_file_actions:
        for sidecar in previous.sidecars:
            tags = sidecar.tags or {}
            try:
                total += int(tags.get("raydelta.numAdds") or "") + int(
                    tags.get("raydelta.numRemoves") or ""
                )
            except ValueError:
                with store.fs.open(sidecar_path(store, sidecar), "rb") as handle:
                    total += pq.ParquetFile(handle).metadata.num_rows
        return total
    for path in previous.paths:
        if path.endswith(".json"):
            total += max(0, int(store.fs.info(path).get("size") or 0) // 500)
            continue
        with store.fs.open(path, "rb") as handle:
            total += pq.ParquetFile(handle).metadata.num_rows
    return total


# --- reading and merging rows ----------------------------------------------------------------


def read_file_actions(
    store: LogStore,
    piece: SourcePiece,
    *,
    use_threads: bool = False,
    with_fingerprints: bool = False,
) -> tuple[pa.Table, pa.Table]:
    """The canonical ``(adds, removes)`` of one piece.

    Single-threaded by default: a piece is one task's work and a task holds
    one CPU; parallelism comes from running tasks side by side. With
    ``with_fingerprints``, a whole shard sidecar whose footer indexes its
    keys (:func:`fingerprint_footer`: adds then removes, in file order) comes
    with its :data:`FINGERPRINT_COLUMN`, so its keys need not be hashed again.
    """
    contents = CheckpointContents()
    footer: dict[bytes, bytes] = {}
    if piece.format == "json":
        with store.fs.open(piece.path, "rb") as handle:
            actions = parse_actions(handle.read())
        contents.add_json_actions([a for a in actions if isinstance(a, (AddFile, RemoveFile))])
    else:
        with store.fs.open(piece.path, "rb") as handle:
            parquet = pq.ParquetFile(handle)
            columns = _parquet_columns(parquet.schema_arrow, ("add", "remove"))
            if piece.row_groups is None:
                table = parquet.read(columns=columns, use_threads=use_threads)
                footer = parquet.metadata.metadata or {}
            else:
                table = parquet.read_row_groups(
                    list(piece.row_groups), columns=columns, use_threads=use_threads
                )
        contents.add_parquet_table(table)
    adds = pa.concat_tables(contents.adds) if contents.adds else ADD_SCHEMA.empty_table()
    removes = (
        pa.concat_tables(contents.removes) if contents.removes else REMOVE_SCHEMA.empty_table()
    )
    if with_fingerprints and footer.get(FOOTER_FINGERPRINT_HASH.encode()) == SHARD_HASH.encode():
        text = footer.get(FOOTER_KEY_FINGERPRINTS.encode())
        try:
            index = decode_fingerprints(text.decode("ascii")) if text is not None else None
        except ValueError:
            index = None
        if index is not None and len(index) == adds.num_rows + removes.num_rows:
            adds = adds.append_column(FINGERPRINT_COLUMN, index.slice(0, adds.num_rows))
            removes = removes.append_column(FINGERPRINT_COLUMN, index.slice(adds.num_rows))
    return adds, removes


def drop_keys(table: pa.Table, keys: pa.Array) -> pa.Table:
    """Rows of a canonical table whose key string is not in ``keys``."""
    if table.num_rows == 0 or len(keys) == 0:
        return table
    hit = pc.is_in(key_strings(table), value_set=keys.cast(pa.string()))
    if not pc.any(hit).as_py():
        return table
    return table.filter(pc.invert(hit))


def drop_expired_tombstones(removes: pa.Table, cutoff_ms: int) -> pa.Table:
    """Tombstones deleted at or after ``cutoff_ms`` (a missing timestamp counts as 0)."""
    if removes.num_rows == 0:
        return removes
    stamps = pc.fill_null(removes.column("deletionTimestamp"), 0)
    keep = pc.greater_equal(stamps, pa.scalar(cutoff_ms, pa.int64()))
    if pc.all(keep).as_py():
        return removes
    return removes.filter(keep)


# --- key fingerprints ------------------------------------------------------------------------

_HIGH_WORD = pa.scalar(32, pa.uint64())


def _fingerprints_of_hashes(hashes: pa.Array) -> pa.Array:
    # the high half: the shard (hash mod n) depends mostly on the low bits
    return pc.shift_right(hashes, _HIGH_WORD).cast(pa.uint32())


def key_fingerprints(table: pa.Table, *, hash_name: str = SHARD_HASH) -> pa.Array:
    """The ``uint32`` fingerprint of each row's key: the high half of its shard hash."""
    if table.num_rows == 0:
        return pa.array([], type=pa.uint32())
    return _fingerprints_of_hashes(shard_hash(key_strings(table), hash_name))


def with_fingerprints(table: pa.Table, *, hash_name: str = SHARD_HASH) -> pa.Table:
    """``table`` with its :data:`FINGERPRINT_COLUMN` (computed unless present)."""
    if FINGERPRINT_COLUMN in table.column_names:
        return table
    return table.append_column(FINGERPRINT_COLUMN, key_fingerprints(table, hash_name=hash_name))


def encode_fingerprints(fingerprints: pa.Array) -> str:
    """Fingerprints as footer text: base64 of their little-endian ``uint32`` bytes."""
    array = (
        fingerprints.combine_chunks() if isinstance(fingerprints, pa.ChunkedArray) else fingerprints
    )
    array = array.cast(pa.uint32())
    if len(array) == 0:
        return ""
    data = array.buffers()[1]
    raw = data.to_pybytes()[array.offset * 4 : (array.offset + len(array)) * 4]
    if sys.byteorder != "little":  # pragma: no cover (Arrow stores native order)
        raw = b"".join(raw[k : k + 4][::-1] for k in range(0, len(raw), 4))
    return base64.b64encode(raw).decode("ascii")


def decode_fingerprints(text: str) -> pa.Array:
    raw = base64.b64decode(text)
    if len(raw) % 4:
        raise ValueError("fingerprint bytes are not whole uint32 values")
    if sys.byteorder != "little":  # pragma: no cover
        raw = b"".join(raw[k : k + 4][::-1] for k in range(0, len(raw), 4))
    return pa.Array.from_buffers(pa.uint32(), len(raw) // 4, [None, pa.py_buffer(raw)])


def fingerprint_footer(adds: pa.Table, removes: pa.Table) -> dict[str, str]:
    """The footer key-value pairs indexing a shard sidecar's keys."""
    parts = [t.column(FINGERPRINT_COLUMN).combine_chunks() for t in (adds, removes) if t.num_rows]
    fingerprints = pa.concat_arrays(parts) if parts else pa.array([], type=pa.uint32())
    return {
        FOOTER_KEY_FINGERPRINTS: encode_fingerprints(fingerprints),
        FOOTER_FINGERPRINT_HASH: SHARD_HASH,
    }


def read_fingerprints(
    store: LogStore, sidecar: Sidecar, *, hash_name: str = SHARD_HASH
) -> pa.Array | None:
    """The key fingerprints a shard sidecar's footer records (None: no index)."""
    try:
        with store.fs.open(sidecar_path(store, sidecar), "rb") as handle:
            metadata = pq.read_metadata(handle).metadata or {}
    except FileNotFoundError:
        return None
    if metadata.get(FOOTER_FINGERPRINT_HASH.encode()) != hash_name.encode():
        return None
    text = metadata.get(FOOTER_KEY_FINGERPRINTS.encode())
    if text is None:
        return None
    try:
        return decode_fingerprints(text.decode("ascii"))
    except ValueError:
        return None


# --- cutting rows by shard ------------------------------------------------------------------


def _shard_ids(
    table: pa.Table,
    num_shards: int,
    *,
    exclude_keys: pa.Array,
    hash_name: str,
    cutoff_ms: int | None,
) -> tuple[pa.Table, pa.Array]:
    """The surviving rows (with fingerprints) and the shard of each."""
    if table.num_rows and cutoff_ms is not None:
        table = drop_expired_tombstones(table, cutoff_ms)
    if table.num_rows == 0:
        empty = table.append_column(FINGERPRINT_COLUMN, pa.array([], type=pa.uint32()))
        return empty, pa.array([], type=pa.int32())
    keys = key_strings(table)
    if len(exclude_keys):
        keep = pc.invert(pc.is_in(keys, value_set=exclude_keys.cast(pa.string())))
        if not pc.all(keep).as_py():
            table, keys = table.filter(keep), keys.filter(keep)
    hashes = shard_hash(keys, hash_name)
    shards = pc.modulo(hashes, pa.scalar(num_shards, pa.uint64())).cast(pa.int32())
    return table.append_column(FINGERPRINT_COLUMN, _fingerprints_of_hashes(hashes)), shards


def _split(
    table: pa.Table,
    num_shards: int,
    *,
    exclude_keys: pa.Array,
    hash_name: str,
    cutoff_ms: int | None = None,
) -> list[pa.Table]:
    rows, shards = _shard_ids(
        table, num_shards, exclude_keys=exclude_keys, hash_name=hash_name, cutoff_ms=cutoff_ms
    )
    if rows.num_rows == 0:
        return [rows] * num_shards
    return split_by_shard_ids(rows, shards, num_shards)


SHARD_OFFSETS_KEY = b"raydelta.shardOffsets"


def _group_split(table: pa.Table, shards: pa.Array, bounds: Sequence[int]) -> list[pa.Table]:
    """Rows sorted by shard, cut into groups of consecutive shards.

    Group ``g`` holds shards ``bounds[g] .. bounds[g+1]-1``; its schema
    metadata records where each shard's rows start (:func:`shard_slice`).
    Each group owns compact buffers (see :func:`split_by_shard_ids`).
    """
    num_groups = len(bounds) - 1
    if table.num_rows == 0:
        empty = table.replace_schema_metadata({SHARD_OFFSETS_KEY: b"{}"})
        return [empty] * num_groups
    order = pc.array_sort_indices(shards)
    tally = pc.value_counts(shards)
    sizes = dict(
        zip(tally.field("values").to_pylist(), tally.field("counts").to_pylist(), strict=True)
    )
    table = table.combine_chunks()
    groups = []
    start = 0
    for g in range(num_groups):
        offsets: dict[str, list[int]] = {}
        length = 0
        for shard in range(bounds[g], bounds[g + 1]):
            size = sizes.get(shard, 0)
            if size:
                offsets[str(shard)] = [length, size]
            length += size
        part = table.take(order.slice(start, length)) if length else table.slice(0, 0)
        start += length
        metadata = {SHARD_OFFSETS_KEY: json.dumps(offsets, separators=(",", ":")).encode()}
        groups.append(part.replace_schema_metadata(metadata))
    return groups


def shard_slice(group: pa.Table, shard: int) -> pa.Table:
    """Shard ``shard``'s rows of a group made by :func:`partition_rows_grouped` (zero-copy)."""
    offsets = json.loads((group.schema.metadata or {}).get(SHARD_OFFSETS_KEY, b"{}"))
    start, length = offsets.get(str(shard), (0, 0))
    return group.slice(start, length).replace_schema_metadata(None)


def group_bounds(num_shards: int, num_groups: int) -> list[int]:
    """Shard boundaries of ``num_groups`` groups of consecutive shards."""
    num_groups = max(1, min(num_groups, num_shards))
    return [g * num_shards // num_groups for g in range(num_groups + 1)]


def partition_rows_grouped(
    adds: pa.Table,
    removes: pa.Table,
    *,
    num_shards: int,
    num_groups: int,
    exclude_keys: pa.Array,
    tombstone_cutoff_ms: int,
    hash_name: str = SHARD_HASH,
) -> list[tuple[pa.Table, pa.Table]]:
    """Like :func:`partition_rows`, in ``num_groups`` groups of consecutive shards.

    A map task returns one object per group instead of one per shard: every
    object costs Ray a serialization and a transfer, so a map task returns
    one per node (one in all on a single machine) and a shard task slices its
    rows out of its node's group (:func:`shard_slice`) without copying.
    """
    bounds = group_bounds(num_shards, num_groups)
    add_rows, add_shards = _shard_ids(
        adds, num_shards, exclude_keys=exclude_keys, hash_name=hash_name, cutoff_ms=None
    )
    remove_rows, remove_shards = _shard_ids(
        removes,
        num_shards,
        exclude_keys=exclude_keys,
        hash_name=hash_name,
        cutoff_ms=tombstone_cutoff_ms,
    )
    add_groups = _group_split(add_rows, add_shards, bounds)
    remove_groups = _group_split(remove_rows, remove_shards, bounds)
    return list(zip(add_groups, remove_groups, strict=True))


def partition_rows(
    adds: pa.Table,
    removes: pa.Table,
    *,
    num_shards: int,
    exclude_keys: pa.Array,
    tombstone_cutoff_ms: int,
    hash_name: str = SHARD_HASH,
) -> list[tuple[pa.Table, pa.Table]]:
    """A piece's surviving rows, cut by shard: ``[(adds, removes)]`` per shard.

    Rows whose key is in ``exclude_keys`` (touched by a later commit) and
    expired tombstones are dropped first. Every part carries the rows'
    :data:`FINGERPRINT_COLUMN`.
    """
    add_parts = _split(adds, num_shards, exclude_keys=exclude_keys, hash_name=hash_name)
    remove_parts = _split(
        removes,
        num_shards,
        exclude_keys=exclude_keys,
        hash_name=hash_name,
        cutoff_ms=tombstone_cutoff_ms,
    )
    return list(zip(add_parts, remove_parts, strict=True))


def split_delta(
    delta_adds: pa.Table, delta_removes: pa.Table, num_shards: int, *, hash_name: str = SHARD_HASH
) -> list[tuple[pa.Table, pa.Table]]:
    """The committed file actions cut by shard (unfiltered, with fingerprints)."""
    return partition_rows(
        delta_adds,
        delta_removes,
        num_shards=num_shards,
        exclude_keys=pa.array([], type=pa.string()),
        tombstone_cutoff_ms=-(2**62),
        hash_name=hash_name,
    )


ADD_ROWS_SCHEMA = ADD_SCHEMA.append(pa.field(FINGERPRINT_COLUMN, pa.uint32()))
REMOVE_ROWS_SCHEMA = REMOVE_SCHEMA.append(pa.field(FINGERPRINT_COLUMN, pa.uint32()))


def slim_rows(adds: pa.Table, removes: pa.Table) -> tuple[pa.Table, pa.Table]:
    """The rows without their all-null columns, for shipping between tasks.

    Most tables leave half the canonical columns null (tags, deletion
    vectors, row tracking...); every column costs several buffers to ship.
    :func:`full_rows` puts them back.
    """

    def slim(table: pa.Table) -> pa.Table:
        if table.num_rows == 0:
            return table.select([])
        keep = [
            n
            for n, c in zip(table.column_names, table.columns, strict=True)
            if c.null_count < len(c)
        ]
        return table.select(keep)

    return slim(adds), slim(removes)


def full_rows(adds: pa.Table, removes: pa.Table) -> tuple[pa.Table, pa.Table]:
    """Undo :func:`slim_rows` (missing columns come back as nulls)."""
    return conform_table(adds, ADD_ROWS_SCHEMA), conform_table(removes, REMOVE_ROWS_SCHEMA)


def select_shard_rows(
    adds: pa.Table, removes: pa.Table, shard: int, num_shards: int, *, hash_name: str = SHARD_HASH
) -> tuple[pa.Table, pa.Table]:
    """The rows of ``shard`` (for reading an overflow sidecar's rows of one shard)."""
    parts = split_delta(adds, removes, num_shards, hash_name=hash_name)
    return parts[shard]


def merge_shard_rows(
    base: Sequence[tuple[pa.Table, pa.Table]],
    delta_adds: pa.Table,
    delta_removes: pa.Table,
    *,
    tombstone_cutoff_ms: int,
    base_filtered: bool,
) -> tuple[pa.Table, pa.Table]:
    """One shard's rows for the new checkpoint (with :data:`FINGERPRINT_COLUMN`).

    ``base`` are the shard's rows from the previous checkpoint; unless
    ``base_filtered`` (a map task already did it) the keys of the delta and
    expired tombstones are dropped from them here.
    """
    if not base_filtered:
        exclude = _touched(delta_adds, delta_removes)
        base = [
            (
                drop_keys(a, exclude),
                drop_expired_tombstones(drop_keys(r, exclude), tombstone_cutoff_ms),
            )
            for a, r in base
        ]
    adds = [with_fingerprints(a) for a, _ in base if a.num_rows]
    adds.append(with_fingerprints(delta_adds))
    removes = [with_fingerprints(r) for _, r in base if r.num_rows]
    removes.append(with_fingerprints(drop_expired_tombstones(delta_removes, tombstone_cutoff_ms)))
    return _concat(adds), _concat(removes)


def _concat(tables: list[pa.Table]) -> pa.Table:
    if len(tables) == 1:
        return tables[0]
    schema = tables[0].schema
    return pa.concat_tables([t.select(schema.names) for t in tables])


def _touched(adds: pa.Table, removes: pa.Table) -> pa.Array:
    parts = [key_strings(t).cast(pa.string()) for t in (adds, removes) if t.num_rows]
    return pa.concat_arrays(parts) if parts else pa.array([], type=pa.string())


# --- incremental plans -------------------------------------------------------------------------


@dataclass(frozen=True)
class AlignedPlan:
    """What an incremental V2 checkpoint does with a previous one sharded the same way.

    - ``rebuild``: shards whose sidecar is rewritten from its previous sidecar,
      its rows in the previous overflow sidecar and its committed actions;
    - ``reuse``: previous shard sidecars kept as they are;
    - ``overflow``: what happens to the overflow sidecar, which holds the
      committed actions of shards that are not rebuilt: ``"none"`` (there is
      none), ``"reuse"`` (the previous one, unchanged) or ``"rewrite"``.

    Invariant: every logical file is in exactly one sidecar of the new
    checkpoint: its shard's sidecar, or the overflow sidecar.
    """

    rebuild: frozenset[int]
    reuse: dict[int, Sidecar]
    overflow: str
    overflow_shards: frozenset[int]
    checked_shards: int = 0


def _has_expired_tombstones(sidecar: Sidecar, cutoff_ms: int) -> bool:
    counts = sidecar_counts(sidecar)
    if counts is None:
        return True
    if not counts[1]:
        return False
    oldest = (sidecar.tags or {}).get(TAG_MIN_DELETION_TIMESTAMP)
    try:
        return oldest is None or int(oldest) < cutoff_ms
    except ValueError:
        return True


def plan_aligned(
    aligned: AlignedSidecars,
    delta_parts: Sequence[tuple[pa.Table, pa.Table]],
    fingerprints: Mapping[int, pa.Array | None],
    *,
    layout: str,
    tombstone_cutoff_ms: int,
    max_overflow_actions: int,
) -> AlignedPlan:
    """Which sidecars an incremental checkpoint rewrites (see :class:`AlignedPlan`).

    A shard is rebuilt when its previous sidecar was written under another
    layout, holds an expired tombstone, or may hold a key the commits
    touched: the key's fingerprint is in the sidecar's footer index
    (``fingerprints[shard]``; None means no index, so any touched key
    counts). The other touched shards' actions go to the overflow sidecar,
    unless it would exceed ``max_overflow_actions``: then every shard with
    overflow rows is rebuilt and the overflow is emptied.
    """
    touched = {s for s, (a, r) in enumerate(delta_parts) if a.num_rows or r.num_rows}
    rebuild: set[int] = set()
    for shard, sidecar in aligned.base.items():
        tags = sidecar.tags or {}
        if tags.get(TAG_LAYOUT) != layout or _has_expired_tombstones(sidecar, tombstone_cutoff_ms):
            rebuild.add(shard)
    checked = 0
    for shard in sorted(touched - rebuild):
        if shard not in aligned.base:
            continue
        checked += 1
        index = fingerprints.get(shard)
        adds, removes = delta_parts[shard]
        mine = [
            t.column(FINGERPRINT_COLUMN).combine_chunks() for t in (adds, removes) if t.num_rows
        ]
        if index is None or pc.any(pc.is_in(pa.concat_arrays(mine), value_set=index)).as_py():
            rebuild.add(shard)
    previous_overflow = aligned.overflow
    old_shards = aligned.overflow_shards
    pending = (touched | old_shards) - rebuild
    counts = sidecar_counts(previous_overflow) if previous_overflow is not None else (0, 0)
    estimate = sum(counts or (0, 0)) + sum(
        delta_parts[s][0].num_rows + delta_parts[s][1].num_rows for s in touched - rebuild
    )
    if estimate > max_overflow_actions:
        rebuild |= pending
        pending = set()
    reuse = {s: sc for s, sc in aligned.base.items() if s not in rebuild}
    if not pending:
        overflow = "none"
    elif (
        previous_overflow is not None
        and not (touched - rebuild)
        and not (old_shards & rebuild)
        and not _has_expired_tombstones(previous_overflow, tombstone_cutoff_ms)
        and (previous_overflow.tags or {}).get(TAG_LAYOUT) == layout
    ):
        overflow = "reuse"
    else:
        overflow = "rewrite"
    return AlignedPlan(frozenset(rebuild), reuse, overflow, frozenset(pending), checked)


def overflow_tags(
    num_shards: int,
    shards: Sequence[int],
    *,
    layout: str,
    adds: pa.Table,
    removes: pa.Table,
    hash_name: str = SHARD_HASH,
) -> dict[str, str | None]:
    """The ``tags`` of an overflow sidecar (shard tags without a shard, plus its shards)."""
    tags = shard_tags(0, num_shards, layout=layout, adds=adds, removes=removes, hash_name=hash_name)
    del tags[TAG_SHARD]
    tags[TAG_OVERFLOW] = "true"
    tags[TAG_OVERFLOW_SHARDS] = ",".join(str(s) for s in sorted(shards))
    return tags


def shards_of_rows(adds: pa.Table, removes: pa.Table, num_shards: int) -> list[int]:
    """The shards some row of ``adds`` / ``removes`` falls in."""
    found: set[int] = set()
    for table in (adds, removes):
        if table.num_rows:
            found.update(shard_of(key_strings(table), num_shards).to_pylist())
    return sorted(found)


def memory_mb() -> dict[str, float]:
    """This process's current resident memory by kind, MB: ``anon`` (private),
    ``shmem`` (shared memory it touched, e.g. Ray's object store), ``file``."""
    out: dict[str, float] = {}
    keys = {"RssAnon:": "anon", "RssShmem:": "shmem", "RssFile:": "file"}
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                name = keys.get(line.split(":", 1)[0] + ":")
                if name is not None:
                    out[name] = int(line.split()[1]) * 1024 / 1e6
    except (OSError, ValueError):
        pass
    return out


def peak_rss_mb() -> float:
    """This process's peak resident set size, MB (10**6 bytes).

    ``VmHWM`` of ``/proc/self/status`` where there is one: it belongs to this
    process' address space, whereas Linux carries ``ru_maxrss`` over
    ``execve`` from the process that started it.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / 1e6
    except (OSError, ValueError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1e6 if sys.platform == "darwin" else peak * 1024 / 1e6


# --- V1, streamed ------------------------------------------------------------------------


def write_v1_streaming(
    store: LogStore,
    delta: LogDelta,
    pieces: Sequence[SourcePiece],
    *,
    now_ms: int,
) -> LastCheckpointInfo:
    """Write the classic ``<v>.checkpoint.parquet`` (V1 spec, one file) of ``delta``.

    The previous checkpoint's rows come from ``pieces``, read one at a time
    and written as row groups; the committed actions come last.
    ``_last_checkpoint`` is not written (the caller does, after this returns).
    """
    config = table_configuration(delta.head)
    view = checkpoint_view(delta.head, config, now_ms=now_ms)
    layout = CheckpointLayout.for_table(config)
    schema = layout.schema(v2=False)
    cutoff = now_ms - config.deleted_file_retention_ms
    exclude = delta.touched_key_strings()
    sink = pa.BufferOutputStream()
    rows = 0
    num_adds = 0
    with pq.ParquetWriter(sink, schema, **parquet_write_options(schema)) as writer:
        head = assemble_rows(schema, list(non_file_rows(non_file_actions(view)).items()))
        writer.write_table(head)
        rows += head.num_rows

        def emit(adds: pa.Table, removes: pa.Table) -> None:
            nonlocal rows, num_adds
            if adds.num_rows == 0 and removes.num_rows == 0:
                return
            table = assemble_rows(
                schema, [("add", layout.add_array(adds)), ("remove", layout.remove_array(removes))]
            )
            writer.write_table(table)
            rows += table.num_rows
            num_adds += adds.num_rows

        for piece in pieces:
            adds, removes = read_file_actions(store, piece)
            adds = drop_keys(adds, exclude)
            removes = drop_expired_tombstones(drop_keys(removes, exclude), cutoff)
            emit(adds, removes)
            del adds, removes
        emit(delta.adds, drop_expired_tombstones(delta.removes, cutoff))
    data: bytes = sink.getvalue().to_pybytes()
    store.write(classic_checkpoint_name(delta.version), data)
    return LastCheckpointInfo(
        version=delta.version, size=rows, sizeInBytes=len(data), numOfAddFiles=num_adds
    )


# --- log compaction ---------------------------------------------------------------------------


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


def write_log_compaction(store: LogStore, start: int, end: int) -> str | None:
    """Write ``<start>.<end>.compacted.json`` from the published commits of the range.

    Returns its name, or None when it already exists. Raises
    :class:`VersionNotFoundError` when a commit of the range is missing.
    """
    if start > end:
        raise ValueError(f"empty compaction range [{start}, {end}]")
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
