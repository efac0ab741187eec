"""File pruning for Spark SQL conditions: which files may hold a row a
condition selects, from their partition values and their statistics.

Two steps, both conservative (a file is dropped only when it is proven
that none of its rows can satisfy the condition):

- :func:`partition_keep`: the condition's top-level ``AND`` terms that read
  only partition columns are evaluated with the real evaluator
  (:func:`raydelta.protocol.expressions.evaluate`) over one row per file,
  its partition values typed as the columns; a file is dropped where a term
  is FALSE or NULL. Exact for every function the evaluator has. A term that
  errors keeps the file (the evaluator refuses the rows later anyway).
- :func:`statistics_may_match`: the prunable forms, over one file's
  ``minValues``/``maxValues``/``nullCount``: ``f(col) <op> constant`` (either
  side; ``= <> != < <= > >= <=>``), ``f(col) [NOT]? IN (constants)``,
  ``f(col) BETWEEN``, ``col LIKE 'prefix%'``, ``col IS [NOT] NULL``, and
  ``AND``/``OR`` of them, where ``f`` is a chain of functions the registry
  marks :class:`~raydelta.protocol.functions.registry.Monotonic` (plus
  ``+``/``-`` of a constant and numeric/temporal casts): the values of
  ``f(col)`` over a file lie in ``[f(min), f(max)]``, computed by the
  evaluator. Anything else keeps the file.

Invariants (never drop a file that could match):
- Unknown, unparsable or missing statistics keep the file; so does any
  evaluation error, a NULL or NaN bound, and a type coercion that is not
  monotone (a string column compared with a number is cast per row).
- Floating-point columns: NaN is not in the statistics (raydelta's writer)
  or is their maximum (delta-spark's), so only the minimum is used, and
  only for the bare column (``floor(NaN)`` is 0, in the middle of the range).
- Strings: the minimum is a prefix (<= every value); a maximum that may be
  truncated (it ends with the tie-breaker U+FFFD or has 32 or more
  characters) is unbounded above.
- Timestamps: statistics are truncated to milliseconds, so the maximum is
  widened by 999 microseconds.
- Deletion vectors and ``tightBounds: false`` leave the statistics wider than
  the live rows: still bounds, so pruning on them stays a superset.
- NULL rows: a chain maps NULL to NULL (checked by evaluating it at NULL), so
  NULL rows never satisfy a comparison; a file of only NULLs is dropped by
  any comparison whose chain maps NULL to NULL.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlglot import exp

from raydelta.protocol.errors import RaydeltaError
from raydelta.protocol.expression_evaluation import CLOCK, CLOCK_NAMES, Evaluator
from raydelta.protocol.expressions import SqlExpression, evaluate, parse_expression
from raydelta.protocol.functions import FUNCTIONS
from raydelta.protocol.functions.registry import NUMERIC

STRING_PREFIX_LENGTH = 32
TIE_BREAKER = "\ufffd"
_FAILURES = (RaydeltaError, pa.ArrowException, ValueError, TypeError, ArithmeticError, KeyError)


def conjuncts(expression: SqlExpression) -> list[exp.Expr]:
    """The top-level ``AND`` terms of ``expression`` (parentheses unwrapped)."""
    node = _unwrap(expression.node)
    terms = list(node.flatten()) if isinstance(node, exp.And) else [node]
    return [_unwrap(term) for term in terms]


def _unwrap(node: exp.Expr) -> exp.Expr:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _uses_clock(node: exp.Expr) -> bool:
    return any(
        isinstance(n, CLOCK) or (isinstance(n, exp.Anonymous) and n.name.lower() in CLOCK_NAMES)
        for n in node.walk()
    )


def _top_level_columns(node: exp.Expr) -> set[str] | None:
    """Lower-cased top-level names of the columns ``node`` reads; None when a
    reference is not a plain top-level column."""
    names: set[str] = set()
    for column in node.find_all(exp.Column):
        if len(column.parts) != 1:
            return None
        names.add(column.name.lower())
    return names


# --- partition pruning -----------------------------------------------------------------


def partition_terms(expression: SqlExpression, partition_columns: Sequence[str]) -> list[str]:
    """The SQL of the top-level terms that read only partition columns (and no clock)."""
    partition = {c.lower() for c in partition_columns}
    out = []
    for term in conjuncts(expression):
        names = _top_level_columns(term)
        if names is not None and names <= partition and not _uses_clock(term):
            out.append(term.sql(dialect="spark"))
    return out


def partition_keep(terms: Sequence[str], partitions: pa.Table) -> list[bool]:
    """For each row of ``partitions`` (one per file, logical names, typed):
    False when some term is FALSE or NULL for it, else True. A term that
    errors over all rows is evaluated row by row; a row where it errors is kept."""
    keep = [True] * partitions.num_rows
    for term in terms:
        for index, value in enumerate(_term_values(term, partitions)):
            if value is not True and value != "error":
                keep[index] = False
    return keep


def _term_values(term: str, partitions: pa.Table) -> list[Any]:
    try:
        return list(evaluate(term, partitions).to_pylist())
    except _FAILURES:
        pass
    values: list[Any] = []
    for index in range(partitions.num_rows):
        try:
            values.append(evaluate(term, partitions.slice(index, 1)).to_pylist()[0])
        except _FAILURES:
            values.append("error")
    return values


# --- statistics ------------------------------------------------------------------------


@dataclass(frozen=True)
class ColumnStats:
    """One column's statistics in one file, as values of its Arrow type.

    ``low``/``high`` are None when unknown; ``high_unbounded`` says the
    maximum is not an upper bound (a truncated string, a float that may hide
    NaN); ``nulls``/``records`` are None when unknown."""

    name: str
    arrow_type: pa.DataType
    low: Any
    high: Any
    high_unbounded: bool
    nulls: int | None
    records: int | None

    @property
    def all_null(self) -> bool:
        return self.records is not None and self.nulls == self.records

    @property
    def may_have_nulls(self) -> bool:
        return self.nulls is None or self.nulls > 0


def column_stats(
    name: str, arrow_type: pa.DataType, low: Any, high: Any, nulls: int | None, records: int | None
) -> ColumnStats:
    """:class:`ColumnStats` from coerced statistics values (see the module for the rules)."""
    unbounded = False
    if pa.types.is_floating(arrow_type):
        unbounded = True
        if isinstance(low, float) and math.isnan(low):
            low = None
    elif pa.types.is_string(arrow_type) and isinstance(high, str):
        unbounded = high.endswith(TIE_BREAKER) or len(high) >= STRING_PREFIX_LENGTH
    elif pa.types.is_timestamp(arrow_type) and isinstance(high, dt.datetime):
        try:
            high = high + dt.timedelta(microseconds=999)
        except OverflowError:
            unbounded = True
    return ColumnStats(name, arrow_type, low, high, unbounded, nulls, records)


StatsLookup = Callable[[str], ColumnStats | None]


def statistics_may_match(node: exp.Expr, stats: StatsLookup) -> bool:
    """False only when the statistics prove no row satisfies ``node``."""
    node = _unwrap(node)
    try:
        if isinstance(node, exp.And):
            return all(statistics_may_match(child, stats) for child in node.flatten())
        if isinstance(node, exp.Or):
            return any(statistics_may_match(child, stats) for child in node.flatten())
        return _leaf_may_match(node, stats)
    except _FAILURES:
        return True


def _leaf_may_match(node: exp.Expr, stats: StatsLookup) -> bool:
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        column = _bare(node.this, stats)
        return column is None or column.may_have_nulls
    if isinstance(node, exp.Not):
        inner = _unwrap(node.this)
        if isinstance(inner, exp.Is) and isinstance(inner.expression, exp.Null):
            column = _bare(inner.this, stats)
            return column is None or not column.all_null
        return True
    if isinstance(node, exp.In) and not node.args.get("query") and node.expressions:
        return any(_compare_may_match(node.this, "=", item, stats) for item in node.expressions)
    if isinstance(node, exp.Between):
        return _compare_may_match(node.this, ">=", node.args["low"], stats) and (
            _compare_may_match(node.this, "<=", node.args["high"], stats)
        )
    if isinstance(node, exp.Like) and not node.args.get("negate"):
        return _like_may_match(node, stats)
    op = _OPS.get(type(node))
    if op is None:
        return True
    if _is_constant(node.expression):
        return _compare_may_match(node.this, op, node.expression, stats)
    if _is_constant(node.this):
        return _compare_may_match(node.expression, _FLIPPED[op], node.this, stats)
    return True


_OPS: dict[type[exp.Expr], str] = {
    exp.EQ: "=",
    exp.NullSafeEQ: "<=>",
    exp.NEQ: "!=",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
}
_FLIPPED = {"=": "=", "<=>": "<=>", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _is_constant(node: exp.Expr) -> bool:
    return not any(isinstance(n, exp.Column) for n in node.walk()) and not _uses_clock(node)


def _bare(node: exp.Expr, stats: StatsLookup) -> ColumnStats | None:
    node = _unwrap(node)
    if isinstance(node, exp.Column) and len(node.parts) == 1:
        return stats(node.name)
    return None


def _constant(node: exp.Expr) -> pa.Scalar:
    value = evaluate(parse_expression(node.sql(dialect="spark")), pa.table({"_": [0]}))
    return value[0]


def _compare_may_match(side: exp.Expr, op: str, other: exp.Expr, stats: StatsLookup) -> bool:
    bounds = _side_bounds(side, stats)
    if bounds is None:
        return True
    low, high, null_image, column = bounds
    literal = _constant(other)
    if not literal.is_valid:
        # x <=> NULL matches NULL rows; any other comparison with NULL is NULL.
        return op == "<=>" and (column.may_have_nulls or null_image.is_valid)
    if null_image.is_valid and column.may_have_nulls:
        return True
    if column.all_null:
        return False
    if low is None:
        return True
    evaluator = Evaluator("", pa.table({"_": [0]}), None)
    values = pa.array([low.as_py(), None if high is None else high.as_py()], low.type)
    coerced, lit = evaluator.coerced(values, literal)
    if coerced.type != values.type and not _monotone_cast(values.type, coerced.type):
        return True
    lo, hi, value = coerced[0].as_py(), coerced[1].as_py(), lit.as_py()
    if any(isinstance(v, float) and math.isnan(v) for v in (lo, hi, value)):
        return True
    if op in ("=", "<=>"):
        return lo <= value and (hi is None or value <= hi)
    if op == "!=":
        return not (hi is not None and lo == hi == value)
    if op in ("<", "<="):
        return bool(lo < value if op == "<" else lo <= value)
    return hi is None or bool(hi > value if op == ">" else hi >= value)


def _side_bounds(
    side: exp.Expr, stats: StatsLookup
) -> tuple[pa.Scalar | None, pa.Scalar | None, pa.Scalar, ColumnStats] | None:
    """``(f(min), f(max) or None when unbounded, f(NULL), column)`` of a
    monotone chain over one column; None when ``side`` is not one."""
    side = _unwrap(side)
    columns = list(side.find_all(exp.Column))
    if len(columns) != 1 or len(columns[0].parts) != 1 or _uses_clock(side):
        return None
    column = stats(columns[0].name)
    if column is None:
        return None
    is_bare = isinstance(side, exp.Column)
    if not is_bare and pa.types.is_floating(column.arrow_type):
        return None
    sql = side.sql(dialect="spark")
    parsed = parse_expression(sql)
    probe = pa.table({column.name: pa.array([None], column.arrow_type)})
    if not is_bare and not _monotone_chain(side, probe):
        return None
    high = None if column.high_unbounded else column.high
    table = pa.table({column.name: pa.array([column.low, high, None], column.arrow_type)})
    images = evaluate(parsed, table)
    low_image = images[0] if column.low is not None and images[0].is_valid else None
    high_image = images[1] if high is not None and images[1].is_valid else None
    if column.low is not None and low_image is None:
        return None
    if high is not None and high_image is None:
        return None
    return low_image, high_image, images[2], column


def _kind(arrow_type: pa.DataType) -> str | None:
    if pa.types.is_integer(arrow_type):
        return "integer"
    if pa.types.is_floating(arrow_type):
        return "floating"
    if pa.types.is_decimal(arrow_type):
        return "decimal"
    if pa.types.is_date(arrow_type):
        return "date"
    if pa.types.is_timestamp(arrow_type):
        return "timestamp"
    if pa.types.is_string(arrow_type):
        return "string"
    return None


def _monotone_cast(source: pa.DataType, target: pa.DataType) -> bool:
    """Casts that keep order: numeric to numeric (widening, or raising on
    overflow), between dates and timestamps, and a type to itself."""
    a, b = _kind(source), _kind(target)
    if a is None or b is None:
        return False
    return a == b or (a in NUMERIC and b in NUMERIC) or {a, b} <= {"date", "timestamp"}


def _type_of(node: exp.Expr, probe: pa.Table) -> pa.DataType:
    return evaluate(parse_expression(node.sql(dialect="spark")), probe).type


def _monotone_chain(node: exp.Expr, probe: pa.Table) -> bool:
    """``node`` is non-decreasing in the one column it reads (see the module)."""
    node = _unwrap(node)
    if isinstance(node, exp.Column):
        return True
    if isinstance(node, exp.Cast | exp.TryCast):
        return _monotone_cast(_type_of(node.this, probe), _type_of(node, probe)) and (
            _monotone_chain(node.this, probe)
        )
    if isinstance(node, exp.Add | exp.Sub):
        if _is_constant(node.expression):
            inner = node.this
        elif isinstance(node, exp.Add) and _is_constant(node.this):
            inner = node.expression
        else:
            return False
        kind = _kind(_type_of(inner, probe))
        return kind in NUMERIC | {"date", "timestamp"} and _monotone_chain(inner, probe)
    function = FUNCTIONS.find(node)
    if function is None or function.monotonic is None:
        return False
    key = function.monotonic.argument
    inner = node.expressions[int(key)] if key.isdigit() else node.args.get(key)
    if not isinstance(inner, exp.Expr):
        return False
    others = [a for a in _arguments(node) if a is not inner]
    if not all(_is_constant(a) for a in others):
        return False
    return _kind(_type_of(inner, probe)) in function.monotonic.kinds and _monotone_chain(
        inner, probe
    )


def _arguments(node: exp.Expr) -> list[exp.Expr]:
    out: list[exp.Expr] = []
    for value in node.args.values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, exp.Expr):
                out.append(item)
    return out


def _like_may_match(node: exp.Like, stats: StatsLookup) -> bool:
    column = _bare(node.this, stats)
    pattern = _unwrap(node.expression)
    if column is None or not isinstance(pattern, exp.Literal) or not pattern.is_string:
        return True
    if not pa.types.is_string(column.arrow_type):
        return True
    prefix, exact = _like_prefix(str(pattern.this))
    if column.all_null:
        return False
    if column.low is None or not prefix:
        return True
    low, high = column.low, None if column.high_unbounded else column.high
    if exact:
        return bool(low <= prefix and (high is None or prefix <= high))
    starts_below_end = low < prefix or low.startswith(prefix)
    return bool(starts_below_end and (high is None or high >= prefix))


def _like_prefix(pattern: str) -> tuple[str, bool]:
    """The literal prefix of a LIKE pattern (``\\`` escapes) and whether the
    pattern is that text exactly (no wildcard)."""
    out: list[str] = []
    chars = iter(pattern)
    for char in chars:
        if char == "\\":
            out.append(next(chars, ""))
        elif char in "%_":
            return "".join(out), False
        else:
            out.append(char)
    return "".join(out), True
