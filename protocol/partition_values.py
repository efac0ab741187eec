"""Partition values: the strings of ``add.partitionValues`` and their typed values.

PROTOCOL.md, "Partition Value Serialization". Every partition value is a
string (or null) in the log, keyed by the column's *physical* name when
column mapping is on.

Invariants:
- The empty string is null for every type, so ``serialize_partition_value``
  never returns ``""`` (an empty string value serializes as null).
- ``parse_partition_value(serialize_partition_value(v, t), t) == v`` for every
  value ``v`` of type ``t`` (floats compare by bits, NaN included).
- Parsing accepts every form the spec allows and real writers produce:
  timestamps as ``YYYY-MM-DD HH:MM:SS[.ffffff]`` (no zone: read as UTC, the
  writer's zone being unknowable) or ISO-8601 with ``Z`` / an offset
  (converted to UTC); ``timestamp_ntz`` without a zone; one- or two-digit
  month/day/hour fields as Spark accepts them; Java's ``NaN``/``Infinity``.
- Serialization is the modern canonical form: timestamps as ISO-8601 UTC
  with six fraction digits and ``Z`` (the spec's recommendation);
  ``timestamp_ntz`` as ``YYYY-MM-DD HH:MM:SS[.fraction]`` with trailing zeros
  dropped (as Spark writes it); decimals in plain notation at the column's
  scale; floats in the shortest form that reads back to the same value;
  binary as the UTF-8 text of the bytes (as Spark casts binary to string).
- ``partition_path`` escapes names and values like Hive/Spark
  (``ExternalCatalogUtils.escapePathName``): ``%XX`` for control characters
  and ``"#%'*/:=?\\{[]^`` and DEL; null and empty become
  ``__HIVE_DEFAULT_PARTITION__``. The result is a relative directory path,
  not yet URI-encoded (``add.path`` is a URI: encode it separately).
- Typed values: ``str``, ``int``, ``float``, ``bool``, ``bytes``,
  ``decimal.Decimal``, ``datetime.date``, aware UTC ``datetime`` for
  ``timestamp``, naive ``datetime`` for ``timestamp_ntz``.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import struct
from collections.abc import Mapping, Sequence
from decimal import Context, Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from raydelta.protocol.errors import CorruptLogError, SchemaError
from raydelta.protocol.schema import DataType, DecimalType, PrimitiveType, StructType, physical_name
from raydelta.protocol.schema_arrow import data_type_to_arrow

HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"

_INT_RANGES = {
    "byte": (-(2**7), 2**7 - 1),
    "short": (-(2**15), 2**15 - 1),
    "integer": (-(2**31), 2**31 - 1),
    "long": (-(2**63), 2**63 - 1),
}

_DATE_RE = re.compile(r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})\s*$")
_TIMESTAMP_RE = re.compile(
    r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})"
    r"(?:[ T](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,9}))?)?)?"
    r"\s*(Z|[+-]\d{2}(?::?\d{2})?)?\s*$"
)


# --- one value ------------------------------------------------------------------------


def parse_partition_value(text: str | None, dtype: DataType) -> Any:
    """The typed value of one serialized partition value (None for null)."""
    if text is None or text == "":
        return None
    if isinstance(dtype, DecimalType):
        return _parse_decimal(text, dtype)
    if not isinstance(dtype, PrimitiveType):
        raise SchemaError(f"a column of type {dtype} cannot be a partition column")
    name = dtype.name
    try:
        if name == "string":
            return text
        if name in _INT_RANGES:
            value = int(text.strip())
            low, high = _INT_RANGES[name]
            if not low <= value <= high:
                raise ValueError(f"{value} is out of range for {name}")
            return value
        if name in ("float", "double"):
            number = _parse_float(text)
            return _round_float32(number) if name == "float" else number
        if name == "boolean":
            lowered = text.strip().lower()
            if lowered not in ("true", "false"):
                raise ValueError("not true or false")
            return lowered == "true"
        if name == "date":
            return _parse_date(text)
        if name == "timestamp":
            return parse_timestamp(text, aware=True)
        if name == "timestamp_ntz":
            return parse_timestamp(text, aware=False)
        if name == "binary":
            return text.encode("utf-8")
        if name == "void":
            return None
    except (ValueError, OverflowError) as exc:
        raise CorruptLogError(f"invalid {name} partition value {text!r}: {exc}") from exc
    raise SchemaError(f"a column of type {name} cannot be a partition column")


def serialize_partition_value(value: Any, dtype: DataType) -> str | None:
    """The log string of one partition value (None for null)."""
    if value is None:
        return None
    if isinstance(dtype, DecimalType):
        return _serialize_decimal(value, dtype)
    if not isinstance(dtype, PrimitiveType):
        raise SchemaError(f"a column of type {dtype} cannot be a partition column")
    name = dtype.name
    text: str | None
    if name == "string":
        _expect(value, str, name)
        text = value
    elif name in _INT_RANGES:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SchemaError(f"a {name} partition value must be an int, got {value!r}")
        low, high = _INT_RANGES[name]
        if not low <= value <= high:
            raise SchemaError(f"{value} is out of range for {name}")
        text = str(value)
    elif name in ("float", "double"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SchemaError(f"a {name} partition value must be a number, got {value!r}")
        text = format_float(float(value), single=name == "float")
    elif name == "boolean":
        _expect(value, bool, name)
        text = "true" if value else "false"
    elif name == "date":
        if isinstance(value, dt.datetime) or not isinstance(value, dt.date):
            raise SchemaError(f"a date partition value must be a date, got {value!r}")
        text = f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
    elif name == "timestamp":
        _expect(value, dt.datetime, name)
        if value.tzinfo is None:
            raise SchemaError("a timestamp partition value must be timezone-aware")
        utc = value.astimezone(dt.UTC)
        text = utc.strftime("%Y-%m-%dT%H:%M:%S") + f".{utc.microsecond:06d}Z"
        text = _pad_year(utc.year, text)
    elif name == "timestamp_ntz":
        _expect(value, dt.datetime, name)
        if value.tzinfo is not None:
            raise SchemaError("a timestamp_ntz partition value must be naive")
        text = _pad_year(value.year, value.strftime("%Y-%m-%d %H:%M:%S"))
        if value.microsecond:
            text += f".{value.microsecond:06d}".rstrip("0")
    elif name == "binary":
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise SchemaError(f"a binary partition value must be bytes, got {value!r}")
        try:
            text = bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SchemaError("a binary partition value must be valid UTF-8") from exc
    elif name == "void":
        text = None
    else:
        raise SchemaError(f"a column of type {name} cannot be a partition column")
    return text or None


def _expect(value: Any, kind: type, name: str) -> None:
    if not isinstance(value, kind):
        raise SchemaError(f"a {name} partition value must be {kind.__name__}, got {value!r}")


def _pad_year(year: int, text: str) -> str:
    # strftime does not zero-pad years below 1000 on every platform.
    head, _, rest = text.partition("-")
    return f"{year:04d}-{rest}" if len(head) != 4 else text


def _parse_decimal(text: str, dtype: DecimalType) -> Decimal:
    try:
        value = Decimal(text.strip())
    except InvalidOperation as exc:
        raise CorruptLogError(f"invalid decimal partition value {text!r}") from exc
    if not value.is_finite():
        raise CorruptLogError(f"invalid decimal partition value {text!r}")
    return _fit_decimal(value, dtype, CorruptLogError)


# Enough digits for any decimal(38, s) (the default context keeps only 28).
DECIMAL_CONTEXT = Context(prec=100)


def rescale_decimal(value: Decimal, precision: int, scale: int) -> Decimal | None:
    """``value`` at exactly ``scale`` digits, or None if that loses digits or
    needs more than ``precision`` digits."""
    try:
        scaled = value.quantize(Decimal(1).scaleb(-scale), context=DECIMAL_CONTEXT)
    except InvalidOperation:
        return None
    if scaled != value or len(scaled.as_tuple().digits) > precision:
        return None
    return scaled


def _fit_decimal(value: Decimal, dtype: DecimalType, error: type[Exception]) -> Decimal:
    scaled = rescale_decimal(value, dtype.precision, dtype.scale)
    if scaled is None:
        raise error(f"{value} does not fit {dtype}")
    return scaled


def _serialize_decimal(value: Any, dtype: DecimalType) -> str:
    if isinstance(value, bool) or not isinstance(value, (Decimal, int)):
        raise SchemaError(f"a decimal partition value must be a Decimal, got {value!r}")
    fitted = _fit_decimal(Decimal(value), dtype, SchemaError)
    return format(fitted, "f")


def _parse_float(text: str) -> float:
    stripped = text.strip()
    special = {"nan": math.nan, "infinity": math.inf, "-infinity": -math.inf, "+infinity": math.inf}
    lowered = stripped.lower()
    if lowered in special:
        return special[lowered]
    return float(stripped)


def _round_float32(value: float) -> float:
    if math.isnan(value) or math.isinf(value):
        return value
    try:
        return float(struct.unpack("<f", struct.pack("<f", value))[0])
    except OverflowError:
        # Beyond the largest float32 even after rounding: IEEE gives infinity.
        return math.copysign(math.inf, value)


def format_float(value: float, *, single: bool) -> str:
    """Shortest text that reads back to ``value`` (as float32 when ``single``).

    NaN and infinities are spelled as Java does: ``NaN``, ``Infinity``.
    """
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if not single:
        return repr(value)
    value32 = _round_float32(value)
    for digits in range(1, 10):
        text = f"{value32:.{digits}g}"
        if _round_float32(float(text)) == value32:
            return repr(float(text))
    return repr(value32)


def _parse_date(text: str) -> dt.date:
    match = _DATE_RE.match(text)
    if not match:
        # Spark also writes a date partition as a full timestamp in rare cases.
        stamp = _TIMESTAMP_RE.match(text)
        if not stamp or stamp.group(4) is None:
            raise ValueError("expected YYYY-MM-DD")
        return dt.date(int(stamp.group(1)), int(stamp.group(2)), int(stamp.group(3)))
    return dt.date(int(match.group(1)), int(match.group(2)), int(match.group(3)))


def parse_timestamp(text: str, *, aware: bool) -> dt.datetime:
    """A timestamp string (space or ``T``, optional fraction and zone) as a datetime.

    ``aware=True``: an aware UTC datetime (no zone means UTC); ``aware=False``:
    a naive one, and a zone is an error.
    """
    match = _TIMESTAMP_RE.match(text)
    if not match:
        raise ValueError("expected YYYY-MM-DD HH:MM:SS[.ffffff] or ISO-8601")
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    micros = int((fraction or "0")[:6].ljust(6, "0"))
    naive = dt.datetime(
        int(year),
        int(month),
        int(day),
        int(hour or 0),
        int(minute or 0),
        int(second or 0),
        micros,
    )
    if not aware:
        if zone is not None:
            raise ValueError("a timestamp_ntz value carries no time zone")
        return naive
    if zone is None or zone == "Z":
        return naive.replace(tzinfo=dt.UTC)
    sign = -1 if zone[0] == "-" else 1
    digits = zone[1:].replace(":", "")
    offset = dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0))
    return naive.replace(tzinfo=dt.timezone(sign * offset)).astimezone(dt.UTC)


# --- Hive paths --------------------------------------------------------------------------

_ESCAPED = frozenset([chr(c) for c in range(0x01, 0x20)] + list("\"#%'*/:=?\\\x7f{[]^"))


def escape_path_name(text: str) -> str:
    """Hive's path escaping of one partition name or value."""
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in text)


