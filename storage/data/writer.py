"""The one data-file writer: Arrow (or pandas) rows in, parquet files and
their ``add`` actions out, with every data rule of the table enforced.

Used by ``raydelta.Table.append/overwrite`` and the Spark sink. Nothing here
commits: the caller commits :class:`WriteResult` (adds, and the new
metadata/protocol when the write changes them) through the TableActor.

Invariants:
- :func:`check_writable` refuses a table whose writer features include one
  whose data duty the writer does not implement
  (:data:`raydelta.protocol.write_rules.DATA_WRITER_FEATURES`), or whose
  data rules use SQL raydelta cannot evaluate; nothing is read or written.
- Every row is checked before the file holding it is written: the schema
  (:mod:`raydelta.protocol.schema_enforcement`), computed columns
  (defaults, generated, identity) filled in, then NOT NULL, invariants,
  CHECK constraints and generated columns (:mod:`raydelta.protocol.write_rules`).
  A ``pa.Table`` or DataFrame is checked whole before any file exists; a
  ``RecordBatchReader`` is checked batch by batch, and when a later batch
  fails, the files this call already wrote are deleted before the error is
  raised. A failed write leaves the table directory as it found it.
- Files are split by partition (values serialized per the spec, keyed by
  physical names under column mapping) and at about ``target_file_size``
  bytes of Arrow data; each gets a fresh UUID name and full statistics.
- Identity values continue from the high-water mark; the new mark is in
  ``WriteResult.metadata`` and must be committed with the adds.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from raydelta.protocol.actions import AddFile, Metadata, Protocol
from raydelta.protocol.errors import InvalidArgumentError, SchemaMismatchError
from raydelta.protocol.schema import (
    COLUMN_MAPPING_ID_KEY,
    COLUMN_MAPPING_PHYSICAL_NAME_KEY,
    ColumnMappingMode,
    StructField,
    StructType,
    assign_column_mapping,
    contains_type,
    serialize_schema,
)
from raydelta.protocol.schema_enforcement import align_to_schema, merge_schema, schema_of_data
from raydelta.protocol.stats_collection import StatsSpec
from raydelta.protocol.table_features import TIMESTAMP_NTZ, supported_features, upgrade_protocol
from raydelta.protocol.write_rules import (
    TableWriteRules,
    check_rows,
    complete_rows,
    table_write_rules,
    with_high_water_marks,
)
from raydelta.storage.data.files import partition_directory, write_data_file
from raydelta.storage.log.store import log_store_for

SchemaMode = Literal["merge", "overwrite"]
DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024
_MAX_COLUMN_ID = "delta.columnMapping.maxColumnId"


@dataclass(frozen=True)
class WriteResult:
    """What one :func:`write_data` call wrote, ready to commit."""

    adds: tuple[AddFile, ...]
    """One or more per partition, full stats, ``dataChange=True``."""
    metadata: Metadata | None
    """A new ``metaData`` to commit with the adds (identity marks moved, schema
    merged or replaced, column-mapping ids assigned), else None."""
    protocol: Protocol | None
    """A new ``protocol`` when the new schema needs a feature, else None."""
    num_rows: int


def check_writable(protocol: Protocol, metadata: Metadata) -> None:
    """Raise unless raydelta's writer can honour every data rule of the table."""
    table_write_rules(protocol, metadata)


