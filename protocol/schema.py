"""The Delta schema type system: parse, serialize, walk, column mapping.

A table schema is the JSON ``schemaString`` of the ``metaData`` action
(PROTOCOL.md, "Schema Serialization Format"): a subset of Spark SQL's JSON
schema. This module turns it into immutable values and back.

Invariants:
- Lossless: ``json.loads(serialize_schema(parse_schema(s))) == json.loads(s)``
  for every schema a Delta writer produces. Unknown type names and unknown
  type objects (``{"type": "udt", ...}``) become :class:`UnknownType` holding
  the raw JSON; unknown keys next to a known type or field are kept in
  ``extra`` and written back; column metadata (``delta.columnMapping.*``,
  ``__COLLATIONS``, ``delta.typeChanges``...) is kept verbatim.
  Two normalisations only: a field without ``nullable``/``metadata`` is
  written with ``"nullable": true`` / ``"metadata": {}`` (Spark's defaults), and
  ``decimal( p , s )`` is written ``decimal(p,s)``.
- Every value is a frozen dataclass, hashable (dict-valued parts are left
  out of the hash but not out of equality).
- Column mapping (PROTOCOL.md, "Column Mapping"): in ``id``/``name`` mode the
  physical name of a field is ``delta.columnMapping.physicalName``, its id
  ``delta.columnMapping.id``; in ``none`` mode the physical name is the name.
- The Arrow mapping is :mod:`raydelta.protocol.schema_arrow`.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from raydelta.protocol.errors import SchemaError

# --- column metadata keys -------------------------------------------------------

COLUMN_MAPPING_ID_KEY = "delta.columnMapping.id"
COLUMN_MAPPING_PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"
# IcebergCompatV2 ids of array elements / map keys and values. The spec names
# ``parquet.field.nested.ids``; delta-spark writes ``delta.columnMapping.nested.ids``.
NESTED_IDS_KEYS = ("delta.columnMapping.nested.ids", "parquet.field.nested.ids")

PRIMITIVE_TYPE_NAMES = frozenset(
    {
        "string",
        "long",
        "integer",
        "short",
        "byte",
        "float",
        "double",
        "boolean",
        "binary",
        "date",
        "timestamp",
        "timestamp_ntz",
        "void",
        "variant",
    }
)

_DECIMAL_RE = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
MAX_DECIMAL_PRECISION = 38


class ColumnMappingMode(enum.StrEnum):
    """Value of the table property ``delta.columnMapping.mode``."""

    NONE = "none"
    ID = "id"
    NAME = "name"


# --- types -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PrimitiveType:
    """A named primitive type (``string``, ``long``, ``timestamp_ntz``, ``variant``...)."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in PRIMITIVE_TYPE_NAMES:
            raise SchemaError(f"unknown primitive type {self.name!r}")

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class DecimalType:
    """``decimal(precision, scale)`` with 1 <= precision <= 38 and 0 <= scale <= precision."""

    precision: int
    scale: int

    def __post_init__(self) -> None:
        if not 1 <= self.precision <= MAX_DECIMAL_PRECISION:
            raise SchemaError(f"decimal precision must be in [1, 38], got {self.precision}")
        if not 0 <= self.scale <= self.precision:
            raise SchemaError(
                f"decimal scale must be in [0, precision={self.precision}], got {self.scale}"
            )

    @property
    def name(self) -> str:
        return f"decimal({self.precision},{self.scale})"

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class UnknownType:
    """A type this module does not know, kept as its raw JSON (string or object)."""

    raw: Any = field(hash=False)

    def __str__(self) -> str:
        return json.dumps(self.raw)


@dataclass(frozen=True, slots=True)
class ArrayType:
    element_type: DataType
    contains_null: bool = True
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True, slots=True)
class MapType:
    key_type: DataType
    value_type: DataType
    value_contains_null: bool = True
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True, slots=True)
class StructField:
    """A column (top-level or nested) with its JSON ``metadata`` map."""

    name: str
    type: DataType
    nullable: bool = True
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False)
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @property
    def column_id(self) -> int | None:
        return column_id(self)