def unescape_path_name(text: str) -> str:
    """Inverse of :func:`escape_path_name` (``%XX`` with two hex digits)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "%" and _is_hex(text[i + 1 : i + 3]):
            out.append(chr(int(text[i + 1 : i + 3], 16)))
            i += 3
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _is_hex(pair: str) -> bool:
    return len(pair) == 2 and all(c in "0123456789abcdefABCDEF" for c in pair)


def partition_path(
    partition_values: Mapping[str, str | None], partition_columns: Sequence[str]
) -> str:
    """The Hive-style directory of a file: ``date=2024-01-01/region=x%2Fy``.

    ``partition_columns`` gives the order (and the keys looked up in
    ``partition_values``); values are the serialized log strings.
    """
    parts = []
    for column in partition_columns:
        value = partition_values.get(column)
        escaped = HIVE_DEFAULT_PARTITION if not value else escape_path_name(value)
        parts.append(f"{escape_path_name(column)}={escaped}")
    return "/".join(parts)


# --- vectorized ------------------------------------------------------------------------------


def partition_values_to_arrow(
    values: Sequence[Mapping[str, str | None] | None] | pa.Array | pa.ChunkedArray,
    schema: StructType,
    partition_columns: Sequence[str],
    *,
    column_mapping_mode: str = "none",
    physical_names: bool = True,
) -> pa.StructArray:
    """Typed partition values of many files, as one Arrow struct per file.

    ``values`` are the ``partitionValues`` maps of the files: Python dicts or
    an Arrow ``map<string, string>`` array (a checkpoint's column). Map keys
    are physical names under column mapping. The struct has one field per
    partition column, named by physical name (``physical_names=True``, the
    checkpoint's ``partitionValues_parsed``) or by logical name. A null map
    gives a struct of nulls. Each distinct string is parsed once.
    """
    fields = [schema.field(c) for c in partition_columns]
    keys = [physical_name(f, column_mapping_mode) for f in fields]
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    columns: list[pa.Array] = []
    for f, key in zip(fields, keys, strict=True):
        if isinstance(values, pa.Array):
            if len(values) == 0:
                raw = pa.array([], pa.string())
            else:
                raw = pc.map_lookup(values, pa.scalar(key, pa.string()), "first")
        else:
            raw = pa.array([None if v is None else v.get(key) for v in values], pa.string())
        columns.append(_parse_column(raw, f.type))
    names = keys if physical_names else [f.name for f in fields]
    arrow_fields = [
        pa.field(name, col.type, nullable=True) for name, col in zip(names, columns, strict=True)
    ]
    if not arrow_fields:
        return pa.array([{}] * len(values), pa.struct([]))
    return pa.StructArray.from_arrays(columns, fields=arrow_fields)


def _parse_column(raw: pa.Array, dtype: DataType) -> pa.Array:
    arrow_type = data_type_to_arrow(dtype)
    if len(raw) == 0:
        return pa.array([], arrow_type)
    encoded = pc.dictionary_encode(raw)
    dictionary = encoded.dictionary.to_pylist()
    parsed = pa.array([parse_partition_value(t, dtype) for t in dictionary], arrow_type)
    return pc.take(parsed, encoded.indices)


def partition_values_from_arrow(
    struct_array: pa.StructArray,
    schema: StructType,
    partition_columns: Sequence[str],
    *,
    column_mapping_mode: str = "none",
) -> list[dict[str, str | None]]:
    """The ``partitionValues`` maps back from typed structs (physical keys)."""
    fields = [schema.field(c) for c in partition_columns]
    keys = [physical_name(f, column_mapping_mode) for f in fields]
    names = {struct_array.type.field(i).name for i in range(struct_array.type.num_fields)}
    out: list[dict[str, str | None]] = [{} for _ in range(len(struct_array))]
    for f, key in zip(fields, keys, strict=True):
        name = key if key in names else f.name
        column = struct_array.field(name).to_pylist()
        for row, value in zip(out, column, strict=True):
            row[key] = serialize_partition_value(_normalize_arrow_value(value, f.type), f.type)
    return out


def _normalize_arrow_value(value: Any, dtype: DataType) -> Any:
    if (
        isinstance(dtype, PrimitiveType)
        and dtype.name == "timestamp"
        and isinstance(value, dt.datetime)
        and value.tzinfo is None
    ):
        return value.replace(tzinfo=dt.UTC)
    return value
