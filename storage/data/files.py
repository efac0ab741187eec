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
  are decoded exactly once (``file_actions.canonical_path``, the spelling
  every comparison uses: :meth:`LogStore.data_path`) before touching the
  filesystem. Every byte goes through the table's store
  (:func:`raydelta.storage.log.store.log_store_for`).
- Variant columns (anywhere in a type) are returned in their physical parquet
  form, as the file stores them: ``struct<value, metadata>`` unshredded, or
  ``struct<metadata, value, typed_value>`` shredded (variantShredding); the
  reader never reassembles or reinterprets variant bytes.
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
from raydelta.protocol.partition_values import (
    parse_partition_value,
    partition_path,
    serialize_partition_value,
)
from raydelta.protocol.schema import (
    VARIANT,
    ColumnMappingMode,
    StructField,
    StructType,
    column_id,
    column_mapping_mode_from,
    contains_type,
    physical_name,
)
from raydelta.protocol.schema_arrow import PARQUET_FIELD_ID_KEY, data_type_to_arrow, to_arrow
from raydelta.protocol.schema_enforcement import writer_arrow_schema
from raydelta.protocol.stats_collection import StatsSpec, collect_statistics
from raydelta.storage.data.deletion_vectors import read_deletion_vector
from raydelta.storage.log.store import log_store_for


def remove_data_files(
    table_uri: str, paths: Sequence[str], *, storage_options: dict[str, Any] | None = None
) -> None:
    """Remove the files of ``paths`` (``add.path`` spellings) that exist: the
    files of a write that is being abandoned, never committed."""
    store = log_store_for(table_uri, storage_options)
    for path in paths:
        target = store.data_path(path)
        if store.exists(target):
            store.remove_file(target)


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
    store = log_store_for(table_uri, storage_options)
    arrow_schema = to_arrow(schema)
    physical_schema = to_arrow(schema, physical=mode is not ColumnMappingMode.NONE)
    with store.open_input(store.data_path(add["path"])) as handle:
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
        deleted = read_deletion_vector(descriptor, table_uri, store=store)
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
        column = table.column(source)
        physical_type, logical_type = physical_field.type, field.type
        if contains_type(delta_field.type, "variant"):
            physical_type = _as_stored(physical_type, column.type)
            logical_type = _renamed_like(logical_type, physical_type)
        columns.append(_renamed(column.cast(physical_type), logical_type))
    out_schema = pa.schema(
        [f.with_type(c.type) for f, c in zip(arrow_schema, columns, strict=True)],
        metadata=arrow_schema.metadata,
    )
    return pa.Table.from_arrays(columns, schema=out_schema)


_VARIANT_ARROW = data_type_to_arrow(VARIANT)


def _is_list(dtype: pa.DataType) -> bool:
    return bool(pa.types.is_list(dtype) or pa.types.is_large_list(dtype))


def _as_stored(target: pa.DataType, stored: pa.DataType) -> pa.DataType:
    """``target`` with each variant in it replaced by the struct the file
    stores there: ``value`` and ``metadata`` (unshredded), or ``metadata``,
    ``value`` and ``typed_value`` (shredded). Variants are returned in their
    physical parquet form, as stored; nothing else changes."""
    if target == _VARIANT_ARROW:
        return stored if pa.types.is_struct(stored) else target
    if pa.types.is_struct(target) and pa.types.is_struct(stored):
        by_name = {stored.field(i).name: stored.field(i).type for i in range(stored.num_fields)}
        fields = [
            f.with_type(_as_stored(f.type, by_name[f.name])) if f.name in by_name else f
            for f in target
        ]
        return pa.struct(fields)
    if _is_list(target) and _is_list(stored):
        value = target.value_field.with_type(_as_stored(target.value_type, stored.value_type))
        return pa.list_(value) if pa.types.is_list(target) else pa.large_list(value)
    if pa.types.is_map(target) and pa.types.is_map(stored):
        return pa.map_(
            target.key_field.with_type(_as_stored(target.key_type, stored.key_type)),
            target.item_field.with_type(_as_stored(target.item_type, stored.item_type)),
            keys_sorted=target.keys_sorted,
        )
    return target


def _renamed_like(logical: pa.DataType, physical: pa.DataType) -> pa.DataType:
    """``physical`` (``_as_stored`` of the physical type) with the field names
    of ``logical`` (the two differ only in names and in stored variants)."""
    if logical == _VARIANT_ARROW:
        return physical
    if pa.types.is_struct(logical):
        return pa.struct(
            [
                lf.with_type(_renamed_like(lf.type, physical.field(i).type))
                for i, lf in enumerate(logical)
            ]
        )
    if _is_list(logical):
        element = _renamed_like(logical.value_type, physical.value_type)
        value = logical.value_field.with_type(element)
        return pa.list_(value) if pa.types.is_list(logical) else pa.large_list(value)
    if pa.types.is_map(logical):
        return pa.map_(
            logical.key_field.with_type(_renamed_like(logical.key_type, physical.key_type)),
            logical.item_field.with_type(_renamed_like(logical.item_type, physical.item_type)),
            keys_sorted=logical.keys_sorted,
        )
    return logical


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
    directory_prefix: str = "",
    file_prefix: str = "part-00000",
    hidden_columns: Sequence[str] = (),
) -> AddFile:
    """Write ``data`` (logical column names) as one new parquet file; return its ``add``.

    ``partition_values`` are typed values (or None) for every partition column,
    by logical name. Partition columns are left out of the file unless
    ``materialize_partition_columns`` (the ``materializePartitionColumns``
    feature), where they follow the data columns. ``directory_prefix``
    (``_change_data`` for change data files) and ``file_prefix`` place and
    name the file. ``hidden_columns`` (row tracking's materialized row id and
    commit version columns) are columns of ``data`` outside the schema,
    written after the others as they are, without statistics. The ``add``
    carries full statistics (:func:`raydelta.protocol.stats_collection.collect_statistics`).
    This is the one place raydelta writes a data file; the data writer
    (``storage/data/writer.py``) enforces the table's rules before calling it.
    """
    mode = column_mapping_mode_from(column_mapping_mode)
    mapped = mode is not ColumnMappingMode.NONE
    store = log_store_for(table_uri, storage_options)
    values = dict(partition_values or {})
    serialized = serialized_partition_values(schema, partition_columns, values, mode)
    directory = partition_path(serialized, list(serialized)) if partition_columns else ""
    name = f"{file_prefix}-{uuid.uuid4()}-c000.snappy.parquet"
    relative = "/".join(p for p in (directory_prefix.strip("/"), directory, name) if p)
    target = store.root_path(relative)
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
    for hidden in hidden_columns:
        if hidden in data.column_names:
            file_data = file_data.append_column(hidden, data.column(hidden))
    with store.open_output(target) as handle:
        pq.write_table(file_data, handle, compression="snappy")
    size = store.status(target).size
    spec = stats_spec or StatsSpec(mapping_mode=mode)
    return AddFile(
        path=quote(relative, safe="/="),
        partitionValues=serialized,
        size=size,
        modificationTime=int(time.time() * 1000),
        dataChange=True,
        stats=collect_statistics(logical_data, data_fields.fields, spec),
    )
