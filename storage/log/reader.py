"""Read the files of a log segment into actions and Arrow tables.

Invariants:
- Checkpoints are read column-selectively: only the top-level action columns
  that exist in the file, and of ``add`` only the fields of the canonical
  layout (``stats_parsed`` / ``partitionValues_parsed`` are never decoded
  unless ``stats`` is absent).
- V2 checkpoints (UUID-named JSON or parquet, and classic-named ones carrying
  ``checkpointMetadata``) have their sidecars read concurrently; a sidecar
  that is missing is a :class:`CorruptLogError`, never a silently smaller table.
- A checkpoint yields the same :class:`TableState` whichever format holds it.
- :func:`read_checkpoint` and :func:`checkpoint_head` judge the checkpoint's
  spec (:func:`raydelta.protocol.log_segment.check_checkpoint_spec`): an
  invalid one is an :class:`InvalidCheckpointError` for the caller, which
  rebuilds the version without it when older files can.
- An action column a checkpoint part does not have is all null in that part
  (PROTOCOL.md, "Checkpoints": "Any missing column should be treated as
  null"): a multi-part checkpoint may hold only ``txn`` in some parts. A
  column that is there must have the checkpoint schema's type (a struct),
  else :class:`CorruptLogError`; and a classic or multi-part checkpoint none
  of whose parts has an ``add`` column is refused
  (:func:`require_add_column`), never read as an empty table.
- :func:`read_last_checkpoint` is the one reader of ``_last_checkpoint``: a
  missing or corrupt file is no hint (None), never an error.
- No read of checkpoint or sidecar parquet decodes more rows at once than
  the read bound (:mod:`raydelta.storage.log.read_bound`), whatever its row
  groups hold; what a reader keeps is the canonical rows (or, for non-file
  columns, only the rows that hold one).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from raydelta.protocol.actions import Action, Sidecar, action_from_wrapper, parse_actions
from raydelta.protocol.errors import CorruptLogError, InvalidCheckpointError, RaydeltaError
from raydelta.protocol.file_actions import (
    ADD_SCHEMA,
    REMOVE_SCHEMA,
    column_as_json,
    struct_column_to_table,
)
from raydelta.protocol.file_names import LAST_CHECKPOINT_NAME, SIDECAR_DIR, LogFile, LogFileKind
from raydelta.protocol.last_checkpoint import LastCheckpointInfo, parse_last_checkpoint
from raydelta.protocol.log_segment import CheckpointRef, LogSegment, check_checkpoint_spec
from raydelta.protocol.reconciliation import TableState, state_from_checkpoint
from raydelta.storage.log.read_bound import (
    checkpoint_read_rows,
    iter_checkpoint_batches,
    open_checkpoint_parquet,
    row_groups_with_rows,
    rows_holding,
)
from raydelta.storage.log.store import LogStore

ACTION_COLUMNS = (
    "add",
    "remove",
    "metaData",
    "protocol",
    "txn",
    "domainMetadata",
    "checkpointMetadata",
    "sidecar",
)
NON_FILE_COLUMNS = ("metaData", "protocol", "txn", "domainMetadata", "checkpointMetadata")
_FILE_FIELDS = {"add": ADD_SCHEMA.names, "remove": REMOVE_SCHEMA.names}


def require_add_column(
    parts: Sequence[LogFile], columns: Sequence[Collection[str]], *, names_sidecars: bool
) -> None:
    """Refuse a checkpoint whose file actions would silently read as none.

    ``columns`` holds the top-level columns of each parquet part of one
    checkpoint (``parts``, in the same order). A part without ``add`` has no
    ``add`` rows, as for every reader of the spec; but when *no* part of a
    classic or multi-part checkpoint has the column and the checkpoint names
    no sidecar, the table would read as empty. Every writer writes the
    column (all null on a table without files), so that is a damaged file
    (a rewrite that dropped the column, a truncated schema): a
    :class:`CorruptLogError`, the table's files never silently dropped.
    UUID-named checkpoints and JSON parts are not judged here.
    """
    parquet = [(p, c) for p, c in zip(parts, columns, strict=True) if p.name.endswith(".parquet")]
    if not parquet or names_sidecars:
        return
    if any(p.kind is LogFileKind.CHECKPOINT_UUID for p, _ in parquet):
        return
    if not any("add" in c for _, c in parquet):
        names = ", ".join(p.name for p, _ in parquet)
        raise CorruptLogError(
            f"checkpoint {names} has no 'add' column in any part: its live files would "
            "silently read as none"
        )


def parquet_action_columns(store: LogStore, path: str) -> frozenset[str]:
    """The top-level columns of a checkpoint part, from its footer only; an
    action column that is there but not a struct is a :class:`CorruptLogError`
    (found before any row is read)."""
    try:
        with store.open_input(path) as handle:
            schema = pq.ParquetFile(handle).schema_arrow
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException) as exc:
        raise CorruptLogError(f"cannot read checkpoint file {path}: {exc}") from exc
    for name in ACTION_COLUMNS:
        if name in schema.names and not pa.types.is_struct(schema.field(name).type):
            raise CorruptLogError(f"the checkpoint column {name!r} of {path} is not a struct")
    return frozenset(schema.names)


_Inline = TypeVar("_Inline")
_Read = TypeVar("_Read")


def read_valid_segment(
    build: Callable[[frozenset[str]], tuple[LogSegment, _Inline]],
    read: Callable[[LogSegment, _Inline], _Read],
) -> tuple[LogSegment, _Inline, _Read]:
    """``read`` of the segment ``build`` makes, its checkpoint judged valid.

    ``build(unusable)`` makes the segment (and what comes with it: a
    catalog's inline commits) without the checkpoint files named in
    ``unusable``. When ``read`` finds the segment's checkpoint breaks the
    spec (:class:`InvalidCheckpointError`, see
    :func:`raydelta.protocol.log_segment.check_checkpoint_spec`), the
    segment is built again without it, from an older checkpoint or the
    commits, and read again; when nothing older rebuilds the version, the
    checkpoint's error is raised (the reason nothing could be built is its
    cause). Nothing is ever read from an invalid checkpoint.
    """
    unusable: frozenset[str] = frozenset()
    segment, extra = build(unusable)
    while True:
        try:
            return segment, extra, read(segment, extra)
        except InvalidCheckpointError as invalid:
            if segment.checkpoint is None:
                raise
            unusable |= {f.name for f in segment.checkpoint.files}
            try:
                segment, extra = build(unusable)
            except RaydeltaError as nothing_older:
                raise invalid from nothing_older


def read_last_checkpoint(store: LogStore) -> LastCheckpointInfo | None:
    """The ``_last_checkpoint`` hint of the table, or None.

    None when the file is missing, and when it is corrupt (not JSON, missing
    fields, a failed checksum: :func:`parse_last_checkpoint` refuses it);
    callers then find checkpoints by listing, as the spec allows.
    """
    try:
        data = store.read(LAST_CHECKPOINT_NAME)
    except FileNotFoundError:
        return None
    return parse_last_checkpoint(data)


def _parquet_columns(
    schema: pa.Schema, wanted: Sequence[str], add_fields: Sequence[str] | None = None
) -> list[str]:
    """Column selection for a checkpoint: file-action structs by needed leaves
    (of ``add`` only ``add_fields`` when given)."""
    columns: list[str] = []
    for name in wanted:
        if name not in schema.names:
            continue
        fields = _FILE_FIELDS.get(name)
        if name == "add" and add_fields is not None:
            fields = [f for f in ADD_SCHEMA.names if f in add_fields]
        struct_type = schema.field(name).type
        if fields is None or not pa.types.is_struct(struct_type):
            columns.append(name)
            continue
        present = {struct_type.field(i).name for i in range(struct_type.num_fields)}
        columns.extend(f"{name}.{f}" for f in fields if f in present)
        if (
            name == "add"
            and "stats" in fields
            and "stats" not in present
            and ("stats_parsed" in present)
        ):
            columns.append("add.stats_parsed")
    return columns


def read_parquet_actions(
    store: LogStore,
    path: str,
    wanted: Sequence[str] = NON_FILE_COLUMNS,
    *,
    read_rows: int | None = None,
) -> pa.Table:
    """The rows of a checkpoint/sidecar parquet file at ``path`` that hold one
    of the ``wanted`` action columns (those columns only), read in bounded
    batches (:func:`raydelta.storage.log.read_bound.checkpoint_read_rows`)
    from every row group (none is skipped by its statistics: this also
    proves the columns decode): meant for the few non-file rows, never a
    whole file's file actions."""
    return read_rows_of_columns(store, path, wanted, read_rows=read_rows, every_group=True)