@dataclass(frozen=True, slots=True)
class StructType:
    """A struct: the table schema itself or a nested struct column."""

    fields: tuple[StructField, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.fields, tuple):
            object.__setattr__(self, "fields", tuple(self.fields))

    def __iter__(self) -> Iterator[StructField]:
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    @property
    def field_names(self) -> list[str]:
        return [f.name for f in self.fields]

    def get(self, name: str, *, case_sensitive: bool = True) -> StructField | None:
        """The field called ``name``, or None."""
        for f in self.fields:
            if f.name == name:
                return f
        if not case_sensitive:
            folded = name.lower()
            for f in self.fields:
                if f.name.lower() == folded:
                    return f
        return None

    def field(self, name: str, *, case_sensitive: bool = True) -> StructField:
        """The field called ``name``; :class:`SchemaError` when absent."""
        found = self.get(name, case_sensitive=case_sensitive)
        if found is None:
            raise SchemaError(f"no column {name!r} in schema (columns: {self.field_names})")
        return found

    def field_at(self, path: list[str] | tuple[str, ...]) -> StructField:
        """The nested field at ``path`` (struct field names only)."""
        if not path:
            raise SchemaError("an empty column path names no field")
        current: StructType = self
        found: StructField | None = None
        for i, part in enumerate(path):
            found = current.field(part)
            if i < len(path) - 1:
                if not isinstance(found.type, StructType):
                    raise SchemaError(f"column {'.'.join(path[: i + 1])!r} is not a struct")
                current = found.type
        assert found is not None
        return found


DataType = PrimitiveType | DecimalType | StructType | ArrayType | MapType | UnknownType

STRING = PrimitiveType("string")
LONG = PrimitiveType("long")
INTEGER = PrimitiveType("integer")
SHORT = PrimitiveType("short")
BYTE = PrimitiveType("byte")
FLOAT = PrimitiveType("float")
DOUBLE = PrimitiveType("double")
BOOLEAN = PrimitiveType("boolean")
BINARY = PrimitiveType("binary")
DATE = PrimitiveType("date")
TIMESTAMP = PrimitiveType("timestamp")
TIMESTAMP_NTZ = PrimitiveType("timestamp_ntz")
VOID = PrimitiveType("void")
VARIANT = PrimitiveType("variant")


# --- JSON parse / serialize ---------------------------------------------------------


def parse_schema(schema_string: str) -> StructType:
    """Parse a ``schemaString``; the top level must be a struct."""
    try:
        raw = json.loads(schema_string)
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"schema string is not JSON: {exc}") from exc
    dtype = data_type_from_json(raw)
    if not isinstance(dtype, StructType):
        raise SchemaError("a table schema must be a struct type")
    return dtype


def serialize_schema(schema: StructType) -> str:
    """The compact one-line JSON form written into ``schemaString``."""
    return json.dumps(data_type_to_json(schema), separators=(",", ":"), ensure_ascii=False)


def data_type_from_json(raw: Any) -> DataType:
    """One type from its JSON value (a type name or a type object)."""
    if isinstance(raw, str):
        if raw in PRIMITIVE_TYPE_NAMES:
            return PrimitiveType(raw)
        match = _DECIMAL_RE.match(raw)
        if match:
            return DecimalType(int(match.group(1)), int(match.group(2)))
        return UnknownType(raw)
    if not isinstance(raw, dict):
        raise SchemaError(f"a type must be a string or an object, got {raw!r}")
    kind = raw.get("type")
    if kind == "struct":
        fields_raw = raw.get("fields")
        if not isinstance(fields_raw, list):
            raise SchemaError("a struct type needs a 'fields' array")
        return StructType(
            tuple(_field_from_json(f) for f in fields_raw),
            extra=_extra(raw, ("type", "fields")),
        )
    if kind == "array":
        if "elementType" not in raw:
            raise SchemaError("an array type needs 'elementType'")
        return ArrayType(
            data_type_from_json(raw["elementType"]),
            _bool(raw.get("containsNull", True), "containsNull"),
            extra=_extra(raw, ("type", "elementType", "containsNull")),
        )
    if kind == "map":
        if "keyType" not in raw or "valueType" not in raw:
            raise SchemaError("a map type needs 'keyType' and 'valueType'")
        return MapType(
            data_type_from_json(raw["keyType"]),
            data_type_from_json(raw["valueType"]),
            _bool(raw.get("valueContainsNull", True), "valueContainsNull"),
            extra=_extra(raw, ("type", "keyType", "valueType", "valueContainsNull")),
        )
    if kind == "variant" and set(raw) == {"type"}:
        # The variant RFC's example schema spells a nested variant as an object;
        # delta-spark writes the name. Both are the one variant type, written
        # back as the name (the form every peer reads).
        return VARIANT
    return UnknownType(raw)


