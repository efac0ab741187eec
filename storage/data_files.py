"""Reading and writing the table's data files (parquet), for engines that
have no Delta reader of their own (the Spark data source, tests).

Invariants:
- Reading a logical file returns exactly its live rows: the rows of the
  parquet file minus the rows its deletion vector marks, with partition
  columns filled from the ``add`` action's partition values (the log is the
  truth, never the directory names) and missing columns as nulls.
- Writing returns an ``AddFile`` whose ``size`` is the file's real size and
  whose ``stats`` are complete (``numRecords``, min/max/nullCount of the
  indexed columns, nested ones included), so DVs may later be attached to it.
  Files are never overwritten: each has a fresh UUID name.
- Paths in the log are URI-encoded relative paths (or absolute URIs); they
  are decoded before touching the filesystem.
- Column mapping (``name`` / ``id`` mode): data files, partition values and
  statistics use physical names (and Parquet field ids); readers get logical
  names. A column is found in a data file by its field id in ``id`` mode
  (falling back to its physical name), by its physical name in ``name`` mode.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raydelta.protocol.actions import AddFile
from raydelta.protocol.deletion_vectors import DeletionVectorDescriptor
from raydelta.protocol.file_actions import canonical_path, table_root_key
from raydelta.protocol.partition_values import (
    parse_partition_value,
    partition_path,
    serialize_partition_value,
)
from raydelta.protocol.schema import (
    ColumnMappingMode,
    StructField,
    StructType,
    column_id,
    column_mapping_mode_from,
    physical_name,
)
from raydelta.protocol.schema_arrow import PARQUET_FIELD_ID_KEY, to_arrow
from raydelta.protocol.schema_enforcement import writer_arrow_schema
from raydelta.protocol.stats_collection import StatsSpec, collect_statistics
from raydelta.storage.deletion_vector_files import read_deletion_vector
from raydelta.storage.log_store import split_uri


def table_root_key_of(fs: Any, table_root: str) -> str:
    """The table root as :func:`raydelta.protocol.file_actions.table_root_key`
    spells it, for a filesystem and its root path (``split_uri``'s pair):
    ``/data/t`` for local tables, ``s3://bucket/t`` and ``memory:///t``
    otherwise. Log paths are compared against it (reconciliation, conflicts)."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol in ("file", "local"):
        return table_root_key(table_root)
    return table_root_key(f"{protocol}://{table_root}")


def data_file_path(fs: Any, table_root: str, path: str) -> str:
    """The filesystem path of an ``add.path`` (relative and URI-encoded, or absolute).

    The path is decoded exactly once, by
    :func:`raydelta.protocol.file_actions.canonical_path` (the spelling every
    comparison uses); a ``file:`` URI names a local file, another URI is
    stripped of its scheme by ``fs``.
    """
    canonical = canonical_path(path)
    if "://" in canonical:
        return str(fs._strip_protocol(canonical))
    if canonical.startswith("/"):
        return canonical
    return f"{table_root.rstrip('/')}/{canonical}"


def read_logical_file(
    table_uri: str,
    add: Mapping[str, Any],
    schema: StructType,
    partition_columns: Sequence[str],
    *,
    column_mapping_mode: ColumnMappingMode | str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> pa.Table:
    """The live rows of one ``add`` (a dict as in the log), in ``schema``'s order
    (logical names)."""
    mode = column_mapping_mode_from(column_mapping_mode)
    fs, root = split_uri(table_uri, storage_options)
    arrow_schema = to_arrow(schema)
    physical_schema = to_arrow(schema, physical=mode is not ColumnMappingMode.NONE)
    with fs.open(data_file_path(fs, root, add["path"]), "rb") as handle:
        parquet = pq.ParquetFile(handle)
        located = {
            f.name: _file_column(parquet.schema_arrow, f, mode)
            for f in schema.fields
            if f.name not in partition_columns
        }
        wanted = sorted({name for name in located.values() if name is not None})
        table = parquet.read(columns=wanted)
    dv = add.get("deletionVector")
    if dv:
        descriptor = DeletionVectorDescriptor.model_validate(dv)
        deleted = read_deletion_vector(descriptor, table_uri, storage_options=storage_options)
        if len(deleted):
            positions = pa.array(range(table.num_rows), type=pa.uint64())
            table = table.filter(pc.invert(pc.is_in(positions, value_set=deleted)))
    columns = []
    values = add.get("partitionValues") or {}
    for field, physical_field, delta_field in zip(
        arrow_schema, physical_schema, schema.fields, strict=True
    ):
        if field.name in partition_columns:
            raw = values.get(physical_name(delta_field, mode))
            value = parse_partition_value(raw, delta_field.type)
            columns.append(pa.array([value] * table.num_rows, type=field.type))
            continue
        source = located.get(field.name)
        if source is None:
            columns.append(pa.nulls(table.num_rows, field.type))
            continue
        columns.append(_renamed(table.column(source).cast(physical_field.type), field.type))
    return pa.Table.from_arrays(columns, schema=arrow_schema)


def _renamed(column: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    """``column`` as ``target``, a type that differs from its own only in the
    names of nested fields (physical vs logical): the buffers are reused."""
    if column.type == target:
        return column
    return pa.chunked_array([chunk.view(target) for chunk in column.chunks], type=target)


def _file_column(file_schema: pa.Schema, f: StructField, mode: ColumnMappingMode) -> str | None:
    """The name of ``f``'s column in a data file with ``file_schema``, or None."""
    if mode is ColumnMappingMode.ID and (wanted := column_id(f)) is not None:
        for candidate in file_schema:
            raw = (candidate.metadata or {}).get(PARQUET_FIELD_ID_KEY)
            if raw is not None and int(raw) == wanted:
                return str(candidate.name)
    name = physical_name(f, mode)
    return name if name in file_schema.names else None


def serialized_partition_values(
    schema: StructType,
    partition_columns: Sequence[str],
    values: Mapping[str, Any],
    mode: ColumnMappingMode,
) -> dict[str, str | None]:
    """``add.partitionValues`` of typed values: physical names, spec strings."""
    return {
        physical_name(schema.field(column), mode): serialize_partition_value(
            values.get(column), schema.field(column).type
        )
        for column in partition_columns
    }


def partition_directory(
    schema: StructType,
    partition_columns: Sequence[str],
    values: Mapping[str, Any],
    mode: ColumnMappingMode,
) -> str:
    """The relative directory (``a=1/b=x``) of a file with these partition values."""
    serialized = serialized_partition_values(schema, partition_columns, values, mode)
    return partition_path(serialized, list(serialized)) if partition_columns else ""


def write_data_file(
    table_uri: str,
    data: pa.Table,
    *,
    schema: StructType,
    partition_columns: Sequence[str],
    partition_values: Mapping[str, Any] | None = None,
    column_mapping_mode: ColumnMappingMode | str | None = None,
    storage_options: dict[str, Any] | None = None,
    stats_spec: StatsSpec | None = None,
    materialize_partition_columns: bool = False,
) -> AddFile:
    """Write ``data`` (logical column names) as one new parquet file; return its ``add``.

    ``partition_values`` are typed values (or None) for every partition column,
    by logical name. Partition columns are left out of the file unless
    ``materialize_partition_columns`` (the ``materializePartitionColumns``
    feature), where they follow the data columns. The ``add`` carries full
    statistics (:func:`raydelta.protocol.stats_collection.collect_statistics`).
    This is the one place raydelta writes a data file; the data writer
    (``storage/data_writer.py``) enforces the table's rules before calling it.
    """
    mode = column_mapping_mode_from(column_mapping_mode)
    mapped = mode is not ColumnMappingMode.NONE
    fs, root = split_uri(table_uri, storage_options)
    values = dict(partition_values or {})
    serialized = serialized_partition_values(schema, partition_columns, values, mode)
    directory = partition_path(serialized, list(serialized)) if partition_columns else ""
    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    relative = f"{directory}/{name}" if directory else name
    target = f"{root}/{relative}"
    fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
    data_fields = StructType(tuple(f for f in schema.fields if f.name not in partition_columns))
    file_fields = data_fields
    if materialize_partition_columns and partition_columns:
        file_fields = StructType(
            (*data_fields.fields, *(schema.field(c) for c in partition_columns))
        )
    logical = writer_arrow_schema(file_fields)
    physical = writer_arrow_schema(file_fields, physical=mapped)
    columns = []
    for want in logical:
        if want.name in data.column_names:
            columns.append(data.column(want.name).cast(want.type))
        else:  # a materialized partition column the caller left out
            value = values.get(want.name)
            columns.append(pa.chunked_array([pa.array([value] * data.num_rows, type=want.type)]))
    logical_data = pa.Table.from_arrays(columns, schema=logical)
    file_data = logical_data
    if mapped:
        file_data = pa.Table.from_arrays(
            [
                _renamed(column, want.type)
                for column, want in zip(logical_data.columns, physical, strict=True)
            ],
            schema=physical,
        )
    with fs.open(target, "wb") as handle:
        pq.write_table(file_data, handle, compression="snappy")
    size = int(fs.size(target))
    spec = stats_spec or StatsSpec(mapping_mode=mode)
    return AddFile(
        path=quote(relative, safe="/="),
        partitionValues=serialized,
        size=size,
        modificationTime=int(time.time() * 1000),
        dataChange=True,
        stats=collect_statistics(logical_data, data_fields.fields, spec),
    )
