"""Schema enforcement and evolution for data about to be written.

Invariants:
- :func:`align_to_schema` returns the data with exactly the table's columns
  (logical names, the table's Arrow types, the table's order), or raises
  :class:`SchemaMismatchError` naming the first offending column: a column
  the table lacks, a table column the data lacks (unless it is one the
  writer computes: default, generated, identity), or a type that cannot be
  written losslessly. Names match exactly, else case-insensitively (Spark).
- Lossless means: the same type; a wider integer (byte → short → int →
  long); float → double; an integer of at most 24 (float) or 53 (double)
  bits → float/double; a decimal into a decimal that holds it (scale and
  integer digits not smaller); string/large_string/string_view and the
  binary family among themselves; dictionary-encoded values by their value
  type; date32/date64 → date; any timestamp unit → microseconds when no
  value loses precision, with the same zone-awareness (an aware timestamp is
  never written to ``timestamp_ntz`` nor a naive one to ``timestamp``);
  struct, list and map recursively; null → any type. Everything else
  (narrowing, another family) is refused.
- :func:`merge_schema` keeps every table column (and its metadata) and
  appends the data's new columns, nested struct fields too, as nullable;
  types of existing columns follow the table.
"""

from __future__ import annotations

from collections.abc import Collection

import pyarrow as pa

from raydelta.protocol.errors import SchemaError, SchemaMismatchError
from raydelta.protocol.schema import ArrayType, DataType, MapType, StructField, StructType
from raydelta.protocol.schema_arrow import from_arrow, to_arrow

_INT_ORDER = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]


def writer_arrow_schema(schema: StructType, *, physical: bool = False) -> pa.Schema:
    """The Arrow schema rows are written with: the table's types with every
    field nullable. Delta writers write nullable Parquet columns (delta-spark
    writes ``schema.asNullable``); NOT NULL is enforced on the rows instead,
    with delta-spark's rule for fields under a null struct."""
    return pa.schema([_nullable_field(f) for f in to_arrow(schema, physical=physical)])


def _nullable_field(f: pa.Field) -> pa.Field:
    return pa.field(f.name, _nullable_arrow(f.type), nullable=True, metadata=f.metadata)


