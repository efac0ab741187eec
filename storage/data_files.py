"""Reading and writing the table's data files (parquet), for engines that
have no Delta reader of their own (the Spark data source, tests).

Invariants:
- Reading a logical file returns exactly its live rows: the rows of the
  parquet file minus the rows its deletion vector marks, with partition
  columns filled from the ``add`` action's partition values (the log is the
  truth, never the directory names) and missing columns as nulls.
- Writing returns an ``AddFile`` whose ``size`` is the file's real size and
  whose ``stats`` hold an exact ``numRecords`` (and min/max/nullCount for the
  primitive columns), so DVs may later be attached to it.
- Paths in the log are URI-encoded relative paths (or absolute URIs); they
  are decoded before touching the filesystem.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from protocol.actions import AddFile
from protocol.deletion_vectors import DeletionVectorDescriptor
from protocol.partition_values import (
    parse_partition_value,
    partition_path,
    serialize_partition_value,
)
from protocol.schema import StructType, data_type_to_arrow, to_arrow
from storage.deletion_vector_files import read_deletion_vector
from storage.log_store import split_uri


def data_file_path(fs: Any, table_root: str, path: str) -> str:
    """The filesystem path of an ``add.path`` (relative and URI-encoded, or absolute)."""
    decoded = unquote(path)
    if "://" in path or path.startswith("file:"):
        return str(fs._strip_protocol(decoded))
    if decoded.startswith("/"):
        return decoded
    return f"{table_root.rstrip('/')}/{decoded}"


def read_logical_file(
    table_uri: str,
    add: Mapping[str, Any],
    schema: StructType,
    partition_columns: Sequence[str],
    *,
    storage_options: dict[str, Any] | None = None,
) -> pa.Table:
    """The live rows of one ``add`` (a dict as in the log), in ``schema``'s order."""
    fs, root = split_uri(table_uri, storage_options)
    arrow_schema = to_arrow(schema)
    data_columns = [f for f in arrow_schema if f.name not in partition_columns]
    with fs.open(data_file_path(fs, root, add["path"]), "rb") as handle:
        parquet = pq.ParquetFile(handle)
        present = set(parquet.schema_arrow.names)
        table = parquet.read(columns=[f.name for f in data_columns if f.name in present])
    dv = add.get("deletionVector")
    if dv:
        descriptor = DeletionVectorDescriptor.model_validate(dv)
        deleted = read_deletion_vector(descriptor, table_uri, storage_options=storage_options)
        if len(deleted):
            positions = pa.array(range(table.num_rows), type=pa.uint64())
            table = table.filter(pc.invert(pc.is_in(positions, value_set=deleted)))
    columns = []
    values = add.get("partitionValues") or {}
    for field in arrow_schema:
        if field.name in partition_columns:
            delta_type = schema.field(field.name).type
            value = parse_partition_value(values.get(field.name), delta_type)
            columns.append(pa.array([value] * table.num_rows, type=field.type))
        elif field.name in table.column_names:
            columns.append(table.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=arrow_schema)


def _stats(table: pa.Table) -> str:
    minimum: dict[str, Any] = {}
    maximum: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name in table.column_names:
        column = table.column(name)
        nulls[name] = column.null_count
        kind = column.type
        if not (
            pa.types.is_integer(kind)
            or pa.types.is_floating(kind)
            or pa.types.is_string(kind)
            or pa.types.is_date(kind)
            or pa.types.is_timestamp(kind)
            or pa.types.is_decimal(kind)
        ):
            continue
        if column.null_count == len(column):
            continue
        bounds = pc.min_max(column)
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if pa.types.is_timestamp(kind):
            low = low.isoformat(timespec="milliseconds").replace("+00:00", "Z")
            high = high.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        elif pa.types.is_date(kind) or pa.types.is_decimal(kind):
            low, high = str(low), str(high)
        minimum[name], maximum[name] = low, high
    return json.dumps(
        {
            "numRecords": table.num_rows,
            "minValues": minimum,
            "maxValues": maximum,
            "nullCount": nulls,
        },
        separators=(",", ":"),
        default=str,
    )


def write_data_file(
    table_uri: str,
    data: pa.Table,
    *,
    schema: StructType,
    partition_columns: Sequence[str],
    partition_values: Mapping[str, Any] | None = None,
    storage_options: dict[str, Any] | None = None,
) -> AddFile:
    """Write ``data`` (data columns only) as one new parquet file; return its ``add``.

    ``partition_values`` are typed values (or None) for every partition column.
    """
    fs, root = split_uri(table_uri, storage_options)
    values = dict(partition_values or {})
    serialized = {
        column: serialize_partition_value(values.get(column), schema.field(column).type)
        for column in partition_columns
    }
    directory = partition_path(serialized, list(partition_columns)) if partition_columns else ""
    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    relative = f"{directory}/{name}" if directory else name
    target = f"{root}/{relative}"
    fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
    data_fields = [f for f in schema.fields if f.name not in partition_columns]
    wanted = pa.schema([pa.field(f.name, data_type_to_arrow(f.type)) for f in data_fields])
    data = data.select([f.name for f in wanted]).cast(wanted)
    with fs.open(target, "wb") as handle:
        pq.write_table(data, handle, compression="snappy")
    size = int(fs.size(target))
    return AddFile(
        path=quote(relative),
        partitionValues=serialized,
        size=size,
        modificationTime=int(time.time() * 1000),
        dataChange=True,
        stats=_stats(data),
    )
