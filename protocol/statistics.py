"""Per-file statistics: the ``stats`` JSON of add/remove and the checkpoint's ``stats_parsed``.

PROTOCOL.md, "Per-file Statistics" and "Checkpoint Schema".

Invariants:
- Parsing is tolerant: a ``stats`` string that is not a JSON object gives
  None (no statistics), never an error; unknown keys are kept.
- ``tightBounds`` absent means tight (spec).
- The typed schema follows what Delta writers collect: ``numRecords``;
  ``minValues``/``maxValues`` only for leaves of type byte, short, integer,
  long, float, double, decimal, date, timestamp, timestamp_ntz and string
  (never boolean, binary, variant, arrays or maps); ``nullCount`` for every
  leaf, arrays and maps counting as one leaf; structs nest; a struct with no
  eligible leaf is left out (Parquet cannot store empty groups);
  ``tightBounds``. Partition columns have no statistics (they are not in the
  data files). The null-count field is ``nullCount`` as delta-spark and
  delta-kernel write it; the spec's checkpoint example says ``nullCounts``.
- Columns are keyed by physical names when ``physical=True`` (the metadata's
  ``delta.columnMapping.physicalName`` where present), as the log stores them.
- Converting JSON to Arrow never fails on a value: a value that does not
  fit its column (e.g. an older, narrower type after type widening) becomes
  null, which only loses skipping power. Timestamps are ISO-8601 strings
  with a zone (``Z`` or an offset) and convert to UTC; ``timestamp_ntz``
  values have none. Decimals are read without going through binary floats.
- ``stats_from_arrow`` writes JSON that ``stats_to_arrow`` reads back to the
  same typed values: nulls are omitted, timestamps written in UTC with ``Z``
  and millisecond precision (microseconds when present), floats in their
  shortest exact form, NaN/Infinity as the strings Jackson writes.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from raydelta.protocol.partition_values import parse_timestamp, rescale_decimal
from raydelta.protocol.schema import (
    COLUMN_MAPPING_PHYSICAL_NAME_KEY,
    DataType,
    DecimalType,
    PrimitiveType,
    StructField,
    StructType,
)
from raydelta.protocol.schema_arrow import data_type_to_arrow

NUM_RECORDS = "numRecords"
MIN_VALUES = "minValues"
MAX_VALUES = "maxValues"
NULL_COUNT = "nullCount"
TIGHT_BOUNDS = "tightBounds"

MIN_MAX_TYPE_NAMES = frozenset(
    {
        "byte",
        "short",
        "integer",
        "long",
        "float",
        "double",
        "date",
        "timestamp",
        "timestamp_ntz",
        "string",
    }
)


class FileStatistics(BaseModel):
    """The parsed ``stats`` of one file; nested column maps are kept raw."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="allow")

    num_records: int | None = Field(default=None, alias="numRecords")
    tight_bounds: bool | None = Field(default=None, alias="tightBounds")
    min_values: dict[str, Any] | None = Field(default=None, alias="minValues")
    max_values: dict[str, Any] | None = Field(default=None, alias="maxValues")
    null_count: dict[str, Any] | None = Field(default=None, alias="nullCount")

    @property
    def bounds_are_tight(self) -> bool:
        """``tightBounds``, true when absent (spec)."""
        return self.tight_bounds is not False

    def min_value(self, path: Sequence[str]) -> Any:
        """The raw JSON minimum of the column at ``path`` (physical names), or None."""
        return _lookup(self.min_values, path)

    def max_value(self, path: Sequence[str]) -> Any:
        return _lookup(self.max_values, path)

    def null_count_of(self, path: Sequence[str]) -> int | None:
        value = _lookup(self.null_count, path)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def to_json(self) -> str:
        """Compact JSON, unknown keys included."""
        return json.dumps(self.model_dump(by_alias=True, exclude_none=True), separators=(",", ":"))