def _stats_from_parsed(table: pa.Table) -> pa.Table:
    """Fill ``add.stats`` from ``add.stats_parsed`` when a writer only wrote the latter."""
    add = table.column("add")
    struct_type = add.type
    names = [struct_type.field(i).name for i in range(struct_type.num_fields)]
    if "stats" in names or "stats_parsed" not in names:
        return table
    from raydelta.protocol.statistics import stats_from_arrow

    combined = add.combine_chunks()
    stats = pa.array(stats_from_arrow(combined.field("stats_parsed")), type=pa.string())
    children = [combined.field(n) for n in names if n != "stats_parsed"] + [stats]
    fields = [struct_type.field(n) for n in names if n != "stats_parsed"]
    fields.append(pa.field("stats", pa.string()))
    rebuilt = pa.StructArray.from_arrays(
        children, fields=fields, mask=combined.is_null() if combined.null_count else None
    )
    return table.set_column(table.schema.get_field_index("add"), "add", rebuilt)


def _non_file_actions(table: pa.Table) -> list[Action]:
    actions: list[Action] = []
    for name in NON_FILE_COLUMNS:
        if name in table.column_names:
            for body in column_as_json(table.column(name)):
                action = action_from_wrapper({name: body})
                if action is not None:
                    actions.append(action)
    return actions


