"""Where a new checkpoint's rows come from: the log since the previous
checkpoint, and the previous checkpoint's file actions a piece at a time.

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
  read and split by shard
  (:func:`raydelta.storage.checkpoint.shards.partition_rows`).
- :func:`write_v1_streaming`: a classic single-file V1 checkpoint written
  batch by batch (one row group per read batch), so the writer holds one
  bounded batch of decoded rows and the compressed output, never the whole
  table decoded.
- Every parquet read here is bounded (:mod:`raydelta.storage.log.read_bound`):
  no batch decoded holds more than the read bound's rows, whatever the
  previous checkpoint's row groups hold.

Related modules: cutting and merging rows by shard
(:mod:`raydelta.storage.checkpoint.shards`), the sidecars' key index
(:mod:`raydelta.storage.checkpoint.fingerprints`), incremental plans and
the overflow sidecar (:mod:`raydelta.storage.checkpoint.incremental`), log
compaction (:mod:`raydelta.storage.compaction`).

Invariants:
- A logical file (``(path, deletionVector.uniqueId)``) the commits touched
  appears in the result exactly as its newest committed action says (or
  not at all for an expired tombstone); every other row of the previous
  checkpoint is kept as it is, except expired tombstones.
- Rows are canonical (:mod:`raydelta.protocol.file_actions`) everywhere in between.
- Nothing here writes ``_last_checkpoint``: callers do, last.
- A catalog-managed table is read only up to the version its catalog says
  is published (``max_published_version``), never by listing alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raydelta.protocol.actions import (
    Action,
    AddFile,
    CheckpointMetadata,
    RemoveFile,
    Sidecar,
    parse_actions,
)
from raydelta.protocol.catalog_managed import ensure_catalog_access
from raydelta.protocol.checkpoint_plan import (
    SHARD_HASH,
    TAG_NUM_ADDS,
    TAG_NUM_REMOVES,
    TAG_NUM_SHARDS,
    TAG_SHARD_HASH,
    checkpoint_view,
    key_strings,
    non_file_actions,
    sidecar_shard,
    table_configuration,
)
from raydelta.protocol.checkpoint_schema import CheckpointLayout, assemble_rows, non_file_rows
from raydelta.protocol.errors import VersionNotFoundError, VersionsNotContiguousError
from raydelta.protocol.file_actions import ADD_SCHEMA, REMOVE_SCHEMA, FileKey, table_keys
from raydelta.protocol.file_names import LogFileKind
from raydelta.protocol.last_checkpoint import LastCheckpointInfo
from raydelta.protocol.log_segment import (
    CheckpointRef,
    LogSegment,
    build_log_segment,
    check_checkpoint_spec,
)
from raydelta.protocol.reconciliation import TableState, apply_commits
from raydelta.storage.checkpoint.fingerprints import (
    FINGERPRINT_COLUMN,
    FOOTER_FINGERPRINT_HASH,
    FOOTER_KEY_FINGERPRINTS,
    decode_fingerprints,
)
from raydelta.storage.checkpoint.incremental import TAG_OVERFLOW, AlignedSidecars, is_overflow
from raydelta.storage.checkpoint.shards import drop_expired_tombstones, drop_keys
from raydelta.storage.checkpoint.writer import create_classic_checkpoint, parquet_write_options
from raydelta.storage.compaction import replay_compactions_safely
from raydelta.storage.log.read_bound import (
    checkpoint_read_rows,
    iter_checkpoint_batches,
    open_checkpoint_parquet,
)
from raydelta.storage.log.reader import (
    NON_FILE_COLUMNS,
    CheckpointContents,
    _parquet_columns,
    parquet_action_columns,
    read_commits,
    read_last_checkpoint,
    read_rows_of_columns,
    read_valid_segment,
    require_add_column,
    sidecar_path,
)
from raydelta.storage.log.store import LogStore

ROWS_PER_PIECE = 250_000
"""Row groups of one previous-checkpoint file are grouped into pieces of about this many rows."""


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


_ROOTED = r"^/|^[A-Za-z][A-Za-z0-9+.-]+:"
"""Key strings that are absolute or URIs (not relative to the table root)."""


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
        """Key strings (:func:`raydelta.protocol.checkpoint_plan.key_strings`) of
        touched files, in every spelling a previous checkpoint's row may key
        the same file by: root-free (decoded, ``file:`` folded), relative to
        the table root, and absolute under it; so a row written as
        ``file:///root/a`` is replaced by a newer ``a`` and the reverse."""
        root = self.head.table_root
        parts: list[pa.Array] = []
        for table in (self.adds, self.removes):
            if not table.num_rows:
                continue
            parts.append(key_strings(table).cast(pa.string()))
            if root:
                relative = key_strings(table, root).cast(pa.string())
                parts.append(relative)
                is_relative = pc.invert(pc.match_substring_regex(relative, _ROOTED))
                inside = relative.filter(is_relative)
                parts.append(pc.binary_join_element_wise(root + "/", inside, ""))
        if not parts:
            return pa.array([], type=pa.string())
        return pc.unique(pa.concat_arrays(parts))