def _lookup(tree: dict[str, Any] | None, path: Sequence[str]) -> Any:
    node: Any = tree
    for part in path:
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return None if isinstance(node, dict) else node


def parse_stats(json_text: str | None) -> FileStatistics | None:
    """The statistics of a ``stats`` string; None when absent or unreadable."""
    if not json_text:
        return None
    try:
        raw = json.loads(json_text)
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return None
    try:
        return FileStatistics.model_validate(raw)
    except ValidationError:
        return None


def num_records_of(stats: str | None) -> int | None:
    """``numRecords`` of a ``stats`` string: None when the text is absent or
    empty, not a JSON object, or its ``numRecords`` is absent or not an int.

    Lighter than :func:`parse_stats` (nothing else is validated), and
    stricter about the count: no coercion, only a JSON integer counts (and
    ``true``, Python's ``bool`` being an ``int``)."""
    if not stats:
        return None
    try:
        value = json.loads(stats).get(NUM_RECORDS)
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, int) else None


# --- typed schema ---------------------------------------------------------------------


def stats_schema(
    table_schema: StructType,
    *,
    physical: bool = True,
    partition_columns: Sequence[str] = (),
    num_indexed_cols: int | None = None,
) -> pa.StructType:
    """The Arrow type of ``stats_parsed`` for a table schema.

    ``num_indexed_cols`` (``delta.dataSkippingNumIndexedCols``; None or -1
    for all) keeps only the first N leaf columns, depth first, as Delta does.
    """
    partitions = set(partition_columns)
    data_fields = [f for f in table_schema.fields if f.name not in partitions]
    budget = [-1 if num_indexed_cols is None or num_indexed_cols < 0 else num_indexed_cols]
    indexed = _take_leaves(data_fields, budget)

    fields = [pa.field(NUM_RECORDS, pa.int64())]
    min_max = _stats_struct(indexed, physical=physical, null_counts=False)
    if min_max is not None:
        fields += [pa.field(MIN_VALUES, min_max), pa.field(MAX_VALUES, min_max)]
    counts = _stats_struct(indexed, physical=physical, null_counts=True)
    if counts is not None:
        fields.append(pa.field(NULL_COUNT, counts))
    fields.append(pa.field(TIGHT_BOUNDS, pa.bool_()))
    return pa.struct(fields)


def _take_leaves(fields: Sequence[StructField], budget: list[int]) -> list[StructField]:
    kept: list[StructField] = []
    for f in fields:
        if budget[0] == 0:
            break
        if isinstance(f.type, StructType):
            children = _take_leaves(f.type.fields, budget)
            if children:
                kept.append(
                    StructField(f.name, StructType(tuple(children)), f.nullable, f.metadata)
                )
        else:
            kept.append(f)
            if budget[0] > 0:
                budget[0] -= 1
    return kept


def _stats_struct(
    fields: Sequence[StructField], *, physical: bool, null_counts: bool
) -> pa.StructType | None:
    out = []
    for f in fields:
        name = f.name
        if physical:
            phys = f.metadata.get(COLUMN_MAPPING_PHYSICAL_NAME_KEY)
            if isinstance(phys, str) and phys:
                name = phys
        arrow_type = _leaf_stats_type(f.type, physical=physical, null_counts=null_counts)
        if arrow_type is not None:
            out.append(pa.field(name, arrow_type))
    return pa.struct(out) if out else None


def _leaf_stats_type(dtype: DataType, *, physical: bool, null_counts: bool) -> pa.DataType | None:
    if isinstance(dtype, StructType):
        return _stats_struct(dtype.fields, physical=physical, null_counts=null_counts)
    if null_counts:
        return pa.int64()
    return data_type_to_arrow(dtype) if has_min_max(dtype) else None


def has_min_max(dtype: DataType) -> bool:
    """Whether Delta writers collect min/max for a leaf of this type."""
    return isinstance(dtype, DecimalType) or (
        isinstance(dtype, PrimitiveType) and dtype.name in MIN_MAX_TYPE_NAMES
    )


