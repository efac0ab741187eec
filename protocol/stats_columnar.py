"""A columnar fast path for the commit validator's ``stats`` rules.

:class:`~raydelta.protocol.file_action_rules.StatsChecker` decodes each file's
``stats`` with Python's JSON scanner and walks the values: about 3 µs a
file, most of a 10,000-file commit's validation. :func:`check_stats_columnar`
parses all of a commit's ``stats`` in one call of Arrow's JSON reader, typed by
the statistics schema, and checks whole columns.

Contract: it returns the files' ``numRecords`` when every ``stats`` passes
every rule the per-file checker applies, and None otherwise. None means
"not decided here" (a bad value, or a shape this path does not handle,
such as decimal columns or a ``stats`` holding a line break), never
"refused": the caller then runs the per-file checker, which accepts or
names the bad field. So this path may decline good input, and must never
accept input the per-file checker refuses.

Why one Arrow parse is unambiguous: the texts are joined with line breaks,
and each must start with ``{``, end with ``}`` and hold no line break
(checked on the joined text: as many line breaks as joins, each inside
``}`` line break ``{``). At
every join the text reads ``}`` line break ``{``, which is valid JSON only
between two top-level documents: a line break cannot sit inside a JSON
string, and ``}`` followed by ``{`` cannot sit inside an object or an array.
So every line holds at least one whole document, and exactly ``N`` rows
for ``N`` texts means exactly one document per line, in order.

Where Arrow's typed parse already enforces a rule: integers must be integer
literals within the column's width, floats any JSON number that fits a
double, strings strings, booleans booleans; a key given twice, ``NaN``,
control characters in strings and anything that is not JSON are errors.
Leaves of other types (dates, timestamps, binary) are read as strings and
checked one value at a time with the same coercers the per-file checker
uses; a schema with decimal leaves is declined (JSON numbers would have to
keep their exact digits).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from raydelta.protocol.statistics import (
    MAX_VALUES,
    MIN_VALUES,
    NULL_COUNT,
    NUM_RECORDS,
    value_coercer,
)


class ColumnarStatsCheck:
    """The fast path for one statistics schema (``stats_schema(...)``), built once."""

    def __init__(self, struct: pa.StructType) -> None:
        self._usable = not _has_decimal(struct)
        self._per_value: list[tuple[tuple[str, ...], Any]] = []
        fields = []
        for i in range(struct.num_fields):
            field = struct.field(i)
            fields.append(pa.field(field.name, self._decode_type(field.type, (field.name,))))
        self._schema = pa.schema(fields)
        self._parse = pa_json.ParseOptions(
            explicit_schema=self._schema, unexpected_field_behavior="ignore"
        )

    def _decode_type(self, arrow_type: pa.DataType, path: tuple[str, ...]) -> pa.DataType:
        if pa.types.is_struct(arrow_type):
            return pa.struct(
                [
                    pa.field(f.name, self._decode_type(f.type, (*path, f.name)))
                    for f in (arrow_type.field(i) for i in range(arrow_type.num_fields))
                ]
            )
        if pa.types.is_integer(arrow_type) or pa.types.is_boolean(arrow_type):
            return arrow_type
        if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
            return pa.string()
        if pa.types.is_floating(arrow_type):
            return pa.float64()
        # Dates, timestamps, ...: JSON strings, checked value by value below.
        self._per_value.append((path, value_coercer(arrow_type)))
        return pa.string()

    def check(self, texts: Sequence[str]) -> list[int | None] | None:
        """``numRecords`` of each text if all pass (module docstring), else None."""
        if not self._usable or not texts:
            return None
        joined = "\n".join(texts)
        joins = len(texts) - 1
        # Exactly the joins are line breaks, and each reads "}\n{".
        if joined.count("\n") != joins or joined.count("}\n{") != joins:
            return None
        if joined[0] != "{" or joined[-1] != "}":
            return None
        try:
            table = pa_json.read_json(
                pa.BufferReader(joined.encode("utf-8")),
                read_options=pa_json.ReadOptions(block_size=max(len(joined) // 2, 1 << 16)),
                parse_options=self._parse,
            )
        except (pa.ArrowException, UnicodeError, ValueError, OverflowError):
            return None
        if table.num_rows != len(texts):
            return None
        columns = set(table.column_names)
        if NUM_RECORDS in columns and not _non_negative(table.column(NUM_RECORDS)):
            return None
        if NULL_COUNT in columns and not _counts_non_negative(table.column(NULL_COUNT)):
            return None
        for path, coerce in self._per_value:
            for key in (MIN_VALUES, MAX_VALUES):
                if key not in columns or path[0] != key:
                    continue
                column = _leaf(table.column(key), path[1:])
                if any(v is not None and coerce(v) is None for v in column.to_pylist()):
                    return None
        if NUM_RECORDS not in columns:
            return [None] * len(texts)
        records: list[int | None] = table.column(NUM_RECORDS).to_pylist()
        return records


def _has_decimal(arrow_type: pa.DataType) -> bool:
    if pa.types.is_decimal(arrow_type):
        return True
    if pa.types.is_struct(arrow_type):
        return any(_has_decimal(arrow_type.field(i).type) for i in range(arrow_type.num_fields))
    return False


def _leaf(column: pa.ChunkedArray, path: tuple[str, ...]) -> pa.ChunkedArray:
    for name in path:
        column = pc.struct_field(column, name)
    return column


def _non_negative(column: pa.ChunkedArray) -> bool:
    if column.null_count == len(column):
        return True
    low = pc.min(column).as_py()
    return low is None or low >= 0


def _counts_non_negative(column: pa.ChunkedArray) -> bool:
    if pa.types.is_struct(column.type):
        return all(
            _counts_non_negative(pc.struct_field(column, column.type.field(i).name))
            for i in range(column.type.num_fields)
        )
    return _non_negative(column)
