"""Scans: a snapshot's live rows as Arrow, reading only the files a filter may need.

Invariants:
- The rows returned are exactly the live rows of the snapshot that satisfy the
  filter: each file's rows minus those its deletion vector marks, partition
  columns filled from the log (:func:`raydelta.storage.data.files.read_logical_file`),
  then the filter applied row by row with SQL semantics (NULL is not true).
- File pruning is conservative: a file is skipped only when its partition
  values or its statistics prove no row can match; unknown or unparsable
  statistics, nested columns and types without an order keep the file.
- Statistics are keyed by physical names under column mapping; predicates
  and results use logical names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from raydelta.protocol.errors import InvalidArgumentError, InvalidPredicateError
from raydelta.protocol.expression_pruning import (
    ColumnStats,
    column_stats,
    conjuncts,
    partition_keep,
    partition_terms,
    statistics_may_match,
)
from raydelta.protocol.expressions import SqlExpression, evaluate, parse_expression
from raydelta.protocol.partition_values import parse_partition_value, partition_values_to_arrow
from raydelta.protocol.predicate_evaluation import matches
from raydelta.protocol.predicates import (
    AlwaysTrue,
    And,
    Comparison,
    In,
    IsNull,
    Not,
    Or,
    Predicate,
    parse_predicate,
)
from raydelta.protocol.schema import DataType, PrimitiveType, StructField, StructType, physical_name
from raydelta.protocol.schema_arrow import data_type_to_arrow, to_arrow
from raydelta.protocol.statistics import FileStatistics, parse_stats, value_coercer
from raydelta.storage.data.files import read_logical_file

Filter: TypeAlias = "str | Predicate | pc.Expression"
READ_THREADS = 8
_ORDERED = frozenset({"byte", "short", "integer", "long", "float", "double", "string", "date"})


def as_predicate(filter: str | Predicate) -> Predicate:
    """A SQL filter (the predicate subset of :func:`parse_predicate`) as a predicate."""
    return parse_predicate(filter) if isinstance(filter, str) else filter


_PREDICATE_NODES = (AlwaysTrue, And, Comparison, In, IsNull, Not, Or)


def to_arrow_expression(predicate: Predicate, schema: StructType) -> pc.Expression:
    """``predicate`` as a pyarrow compute expression over logical column names."""
    if isinstance(predicate, AlwaysTrue):
        return pc.scalar(True)
    if isinstance(predicate, Comparison):
        column, literal = pc.field(predicate.column), _literal(predicate, schema)
        if pa.types.is_floating(literal.type):
            return _floating_comparison(column, predicate.op, literal)
        return {
            "=": column == literal,
            "!=": column != literal,
            "<": column < literal,
            "<=": column <= literal,
            ">": column > literal,
            ">=": column >= literal,
        }[predicate.op]
    if isinstance(predicate, In):
        arrow_type = _arrow_type(predicate.column, schema)
        values = pa.array([_cast(v, arrow_type) for v in predicate.values], type=arrow_type)
        return pc.field(predicate.column).isin(values)
    if isinstance(predicate, IsNull):
        return pc.field(predicate.column).is_null()
    if isinstance(predicate, Not):
        return ~to_arrow_expression(predicate.child, schema)
    if isinstance(predicate, And | Or):
        parts = [to_arrow_expression(child, schema) for child in predicate.children]
        combined = parts[0]
        for part in parts[1:]:
            combined = combined & part if isinstance(predicate, And) else combined | part
        return combined
    raise InvalidArgumentError(f"unsupported predicate {predicate!r}")


def _floating_comparison(column: pc.Expression, op: str, literal: pa.Scalar) -> pc.Expression:
    """``column <op> literal`` on a float or double column in Spark's order,
    where NaN is above every number (Arrow's is IEEE's: NaN > 1 is false).
    A predicate's literal is finite (the model refuses NaN and infinities)."""
    comparison = {
        "=": column == literal,
        "!=": column != literal,
        "<": column < literal,
        "<=": column <= literal,
        ">": column > literal,
        ">=": column >= literal,
    }[op]
    return comparison | pc.is_nan(column) if op in (">", ">=") else comparison


def _field(column: str, schema: StructType) -> StructField:
    for f in schema.fields:
        if f.name == column or f.name.lower() == column.lower():
            return f
    raise InvalidArgumentError(
        f"filter names column {column!r}, which the table does not have"
        f" (columns: {', '.join(f.name for f in schema.fields)})"
    )