class CheckpointContents:
    """What one checkpoint holds, file actions in the canonical layout."""

    def __init__(self) -> None:
        self.non_file_actions: list[Action] = []
        self.sidecars: list[Sidecar] = []
        self.adds: list[pa.Table] = []
        self.removes: list[pa.Table] = []

    def add_parquet_table(self, table: pa.Table) -> None:
        """Take the rows of one checkpoint part or sidecar; columns whose types
        do not fit the checkpoint schema make it a :class:`CorruptLogError`."""
        try:
            self._add_parquet_table(table)
        except (pa.ArrowException, ValueError, TypeError) as exc:
            # ValueError covers pydantic's ValidationError (a sidecar row).
            message = f"a checkpoint does not have the checkpoint schema: {exc}"
            raise CorruptLogError(message) from exc

    def _add_parquet_table(self, table: pa.Table) -> None:
        for name in table.column_names:
            if not pa.types.is_struct(table.schema.field(name).type):
                raise CorruptLogError(f"the checkpoint column {name!r} is not a struct")
        if "add" in table.column_names:
            table = _stats_from_parsed(table)
            adds = _compact_nulls(struct_column_to_table(table.column("add"), ADD_SCHEMA))
            self.adds.append(_with_required(adds, "add", ("path", "size", "modificationTime")))
        if "remove" in table.column_names:
            removes = _compact_nulls(struct_column_to_table(table.column("remove"), REMOVE_SCHEMA))
            self.removes.append(_with_required(removes, "remove", ("path",)))
        self.non_file_actions.extend(_non_file_actions(table))
        if "sidecar" in table.column_names:
            for body in column_as_json(table.column("sidecar")):
                self.sidecars.append(Sidecar.model_validate(body))

    def check_one_protocol_and_metadata(self) -> None:
        """A checkpoint is a reconciled state: two different ``protocol`` (or
        ``metaData``) rows have no single meaning."""
        from raydelta.protocol.actions import Metadata, Protocol

        for kind in (Protocol, Metadata):
            found = [a for a in self.non_file_actions if isinstance(a, kind)]
            if any(a != found[0] for a in found[1:]):
                raise CorruptLogError(
                    f"a checkpoint holds {len(found)} different {kind.action_name!r} actions"
                )

    def add_json_actions(self, actions: Sequence[Action]) -> None:
        from raydelta.protocol.actions import AddFile, RemoveFile
        from raydelta.protocol.file_actions import actions_to_table

        adds = [a for a in actions if isinstance(a, AddFile)]
        removes = [r for r in actions if isinstance(r, RemoveFile)]
        if adds:
            self.adds.append(actions_to_table(adds, ADD_SCHEMA))
        if removes:
            self.removes.append(actions_to_table(removes, REMOVE_SCHEMA))
        for action in actions:
            if isinstance(action, Sidecar):
                self.sidecars.append(action)
            elif not isinstance(action, (AddFile, RemoveFile)):
                self.non_file_actions.append(action)


