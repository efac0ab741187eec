"""Collecting a new data file's statistics (the ``stats`` JSON of its ``add``)
from its rows, as delta-spark's ``StatisticsCollection`` does.

PROTOCOL.md, "Per-file Statistics".

Invariants:
- ``numRecords`` is the exact row count. ``nullCount`` is kept for every
  indexed leaf (arrays, maps, booleans and binaries included); a leaf under a
  null struct counts as null. ``minValues``/``maxValues`` only for leaves of
  the skipping-eligible types (byte, short, integer, long, float, double,
  decimal, date, timestamp, timestamp_ntz, string) with at least one
  non-null value. Structs nest; a struct left with no statistic is omitted.
- Indexed leaves: ``delta.dataSkippingStatsColumns`` (a comma-separated list
  of column paths, case-insensitive, backquotes allowed) when set, else the
  first ``delta.dataSkippingNumIndexedCols`` leaves depth first (32 by
  default; negative means all), arrays and maps counting as one leaf.
  Partition columns are not in data files and have no statistics.
- Keys are physical names under column mapping (``name``/``id``).
- Strings: the minimum is its first 32 characters (code points); the
  maximum is cut to 32 characters followed by the tie-breaker U+FFFD, the
  prefix first extended over following characters >= U+FFFD, so the
  stored maximum is >= every value (delta-spark's ``truncateMaxStringAgg``;
  it counts UTF-16 units, raydelta code points, which keeps the bound
  correct for characters outside the BMP).
- Timestamps are truncated down to milliseconds and written
  ``yyyy-MM-ddTHH:mm:ss.SSSZ`` (UTC) or without the zone for
  ``timestamp_ntz``; dates ``yyyy-MM-dd``; decimals as plain JSON numbers;
  floats in their shortest form (NaN/Infinity as Jackson spells them).
- ``tightBounds: true`` is written when the table supports deletion
  vectors, as delta-spark does; absent otherwise (absent means tight).
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from raydelta.protocol.partition_values import format_float
from raydelta.protocol.schema import (
    ColumnMappingMode,
    DataType,
    DecimalType,
    PrimitiveType,
    StructField,
    StructType,
    physical_name,
)
from raydelta.protocol.statistics import has_min_max

DEFAULT_NUM_INDEXED_COLS = 32
STRING_PREFIX_LENGTH = 32
_TIE_BREAKER = "\ufffd"
DATA_SKIPPING_STATS_COLUMNS = "delta.dataSkippingStatsColumns"
DATA_SKIPPING_NUM_INDEXED_COLS = "delta.dataSkippingNumIndexedCols"


@dataclass(frozen=True)
class StatsSpec:
    """Which leaves get statistics and how they are keyed."""

    num_indexed_cols: int = DEFAULT_NUM_INDEXED_COLS
    stats_columns: tuple[tuple[str, ...], ...] | None = None
    mapping_mode: ColumnMappingMode = ColumnMappingMode.NONE
    tight_bounds: bool = False
    string_prefix_length: int = STRING_PREFIX_LENGTH

    @classmethod
    def from_configuration(
        cls,
        configuration: dict[str, str],
        *,
        mapping_mode: ColumnMappingMode,
        tight_bounds: bool,
    ) -> StatsSpec:
        named = configuration.get(DATA_SKIPPING_STATS_COLUMNS)
        raw = configuration.get(DATA_SKIPPING_NUM_INDEXED_COLS)
        return cls(
            num_indexed_cols=int(raw) if raw is not None else DEFAULT_NUM_INDEXED_COLS,
            stats_columns=parse_stats_columns(named) if named is not None else None,
            mapping_mode=mapping_mode,
            tight_bounds=tight_bounds,
        )


def parse_stats_columns(text: str) -> tuple[tuple[str, ...], ...]:
    """``a, b.c, `d.e`.f`` → (("a",), ("b", "c"), ("d.e", "f")), lower-cased."""
    paths: list[tuple[str, ...]] = []
    for item in _split_outside_backquotes(text, ","):
        item = item.strip()
        if item:
            parts = _split_outside_backquotes(item, ".")
            paths.append(tuple(p.strip().strip("`").replace("``", "`").lower() for p in parts))
    return tuple(paths)


def _split_outside_backquotes(text: str, separator: str) -> list[str]:
    out: list[str] = []
    current: list[str] = []
    quoted = False
    for char in text:
        if char == "`":
            quoted = not quoted
        if char == separator and not quoted:
            out.append("".join(current))
            current = []
        else:
            current.append(char)
    out.append("".join(current))
    return out


def indexed_fields(data_fields: Sequence[StructField], spec: StatsSpec) -> list[StructField]:
    """The data schema cut down to the leaves that get statistics."""
    if spec.stats_columns is not None:
        return _named(data_fields, spec.stats_columns)
    if spec.num_indexed_cols < 0:
        return list(data_fields)
    return _first_leaves(data_fields, [spec.num_indexed_cols])


def _first_leaves(fields: Sequence[StructField], budget: list[int]) -> list[StructField]:
    kept: list[StructField] = []
    for f in fields:
        if budget[0] <= 0:
            break
        if isinstance(f.type, StructType):
            children = _first_leaves(f.type.fields, budget)
            kept.append(StructField(f.name, StructType(tuple(children)), f.nullable, f.metadata))
        else:
            kept.append(f)
            budget[0] -= 1
    return kept


def _named(fields: Sequence[StructField], paths: Sequence[tuple[str, ...]]) -> list[StructField]:
    kept: list[StructField] = []
    for f in fields:
        mine = [p[1:] for p in paths if p and p[0] == f.name.lower()]
        if not mine:
            continue
        if any(not rest for rest in mine):
            kept.append(f)
        elif isinstance(f.type, StructType):
            children = _named(f.type.fields, mine)
            kept.append(StructField(f.name, StructType(tuple(children)), f.nullable, f.metadata))
    return kept


def collect_statistics(data: pa.Table, data_fields: Sequence[StructField], spec: StatsSpec) -> str:
    """The ``stats`` JSON of a file holding ``data`` (logical names, the
    table's Arrow types) whose data columns are ``data_fields``."""
    minimum: dict[str, Any] = {}
    maximum: dict[str, Any] = {}
    nulls: dict[str, Any] = {}
    for f in indexed_fields(data_fields, spec):
        if f.name not in data.column_names:
            continue
        column = data.column(f.name)
        array = pa.concat_arrays(column.chunks) if column.num_chunks else pa.array([], column.type)
        _collect(array, f, spec, minimum, maximum, nulls)
    parts = [f'"numRecords":{data.num_rows}']
    if minimum:
        parts.append(f'"minValues":{_object(minimum)}')
    if maximum:
        parts.append(f'"maxValues":{_object(maximum)}')
    if nulls:
        parts.append(f'"nullCount":{_object(nulls)}')
    if spec.tight_bounds:
        parts.append('"tightBounds":true')
    return "{" + ",".join(parts) + "}"


def _collect(
    array: pa.Array,
    f: StructField,
    spec: StatsSpec,
    minimum: dict[str, Any],
    maximum: dict[str, Any],
    nulls: dict[str, Any],
) -> None:
    key = physical_name(f, spec.mapping_mode)
    if isinstance(f.type, StructType):
        child_min: dict[str, Any] = {}
        child_max: dict[str, Any] = {}
        child_nulls: dict[str, Any] = {}
        names = [array.type.field(i).name for i in range(array.type.num_fields)]
        for child in f.type.fields:
            if child.name in names:
                values = pc.struct_field(array, [names.index(child.name)])
                _collect(values, child, spec, child_min, child_max, child_nulls)
        for target, part in ((minimum, child_min), (maximum, child_max), (nulls, child_nulls)):
            if part:
                target[key] = part
        return
    nulls[key] = str(array.null_count)
    if not has_min_max(f.type) or array.null_count == len(array):
        return
    bounds = pc.min_max(array)
    low, high = bounds["min"], bounds["max"]
    if not low.is_valid:
        return
    minimum[key] = _json_value(low.as_py(), f.type, spec, is_max=False)
    maximum[key] = _json_value(high.as_py(), f.type, spec, is_max=True)


def _json_value(value: Any, dtype: DataType, spec: StatsSpec, *, is_max: bool) -> str:
    """The JSON text of one bound."""
    if isinstance(dtype, DecimalType):
        return format(value, "f")
    assert isinstance(dtype, PrimitiveType)
    name = dtype.name
    if name == "string":
        text = (
            truncate_max(value, spec.string_prefix_length)
            if is_max
            else (value[: spec.string_prefix_length])
        )
        return json.dumps(text, ensure_ascii=False)
    if name in ("float", "double"):
        text = format_float(float(value), single=name == "float")
        return f'"{text}"' if not math.isfinite(float(value)) else text
    if name == "date":
        return f'"{value.isoformat()}"'
    if name in ("timestamp", "timestamp_ntz"):
        return f'"{format_timestamp(value, aware=name == "timestamp")}"'
    return str(int(value))


def truncate_max(value: str, prefix_length: int) -> str:
    """A string >= ``value`` of about ``prefix_length`` characters (see the module)."""
    if len(value) <= prefix_length:
        return value
    end = prefix_length
    while end < len(value) and value[end] >= _TIE_BREAKER:
        end += 1
    if end == len(value):
        return value
    return value[:end] + _TIE_BREAKER


def format_timestamp(value: dt.datetime, *, aware: bool) -> str:
    """``yyyy-MM-ddTHH:mm:ss.SSS`` (+ ``Z`` when aware), truncated to milliseconds."""
    if aware:
        value = value.astimezone(dt.UTC)
    text = value.strftime("%Y-%m-%dT%H:%M:%S") + f".{value.microsecond // 1000:03d}"
    if value.year < 1000:
        text = f"{value.year:04d}" + text[text.index("-") :]
    return text + ("Z" if aware else "")


def _object(tree: dict[str, Any]) -> str:
    parts = []
    for key, value in tree.items():
        text = _object(value) if isinstance(value, dict) else value
        parts.append(json.dumps(key, ensure_ascii=False) + ":" + text)
    return "{" + ",".join(parts) + "}"