def _arrow_type(column: str, schema: StructType) -> pa.DataType:
    return data_type_to_arrow(_field(column, schema).type)


def _cast(value: Any, arrow_type: pa.DataType) -> pa.Scalar:
    try:
        return pa.scalar(value).cast(arrow_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InvalidArgumentError(f"{value!r} is not a value of type {arrow_type}") from exc


def _literal(predicate: Comparison, schema: StructType) -> pa.Scalar:
    return _cast(predicate.value, _arrow_type(predicate.column, schema))


# --- file pruning ---------------------------------------------------------------------


def _stat_value(raw: Any, dtype: DataType) -> Any:
    if isinstance(raw, str) and not (isinstance(dtype, PrimitiveType) and dtype.name == "string"):
        return parse_partition_value(raw, dtype)
    return raw


def _comparable(value: Any, literal: Any) -> tuple[Any, Any] | None:
    if isinstance(value, bool) or isinstance(literal, bool):
        return None
    if isinstance(value, int | float) and isinstance(literal, int | float):
        return value, literal
    if isinstance(value, str) and isinstance(literal, str):
        return value, literal
    if isinstance(value, date) and isinstance(literal, str):
        return value, date.fromisoformat(literal)
    return None


_NAN_MATCHES = frozenset({">", ">=", "!="})
"""Comparisons a NaN row satisfies under Spark's ordering (NaN above all numbers)."""


class _StatsView:
    """One file's statistics seen through logical column names."""

    def __init__(self, stats: FileStatistics, schema: StructType, mode: str) -> None:
        self.stats, self.schema, self.mode = stats, schema, mode

    def bounds(self, column: str, literal: Any) -> tuple[Any, Any, Any, bool] | None:
        """``(min, max, literal)`` made comparable, and whether the column is a
        float or double one (its NaN rows are in neither bound); None when unknown."""
        try:
            f = _field(column, self.schema)
        except InvalidArgumentError:
            return None
        if not (isinstance(f.type, PrimitiveType) and f.type.name in _ORDERED):
            return None
        key = [physical_name(f, self.mode)]
        low, high = self.stats.min_value(key), self.stats.max_value(key)
        if low is None or high is None:
            return None
        try:
            low_pair = _comparable(_stat_value(low, f.type), literal)
            high_pair = _comparable(_stat_value(high, f.type), literal)
        except (ValueError, TypeError, ArithmeticError):
            return None
        if low_pair is None or high_pair is None:
            return None
        floating = f.type.name in ("float", "double")
        return low_pair[0], high_pair[0], low_pair[1], floating

    def nulls(self, column: str) -> tuple[int, int] | None:
        try:
            f = _field(column, self.schema)
        except InvalidArgumentError:
            return None
        count = self.stats.null_count_of([physical_name(f, self.mode)])
        total = self.stats.num_records
        return None if count is None or total is None else (count, total)


def _may_match(predicate: Predicate, view: _StatsView) -> bool:
    if isinstance(predicate, Comparison):
        known = view.bounds(predicate.column, predicate.value)
        if known is None:
            return True
        low, high, value, floating = known
        if floating and predicate.op in _NAN_MATCHES:
            # NaN is in no min/max statistic, and in Spark's order it is above
            # every number and unequal to each: a NaN row may match these
            return True
        try:
            return bool(
                {
                    "=": low <= value <= high,
                    "!=": not (low == high == value),
                    "<": low < value,
                    "<=": low <= value,
                    ">": high > value,
                    ">=": high >= value,
                }[predicate.op]
            )
        except TypeError:
            return True
    if isinstance(predicate, In):
        return any(
            _may_match(Comparison(column=predicate.column, op="=", value=v), view)
            for v in predicate.values
        )
    if isinstance(predicate, IsNull):
        nulls = view.nulls(predicate.column)
        return nulls is None or nulls[0] > 0
    if isinstance(predicate, Not) and isinstance(predicate.child, IsNull):
        nulls = view.nulls(predicate.child.column)
        return nulls is None or nulls[0] < nulls[1]
    if isinstance(predicate, And):
        return all(_may_match(child, view) for child in predicate.children)
    if isinstance(predicate, Or):
        return any(_may_match(child, view) for child in predicate.children)
    return True


def prune_files(
    files: pa.Table,
    predicate: Predicate | None,
    schema: StructType,
    partition_columns: Sequence[str],
    column_mapping_mode: str,
) -> pa.Table:
    """The rows of ``files`` (canonical ``add`` rows) that may hold a row
    ``predicate`` selects: partition pruning, then min/max/null-count skipping."""
    if predicate is None or isinstance(predicate, AlwaysTrue) or files.num_rows == 0:
        return files
    by_physical = {physical_name(f, column_mapping_mode): f for f in schema.fields}
    types = {f.name: f.type for f in schema.fields if f.name in partition_columns}
    keep = []
    for values, stats_text in zip(
        files.column("partitionValues").to_pylist(),
        files.column("stats").to_pylist(),
        strict=True,
    ):
        logical = {by_physical[k].name if k in by_physical else k: v for k, v in values or []}
        if not matches(predicate, logical, types):
            keep.append(False)
            continue
        stats = parse_stats(stats_text)
        keep.append(
            stats is None or _may_match(predicate, _StatsView(stats, schema, column_mapping_mode))
        )
    return files.filter(pa.array(keep, type=pa.bool_()))


def prune_files_by_expression(
    files: pa.Table,
    expression: SqlExpression,
    schema: StructType,
    partition_columns: Sequence[str],
    column_mapping_mode: str,
) -> pa.Table:
    """The rows of ``files`` that may hold a row the Spark SQL ``expression``
    selects (:mod:`raydelta.protocol.expression_pruning`): its partition-only
    ``AND`` terms evaluated over each file's typed partition values, then its
    terms' prunable forms over each file's statistics."""
    if files.num_rows == 0:
        return files
    keep = [True] * files.num_rows
    terms = partition_terms(expression, partition_columns)
    if terms and partition_columns:
        values = partition_values_to_arrow(
            files.column("partitionValues"),
            schema,
            list(partition_columns),
            column_mapping_mode=column_mapping_mode,
            physical_names=False,
        )
        partitions = pa.Table.from_struct_array(values)
        keep = partition_keep(terms, partitions)
    partition = {c.lower() for c in partition_columns}
    data_terms = conjuncts(expression)
    for index, stats_text in enumerate(files.column("stats").to_pylist()):
        if not keep[index]:
            continue
        stats = parse_stats(stats_text)
        if stats is None:
            continue
        lookup = _stats_lookup(stats, schema, partition, column_mapping_mode)
        keep[index] = all(statistics_may_match(term, lookup) for term in data_terms)
    return files.filter(pa.array(keep, type=pa.bool_()))


def _stats_lookup(
    stats: FileStatistics, schema: StructType, partition: set[str], mode: str
) -> Callable[[str], ColumnStats | None]:
    """One file's statistics of a top-level data column, by logical name."""

    def lookup(column: str) -> ColumnStats | None:
        try:
            f = _field(column, schema)
        except InvalidArgumentError:
            return None
        if f.name.lower() in partition or not isinstance(f.type, PrimitiveType):
            return None
        arrow_type = data_type_to_arrow(f.type)
        coerce = value_coercer(arrow_type)
        key = [physical_name(f, mode)]
        low, high = stats.min_value(key), stats.max_value(key)
        return column_stats(
            f.name,
            arrow_type,
            None if low is None else coerce(low),
            None if high is None else coerce(high),
            stats.null_count_of(key),
            stats.num_records,
        )

    return lookup


# --- the scan ----------------------------------------------------------------------------


def scan(
    table_uri: str,
    files: pa.Table,
    schema: StructType,
    partition_columns: Sequence[str],
    *,
    column_mapping_mode: str = "none",
    columns: Sequence[str] | None = None,
    filter: Filter | None = None,
    storage_options: dict[str, Any] | None = None,
    on_file_read: Callable[[int], None] | None = None,
) -> pa.Table:
    """The live rows of ``files`` that satisfy ``filter``, with ``columns``
    (all by default) in the table's order.

    ``filter`` is Spark SQL text (see :func:`_plan_filter`), a
    :class:`Predicate`, or a pyarrow compute expression (applied to rows
    only: no file pruning). Reads files on a thread pool.
    """
    names = [f.name for f in schema.fields]
    wanted = list(columns) if columns is not None else names
    unknown = [c for c in wanted if c not in names]
    if unknown:
        raise InvalidArgumentError(f"unknown columns {unknown}; the table has {names}")
    predicate, row_filter = _plan_filter(filter, schema)
    selected = prune_files(files, predicate, schema, partition_columns, column_mapping_mode)
    if isinstance(filter, str):
        selected = prune_files_by_expression(
            selected, parse_expression(filter), schema, partition_columns, column_mapping_mode
        )
    read_schema = (
        schema
        if row_filter is not None
        else StructType(tuple(f for f in schema.fields if f.name in wanted))
    )
    arrow_schema = to_arrow(read_schema)

    def read(add: Mapping[str, Any]) -> pa.Table:
        row = dict(add)
        row["partitionValues"] = dict(add.get("partitionValues") or [])
        table = read_logical_file(
            table_uri,
            row,
            read_schema,
            partition_columns,
            column_mapping_mode=column_mapping_mode,
            storage_options=storage_options,
        )
        if on_file_read is not None:
            on_file_read(1)
        return table

    rows = selected.select(["path", "partitionValues", "deletionVector"]).to_pylist()
    with ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        parts = list(pool.map(read, rows))
    # Files may store a variant differently (unshredded, or shredded with
    # another typed_value): the struct fields are unioned, each file's as stored.
    result = (
        pa.concat_tables(parts, promote_options="permissive")
        if parts
        else arrow_schema.empty_table()
    )
    if row_filter is not None:
        result = row_filter(result)
    return result.select(wanted)


def select_files(
    files: pa.Table,
    filter: Filter | None,
    schema: StructType,
    partition_columns: Sequence[str],
    *,
    column_mapping_mode: str = "none",
) -> pa.Table:
    """The rows of ``files`` that :func:`scan` with ``filter`` reads (the same
    partition pruning and statistics skipping), for readers that split the
    files among tasks and scan each group. Raises on a filter that does not
    parse, before any file is read.

    SQL text outside the predicate subset still prunes by its top-level
    ``AND`` terms that are in it (``a = 1 AND b % 2 = 0`` prunes by
    ``a = 1``): rows must satisfy every term, so files none of whose rows
    satisfy one are skipped safely. SQL text then also prunes by
    :func:`prune_files_by_expression` (any function on partition columns,
    monotone functions, ``LIKE 'prefix%'``... on statistics)."""
    predicate, _ = _plan_filter(filter, schema)
    if predicate is None and isinstance(filter, str):
        predicate = _prunable_terms(filter)
    selected = prune_files(files, predicate, schema, partition_columns, column_mapping_mode)
    if isinstance(filter, str):
        selected = prune_files_by_expression(
            selected, parse_expression(filter), schema, partition_columns, column_mapping_mode
        )
    return selected


def _prunable_terms(sql: str) -> Predicate | None:
    """The ``AND`` of the top-level terms of ``sql`` that fit the predicate subset."""
    from sqlglot import exp

    node = parse_expression(sql).node
    while isinstance(node, exp.Paren):
        node = node.this
    terms: list[Predicate] = []
    for term in node.flatten() if isinstance(node, exp.And) else [node]:
        try:
            terms.append(parse_predicate(term.sql(dialect="spark")))
        except InvalidPredicateError:
            continue
    if not terms:
        return None
    return terms[0] if len(terms) == 1 else And(children=tuple(terms))


def _plan_filter(
    filter: Filter | None, schema: StructType
) -> tuple[Predicate | None, Callable[[pa.Table], pa.Table] | None]:
    """The predicate files are pruned with (None: no pruning) and the row filter.

    SQL text is evaluated row by row with :mod:`raydelta.protocol.expressions`
    (any Spark SQL it supports); when it also fits the predicate subset
    (comparisons, ``IN``, ``IS NULL``, ``AND``/``OR``/``NOT``) it prunes files.
    """
    if filter is None:
        return None, None
    if isinstance(filter, str):
        parsed = parse_expression(filter)
        try:
            predicate: Predicate | None = parse_predicate(filter)
        except InvalidPredicateError:
            predicate = None
        return predicate, lambda table: table.filter(evaluate(parsed, table))
    if isinstance(filter, _PREDICATE_NODES):
        expression = to_arrow_expression(filter, schema)
        return filter, lambda table: table.filter(expression)
    if isinstance(filter, pc.Expression):
        return None, lambda table: table.filter(filter)
    raise InvalidArgumentError(
        f"filter must be SQL text, a Predicate or a pyarrow expression, got {type(filter).__name__}"
    )