def _compact_nulls(table: pa.Table) -> pa.Table:
    """``table`` with every all-null column rebuilt by :func:`pyarrow.nulls`,
    whose children share one zeroed buffer: a checkpoint decodes an absent
    ``deletionVector`` or ``baseRowId`` into full-size buffers per field."""
    if table.num_rows == 0:
        return table
    for position in range(table.num_columns):
        column = table.column(position)
        if column.null_count == table.num_rows and column.nbytes:
            nulls = pa.nulls(table.num_rows, column.type)
            table = table.set_column(position, table.schema.field(position), nulls)
    return table


def _with_required(table: pa.Table, action: str, fields: Sequence[str]) -> pa.Table:
    """``table`` (canonical file actions of a checkpoint) when every row has
    the spec's required ``fields``; a null one is a :class:`CorruptLogError`."""
    for name in fields:
        if table.column(name).null_count:
            raise CorruptLogError(f"a checkpoint {action!r} row has no {name!r}")
    return table


def sidecar_path(store: LogStore, sidecar: Sidecar) -> str:
    """Where a sidecar lives: a bare name is under ``_delta_log/_sidecars``."""
    from urllib.parse import unquote

    path = unquote(sidecar.path)
    if "://" in sidecar.path or path.startswith("/"):
        return store.path_of_uri(sidecar.path)
    return store.path_of(f"{SIDECAR_DIR}/{path}")


STREAM_BATCH_ROWS = 131_072
"""Rows per batch a streamed file scan hands out by default
(:func:`raydelta.storage.live_files.iter_live_files`). Decoding is bounded
apart, by the read bound: the raw rows of one batch are converted to the
canonical layout and dropped before the next is decoded, so reading a
checkpoint costs its canonical tables plus one bounded batch per file."""


def iter_parquet_actions(
    store: LogStore,
    path: str,
    wanted: Sequence[str] = ACTION_COLUMNS,
    *,
    batch_rows: int | None = None,
    add_fields: Sequence[str] | None = None,
) -> Iterator[pa.Table]:
    """The action columns of a checkpoint/sidecar parquet file at ``path``, one
    batch of at most ``batch_rows`` rows at a time (never the whole file, nor
    a whole row group; None: the process's read bound,
    :func:`~raydelta.storage.log.read_bound.checkpoint_read_rows`);
    ``add_fields`` narrows the ``add`` leaves decoded.

    The first table has no rows and every wanted column the file has (so a
    caller sees the file's columns even when they hold no row). Per row
    group, a column other than ``add`` whose leaves are all null by the
    footer's statistics is not decoded
    (:func:`~raydelta.storage.log.read_bound.row_groups_with_rows`): a
    classic checkpoint's ``remove``/``metaData``/``txn`` columns cost nothing
    in its ``add`` rows. ``add`` is always decoded (a live file is never
    left to a writer's statistics).
    """
    rows = checkpoint_read_rows(batch_rows)
    try:
        parquet = open_checkpoint_parquet(store, path)
        schema = parquet.schema_arrow
        columns = _parquet_columns(schema, wanted, add_fields)
        if parquet.metadata.num_rows == 0:
            yield parquet.read(columns=columns)
            return
        top = [name for name in wanted if name in schema.names]
        yield parquet.read_row_groups([], columns=columns)
        pool = pa.default_memory_pool()
        for group in range(parquet.metadata.num_row_groups):
            present = [
                c for c in top if c == "add" or row_groups_with_rows(parquet.metadata, [c], [group])
            ]
            group_columns = _parquet_columns(schema, present, add_fields)
            if not group_columns:
                continue
            for batch in iter_checkpoint_batches(
                parquet, columns=group_columns, read_rows=rows, row_groups=[group]
            ):
                yield pa.Table.from_batches([batch])
                # the batch's raw buffers are dropped by now: hand freed pages
                # back before the next is decoded (the allocator keeps them)
                pool.release_unused()
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException) as exc:
        raise CorruptLogError(f"cannot read checkpoint file {path}: {exc}") from exc