def _nullable_arrow(t: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([_nullable_field(t.field(i)) for i in range(t.num_fields)])
    if pa.types.is_list(t):
        return pa.list_(_nullable_field(t.value_field))
    if pa.types.is_map(t):
        item = _nullable_field(t.item_field)
        return pa.map_(t.key_field, item)
    return t


def _match(names: list[str], wanted: str) -> str | None:
    if wanted in names:
        return wanted
    folded = [n for n in names if n.lower() == wanted.lower()]
    return folded[0] if len(folded) == 1 else None


def align_to_schema(
    data: pa.Table, schema: StructType, *, computed: Collection[str] = ()
) -> pa.Table:
    """``data`` as the table's columns and types; ``computed`` columns may be absent."""
    names = list(data.column_names)
    if len(set(n.lower() for n in names)) != len(names):
        raise SchemaMismatchError(f"the data has duplicate column names: {names}")
    wanted = {f.name.lower() for f in schema.fields}
    for name in names:
        if name.lower() not in wanted:
            raise SchemaMismatchError(
                f"column {name!r} is not in the table's schema "
                f"(columns: {schema.field_names}); use schema_mode='merge' to add it",
                name,
                None,
                str(data.schema.field(name).type),
            )
    columns: list[pa.ChunkedArray] = []
    fields: list[pa.Field] = []
    target_schema = writer_arrow_schema(schema)
    for f, target in zip(schema.fields, target_schema, strict=True):
        source = _match(names, f.name)
        if source is None:
            if f.name in computed:
                continue
            raise SchemaMismatchError(
                f"column {f.name!r} ({f.type}) is missing from the data",
                f.name,
                str(f.type),
                None,
            )
        column = data.column(source)
        columns.append(cast_column(column, target.type, f.name))
        fields.append(target)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def cast_column(column: pa.ChunkedArray, target: pa.DataType, name: str) -> pa.ChunkedArray:
    """``column`` as ``target`` when lossless; :class:`SchemaMismatchError` otherwise."""
    if column.type == target:
        return column
    problem = lossless_problem(column.type, target, name)
    if problem is not None:
        raise SchemaMismatchError(
            f"column {problem[0]!r}: the table's type is {problem[1]}, the data has {problem[2]}, "
            "which cannot be written without loss",
            problem[0],
            str(problem[1]),
            str(problem[2]),
        )
    source = column.type
    if pa.types.is_dictionary(source):
        column = column.cast(source.value_type)
        return cast_column(column, target, name)
    try:
        return column.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise SchemaMismatchError(
            f"column {name!r}: the data's {source} values cannot be written as {target}: {error}",
            name,
            str(target),
            str(source),
        ) from error


def lossless_problem(
    source: pa.DataType, target: pa.DataType, path: str
) -> tuple[str, pa.DataType, pa.DataType] | None:
    """None when ``source`` values fit ``target``; else (path, target, source)."""
    if source == target or pa.types.is_null(source):
        return None
    if pa.types.is_dictionary(source):
        return lossless_problem(source.value_type, target, path)
    bad = (path, target, source)
    if pa.types.is_integer(target):
        if not pa.types.is_integer(source):
            return bad
        if pa.types.is_unsigned_integer(source):
            return None if source.bit_width < target.bit_width else bad
        return None if source.bit_width <= target.bit_width else bad
    if pa.types.is_floating(target):
        if pa.types.is_floating(source):
            return None if source.bit_width <= target.bit_width else bad
        if pa.types.is_integer(source):
            mantissa = 24 if target.bit_width == 32 else 53
            return None if source.bit_width < mantissa else bad
        return bad
    if pa.types.is_decimal(target):
        if pa.types.is_decimal(source):
            digits_ok = source.precision - source.scale <= target.precision - target.scale
            return None if digits_ok and source.scale <= target.scale else bad
        if pa.types.is_integer(source):
            needed = {8: 3, 16: 5, 32: 10, 64: 19}[source.bit_width]
            return None if target.precision - target.scale >= needed else bad
        return bad
    if pa.types.is_string(target) or pa.types.is_large_string(target):
        ok = (
            pa.types.is_string(source)
            or pa.types.is_large_string(source)
            or (pa.types.is_string_view(source))
        )
        return None if ok else bad
    if pa.types.is_binary(target):
        ok = (
            pa.types.is_binary(source)
            or pa.types.is_large_binary(source)
            or pa.types.is_binary_view(source)
            or pa.types.is_fixed_size_binary(source)
        )
        return None if ok else bad
    if pa.types.is_date(target):
        return None if pa.types.is_date(source) else bad
    if pa.types.is_timestamp(target):
        if not pa.types.is_timestamp(source):
            return bad
        if (source.tz is None) != (target.tz is None):
            return bad
        return None
    if (
        pa.types.is_struct(target)
        or pa.types.is_list(target)
        or pa.types.is_large_list(target)
        or pa.types.is_map(target)
    ):
        return _nested_lossless_problem(source, target, path)
    return bad


def _nested_lossless_problem(
    source: pa.DataType, target: pa.DataType, path: str
) -> tuple[str, pa.DataType, pa.DataType] | None:
    """:func:`lossless_problem` for a struct, list or map ``target``: the
    same kind of container, then each child (struct fields by name, case
    aside)."""
    bad = (path, target, source)
    if pa.types.is_struct(target):
        if not pa.types.is_struct(source):
            return bad
        names = [source.field(i).name for i in range(source.num_fields)]
        wanted = [target.field(i).name for i in range(target.num_fields)]
        if sorted(n.lower() for n in names) != sorted(n.lower() for n in wanted):
            return bad
        for i in range(target.num_fields):
            child = target.field(i)
            found = _match(names, child.name)
            assert found is not None
            problem = lossless_problem(source.field(found).type, child.type, f"{path}.{child.name}")
            if problem is not None:
                return problem
        return None
    if pa.types.is_list(target) or pa.types.is_large_list(target):
        if not (
            pa.types.is_list(source)
            or pa.types.is_large_list(source)
            or pa.types.is_fixed_size_list(source)
        ):
            return bad
        return lossless_problem(source.value_type, target.value_type, f"{path}.element")
    if pa.types.is_map(target):
        if not pa.types.is_map(source):
            return bad
        return lossless_problem(
            source.key_type, target.key_type, f"{path}.key"
        ) or lossless_problem(source.item_type, target.item_type, f"{path}.value")
    return bad


def merge_schema(table: StructType, data: pa.Schema) -> StructType:
    """The table's schema plus the data's new columns (see the module)."""
    try:
        incoming = from_arrow(data)
    except SchemaError as error:
        raise SchemaMismatchError(f"the data's schema has no Delta equivalent: {error}") from error
    merged = _merge_struct(table, incoming, "")
    return merged


def _merge_struct(table: StructType, data: StructType, prefix: str) -> StructType:
    fields = list(table.fields)
    names = [f.name for f in fields]
    for incoming in data.fields:
        found = _match(names, incoming.name)
        if found is None:
            fields.append(_nullable(incoming))
            names.append(incoming.name)
            continue
        index = names.index(found)
        existing = fields[index]
        if isinstance(existing.type, StructType) and isinstance(incoming.type, StructType):
            merged = _merge_struct(existing.type, incoming.type, f"{prefix}{existing.name}.")
            fields[index] = StructField(
                existing.name, merged, existing.nullable, existing.metadata, existing.extra
            )
    return StructType(tuple(fields), table.extra)


def _nullable(f: StructField) -> StructField:
    return StructField(f.name, _nullable_type(f.type), True, {})


def _nullable_type(dtype: DataType) -> DataType:
    if isinstance(dtype, StructType):
        return StructType(tuple(_nullable(f) for f in dtype.fields))
    if isinstance(dtype, ArrayType):
        return ArrayType(_nullable_type(dtype.element_type), True)
    if isinstance(dtype, MapType):
        return MapType(dtype.key_type, _nullable_type(dtype.value_type), True)
    return dtype


def schema_of_data(data: pa.Schema) -> StructType:
    """The Delta schema of the data (``schema_mode="overwrite"``)."""
    try:
        return from_arrow(data)
    except SchemaError as error:
        raise SchemaMismatchError(f"the data's schema has no Delta equivalent: {error}") from error