# --- JSON → Arrow ------------------------------------------------------------------------

Coercer = Callable[[Any], Any]


def stats_to_arrow(
    stats_json_list: Sequence[str | None], schema: pa.StructType | pa.DataType
) -> pa.StructArray:
    """Typed statistics of many files (``stats_parsed``), one struct per file.

    A missing or unreadable ``stats`` string gives a null struct. The
    per-column converters are built once per call from the Arrow type.
    """
    struct_type = schema if isinstance(schema, pa.StructType) else pa.struct(list(schema))
    coerce = _coercer(struct_type)
    decoder = (
        json.JSONDecoder(parse_float=Decimal) if _has_decimal(struct_type) else json.JSONDecoder()
    )
    rows: list[dict[str, Any] | None] = []
    for text in stats_json_list:
        raw: Any = None
        if text:
            try:
                raw = decoder.decode(text)
            except ValueError:
                raw = None
        rows.append(coerce(raw) if isinstance(raw, dict) else None)
    return pa.array(rows, type=struct_type)


def value_coercer(arrow_type: pa.DataType) -> Coercer:
    """The function turning one JSON statistics value into a value of
    ``arrow_type``; it returns None for a value that does not fit the type
    (the commit validator refuses such a value where the reader would null it)."""
    return _coercer(arrow_type)


def _has_decimal(arrow_type: pa.DataType) -> bool:
    if pa.types.is_decimal(arrow_type):
        return True
    if pa.types.is_struct(arrow_type):
        return any(_has_decimal(arrow_type.field(i).type) for i in range(arrow_type.num_fields))
    return False


def _coercer(arrow_type: pa.DataType) -> Coercer:
    """A function turning one JSON value into a value of ``arrow_type`` (None if it cannot)."""
    t = arrow_type
    if pa.types.is_struct(t):
        children = [(t.field(i).name, _coercer(t.field(i).type)) for i in range(t.num_fields)]

        def struct_value(value: Any) -> Any:
            if not isinstance(value, dict):
                return None
            out = {}
            for name, convert in children:
                item = value.get(name)
                out[name] = None if item is None else convert(item)
            return out

        return struct_value
    if pa.types.is_integer(t):
        return _integer_coercer(2 ** (t.bit_width - 1))
    if pa.types.is_floating(t):
        return _float_value
    if pa.types.is_decimal(t):
        return _decimal_coercer(t.precision, t.scale)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return lambda value: value if isinstance(value, str) else None
    if pa.types.is_boolean(t):
        return lambda value: value if isinstance(value, bool) else None
    if pa.types.is_date(t):
        return _date_value
    if pa.types.is_timestamp(t):
        return _aware_timestamp if t.tz is not None else _naive_timestamp
    return lambda value: None


def _integer_coercer(bound: int) -> Coercer:
    def integer_value(value: Any) -> Any:
        if type(value) is not int:
            if isinstance(value, bool) or not isinstance(value, (float, Decimal)):
                return None
            if not math.isfinite(value) or value != int(value):
                return None
            value = int(value)
        return value if -bound <= value < bound else None

    return integer_value


_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _float_value(value: Any) -> Any:
    if type(value) is float:
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, Decimal)):
        try:
            return float(value)
        except OverflowError:  # an integer literal beyond a double's range
            return None
    if isinstance(value, str):
        return _FLOAT_WORDS.get(value)
    return None


def _decimal_coercer(precision: int, scale: int) -> Coercer:
    def decimal_value(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float, Decimal, str)):
            return None
        try:
            number = value if isinstance(value, Decimal) else Decimal(str(value))
        except InvalidOperation:
            return None
        return rescale_decimal(number, precision, scale)

    return decimal_value