def data_type_to_json(dtype: DataType) -> Any:
    """The JSON value of one type (inverse of :func:`data_type_from_json`)."""
    if isinstance(dtype, (PrimitiveType, DecimalType)):
        return dtype.name
    if isinstance(dtype, UnknownType):
        return dtype.raw
    if isinstance(dtype, StructType):
        return {
            "type": "struct",
            "fields": [_field_to_json(f) for f in dtype.fields],
            **dtype.extra,
        }
    if isinstance(dtype, ArrayType):
        return {
            "type": "array",
            "elementType": data_type_to_json(dtype.element_type),
            "containsNull": dtype.contains_null,
            **dtype.extra,
        }
    if isinstance(dtype, MapType):
        return {
            "type": "map",
            "keyType": data_type_to_json(dtype.key_type),
            "valueType": data_type_to_json(dtype.value_type),
            "valueContainsNull": dtype.value_contains_null,
            **dtype.extra,
        }
    raise SchemaError(f"not a Delta type: {dtype!r}")


def _field_from_json(raw: Any) -> StructField:
    if not isinstance(raw, dict):
        raise SchemaError(f"a struct field must be an object, got {raw!r}")
    name = raw.get("name")
    if not isinstance(name, str):
        raise SchemaError(f"a struct field needs a string 'name', got {name!r}")
    if "type" not in raw:
        raise SchemaError(f"struct field {name!r} has no 'type'")
    metadata = raw.get("metadata", {})
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise SchemaError(f"the metadata of field {name!r} must be an object")
    return StructField(
        name=name,
        type=data_type_from_json(raw["type"]),
        nullable=_bool(raw.get("nullable", True), "nullable"),
        metadata=metadata,
        extra=_extra(raw, ("name", "type", "nullable", "metadata")),
    )


def _field_to_json(f: StructField) -> dict[str, Any]:
    return {
        "name": f.name,
        "type": data_type_to_json(f.type),
        "nullable": f.nullable,
        "metadata": dict(f.metadata),
        **f.extra,
    }


def _extra(raw: dict[str, Any], known: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in raw.items() if k not in known}


def _bool(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise SchemaError(f"{key!r} must be a boolean, got {value!r}")
    return value


# --- walking -----------------------------------------------------------------------


def walk_fields(
    dtype: DataType, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], StructField]]:
    """Every struct field reachable from ``dtype``, depth first, with its path.

    Paths hold field names; hops through an array or map add ``element``,
    ``key`` or ``value`` (the names Delta uses for nested ids and type changes).
    """
    if isinstance(dtype, StructType):
        for f in dtype.fields:
            path = (*prefix, f.name)
            yield path, f
            yield from walk_fields(f.type, path)
    elif isinstance(dtype, ArrayType):
        yield from walk_fields(dtype.element_type, (*prefix, "element"))
    elif isinstance(dtype, MapType):
        yield from walk_fields(dtype.key_type, (*prefix, "key"))
        yield from walk_fields(dtype.value_type, (*prefix, "value"))


def contains_type(dtype: DataType, name: str) -> bool:
    """Whether a primitive type called ``name`` (e.g. ``timestamp_ntz``) occurs anywhere."""
    if isinstance(dtype, PrimitiveType):
        return dtype.name == name
    if isinstance(dtype, StructType):
        return any(contains_type(f.type, name) for f in dtype.fields)
    if isinstance(dtype, ArrayType):
        return contains_type(dtype.element_type, name)
    if isinstance(dtype, MapType):
        return contains_type(dtype.key_type, name) or contains_type(dtype.value_type, name)
    return False


# --- column mapping ------------------------------------------------------------------


def column_mapping_mode_from(value: str | ColumnMappingMode | None) -> ColumnMappingMode:
    """Parse ``delta.columnMapping.mode`` (absent means ``none``)."""
    if value is None:
        return ColumnMappingMode.NONE
    if isinstance(value, ColumnMappingMode):
        return value
    try:
        return ColumnMappingMode(value.strip().lower())
    except ValueError as exc:
        raise SchemaError(f"invalid column mapping mode {value!r}") from exc


