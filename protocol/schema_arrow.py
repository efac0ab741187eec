"""The Arrow mapping of Delta schemas (PROTOCOL.md, "Primitive Types"; Spark's
physical layout for ``variant``).

Invariants:
- ``timestamp`` → ``timestamp[us, tz=UTC]``, ``timestamp_ntz`` →
  ``timestamp[us]``, ``date`` → ``date32``, ``decimal(p,s)`` →
  ``decimal128(p,s)``, ``variant`` → ``struct<value: binary, metadata: binary>``,
  ``void`` → ``null``.
- :func:`from_arrow` accepts the wider Arrow family (large/view strings and
  lists, any timestamp unit, dictionaries...) and refuses what Delta cannot
  store (unsigned 64-bit, unions, durations...) with :class:`SchemaError`.
- With ``physical=True`` fields carry their column-mapping physical names
  and field ids (:data:`PARQUET_FIELD_ID_KEY`) as the data files store them.
"""

from __future__ import annotations

import pyarrow as pa

from raydelta.protocol.errors import SchemaError
from raydelta.protocol.schema import (
    BINARY,
    BOOLEAN,
    BYTE,
    COLUMN_MAPPING_PHYSICAL_NAME_KEY,
    DATE,
    DOUBLE,
    FLOAT,
    INTEGER,
    LONG,
    MAX_DECIMAL_PRECISION,
    SHORT,
    STRING,
    TIMESTAMP,
    TIMESTAMP_NTZ,
    VOID,
    ArrayType,
    DataType,
    DecimalType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
    column_id,
    nested_ids,
)

PARQUET_FIELD_ID_KEY = b"PARQUET:field_id"