def write_data(
    table_uri: str,
    data: pa.Table | pa.RecordBatchReader | Any,
    *,
    protocol: Protocol,
    metadata: Metadata,
    schema_mode: SchemaMode | None = None,
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
    storage_options: dict[str, Any] | None = None,
    on_rows_written: Callable[[int], None] | None = None,
    rewrite: bool = False,
    hidden_columns: Sequence[str] = (),
) -> WriteResult:
    """Write ``data`` as new data files of the table; commit nothing.

    ``data`` is a ``pyarrow.Table``, a ``pyarrow.RecordBatchReader`` or a
    pandas DataFrame with logical column names. ``schema_mode="merge"`` adds
    the data's new columns to the schema; ``"overwrite"`` replaces the schema
    with the data's (the caller allows it for overwrites only).
    ``rewrite=True`` writes rows that are already in the table (DML copies
    and updates): identity values are kept as they are, never refused as
    explicit inserts, and the high-water marks do not move.
    ``hidden_columns`` are columns of ``data`` outside the schema (row
    tracking's materialized columns, named in the table's configuration),
    carried into the files unchecked.
    """
    if schema_mode not in (None, "merge", "overwrite"):
        raise InvalidArgumentError(
            f"schema_mode must be None, 'merge' or 'overwrite', got {schema_mode!r}"
        )
    if not isinstance(target_file_size, int) or target_file_size <= 0:
        raise InvalidArgumentError(
            f"target_file_size must be a positive int, got {target_file_size!r}"
        )
    table_write_rules(protocol, metadata)  # refuse before looking at the data
    batches, arrow_schema = _batches(data)
    new_metadata, new_protocol = _evolve(protocol, metadata, arrow_schema, schema_mode)
    rules = table_write_rules(new_protocol or protocol, new_metadata or metadata)
    if rewrite:
        rules = replace(
            rules,
            identities=tuple(replace(i, allow_explicit_insert=True) for i in rules.identities),
        )
    writer = _FileWriter(table_uri, rules, target_file_size, storage_options, hidden_columns)
    marks: dict[str, int | None] = {i.column: i.high_water_mark for i in rules.identities}
    now = dt.datetime.now(dt.UTC)
    rows = 0
    try:
        for batch in batches:
            hidden = [c for c in hidden_columns if c in batch.column_names]
            aligned = align_to_schema(
                batch.drop_columns(hidden), rules.schema, computed=rules.computed_columns
            )
            complete = complete_rows(aligned, rules, now=now, high_water_marks=marks)
            check_rows(complete, rules)
            for column in hidden:
                complete = complete.append_column(column, batch.column(column))
            writer.add(complete)
            rows += complete.num_rows
            if on_rows_written is not None and complete.num_rows:
                on_rows_written(complete.num_rows)
        writer.flush()
    except BaseException:
        writer.delete_written()
        raise
    moved = {
        i.column: marks[i.column]
        for i in rules.identities
        if marks.get(i.column) != i.high_water_mark
    }
    if moved:
        schema = with_high_water_marks(rules.schema, moved)
        base = new_metadata or metadata
        new_metadata = base.model_copy(update={"schema_string": serialize_schema(schema)})
    return WriteResult(
        adds=tuple(writer.adds), metadata=new_metadata, protocol=new_protocol, num_rows=rows
    )


# --- input -----------------------------------------------------------------------------


def _batches(data: Any) -> tuple[Iterator[pa.Table], pa.Schema]:
    """The data as a stream of tables (one for a table or DataFrame) and its schema."""
    if isinstance(data, pa.Table):
        return iter([data]), data.schema
    if isinstance(data, pa.RecordBatch):
        return iter([pa.Table.from_batches([data])]), data.schema
    if isinstance(data, pa.RecordBatchReader):
        reader = data
        return (pa.Table.from_batches([b]) for b in reader), reader.schema
    if _is_pandas_frame(data):
        table = pa.Table.from_pandas(data, preserve_index=False)
        return iter([table]), table.schema
    raise InvalidArgumentError(
        "data must be a pyarrow.Table, a pyarrow.RecordBatchReader or a pandas DataFrame, "
        f"got {type(data).__name__}"
    )


def _is_pandas_frame(data: Any) -> bool:
    """Duck-typed: pandas is optional and never imported unless data is a frame."""
    kind = type(data)
    return kind.__name__ == "DataFrame" and kind.__module__.split(".")[0] == "pandas"


# --- schema evolution -------------------------------------------------------------------


def _evolve(
    protocol: Protocol, metadata: Metadata, data_schema: pa.Schema, schema_mode: SchemaMode | None
) -> tuple[Metadata | None, Protocol | None]:
    """The new metadata and protocol when ``schema_mode`` changes the schema."""
    if schema_mode is None:
        return None, None
    rules = table_write_rules(protocol, metadata)
    current = rules.schema
    if schema_mode == "merge":
        schema = merge_schema(current, data_schema)
    else:
        schema = _keep_mapping(current, schema_of_data(data_schema))
        missing = [c for c in metadata.partition_columns if schema.get(c) is None]
        if missing:
            raise SchemaMismatchError(
                f"schema_mode='overwrite' cannot drop the partition columns {missing}",
                missing[0],
            )
    if schema == current:
        return None, None
    configuration = dict(metadata.configuration)
    if rules.mapping_mode is not ColumnMappingMode.NONE:
        first = int(configuration.get(_MAX_COLUMN_ID, "0") or 0) + 1
        schema, max_id = assign_column_mapping(
            schema, new_physical_name=lambda: f"col-{uuid.uuid4()}", first_id=first
        )
        configuration[_MAX_COLUMN_ID] = str(max(max_id, first - 1))
    new_metadata = metadata.model_copy(
        update={"schema_string": serialize_schema(schema), "configuration": configuration}
    )
    new_protocol = None
    if contains_type(schema, "timestamp_ntz") and TIMESTAMP_NTZ not in supported_features(protocol):
        new_protocol = upgrade_protocol(
            protocol, reader_features=[TIMESTAMP_NTZ], writer_features=[TIMESTAMP_NTZ]
        )
    return new_metadata, new_protocol


