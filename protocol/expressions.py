"""Spark SQL expressions (CHECK constraints, invariants, generation and default
expressions, DML predicates) evaluated over Arrow tables.

:func:`parse_expression` parses with sqlglot's ``spark`` dialect (no parser
of our own) and checks every node against the constructs this module
evaluates; :func:`evaluate` computes the expression for every row of an
Arrow table whose columns carry *logical* names.

Evaluated: column references (nested struct fields as ``a.b``; exact name
first, then case-insensitively, as Spark resolves them), literals (integers,
decimals and exponents as doubles, strings, booleans, NULL, ``DATE '...'``,
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
- SQL null semantics: comparisons and arithmetic with NULL are NULL; AND/OR
  are Kleene; ``x IN (..., NULL)`` without a match is NULL; ``<=>``, ``IS``
  and ``COALESCE`` never return NULL for null inputs alone; a NULL ``CASE``
  or ``IF`` condition takes the next branch.
- Spark's choices where engines differ: ``/`` divides as doubles, ``DIV``
  and ``%`` truncate toward zero (the sign of ``%`` follows the dividend);
  a zero divisor gives NULL; integer overflow and failed casts raise
  :class:`InvalidExpressionError` (ANSI mode, Spark 4's default);
  ``length``/``substring`` count characters (code points); ``trim`` strips
  spaces only. Timestamps with a zone are taken in UTC (delta-spark uses
  the session time zone; raydelta's is UTC).
- :func:`evaluate` returns a ``pa.Array`` with one value per row, never a
  chunked array or a scalar.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from raydelta.protocol.errors import InvalidExpressionError, UnsupportedExpressionError
from raydelta.protocol.expression_types import Value, arrow_type, cast, common_type, is_numeric


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


_COMPARISONS: dict[type[exp.Expression], str] = {
    exp.EQ: "equal",
    exp.NEQ: "not_equal",
    exp.LT: "less",
    exp.LTE: "less_equal",
    exp.GT: "greater",
    exp.GTE: "greater_equal",
}
_DATE_PARTS: dict[type[exp.Expression], str] = {
    exp.Year: "year",
    exp.Month: "month",
    exp.Day: "day",
    exp.DayOfMonth: "day",
    exp.Hour: "hour",
    exp.Minute: "minute",
    exp.Second: "second",
}
_CLOCK = (exp.CurrentTimestamp, exp.CurrentDate)
_SUPPORTED: tuple[type[exp.Expression], ...] = (
    exp.Column,
    exp.Identifier,
    exp.Dot,
    exp.Literal,
    exp.Boolean,
    exp.Null,
    exp.Paren,
    exp.And,
    exp.Or,
    exp.Not,
    exp.Is,
    exp.NullSafeEQ,
    exp.NullSafeNEQ,
    exp.In,
    exp.Between,
    exp.Like,
    exp.ILike,
    exp.RegexpLike,
    exp.Escape,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.IntDiv,
    exp.Mod,
    exp.Neg,
    exp.Cast,
    exp.TryCast,
    exp.DataType,
    exp.DataTypeParam,
    exp.Case,
    exp.If,
    exp.Coalesce,
    exp.TsOrDsToDate,
    exp.TimeToStr,
    exp.TimeStrToTime,
    exp.Substring,
    exp.Lower,
    exp.Upper,
    exp.Concat,
    exp.Length,
    exp.Trim,
    exp.Abs,
    *_COMPARISONS,
    *_DATE_PARTS,
    *_CLOCK,
)


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
        if not isinstance(child, _SUPPORTED):
            raise UnsupportedExpressionError(
                f"raydelta cannot evaluate {child.sql('spark')!r} "
                f"({type(child).__name__}) in SQL expression {sql!r}",
                sql,
            )
        if isinstance(child, _CLOCK):
            uses_clock = True
        if isinstance(child, exp.Column):
            path = _column_path(child, sql)
            if path not in columns:
                columns.append(path)
    return SqlExpression(sql=sql, node=node, columns=tuple(columns), uses_clock=uses_clock)


def _column_path(column: exp.Expression, sql: str) -> tuple[str, ...]:
    if isinstance(column, exp.Dot):
        return (*_column_path(column.this, sql), column.expression.name)
    if isinstance(column, exp.Column):
        return tuple(part.name for part in column.parts)
    raise UnsupportedExpressionError(f"unsupported column reference in {sql!r}", sql)


def evaluate(
    expression: SqlExpression | str,
    table: pa.Table,
    *,
    now: dt.datetime | None = None,
) -> pa.Array:
    """The value of ``expression`` for every row of ``table`` (logical names)."""
    parsed = parse_expression(expression) if isinstance(expression, str) else expression
    evaluator = _Evaluator(parsed.sql, table, now)
    try:
        result = evaluator.value(parsed.node)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
        raise InvalidExpressionError(
            f"cannot evaluate {parsed.sql!r}: {error}", parsed.sql
        ) from error
    return evaluator.array(result)


def referenced_columns(expression: SqlExpression) -> list[str]:
    """The dotted names of the columns ``expression`` reads (for messages)."""
    return [".".join(path) for path in expression.columns]


# --- evaluation --------------------------------------------------------------------


class _Evaluator:
    def __init__(self, sql: str, table: pa.Table, now: dt.datetime | None) -> None:
        self.sql = sql
        self.table = table
        self.rows = table.num_rows
        self.now = now

    # helpers ----------------------------------------------------------------------

    def fail(self, message: str) -> InvalidExpressionError:
        return InvalidExpressionError(f"{message} in {self.sql!r}", self.sql)

    def array(self, value: Value) -> pa.Array:
        if isinstance(value, pa.Scalar):
            return pa.array([value.as_py()] * self.rows, type=value.type)
        if isinstance(value, pa.ChunkedArray):
            return pa.concat_arrays(value.chunks) if value.num_chunks else pa.array([], value.type)
        return value

    def literal_text(self, node: exp.Expression, what: str) -> str:
        value = self.value(node)
        if not isinstance(value, pa.Scalar) or not pa.types.is_string(value.type):
            raise UnsupportedExpressionError(f"{what} must be a string literal in {self.sql!r}")
        return str(value.as_py())

    def literal_int(self, node: exp.Expression, what: str) -> int:
        value = self.value(node)
        if not isinstance(value, pa.Scalar) or not pa.types.is_integer(value.type):
            raise UnsupportedExpressionError(f"{what} must be an integer literal in {self.sql!r}")
        return int(value.as_py())

    # dispatch ---------------------------------------------------------------------

    def value(self, node: exp.Expr) -> Value:
        handler = _HANDLERS.get(type(node))
        if handler is None:
            for kind, name in ((_COMPARISONS, "compare"), (_DATE_PARTS, "date_part")):
                if type(node) in kind:
                    return getattr(self, name)(node)
            raise UnsupportedExpressionError(
                f"raydelta cannot evaluate {node.sql('spark')!r} in {self.sql!r}", self.sql
            )
        return handler(self, node)

    def column(self, node: exp.Expression) -> Value:
        path = _column_path(node, self.sql)
        current: pa.Array = self._top_level(path[0])
        for depth, part in enumerate(path[1:], start=1):
            if not pa.types.is_struct(current.type):
                raise self.fail(f"column {'.'.join(path[:depth])!r} is not a struct")
            index = _field_index(
                [current.type.field(i).name for i in range(current.type.num_fields)], part
            )
            if index is None:
                raise self.fail(f"no field {part!r} in column {'.'.join(path[:depth])!r}")
            current = pc.struct_field(current, [index])
        return current

    def _top_level(self, name: str) -> pa.Array:
        index = _field_index(self.table.column_names, name)
        if index is None:
            raise self.fail(f"no column {name!r} (columns: {self.table.column_names})")
        return self.array(self.table.column(index))

    def literal(self, node: exp.Literal) -> Value:
        text = node.this
        if node.is_string:
            return pa.scalar(str(text), pa.string())
        text = str(text)
        if re.fullmatch(r"[0-9]+", text):
            number = int(text)
            if number < 2**31:
                return pa.scalar(number, pa.int32())
            if number < 2**63:
                return pa.scalar(number, pa.int64())
        if re.fullmatch(r"[0-9]+[lL]", text):
            return pa.scalar(int(text[:-1]), pa.int64())
        try:
            return pa.scalar(float(text.rstrip("dDfF")), pa.float64())
        except ValueError:
            raise UnsupportedExpressionError(
                f"unsupported literal {text!r} in {self.sql!r}"
            ) from None

    def and_or(self, node: exp.Expression) -> Value:
        left, right = self.boolean(node.this), self.boolean(node.expression)
        kernel = pc.and_kleene if isinstance(node, exp.And) else pc.or_kleene
        return kernel(left, right)

    def boolean(self, node: exp.Expression) -> Value:
        value = self.value(node)
        if pa.types.is_null(value.type):
            return value.cast(pa.bool_())
        if not pa.types.is_boolean(value.type):
            raise self.fail(f"{node.sql('spark')!r} is not a boolean")
        return value

    def not_(self, node: exp.Not) -> Value:
        return pc.invert(self.boolean(node.this))

    def compare(self, node: exp.Expression) -> Value:
        left, right = self.coerced(self.value(node.this), self.value(node.expression))
        return getattr(pc, _COMPARISONS[type(node)])(left, right)

    def null_safe_eq(self, node: exp.Expression) -> Value:
        left, right = self.coerced(self.value(node.this), self.value(node.expression))
        equal = pc.fill_null(pc.equal(left, right), False)
        both_null = pc.and_(pc.is_null(left), pc.is_null(right))
        result = pc.or_(equal, both_null)
        return pc.invert(result) if isinstance(node, exp.NullSafeNEQ) else result

    def is_(self, node: exp.Is) -> Value:
        target = node.expression
        value = self.value(node.this)
        if isinstance(target, exp.Null):
            return pc.is_null(value)
        if isinstance(target, exp.Boolean):
            checked = self.boolean(node.this)
            return pc.fill_null(pc.equal(checked, pa.scalar(bool(target.this))), False)
        raise UnsupportedExpressionError(f"unsupported IS {target.sql('spark')} in {self.sql!r}")

    def in_(self, node: exp.In) -> Value:
        if node.args.get("query") is not None or not node.expressions:
            raise UnsupportedExpressionError(f"IN needs a list of values in {self.sql!r}")
        subject = self.value(node.this)
        result: Value | None = None
        for item in node.expressions:
            left, right = self.coerced(subject, self.value(item))
            test = pc.equal(left, right)
            result = test if result is None else pc.or_kleene(result, test)
        assert result is not None
        return result

    def between(self, node: exp.Between) -> Value:
        subject = self.value(node.this)
        low_left, low = self.coerced(subject, self.value(node.args["low"]))
        high_left, high = self.coerced(subject, self.value(node.args["high"]))
        return pc.and_kleene(pc.greater_equal(low_left, low), pc.less_equal(high_left, high))

    def like(self, node: exp.Expression, escape: str | None = None) -> Value:
        subject = self.string(node.this)
        pattern = self.literal_text(node.expression, "a LIKE pattern")
        if escape is not None and escape != "\\":
            pattern = _reescape_like(pattern, escape)
        if isinstance(node, exp.RegexpLike):
            result = pc.match_substring_regex(subject, pattern=pattern)
        else:
            result = pc.match_like(
                subject, pattern=pattern, ignore_case=isinstance(node, exp.ILike)
            )
        return pc.invert(result) if node.args.get("negate") else result

    def escape(self, node: exp.Escape) -> Value:
        if not isinstance(node.this, (exp.Like, exp.ILike)):
            raise UnsupportedExpressionError(f"ESCAPE only follows LIKE in {self.sql!r}")
        escape = self.literal_text(node.expression, "an ESCAPE character")
        if len(escape) != 1:
            raise self.fail("the ESCAPE character must be one character")
        return self.like(node.this, escape)

    def arithmetic(self, node: exp.Expression) -> Value:
        left, right = self.value(node.this), self.value(node.expression)
        if isinstance(node, exp.Div):
            left, right = left.cast(pa.float64()), right.cast(pa.float64())
            right = pc.if_else(pc.equal(right, 0.0), pa.scalar(None, pa.float64()), right)
            return pc.divide(left, right)
        left, right = self.coerced(left, right)
        if not is_numeric(left.type):
            raise self.fail(f"arithmetic on {left.type}")
        if isinstance(node, (exp.IntDiv, exp.Mod)):
            zero = pa.scalar(0, right.type) if not pa.types.is_null(right.type) else None
            if zero is not None:
                right = pc.if_else(pc.equal(right, zero), pa.scalar(None, right.type), right)
            if isinstance(node, exp.IntDiv):
                quotient = pc.divide(left.cast(pa.float64()), right.cast(pa.float64()))
                return pc.trunc(quotient).cast(pa.int64())
            floor_mod = pc.modulo(left, right)
            wrong_sign = pc.and_(
                pc.not_equal(floor_mod, pa.scalar(0, floor_mod.type)),
                pc.not_equal(pc.sign(floor_mod), pc.sign(left)),
            )
            return pc.if_else(wrong_sign, pc.subtract(floor_mod, right), floor_mod)
        kernel: dict[type[exp.Expression], Callable[[Value, Value], Value]] = {
            exp.Add: pc.add_checked,
            exp.Sub: pc.subtract_checked,
            exp.Mul: pc.multiply_checked,
        }
        return kernel[type(node)](left, right)

    def neg(self, node: exp.Neg) -> Value:
        return pc.negate_checked(self.value(node.this))

    def abs_(self, node: exp.Abs) -> Value:
        return pc.abs_checked(self.value(node.this))

    def cast(self, node: exp.Expression) -> Value:
        target = arrow_type(node.args["to"], self.sql)
        value = self.value(node.this)
        return cast(value, target)

    def case(self, node: exp.Case) -> Value:
        subject = self.value(node.this) if node.this is not None else None
        conditions: list[Value] = []
        results: list[Value] = []
        for branch in node.args.get("ifs") or []:
            if subject is not None:
                left, right = self.coerced(subject, self.value(branch.this))
                conditions.append(pc.equal(left, right))
            else:
                conditions.append(self.boolean(branch.this))
            results.append(self.value(branch.args["true"]))
        default = node.args.get("default")
        return self.choose(
            conditions, results, self.value(default) if default is not None else None
        )

    def if_(self, node: exp.If) -> Value:
        false = node.args.get("false")
        return self.choose(
            [self.boolean(node.this)],
            [self.value(node.args["true"])],
            self.value(false) if false is not None else None,
        )

    def choose(self, conditions: list[Value], results: list[Value], default: Value | None) -> Value:
        values = [*results, *([default] if default is not None else [])]
        common = common_type([v.type for v in values])
        arrays = [self.array(cast(v, common)) for v in values]
        struct = pc.make_struct(*[pc.fill_null(self.array(c), False) for c in conditions])
        return pc.case_when(struct, *arrays)

    def coalesce(self, node: exp.Coalesce) -> Value:
        values = [self.value(node.this), *(self.value(e) for e in node.expressions)]
        common = common_type([v.type for v in values])
        return pc.coalesce(*[self.array(cast(v, common)) for v in values])

    def to_date(self, node: exp.Expression) -> Value:
        if node.args.get("format") is not None:
            raise UnsupportedExpressionError(f"to_date with a format in {self.sql!r}")
        return cast(self.value(node.this), pa.date32())

    def to_timestamp(self, node: exp.Expression) -> Value:
        value = self.value(node.this)
        if pa.types.is_timestamp(value.type):
            return value
        return cast(value, pa.timestamp("us", tz="UTC"))

    def date_part(self, node: exp.Expression) -> Value:
        value = self.value(node.this)
        if pa.types.is_string(value.type):
            value = cast(value, pa.timestamp("us"))
        return getattr(pc, _DATE_PARTS[type(node)])(value).cast(pa.int32())

    def date_format(self, node: exp.TimeToStr) -> Value:
        pattern = self.literal_text(node.args["format"], "a date_format pattern")
        pattern = pattern.replace("strict", "")
        if re.search(r"%[^YmdHMS%]", pattern) or re.search(r"[A-Za-z](?<!%[YmdHMS])", pattern):
            raise UnsupportedExpressionError(
                f"date_format supports yyyy MM dd HH mm ss only in {self.sql!r}", self.sql
            )
        value = self.to_timestamp(node.this)
        if isinstance(value, pa.Scalar):
            value = self.array(value)
        return pc.strftime(value, format=pattern)

    def substring(self, node: exp.Substring) -> Value:
        subject = self.string(node.this)
        start = self.literal_int(node.args["start"], "a substring position")
        length_node = node.args.get("length")
        length = None if length_node is None else self.literal_int(length_node, "a length")
        begin = start - 1 if start > 0 else start
        if length is not None and length <= 0:
            return pc.utf8_slice_codeunits(subject, start=0, stop=0)
        stop = None if length is None else begin + length
        if stop is not None and begin < 0 <= stop:
            stop = None
        return pc.utf8_slice_codeunits(subject, start=begin, stop=stop)

    def string(self, node: exp.Expression) -> Value:
        value = self.value(node)
        return value if pa.types.is_string(value.type) else cast(value, pa.string())

    def lower(self, node: exp.Lower) -> Value:
        return pc.utf8_lower(self.string(node.this))

    def upper(self, node: exp.Upper) -> Value:
        return pc.utf8_upper(self.string(node.this))

    def length(self, node: exp.Length) -> Value:
        return pc.utf8_length(self.string(node.this)).cast(pa.int32())

    def trim(self, node: exp.Trim) -> Value:
        subject = self.string(node.this)
        characters = " "
        if node.expression is not None:
            characters = self.literal_text(node.expression, "the characters to trim")
        position = str(node.args.get("position") or "BOTH").upper()
        kernel = {"LEADING": pc.utf8_ltrim, "TRAILING": pc.utf8_rtrim}.get(position, pc.utf8_trim)
        return kernel(subject, characters=characters)

    def concat(self, node: exp.Concat) -> Value:
        parts = [self.array(self.string(e)) for e in node.expressions]
        if not parts:
            return pa.scalar("", pa.string())
        return pc.binary_join_element_wise(*parts, "", null_handling="emit_null")

    def clock(self, node: exp.Expression) -> Value:
        if self.now is None:
            raise self.fail("current_timestamp()/current_date() need the write's time")
        now = self.now if self.now.tzinfo is not None else self.now.replace(tzinfo=dt.UTC)
        if isinstance(node, exp.CurrentDate):
            return pa.scalar(now.astimezone(dt.UTC).date(), pa.date32())
        return pa.scalar(now, pa.timestamp("us", tz="UTC"))

    def paren(self, node: exp.Paren) -> Value:
        return self.value(node.this)

    # type coercion ----------------------------------------------------------------

    def coerced(self, left: Value, right: Value) -> tuple[Value, Value]:
        """Bring two operands to one type the way Spark's implicit casts do."""
        lt, rt = left.type, right.type
        if lt == rt:
            return left, right
        if pa.types.is_null(lt):
            return left.cast(rt), right
        if pa.types.is_null(rt):
            return left, right.cast(lt)
        common = common_type([lt, rt])
        return cast(left, common), cast(right, common)