def _parquet_has_rows(path: str, store: LogStore, column: str) -> bool:
    """Whether a parquet file has a non-null row in struct column ``column``
    (read a bounded batch at a time, up to the first such row)."""
    with open_checkpoint_parquet(store, path) as parquet:
        if column not in parquet.schema_arrow.names:
            return False
        batches = iter_checkpoint_batches(
            parquet, columns=[f"{column}.path"], read_rows=checkpoint_read_rows()
        )
        return any(b.column(0).null_count < b.num_rows for b in batches)


def _describe_checkpoint(
    store: LogStore, ref: CheckpointRef
) -> tuple[PreviousCheckpoint, list[Action]]:
    """The previous checkpoint's storage description and its non-file actions."""
    paths = tuple(store.path_of(f.name) for f in ref.files)
    contents = CheckpointContents()
    embedded = False
    columns: list[frozenset[str]] = []
    for file, path in zip(ref.files, paths, strict=True):
        columns.append(frozenset())
        if file.name.endswith(".json"):
            actions = parse_actions(store.read(file.name))
            embedded = embedded or any(isinstance(a, (AddFile, RemoveFile)) for a in actions)
            contents.add_json_actions(
                [a for a in actions if not isinstance(a, (AddFile, RemoveFile))]
            )
        else:
            columns[-1] = parquet_action_columns(store, path)
            contents.add_parquet_table(
                read_rows_of_columns(store, path, (*NON_FILE_COLUMNS, "sidecar"))
            )
    # a part without "add" has none (map tasks read it as such); a checkpoint
    # without the column anywhere would make the new one silently empty
    require_add_column(ref.files, columns, names_sidecars=bool(contents.sidecars))
    actions = contents.non_file_actions
    check_checkpoint_spec(ref, actions, names_sidecars=bool(contents.sidecars))
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