def _read_part_streaming(
    store: LogStore, path: str, wanted: Sequence[str], read_rows: int | None = None
) -> tuple[CheckpointContents, set[str]]:
    """One parquet part or sidecar, batch by batch, into canonical form; and the
    top-level action columns the file has."""
    contents = CheckpointContents()
    seen: set[str] = set()
    for table in iter_parquet_actions(store, path, wanted, batch_rows=read_rows):
        seen.update(table.column_names)
        contents.add_parquet_table(table)
    return contents, seen


def _merge(into: CheckpointContents, part: CheckpointContents) -> None:
    into.non_file_actions.extend(part.non_file_actions)
    into.sidecars.extend(part.sidecars)
    into.adds.extend(part.adds)
    into.removes.extend(part.removes)


def read_checkpoint(
    store: LogStore,
    parts: Sequence[LogFile],
    *,
    max_workers: int = 8,
    read_rows: int | None = None,
) -> CheckpointContents:
    """Read every part of one checkpoint (and its sidecars) into canonical form.

    Parquet parts and sidecars are streamed (:func:`iter_parquet_actions`):
    at most ``max_workers`` files are being decoded at once, one batch of at
    most ``read_rows`` rows each (None: the process's read bound).
    """
    contents = CheckpointContents()
    parquet_parts = [p for p in parts if p.name.endswith(".parquet")]
    json_parts = [p for p in parts if p.name.endswith(".json")]
    for part in json_parts:
        contents.add_json_actions(parse_actions(store.read(part.name)))
    with ThreadPoolExecutor(max_workers=max_workers) as pool:
        read = list(
            pool.map(
                lambda p: _read_part_streaming(
                    store, store.path_of(p.name), ACTION_COLUMNS, read_rows
                ),
                parquet_parts,
            )
        )
        for part_contents, _ in read:
            _merge(contents, part_contents)
        require_add_column(
            parquet_parts, [columns for _, columns in read], names_sidecars=bool(contents.sidecars)
        )
        if contents.sidecars:
            sidecar_paths = [sidecar_path(store, s) for s in contents.sidecars]

            def read_sidecar(path: str) -> CheckpointContents:
                try:
                    sidecar, columns = _read_part_streaming(
                        store, path, ("add", "remove"), read_rows
                    )
                except FileNotFoundError as exc:
                    raise CorruptLogError(f"sidecar file missing: {path}") from exc
                if "add" not in columns and "remove" not in columns:
                    raise CorruptLogError(f"sidecar {path} has no 'add' or 'remove' column")
                return sidecar

            for sidecar_contents in pool.map(read_sidecar, sidecar_paths):
                _merge(contents, sidecar_contents)
    contents.check_one_protocol_and_metadata()
    check_checkpoint_spec(
        checkpoint_ref(parts), contents.non_file_actions, names_sidecars=bool(contents.sidecars)
    )
    return contents


def checkpoint_ref(parts: Sequence[LogFile]) -> CheckpointRef:
    """The :class:`CheckpointRef` of one checkpoint's files (all of one version)."""
    return CheckpointRef(parts[0].require_version(), parts[0].kind, tuple(parts))


def checkpoint_state(
    store: LogStore,
    version: int,
    parts: Sequence[LogFile],
    *,
    table_root: str | None = None,
    read_rows: int | None = None,
) -> TableState:
    """The state a checkpoint describes; ``table_root`` as in :class:`TableState`;
    ``read_rows`` as in :func:`read_checkpoint`."""
    contents = read_checkpoint(store, parts, read_rows=read_rows)
    adds = pa.concat_tables(contents.adds) if contents.adds else ADD_SCHEMA.empty_table()
    removes = (
        pa.concat_tables(contents.removes) if contents.removes else REMOVE_SCHEMA.empty_table()
    )
    return state_from_checkpoint(version, contents.non_file_actions, adds, removes, table_root)