def _field_index(names: Sequence[str], wanted: str) -> int | None:
    if wanted in names:
        return list(names).index(wanted)
    folded = [i for i, name in enumerate(names) if name.lower() == wanted.lower()]
    return folded[0] if len(folded) == 1 else None


def _reescape_like(pattern: str, escape: str) -> str:
    """A LIKE pattern with a custom escape character, rewritten with ``\\``."""
    out: list[str] = []
    chars = iter(pattern)
    for char in chars:
        if char == escape:
            out.append("\\" + next(chars, ""))
        elif char == "\\":
            out.append("\\\\")
        else:
            out.append(char)
    return "".join(out)


def _literal_cast(self: _Evaluator, node: exp.Expression) -> Value:
    return self.cast(node)


_HANDLERS: dict[type[exp.Expr], Callable[[_Evaluator, Any], Value]] = {
    exp.Column: _Evaluator.column,
    exp.Dot: _Evaluator.column,
    exp.Literal: _Evaluator.literal,
    exp.Boolean: lambda self, node: pa.scalar(bool(node.this), pa.bool_()),
    exp.Null: lambda self, node: pa.scalar(None, pa.null()),
    exp.Paren: _Evaluator.paren,
    exp.And: _Evaluator.and_or,
    exp.Or: _Evaluator.and_or,
    exp.Not: _Evaluator.not_,
    exp.Is: _Evaluator.is_,
    exp.NullSafeEQ: _Evaluator.null_safe_eq,
    exp.NullSafeNEQ: _Evaluator.null_safe_eq,
    exp.In: _Evaluator.in_,
    exp.Between: _Evaluator.between,
    exp.Like: _Evaluator.like,
    exp.ILike: _Evaluator.like,
    exp.RegexpLike: _Evaluator.like,
    exp.Escape: _Evaluator.escape,
    exp.Add: _Evaluator.arithmetic,
    exp.Sub: _Evaluator.arithmetic,
    exp.Mul: _Evaluator.arithmetic,
    exp.Div: _Evaluator.arithmetic,
    exp.IntDiv: _Evaluator.arithmetic,
    exp.Mod: _Evaluator.arithmetic,
    exp.Neg: _Evaluator.neg,
    exp.Abs: _Evaluator.abs_,
    exp.Cast: _literal_cast,
    exp.TryCast: _Evaluator.cast,
    exp.Case: _Evaluator.case,
    exp.If: _Evaluator.if_,
    exp.Coalesce: _Evaluator.coalesce,
    exp.TsOrDsToDate: _Evaluator.to_date,
    exp.TimeStrToTime: _Evaluator.to_timestamp,
    exp.TimeToStr: _Evaluator.date_format,
    exp.Substring: _Evaluator.substring,
    exp.Lower: _Evaluator.lower,
    exp.Upper: _Evaluator.upper,
    exp.Length: _Evaluator.length,
    exp.Trim: _Evaluator.trim,
    exp.Concat: _Evaluator.concat,
    exp.CurrentDate: _Evaluator.clock,
    exp.CurrentTimestamp: _Evaluator.clock,
}