def _date_value(value: Any) -> Any:
    if not isinstance(value, str):
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        pass
    try:
        return parse_timestamp(value, aware=False).date()
    except ValueError:
        return None


def _aware_timestamp(value: Any) -> Any:
    if not isinstance(value, str):
        return None
    try:
        # Arrow converts an aware datetime of any offset to UTC.
        parsed = dt.datetime.fromisoformat(value)
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)
    except ValueError:
        pass
    try:
        return parse_timestamp(value, aware=True)
    except ValueError:
        return None


def _naive_timestamp(value: Any) -> Any:
    if not isinstance(value, str):
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
        return parsed if parsed.tzinfo is None else None
    except ValueError:
        pass
    try:
        return parse_timestamp(value, aware=False)
    except ValueError:
        return None


# --- Arrow → JSON ------------------------------------------------------------------------


def stats_from_arrow(struct_array: pa.StructArray | pa.ChunkedArray) -> list[str | None]:
    """The ``stats`` JSON text of each typed statistics struct (None for null or empty).

    Column by column: numbers, dates and timestamps are formatted by Arrow
    compute, then each row's object is assembled from its non-null parts.
    """
    if isinstance(struct_array, pa.ChunkedArray):
        struct_array = (
            struct_array.combine_chunks() if struct_array.num_chunks != 1 else struct_array.chunk(0)
        )
    return _json_fragments(struct_array)


def _json_fragments(array: pa.Array) -> list[str | None]:
    """The JSON text of each value of ``array`` (None: omit it)."""
    t = array.type
    if pa.types.is_struct(t):
        keys = [json.dumps(t.field(i).name, ensure_ascii=False) + ":" for i in range(t.num_fields)]
        # flatten() applies the struct's own nulls to its children.
        columns = [_json_fragments(child) for child in array.flatten()]
        out: list[str | None] = []
        for row in zip(*columns, strict=True) if columns else ([()] * len(array)):
            parts = [key + text for key, text in zip(keys, row, strict=True) if text is not None]
            out.append("{" + ",".join(parts) + "}" if parts else None)
        return out
    if pa.types.is_boolean(t):
        return [None if v is None else ("true" if v else "false") for v in array.to_pylist()]
    if pa.types.is_integer(t):
        return pc.cast(array, pa.string()).to_pylist()  # type: ignore[no-any-return]
    if pa.types.is_floating(t):
        # Arrow prints the shortest text that reads back to the same float32/64.
        texts = pc.cast(array, pa.string()).to_pylist()
        return [_finite_float_json(v) for v in texts]
    if pa.types.is_decimal(t):
        return [None if v is None else format(v, "f") for v in array.to_pylist()]
    if pa.types.is_date(t):
        texts = pc.cast(array, pa.string()).to_pylist()
        return [None if v is None else f'"{v}"' for v in texts]
    if pa.types.is_timestamp(t):
        micros = array.cast(pa.timestamp("us", tz=t.tz))
        texts = pc.strftime(micros, format="%Y-%m-%dT%H:%M:%S")
        # Milliseconds, as Delta writers truncate them, unless microseconds are set.
        texts = pc.replace_substring_regex(texts, pattern=r"(\.\d{3})000$", replacement=r"\1")
        suffix = 'Z"' if t.tz is not None else '"'
        return [None if v is None else f'"{v}{suffix}' for v in texts.to_pylist()]
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return [None if v is None else json.dumps(v, ensure_ascii=False) for v in array.to_pylist()]
    return [None] * len(array)


_FLOAT_TEXT = {"nan": '"NaN"', "inf": '"Infinity"', "-inf": '"-Infinity"'}


def _finite_float_json(text: str | None) -> str | None:
    if text is None:
        return None
    if text in _FLOAT_TEXT:
        return _FLOAT_TEXT[text]
    # Arrow prints 3.0 as "3" and -0.0 as "-0"; keep them floats (and the sign).
    return text if any(c in text for c in ".eE") else text + ".0"