def read_rows_of_columns(
    store: LogStore,
    path: str,
    wanted: Sequence[str],
    *,
    read_rows: int | None = None,
    every_group: bool = False,
) -> pa.Table:
    """The rows of a parquet checkpoint part that hold one of the ``wanted``
    action columns (those columns only), read only from the row groups that
    hold any (see :func:`~raydelta.storage.log.read_bound.row_groups_with_rows`; all of them with
    ``every_group``), a bounded batch at a time: a row group of a million
    ``add`` rows and one ``metaData`` row costs bounded batches of decoding,
    and one row is kept."""
    rows = checkpoint_read_rows(read_rows)
    try:
        with open_checkpoint_parquet(store, path) as parquet:
            columns = _parquet_columns(parquet.schema_arrow, wanted)
            groups = (
                list(range(parquet.metadata.num_row_groups))
                if every_group
                else row_groups_with_rows(parquet.metadata, wanted)
            )
            kept = [
                rows_holding(batch, wanted)
                for batch in iter_checkpoint_batches(
                    parquet, columns=columns, read_rows=rows, row_groups=groups
                )
            ]
            if not kept:
                return parquet.read_row_groups([], columns=columns)
            return pa.Table.from_batches(kept)
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException) as exc:
        raise CorruptLogError(f"cannot read checkpoint file {path}: {exc}") from exc


def checkpoint_head(
    store: LogStore, version: int, parts: Sequence[LogFile], *, read_rows: int | None = None
) -> TableState:
    """The non-file part of a checkpoint's state (protocol, metadata, txns,
    domains): only those columns of parquet parts are read (and the sidecar
    references, to judge the checkpoint's spec), sidecar files never."""
    contents = CheckpointContents()
    for part in parts:
        if part.name.endswith(".json"):
            actions = parse_actions(store.read(part.name))
            contents.non_file_actions.extend(a for a in actions if not _is_file_action(a))
            contents.sidecars.extend(a for a in actions if isinstance(a, Sidecar))
        else:
            table = read_rows_of_columns(
                store, store.path_of(part.name), (*NON_FILE_COLUMNS, "sidecar"), read_rows=read_rows
            )
            contents.add_parquet_table(table)
    contents.check_one_protocol_and_metadata()
    check_checkpoint_spec(
        checkpoint_ref(parts), contents.non_file_actions, names_sidecars=bool(contents.sidecars)
    )
    return state_from_checkpoint(
        version, contents.non_file_actions, ADD_SCHEMA.empty_table(), REMOVE_SCHEMA.empty_table()
    )


def _is_file_action(action: Action) -> bool:
    from raydelta.protocol.actions import AddFile, RemoveFile, Sidecar

    return isinstance(action, (AddFile, RemoveFile, Sidecar))


def read_commits(store: LogStore, files: Sequence[LogFile]) -> list[list[Action]]:
    """Parsed actions of each commit (or compaction) file, in the given order."""
    out = []
    for file, data in zip(files, store.read_many([f.name for f in files]), strict=True):
        try:
            out.append(parse_actions(data))
        except CorruptLogError as exc:
            raise CorruptLogError(f"{file.name}: {exc}") from exc
    return out


def first_commit_info(data: bytes) -> dict[str, Any] | None:
    """The ``commitInfo`` body of a commit file, if any (scans lines until found).

    Only lines mentioning ``"commitInfo"`` are parsed; one that is not a JSON
    object is a :class:`CorruptLogError`. A line that mentions the name only
    inside another action (a path, stats) is skipped; a ``commitInfo`` whose
    body is not an object gives None.
    """
    import json

    for line in data.splitlines():
        if b'"commitInfo"' not in line:
            continue
        try:
            wrapper = json.loads(line)
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
            raise CorruptLogError(f"a log line is not JSON: {exc}") from exc
        if not isinstance(wrapper, dict):
            raise CorruptLogError("a log line must be a JSON object")
        if "commitInfo" not in wrapper:
            continue
        body = wrapper["commitInfo"]
        return body if isinstance(body, dict) else None
    return None