_PRIMITIVE_TO_ARROW: dict[str, pa.DataType] = {
    "string": pa.string(),
    "long": pa.int64(),
    "integer": pa.int32(),
    "short": pa.int16(),
    "byte": pa.int8(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
    "void": pa.null(),
    "variant": pa.struct(
        [
            pa.field("value", pa.binary(), nullable=False),
            pa.field("metadata", pa.binary(), nullable=False),
        ]
    ),
}


def to_arrow(schema: StructType, *, physical: bool = False) -> pa.Schema:
    """The Arrow schema of a table schema.

    With ``physical=True`` fields carry their column-mapping physical names
    (where the metadata holds one) and their ids as Parquet field ids, which is
    the schema of the data files of a column-mapped table.
    """
    return pa.schema([_field_to_arrow(f, physical=physical) for f in schema.fields])


def data_type_to_arrow(dtype: DataType, *, physical: bool = False) -> pa.DataType:
    """The Arrow type of one Delta type."""
    return _type_to_arrow(dtype, physical, None, {})


def _field_to_arrow(f: StructField, *, physical: bool) -> pa.Field:
    name = f.name
    metadata: dict[bytes, bytes] | None = None
    ids: dict[str, int] = {}
    if physical:
        phys = f.metadata.get(COLUMN_MAPPING_PHYSICAL_NAME_KEY)
        if isinstance(phys, str) and phys:
            name = phys
        cid = column_id(f)
        if cid is not None:
            metadata = {PARQUET_FIELD_ID_KEY: str(cid).encode()}
        ids = nested_ids(f)
    arrow_type = _type_to_arrow(f.type, physical, name, ids)
    # Arrow's null type is always nullable (a void column holds only nulls).
    nullable = f.nullable or pa.types.is_null(arrow_type)
    return pa.field(name, arrow_type, nullable=nullable, metadata=metadata)


def _nested_field(
    name: str,
    dtype: DataType,
    nullable: bool,
    physical: bool,
    id_path: str | None,
    ids: dict[str, int],
) -> pa.Field:
    metadata = None
    if id_path is not None and id_path in ids:
        metadata = {PARQUET_FIELD_ID_KEY: str(ids[id_path]).encode()}
    arrow_type = _type_to_arrow(dtype, physical, id_path, ids)
    if pa.types.is_null(arrow_type):
        if name == "key":
            raise SchemaError("a map key of type void has no Arrow equivalent")
        nullable = True
    return pa.field(name, arrow_type, nullable=nullable, metadata=metadata)


def _type_to_arrow(
    dtype: DataType, physical: bool, id_path: str | None, ids: dict[str, int]
) -> pa.DataType:
    if isinstance(dtype, PrimitiveType):
        return _PRIMITIVE_TO_ARROW[dtype.name]
    if isinstance(dtype, DecimalType):
        return pa.decimal128(dtype.precision, dtype.scale)
    if isinstance(dtype, StructType):
        return pa.struct([_field_to_arrow(f, physical=physical) for f in dtype.fields])
    if isinstance(dtype, ArrayType):
        path = None if id_path is None else f"{id_path}.element"
        return pa.list_(
            _nested_field("element", dtype.element_type, dtype.contains_null, physical, path, ids)
        )
    if isinstance(dtype, MapType):
        key_path = None if id_path is None else f"{id_path}.key"
        value_path = None if id_path is None else f"{id_path}.value"
        return pa.map_(
            _nested_field("key", dtype.key_type, False, physical, key_path, ids),
            _nested_field(
                "value", dtype.value_type, dtype.value_contains_null, physical, value_path, ids
            ),
        )
    raise SchemaError(f"type {dtype} has no Arrow equivalent")


def from_arrow(schema: pa.Schema | pa.StructType) -> StructType:
    """The Delta schema of an Arrow schema (used to create tables from Arrow)."""
    if isinstance(schema, pa.Schema):
        fields = list(schema)
    else:
        fields = [schema.field(i) for i in range(schema.num_fields)]
    return StructType(tuple(_field_from_arrow(f) for f in fields))


def data_type_from_arrow(arrow_type: pa.DataType) -> DataType:
    """The Delta type of one Arrow type; :class:`SchemaError` when Delta has none."""
    t = arrow_type
    if pa.types.is_dictionary(t):
        return data_type_from_arrow(t.value_type)
    if isinstance(t, pa.ExtensionType):
        return data_type_from_arrow(t.storage_type)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return STRING
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    ):
        return BINARY
    if pa.types.is_boolean(t):
        return BOOLEAN
    signed = {8: BYTE, 16: SHORT, 32: INTEGER, 64: LONG}
    if pa.types.is_signed_integer(t):
        return signed[t.bit_width]
    if pa.types.is_unsigned_integer(t):
        # Widen to the next signed type so every value fits; uint64 has none.
        if t.bit_width == 64:
            raise SchemaError("Delta has no type for unsigned 64-bit integers")
        return signed[t.bit_width * 2]
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return FLOAT
    if pa.types.is_float64(t):
        return DOUBLE
    if pa.types.is_decimal(t):
        if t.precision > MAX_DECIMAL_PRECISION:
            raise SchemaError(f"decimal precision {t.precision} exceeds Delta's maximum of 38")
        return DecimalType(t.precision, t.scale)
    if pa.types.is_date(t):
        return DATE
    if pa.types.is_timestamp(t):
        return TIMESTAMP if t.tz is not None else TIMESTAMP_NTZ
    if pa.types.is_null(t):
        return VOID
    if pa.types.is_struct(t):
        return StructType(tuple(_field_from_arrow(t.field(i)) for i in range(t.num_fields)))
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    ):
        return ArrayType(data_type_from_arrow(t.value_type), t.value_field.nullable)
    if pa.types.is_map(t):
        return MapType(
            data_type_from_arrow(t.key_type),
            data_type_from_arrow(t.item_type),
            t.item_field.nullable,
        )
    raise SchemaError(f"Arrow type {t} has no Delta equivalent")


def _field_from_arrow(f: pa.Field) -> StructField:
    return StructField(f.name, data_type_from_arrow(f.type), f.nullable, {})
