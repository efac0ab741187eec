"""Spark SQL expressions (CHECK constraints, invariants, generation and default
expressions, DML predicates) evaluated over Arrow tables.

:func:`parse_expression` parses with sqlglot's ``spark`` dialect (no parser
of our own) and checks every node against the constructs this module
evaluates; :func:`evaluate` computes the expression for every row of an
Arrow table whose columns carry *logical* names, with the evaluator of
:mod:`raydelta.protocol.expression_evaluation` (how each construct is
computed over Arrow).

Evaluated: column references (nested struct fields as ``a.b``; exact name
first, then case-insensitively, as Spark resolves them), literals (integers;
``1.5`` as ``DECIMAL(2,1)``; exponents and ``D`` suffixes as doubles;
strings, booleans, NULL, ``DATE '...'``,
``TIMESTAMP '...'``, ``TIMESTAMP_NTZ '...'``), ``= == <> != < <= > >= <=>``,
``AND OR NOT`` (three-valued), ``IS [NOT] NULL``, ``IS [NOT] TRUE/FALSE``,
``[NOT] IN``, ``[NOT] BETWEEN``, ``[NOT] LIKE`` / ``ILIKE`` (``\\`` escapes),
``RLIKE``, ``+ - * / % DIV`` and unary minus, ``CAST``/``TRY_CAST``,
``CASE``, ``IF``, ``COALESCE``/``NVL``/``IFNULL``, ``year month day
dayofmonth hour minute second``, ``to_date``/``date``, ``date_format``
(patterns of ``yyyy MM dd HH mm ss`` and literal separators),
``substring``/``substr``, ``lower``, ``upper``, ``concat``, ``length``,
``trim``/``ltrim``/``rtrim`` (spaces), ``abs``, ``current_date``,
``current_timestamp``/``now`` (from the ``now`` argument: this module reads
no clock).

Invariants:
- Anything else raises :class:`UnsupportedExpressionError` from
  :func:`parse_expression`, before any row is looked at: a data rule that
  cannot be evaluated is refused, never skipped.
- Evaluation follows SQL null semantics and Spark's choices where engines
  differ (:mod:`raydelta.protocol.expression_evaluation` states them).
- :func:`evaluate` returns a ``pa.Array`` with one value per row, never a
  chunked array or a scalar.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from raydelta.protocol.errors import InvalidExpressionError
from raydelta.protocol.expression_evaluation import (
    CLOCK,
    CLOCK_NAMES,
    COMPARISONS,
    HANDLERS,
    PARTS,
    Evaluator,
    column_path,
    unsupported,
)
from raydelta.protocol.functions import FUNCTIONS

ANSI_DEFAULT = True
"""``spark.sql.ansi.enabled``'s default in the pinned Spark (4.x: true)."""


@dataclass(frozen=True)
class SqlExpression:
    """A parsed expression: its text, its sqlglot tree, the column paths it
    reads and whether it needs the clock (``current_timestamp()``...)."""

    sql: str
    node: exp.Expr = field(compare=False, repr=False)
    columns: tuple[tuple[str, ...], ...] = ()
    uses_clock: bool = False

    def __str__(self) -> str:
        return self.sql


def _check(node: exp.Expr, sql: str) -> None:
    """Refuse a node the evaluator has no rule for, naming it."""
    if type(node) in HANDLERS or type(node) in COMPARISONS or isinstance(node, PARTS):
        return
    if FUNCTIONS.find(node) is None:
        raise unsupported(node, sql)


def _uses_clock(node: exp.Expr) -> bool:
    if isinstance(node, CLOCK):
        return True
    return isinstance(node, exp.Anonymous) and str(node.name).lower() in CLOCK_NAMES


def parse_expression(sql: str) -> SqlExpression:
    """Parse one Spark SQL expression; refuse constructs :func:`evaluate` lacks."""
    if not isinstance(sql, str) or not sql.strip():
        raise InvalidExpressionError(f"expected a SQL expression, got {sql!r}", str(sql))
    try:
        node = sqlglot.parse_one(sql, read="spark")
    except SqlglotError as error:
        raise InvalidExpressionError(
            f"cannot parse SQL expression {sql!r}: {error}", sql
        ) from error
    columns: list[tuple[str, ...]] = []
    uses_clock = False
    for child in node.walk():
        _check(child, sql)
        if _uses_clock(child):
            uses_clock = True
        if isinstance(child, exp.Column):
            path = column_path(child, sql)
            if path not in columns:
                columns.append(path)
    return SqlExpression(sql=sql, node=node, columns=tuple(columns), uses_clock=uses_clock)


def evaluate(
    expression: SqlExpression | str,
    table: pa.Table,
    *,
    now: dt.datetime | None = None,
    ansi: bool = ANSI_DEFAULT,
) -> pa.Array:
    """The value of ``expression`` for every row of ``table`` (logical names).

    ``ansi`` is Spark's ``spark.sql.ansi.enabled`` (default: the pinned Spark
    4's, true): a zero divisor, an overflow or a failed ``CAST`` raises a
    :class:`~raydelta.protocol.errors.SparkRuntimeException` subclass; with
    False those are NULL (integer overflow wraps), as Spark's legacy mode."""
    parsed = parse_expression(expression) if isinstance(expression, str) else expression
    evaluator = Evaluator(parsed.sql, table, now, ansi=ansi)
    try:
        result = evaluator.value(parsed.node)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
        raise InvalidExpressionError(
            f"cannot evaluate {parsed.sql!r}: {error}", parsed.sql
        ) from error
    except OverflowError as error:
        # A date or time outside years 1-9999, which Spark has and Python has not.
        raise InvalidExpressionError(
            f"cannot evaluate {parsed.sql!r}: a value is out of raydelta's range ({error})",
            parsed.sql,
        ) from error
    return evaluator.array(result)


def referenced_columns(expression: SqlExpression) -> list[str]:
    """The dotted names of the columns ``expression`` reads (for messages)."""
    return [".".join(path) for path in expression.columns]