def _keep_mapping(current: StructType, incoming: StructType) -> StructType:
    """``incoming`` with the column-mapping ids and physical names of the
    same-named, same-typed columns of ``current`` (top level)."""
    fields = []
    for f in incoming.fields:
        old = current.get(f.name)
        if old is not None and old.type == f.type:
            keep = {
                k: v
                for k, v in old.metadata.items()
                if k in (COLUMN_MAPPING_ID_KEY, COLUMN_MAPPING_PHYSICAL_NAME_KEY)
            }
            f = StructField(f.name, old.type, f.nullable, keep, f.extra)
        fields.append(f)
    return StructType(tuple(fields))


# --- files ------------------------------------------------------------------------------


class _FileWriter:
    """Buffers checked rows per partition; writes a file per ~target bytes."""

    def __init__(
        self,
        table_uri: str,
        rules: TableWriteRules,
        target_file_size: int,
        storage_options: dict[str, Any] | None,
        hidden_columns: Sequence[str] = (),
    ) -> None:
        self.table_uri = table_uri
        self.hidden_columns = tuple(hidden_columns)
        self.rules = rules
        self.target = target_file_size
        self.storage_options = storage_options
        self.partition_columns = list(rules.configuration.partition_columns)
        config = rules.configuration
        spec = StatsSpec.from_configuration(
            dict(config.configuration),
            mapping_mode=config.column_mapping_mode,
            tight_bounds=rules.tight_bounds,
        )
        if rules.clustered:
            spec = StatsSpec(
                num_indexed_cols=-1,
                mapping_mode=spec.mapping_mode,
                tight_bounds=spec.tight_bounds,
            )
        self.spec = spec
        self.pending: dict[tuple[Any, ...], list[pa.Table]] = {}
        self.pending_bytes: dict[tuple[Any, ...], int] = {}
        self.adds: list[AddFile] = []
        self.new_directories: list[str] = []

    def add(self, rows: pa.Table) -> None:
        for key, part in self._split(rows):
            self.pending.setdefault(key, []).append(part)
            self.pending_bytes[key] = self.pending_bytes.get(key, 0) + part.nbytes
            if self.pending_bytes[key] >= self.target:
                self._write(key)

    def flush(self) -> None:
        for key in list(self.pending):
            self._write(key)

    def _split(self, rows: pa.Table) -> list[tuple[tuple[Any, ...], pa.Table]]:
        if rows.num_rows == 0:
            return []
        if not self.partition_columns:
            return [((), rows)]
        keys = rows.select(self.partition_columns).group_by(self.partition_columns)
        parts = []
        for values in keys.aggregate([]).to_pylist():
            mask = None
            for column, value in values.items():
                test = (
                    pc.is_null(rows.column(column))
                    if value is None
                    else pc.fill_null(
                        pc.equal(
                            rows.column(column), pa.scalar(value, rows.schema.field(column).type)
                        ),
                        False,
                    )
                )
                mask = test if mask is None else pc.and_(mask, test)
            parts.append((tuple(values[c] for c in self.partition_columns), rows.filter(mask)))
        return parts

    def _write(self, key: tuple[Any, ...]) -> None:
        tables = self.pending.pop(key, [])
        self.pending_bytes.pop(key, None)
        if not tables:
            return
        rows = pa.concat_tables(tables)
        values = dict(zip(self.partition_columns, key, strict=True))
        self._note_new_directories(values)
        per_row = max(1, rows.nbytes // max(1, rows.num_rows))
        rows_per_file = max(1, self.target // per_row)
        for start in range(0, rows.num_rows, rows_per_file):
            chunk = rows.slice(start, rows_per_file)
            add = write_data_file(
                self.table_uri,
                chunk,
                schema=self.rules.schema,
                partition_columns=self.partition_columns,
                partition_values=values,
                column_mapping_mode=self.rules.mapping_mode,
                storage_options=self.storage_options,
                stats_spec=self.spec,
                materialize_partition_columns=self.rules.materialize_partition_columns,
                hidden_columns=self.hidden_columns,
            )
            self.adds.append(add)

    def _note_new_directories(self, values: dict[str, Any]) -> None:
        """Remember the partition directories this write is about to create."""
        if not self.partition_columns:
            return
        directory = partition_directory(
            self.rules.schema, self.partition_columns, values, self.rules.mapping_mode
        )
        store = log_store_for(self.table_uri, self.storage_options)
        parts = directory.split("/")
        for depth in range(1, len(parts) + 1):
            path = store.root_path("/".join(parts[:depth]))
            if path not in self.new_directories and not store.exists(path):
                self.new_directories.append(path)

    def delete_written(self) -> None:
        """Remove every file (and new directory) this writer wrote: the write
        is being abandoned and the table directory must look untouched."""
        store = log_store_for(self.table_uri, self.storage_options)
        for add in self.adds:
            path = store.data_path(add.path)
            if store.exists(path):
                store.remove_file(path)
        self.adds.clear()
        for directory in sorted(self.new_directories, key=len, reverse=True):
            store.remove_directory_if_empty(directory)
        self.new_directories.clear()