def read_log_delta(
    store: LogStore, version: int | None = None, *, max_published_version: int | None = None
) -> LogDelta:
    """The driver's view of the checkpoint of ``version`` (latest published when None).

    Reads one listing, ``_last_checkpoint``, the previous checkpoint's
    non-file rows only, and the commits (or compactions) after it.
    ``max_published_version`` is what a catalog-managed table's catalog says
    is published: files past it are ignored; without it such a table raises
    :class:`~raydelta.protocol.errors.CatalogManagedTableError`.
    """
    listing = store.list_from(0)
    hint = read_last_checkpoint(store)

    def build(unusable: frozenset[str]) -> tuple[LogSegment, dict[str, list[Action]]]:
        try:
            built = build_log_segment(
                listing,
                target_version=version,
                last_checkpoint_hint=hint,
                catalog_latest_version=max_published_version,
                unusable=unusable,
            )
        except VersionsNotContiguousError:
            if max_published_version is None:  # a catalog-managed table says so here
                from raydelta.storage.snapshot import load_head_from_store

                load_head_from_store(store.table_root, store)
            raise
        return built, {}

    def describe(
        segment: LogSegment, _inline: object
    ) -> tuple[PreviousCheckpoint, list[Action]] | None:
        if segment.checkpoint is None:
            return None
        return _describe_checkpoint(store, segment.checkpoint)

    # an invalid previous checkpoint is not built upon: an older one or the commits are
    segment, _, described = read_valid_segment(build, describe)
    root = store.table_root_key
    base = TableState(table_root=root)
    previous: PreviousCheckpoint | None = None
    if described is not None:
        previous, non_file = described
        base = apply_commits(
            TableState(version=previous.version, table_root=root),
            [(previous.version, non_file)],
        )
    units = segment.replay_units()
    batches = []
    read = list(zip(units, read_commits(store, units), strict=True))
    # An unreconciled compaction file whose order matters gives way to its commits.
    for unit, actions in replay_compactions_safely(store, segment, read, root):
        end = unit.end_version if unit.end_version is not None else unit.require_version()
        batches.append((end, actions))
    state = apply_commits(base, batches)
    if state.version != segment.version:
        raise VersionNotFoundError(f"cannot rebuild version {segment.version} of the table")
    if state.protocol is not None:
        ensure_catalog_access(
            state.protocol,
            table_uri=store.table_root,
            through_catalog=max_published_version is not None,
        )
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
        with store.open_input(path) as handle:
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
                total += int(tags.get(TAG_NUM_ADDS) or "") + int(tags.get(TAG_NUM_REMOVES) or "")
            except ValueError:
                with store.open_input(sidecar_path(store, sidecar)) as handle:
                    total += pq.ParquetFile(handle).metadata.num_rows
        return total
    for path in previous.paths:
        if path.endswith(".json"):
            total += max(0, store.status(path).size // 500)
            continue
        with store.open_input(path) as handle:
            total += pq.ParquetFile(handle).metadata.num_rows
    return total


# --- reading rows --------------------------------------------------------------------------


def read_file_actions(
    store: LogStore,
    piece: SourcePiece,
    *,
    use_threads: bool = False,
    with_fingerprints: bool = False,
    read_rows: int | None = None,
) -> tuple[pa.Table, pa.Table]:
    """The canonical ``(adds, removes)`` of one piece.

    Parquet is decoded at most ``read_rows`` rows at a time (None: the
    process's read bound), each batch turned canonical before the next is
    decoded (:func:`iter_file_action_batches`).

    Single-threaded by default: a piece is one task's work and a task holds
    one CPU; parallelism comes from running tasks side by side. With
    ``with_fingerprints``, a whole shard sidecar whose footer indexes its
    keys (:func:`~raydelta.storage.checkpoint.fingerprints.fingerprint_footer`:
    adds then removes, in file order) comes with its ``FINGERPRINT_COLUMN``,
    so its keys need not be hashed again.
    """
    footer: dict[bytes, bytes] = {}
    add_parts: list[pa.Table] = []
    remove_parts: list[pa.Table] = []
    for batch_adds, batch_removes, batch_footer in iter_file_action_batches(
        store, piece, use_threads=use_threads, read_rows=read_rows
    ):
        add_parts.append(batch_adds)
        remove_parts.append(batch_removes)
        footer = batch_footer
    adds = pa.concat_tables(add_parts) if add_parts else ADD_SCHEMA.empty_table()
    removes = pa.concat_tables(remove_parts) if remove_parts else REMOVE_SCHEMA.empty_table()
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


def iter_file_action_batches(
    store: LogStore,
    piece: SourcePiece,
    *,
    use_threads: bool = False,
    read_rows: int | None = None,
) -> Iterator[tuple[pa.Table, pa.Table, dict[bytes, bytes]]]:
    """The canonical ``(adds, removes)`` of one piece, a bounded batch at a
    time, with the file's footer metadata (empty but for a whole parquet file).

    A parquet batch has at most ``read_rows`` rows (None: the process's read
    bound, :func:`~raydelta.storage.log.read_bound.checkpoint_read_rows`),
    whatever the piece's row groups hold; a JSON piece is one batch (a V2
    top-level JSON file is parsed whole in any case).
    """
    if piece.format == "json":
        with store.open_input(piece.path) as handle:
            actions = parse_actions(handle.read())
        contents = CheckpointContents()
        contents.add_json_actions([a for a in actions if isinstance(a, (AddFile, RemoveFile))])
        yield (*_canonical(contents), {})
        return
    rows = checkpoint_read_rows(read_rows)
    with open_checkpoint_parquet(store, piece.path) as parquet:
        columns = _parquet_columns(parquet.schema_arrow, ("add", "remove"))
        footer = (parquet.metadata.metadata or {}) if piece.row_groups is None else {}
        groups = None if piece.row_groups is None else list(piece.row_groups)
        found = False
        for batch in iter_checkpoint_batches(
            parquet, columns=columns, read_rows=rows, row_groups=groups, use_threads=use_threads
        ):
            found = True
            contents = CheckpointContents()
            contents.add_parquet_table(pa.Table.from_batches([batch]))
            del batch
            yield (*_canonical(contents), footer)
            del contents
            # the raw batch is gone: hand its pages back before the next is decoded
            pa.default_memory_pool().release_unused()
        if not found:  # no rows: the columns' checks still apply (a non-struct column)
            contents = CheckpointContents()
            contents.add_parquet_table(parquet.read_row_groups([], columns=columns))
            yield (*_canonical(contents), footer)


def _canonical(contents: CheckpointContents) -> tuple[pa.Table, pa.Table]:
    adds = pa.concat_tables(contents.adds) if contents.adds else ADD_SCHEMA.empty_table()
    removes = (
        pa.concat_tables(contents.removes) if contents.removes else REMOVE_SCHEMA.empty_table()
    )
    return adds, removes


# --- V1, streamed ------------------------------------------------------------------------


def write_v1_streaming(
    store: LogStore,
    delta: LogDelta,
    pieces: Sequence[SourcePiece],
    *,
    now_ms: int,
    read_rows: int | None = None,
) -> tuple[LastCheckpointInfo, bool]:
    """Write the classic ``<v>.checkpoint.parquet`` (V1 spec, one file) of ``delta``.

    The previous checkpoint's rows come from ``pieces``, read a bounded batch
    at a time (``read_rows``, None: the process's read bound) and written
    as row groups; the committed actions come last.
    ``_last_checkpoint`` is not written (the caller does, after this returns).
    Returns the checkpoint's info and whether it was written: a classic
    checkpoint of the version that is already there is left as it is
    (:func:`raydelta.storage.checkpoint.writer.create_classic_checkpoint`).
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
            for adds, removes, _ in iter_file_action_batches(store, piece, read_rows=read_rows):
                adds = drop_keys(adds, exclude)
                removes = drop_expired_tombstones(drop_keys(removes, exclude), cutoff)
                emit(adds, removes)
                del adds, removes
        emit(delta.adds, drop_expired_tombstones(delta.removes, cutoff))
    data: bytes = sink.getvalue().to_pybytes()
    written = create_classic_checkpoint(store, delta.version, data)
    info = LastCheckpointInfo(
        version=delta.version, size=rows, sizeInBytes=len(data), numOfAddFiles=num_adds
    )
    return info, written