def physical_name(f: StructField, mode: ColumnMappingMode | str = ColumnMappingMode.NONE) -> str:
    """The name of the column in data files, partition values and statistics."""
    if column_mapping_mode_from(mode) is ColumnMappingMode.NONE:
        return f.name
    name = f.metadata.get(COLUMN_MAPPING_PHYSICAL_NAME_KEY)
    if not isinstance(name, str) or not name:
        raise SchemaError(f"column {f.name!r} has no {COLUMN_MAPPING_PHYSICAL_NAME_KEY}")
    return name


def column_id(f: StructField) -> int | None:
    """``delta.columnMapping.id`` of the field, or None."""
    value = f.metadata.get(COLUMN_MAPPING_ID_KEY)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SchemaError(f"column {f.name!r} has a non-integer {COLUMN_MAPPING_ID_KEY}: {value!r}")
    return value


def nested_ids(f: StructField) -> dict[str, int]:
    """The IcebergCompatV2 ids of array elements / map keys and values under ``f``."""
    for key in NESTED_IDS_KEYS:
        value = f.metadata.get(key)
        if isinstance(value, dict):
            return {
                k: v for k, v in value.items() if isinstance(v, int) and not isinstance(v, bool)
            }
    return {}


def max_column_id(schema: DataType) -> int:
    """The largest column id used anywhere (fields and nested ids); 0 if none."""
    best = 0
    for _, f in walk_fields(schema):
        cid = column_id(f)
        if cid is not None:
            best = max(best, cid)
        for nid in nested_ids(f).values():
            best = max(best, nid)
    return best


def assign_column_mapping(
    schema: StructType, *, new_physical_name: Callable[[], str], first_id: int = 1
) -> tuple[StructType, int]:
    """Give every field without one (nested struct fields too) a column id and a
    physical name, as a writer does when it turns column mapping on; returns
    the schema and the largest id now used (``delta.columnMapping.maxColumnId``).

    Ids already present are kept, and new ids start above every used one.
    """
    next_id = max(first_id, max_column_id(schema) + 1)

    def field_of(f: StructField) -> StructField:
        nonlocal next_id
        metadata = dict(f.metadata)
        if column_id(f) is None:
            metadata[COLUMN_MAPPING_ID_KEY] = next_id
            next_id += 1
        if not metadata.get(COLUMN_MAPPING_PHYSICAL_NAME_KEY):
            metadata[COLUMN_MAPPING_PHYSICAL_NAME_KEY] = new_physical_name()
        return StructField(f.name, type_of(f.type), f.nullable, metadata, f.extra)

    def type_of(dtype: DataType) -> DataType:
        if isinstance(dtype, StructType):
            return StructType(tuple(field_of(f) for f in dtype.fields), dtype.extra)
        if isinstance(dtype, ArrayType):
            return ArrayType(type_of(dtype.element_type), dtype.contains_null, dtype.extra)
        if isinstance(dtype, MapType):
            return MapType(
                type_of(dtype.key_type),
                type_of(dtype.value_type),
                dtype.value_contains_null,
                dtype.extra,
            )
        return dtype

    mapped = type_of(schema)
    assert isinstance(mapped, StructType)
    return mapped, max(next_id - 1, max_column_id(mapped))


def to_physical(
    schema: StructType, mode: ColumnMappingMode | str = ColumnMappingMode.NONE
) -> StructType:
    """The same schema with every field renamed to its physical name."""
    resolved = column_mapping_mode_from(mode)
    if resolved is ColumnMappingMode.NONE:
        return schema
    renamed = _rename_physical(schema, resolved)
    assert isinstance(renamed, StructType)
    return renamed


def _rename_physical(dtype: DataType, mode: ColumnMappingMode) -> DataType:
    if isinstance(dtype, StructType):
        return StructType(
            tuple(
                StructField(
                    physical_name(f, mode),
                    _rename_physical(f.type, mode),
                    f.nullable,
                    f.metadata,
                    f.extra,
                )
                for f in dtype.fields
            ),
            dtype.extra,
        )
    if isinstance(dtype, ArrayType):
        return ArrayType(
            _rename_physical(dtype.element_type, mode), dtype.contains_null, dtype.extra
        )
    if isinstance(dtype, MapType):
        return MapType(
            _rename_physical(dtype.key_type, mode),
            _rename_physical(dtype.value_type, mode),
            dtype.value_contains_null,
            dtype.extra,
        )
    return dtype
