"""Unity Catalog's ``ColumnInfo`` and Delta's schema, both ways.

A Delta schema is Spark's JSON schema (PROTOCOL.md, "Schema Serialization
Format"); Unity Catalog describes each top-level column by ``type_json``
(the field's JSON), ``type_text`` (Spark's catalog string: ``bigint``,
``array<string>``, ``decimal(10,2)``), ``type_name`` (an enum),
precision/scale, position, nullability and ``partition_index``.

Invariants:
- ``type_json`` is the field exactly as the Delta schema holds it, so
  :func:`schema_from_columns` of :func:`columns_from_schema` gives back the
  same schema (column metadata included).
- A column given without ``type_json`` is read from ``type_text`` or
  ``type_name`` (primitives, decimals); anything else is refused with
  :class:`~raydelta.protocol.errors.InvalidArgumentError` naming the column.
- A derived :class:`~raydelta.protocol.unity_catalog.ColumnInfo` is given
  only the keys that have a value (Unity Catalog leaves the rest out).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from raydelta.protocol.errors import InvalidArgumentError
from raydelta.protocol.unity_catalog import ColumnInfo

_TYPE_NAMES = {
    "boolean": "BOOLEAN",
    "byte": "BYTE",
    "short": "SHORT",
    "integer": "INT",
    "long": "LONG",
    "float": "FLOAT",
    "double": "DOUBLE",
    "date": "DATE",
    "timestamp": "TIMESTAMP",
    "timestamp_ntz": "TIMESTAMP_NTZ",
    "string": "STRING",
    "binary": "BINARY",
}
_CATALOG_STRINGS = {
    "byte": "tinyint",
    "short": "smallint",
    "integer": "int",
    "long": "bigint",
}
_FROM_TYPE_NAME = {v: k for k, v in _TYPE_NAMES.items()}
_FROM_TEXT = {
    **{k: k for k in _TYPE_NAMES},
    "tinyint": "byte",
    "smallint": "short",
    "int": "integer",
    "bigint": "long",
}
_DECIMAL = re.compile(r"^\s*decimal\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)\s*$", re.IGNORECASE)


def catalog_string(dtype: Any) -> str:
    """Spark's ``catalogString`` of a Delta JSON type."""
    if isinstance(dtype, str):
        return _CATALOG_STRINGS.get(dtype, dtype)
    kind = dtype.get("type")
    if kind == "array":
        return f"array<{catalog_string(dtype['elementType'])}>"
    if kind == "map":
        return f"map<{catalog_string(dtype['keyType'])},{catalog_string(dtype['valueType'])}>"
    if kind == "struct":
        inner = ",".join(f"{f['name']}:{catalog_string(f['type'])}" for f in dtype["fields"])
        return f"struct<{inner}>"
    return str(kind)


def _type_name(dtype: Any) -> tuple[str, int | None, int | None]:
    if isinstance(dtype, str):
        match = _DECIMAL.match(dtype)
        if match:
            return "DECIMAL", int(match.group(1)), int(match.group(2))
        return _TYPE_NAMES.get(dtype, "USER_DEFINED_TYPE"), None, None
    kind = dtype.get("type")
    return (
        {"array": "ARRAY", "map": "MAP", "struct": "STRUCT"}.get(kind, "USER_DEFINED_TYPE"),
        None,
        None,
    )


def columns_from_schema(
    schema_string: str, partition_columns: Sequence[str] = ()
) -> tuple[ColumnInfo, ...]:
    """The ``ColumnInfo`` list of a Delta ``schemaString``."""
    schema = json.loads(schema_string)
    columns = []
    for position, field in enumerate(schema.get("fields", [])):
        type_name, precision, scale = _type_name(field["type"])
        column: dict[str, Any] = {
            "name": field["name"],
            "type_text": catalog_string(field["type"]),
            "type_json": json.dumps(field, separators=(",", ":")),
            "type_name": type_name,
            "position": position,
            "nullable": bool(field.get("nullable", True)),
        }
        if precision is not None:
            column["type_precision"] = precision
            column["type_scale"] = scale
        comment = (field.get("metadata") or {}).get("comment")
        if comment is not None:
            column["comment"] = comment
        if field["name"] in partition_columns:
            column["partition_index"] = list(partition_columns).index(field["name"])
        columns.append(ColumnInfo(**column))
    return tuple(columns)


def _field_from_column(info: ColumnInfo) -> dict[str, Any]:
    column = info.model_dump()
    name = column.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"a column needs a name, got {column!r}")
    if column.get("type_json"):
        try:
            field = json.loads(column["type_json"])
        except ValueError:
            raise InvalidArgumentError(f"column {name!r}: type_json is not JSON") from None
        if isinstance(field, dict) and "type" in field:
            field.setdefault("name", name)
            field.setdefault("nullable", column.get("nullable", True))
            field.setdefault("metadata", {})
            return field
    dtype: Any = None
    text = column.get("type_text")
    if isinstance(text, str):
        decimal = _DECIMAL.match(text)
        if decimal:
            dtype = f"decimal({decimal.group(1)},{decimal.group(2)})"
        else:
            dtype = _FROM_TEXT.get(text.strip().lower())
    type_name = column.get("type_name")
    if dtype is None and type_name == "DECIMAL":
        dtype = f"decimal({column.get('type_precision') or 10},{column.get('type_scale') or 0})"
    if dtype is None and isinstance(type_name, str):
        dtype = _FROM_TYPE_NAME.get(type_name)
    if dtype is None:
        raise InvalidArgumentError(
            f"column {name!r}: cannot tell its type from type_text={text!r} / "
            f"type_name={type_name!r} (give type_json for nested types)"
        )
    metadata = {"comment": column["comment"]} if column.get("comment") else {}
    return {
        "name": name,
        "type": dtype,
        "nullable": bool(column.get("nullable", True)),
        "metadata": metadata,
    }


def schema_from_columns(columns: Sequence[ColumnInfo]) -> tuple[str, list[str]]:
    """A Delta ``schemaString`` and partition columns from ``ColumnInfo`` models."""
    if not columns:
        raise InvalidArgumentError("a managed table needs at least one column")
    ordered = sorted(
        enumerate(columns),
        key=lambda item: (item[1].position is None, item[1].position or 0, item[0]),
    )
    fields = [_field_from_column(c) for _, c in ordered]
    partitioned = sorted(
        (c for c in columns if c.partition_index is not None),
        key=lambda c: c.partition_index or 0,
    )
    schema = {"type": "struct", "fields": fields}
    return json.dumps(schema, separators=(",", ":")), [str(c.name) for c in partitioned]


__all__ = ["catalog_string", "columns_from_schema", "schema_from_columns"]
