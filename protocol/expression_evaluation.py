"""How :mod:`raydelta.protocol.expressions` computes a parsed Spark SQL
expression over an Arrow table: one :class:`Evaluator` method per construct
(:data:`HANDLERS` maps sqlglot node types to them), and the implicit
coercions between operands.

Which constructs exist is stated in :mod:`raydelta.protocol.expressions`;
:data:`COMPARISONS`, :data:`DATE_PARTS` and :data:`CLOCK` are shared with
its parser's check.

Invariants:
- SQL null semantics: comparisons and arithmetic with NULL are NULL; AND/OR
  are Kleene; ``x IN (..., NULL)`` without a match is NULL; ``<=>``, ``IS``
  and ``COALESCE`` never return NULL for null inputs alone; a NULL ``CASE``
  or ``IF`` condition takes the next branch.
- Spark's choices where engines differ: ``/`` divides integers and doubles
  as doubles and decimals as decimals (:mod:`raydelta.protocol.expression_decimal`:
  ``1.5`` is ``DECIMAL(2,1)``), ``DIV`` and ``%`` truncate toward zero (the
  sign of ``%`` follows the dividend); comparisons order NaN as Spark does
  (:mod:`raydelta.protocol.expression_compare`: NaN = NaN, NaN above all).
- ANSI mode (``ansi=True``, the default of the pinned Spark 4): a zero
  divisor, integer or decimal overflow and a failed ``CAST`` raise
  :class:`SparkArithmeticException` / :class:`SparkNumberFormatException`
  named with Spark's error class; legacy mode (``ansi=False``) gives NULL
  for those, except integer overflow, which wraps (two's complement, as the
  JVM does), and a cast out of an integer type's range (see
  :mod:`raydelta.protocol.expression_types`);
  ``length``/``substring`` count characters (code points); ``trim`` strips
  spaces only. Timestamps with a zone are taken in UTC (delta-spark uses
  the session time zone; raydelta's is UTC).
- :meth:`Evaluator.array` turns any value into a ``pa.Array`` with one
  value per row.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from raydelta.protocol import expression_decimal as decimals
from raydelta.protocol.errors import (
    InvalidExpressionError,
    SparkArithmeticException,
    SparkNumberFormatException,
    SparkRuntimeException,
    UnsupportedExpressionError,
)
from raydelta.protocol.expression_compare import spark_compare, spark_equal
from raydelta.protocol.expression_types import (
    Value,
    arrow_type,
    cast,
    common_type,
    is_numeric,
    legacy_cast,
)
from raydelta.protocol.functions import FUNCTIONS
from raydelta.protocol.functions.registry import SparkFunction

COMPARISONS: dict[type[exp.Expr], str] = {
    exp.EQ: "equal",
    exp.NEQ: "not_equal",
    exp.LT: "less",
    exp.LTE: "less_equal",
    exp.GT: "greater",
    exp.GTE: "greater_equal",
}
CLOCK = (exp.CurrentTimestamp, exp.CurrentDate)
CLOCK_NAMES = frozenset({"now"})


def column_path(column: exp.Expression, sql: str) -> tuple[str, ...]:
    if isinstance(column, exp.Dot):
        return (*column_path(column.this, sql), column.expression.name)
    if isinstance(column, exp.Column):
        return tuple(part.name for part in column.parts)
    raise UnsupportedExpressionError(f"unsupported column reference in {sql!r}", sql)


class Evaluator:
    """Evaluates nodes of one expression over the rows of ``table``."""

    def __init__(
        self, sql: str, table: pa.Table, now: dt.datetime | None, *, ansi: bool = True
    ) -> None:
        self.sql = sql
        self.table = table
        self.rows = table.num_rows
        self.now = now
        self.ansi = ansi

    # helpers ----------------------------------------------------------------------

    def fail(self, message: str) -> InvalidExpressionError:
        return InvalidExpressionError(f"{message} in {self.sql!r}", self.sql)

    def ansi_error(self, error_class: str, detail: str) -> SparkRuntimeException:
        """The ANSI-mode error Spark raises, named by its error class."""
        kind: type[SparkRuntimeException] = SparkRuntimeException
        if error_class == "CAST_INVALID_INPUT":
            kind = SparkNumberFormatException
        elif error_class in _ARITHMETIC_ERRORS:
            kind = SparkArithmeticException
        return kind(f"[{error_class}] {detail} in {self.sql!r}", self.sql, error_class)

    def refuse(self, what: str) -> UnsupportedExpressionError:
        return UnsupportedExpressionError(
            f"raydelta does not evaluate {what} in {self.sql!r}", self.sql
        )

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
        handler = HANDLERS.get(type(node))
        if handler is not None:
            return handler(self, node)
        if type(node) in COMPARISONS:
            return self.compare(node)
        function = FUNCTIONS.find(node)
        if function is None:
            raise unsupported(node, self.sql)
        if isinstance(node, exp.Anonymous):
            check_arity(function, node, self.sql)
        return function.implementation(self, node)

    def column(self, node: exp.Expression) -> Value:
        if isinstance(node, exp.Dot) and not isinstance(node.this, exp.Column | exp.Dot):
            return self.field_of(self.value(node.this), node.expression.name)
        path = column_path(node, self.sql)
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

    def field_of(self, value: Value, name: str) -> Value:
        """Field ``name`` of a struct value (``named_struct('x', 1).x``)."""
        value = self.array(value)
        if not pa.types.is_struct(value.type):
            raise self.fail(f"{value.type} has no field {name!r}")
        names = [value.type.field(i).name for i in range(value.type.num_fields)]
        index = _field_index(names, name)
        if index is None:
            raise self.fail(f"no field {name!r} in {value.type}")
        return pc.struct_field(value, [index])

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
        if re.fullmatch(r"[0-9]*\.?[0-9]*", text) and any(c.isdigit() for c in text):
            # Spark: a number with a point (or beyond BIGINT) is a DECIMAL literal
            target = decimals.literal_type(text)
            if target is None:
                raise self.fail(f"the decimal literal {text} has more than 38 digits")
            return pa.scalar(decimal.Decimal(text), target)
        try:
            return pa.scalar(float(text.rstrip("dDfF")), pa.float64())
        except ValueError:
            raise UnsupportedExpressionError(
                f"unsupported literal {text!r} in {self.sql!r}"
            ) from None

    def and_or(self, node: exp.Expression) -> Value:
        """Kleene AND/OR; the right side is needed only where the left does
        not decide (Spark stops at a FALSE left of AND, a TRUE left of OR), so
        an ANSI error of another row's right side is not raised."""
        left = self.boolean(node.this)
        decided = pc.fill_null(
            self.array(pc.invert(left) if isinstance(node, exp.And) else left), False
        )
        right = self.lazily(node.expression, pc.invert(decided), Evaluator.boolean)
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

    def compare(self, node: exp.Expr) -> Value:
        left, right = self.coerced(self.value(node.this), self.value(node.expression))
        return spark_compare(COMPARISONS[type(node)], left, right)

    def null_safe_eq(self, node: exp.Expression) -> Value:
        left, right = self.coerced(self.value(node.this), self.value(node.expression))
        equal = pc.fill_null(spark_equal(left, right), False)
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
            test = spark_equal(left, right)
            result = test if result is None else pc.or_kleene(result, test)
        assert result is not None
        return result

    def between(self, node: exp.Between) -> Value:
        subject = self.value(node.this)
        low_left, low = self.coerced(subject, self.value(node.args["low"]))
        high_left, high = self.coerced(subject, self.value(node.args["high"]))
        return pc.and_kleene(
            spark_compare("greater_equal", low_left, low),
            spark_compare("less_equal", high_left, high),
        )

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
        op = _OPERATORS[type(node)]
        if isinstance(node, exp.IntDiv) and decimals.is_decimal_operation(left, right):
            return decimals.integral_divide(left, right, self.ansi_error if self.ansi else None)
        operands = ((node.this, left), (node.expression, right))
        target = decimals.operation_type(op, *operands)
        if target is not None:
            fail = self.ansi_error if self.ansi else None
            return decimals.arithmetic(op, left, right, target, fail)
        if isinstance(node, exp.Div):
            left, right = left.cast(pa.float64()), right.cast(pa.float64())
            return pc.divide(left, self.nonzero(right, left))
        left, right = self.coerced(left, right)
        if not is_numeric(left.type):
            raise self.fail(f"arithmetic on {left.type}")
        if isinstance(node, (exp.IntDiv, exp.Mod)):
            by_zero = "REMAINDER_BY_ZERO" if isinstance(node, exp.Mod) else "DIVIDE_BY_ZERO"
            right = self.nonzero(right, left, by_zero)
            if isinstance(node, exp.IntDiv):
                quotient = pc.divide(left.cast(pa.float64()), right.cast(pa.float64()))
                return pc.trunc(quotient).cast(pa.int64())
            floor_mod = pc.modulo(left, right)
            wrong_sign = pc.and_(
                pc.not_equal(floor_mod, pa.scalar(0, floor_mod.type)),
                pc.not_equal(pc.sign(floor_mod), pc.sign(left)),
            )
            return pc.if_else(wrong_sign, pc.subtract(floor_mod, right), floor_mod)
        checked = {"+": pc.add_checked, "-": pc.subtract_checked, "*": pc.multiply_checked}
        wrapping = {"+": pc.add, "-": pc.subtract, "*": pc.multiply}
        return self.overflowing((checked if self.ansi else wrapping)[op], left, right)

    def overflowing(self, kernel: Callable[..., Value], *values: Value) -> Value:
        """``kernel(*values)``, its overflow raised as Spark's ANSI error."""
        try:
            return kernel(*values)
        except pa.ArrowInvalid as error:
            if "overflow" not in str(error).lower():
                raise
            raise self.ansi_error("ARITHMETIC_OVERFLOW", f"{error}") from error

    def nonzero(
        self, divisor: Value, dividend: Value, error_class: str = "DIVIDE_BY_ZERO"
    ) -> Value:
        """``divisor`` with zeros as NULL (legacy); ANSI: a zero raises where
        the dividend is not NULL (Spark reads the divisor only then)."""
        if pa.types.is_null(divisor.type) or pa.types.is_null(dividend.type):
            return divisor
        zero = pc.and_(pc.equal(divisor, pa.scalar(0, divisor.type)), pc.is_valid(dividend))
        if self.ansi:
            if pc.any(self.array(zero)).as_py():
                raise self.ansi_error(error_class, "Division by zero")
            return divisor
        return pc.if_else(zero, pa.scalar(None, divisor.type), divisor)

    def neg(self, node: exp.Neg) -> Value:
        value = self.value(node.this)
        return self.overflowing(pc.negate_checked if self.ansi else pc.negate, value)

    def cast(self, node: exp.Expression) -> Value:
        """``CAST`` (ANSI: a value that does not convert raises; legacy: it is
        NULL, and integers wrap as :func:`legacy_cast` states) or ``TRY_CAST``
        (such a value is NULL)."""
        target = arrow_type(node.args["to"], self.sql)
        value = self.value(node.this)
        if not node.args.get("safe") and not self.ansi:
            wrapped = legacy_cast(value, target)
            if wrapped is not None:
                return wrapped
        elif not node.args.get("safe"):
            try:
                return cast(value, target)
            except (pa.ArrowInvalid, InvalidExpressionError) as error:
                text = str(error)
                error_class = (
                    "NUMERIC_VALUE_OUT_OF_RANGE"
                    if "NUMERIC_VALUE_OUT_OF_RANGE" in text
                    else "CAST_OVERFLOW"
                    if "overflow" in text.lower() or "not in range" in text
                    else "CAST_INVALID_INPUT"
                )
                raise self.ansi_error(error_class, text) from error
        try:
            return cast(value, target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, InvalidExpressionError):
            pass
        if isinstance(value, pa.Scalar):
            return pa.scalar(None, target)
        out: list[Any] = []
        for item in value:
            try:
                out.append(cast(item, target).as_py())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, InvalidExpressionError):
                out.append(None)
        return pa.array(out, type=target)

    def case(self, node: exp.Case) -> Value:
        subject = self.value(node.this) if node.this is not None else None
        conditions: list[Value] = []
        branches: list[exp.Expr] = []
        for branch in node.args.get("ifs") or []:
            if subject is not None:
                left, right = self.coerced(subject, self.value(branch.this))
                conditions.append(spark_equal(left, right))
            else:
                undecided = self._undecided(conditions)
                conditions.append(self.lazily(branch.this, undecided, Evaluator.boolean))
            branches.append(branch.args["true"])
        return self.choose_nodes(conditions, branches, node.args.get("default"))

    def choose_nodes(
        self, conditions: list[Value], branches: list[exp.Expr], default: exp.Expr | None
    ) -> Value:
        """Each row's first branch whose condition is TRUE, else ``default``;
        a branch is computed only for the rows that take it when computing it
        for all rows raises (Spark evaluates CASE lazily: ``CASE WHEN x <> 0
        THEN 1 / x END`` never divides by zero)."""
        results: list[Value] = []
        for index, branch in enumerate(branches):
            takes = pc.and_(
                self._undecided(conditions[:index]),
                pc.fill_null(self.array(conditions[index]), False),
            )
            results.append(self.lazily(branch, takes))
        rest = self._undecided(conditions)
        last = self.lazily(default, rest) if default is not None else None
        return self.choose(conditions, results, last)

    def _undecided(self, conditions: list[Value]) -> pa.Array:
        """Rows where none of ``conditions`` is TRUE."""
        out = pa.array([True] * self.rows, pa.bool_())
        for condition in conditions:
            out = pc.and_(out, pc.invert(pc.fill_null(self.array(condition), False)))
        return out

    def lazily(
        self,
        node: exp.Expr,
        rows: pa.Array,
        compute: Callable[[Evaluator, Any], Value] | None = None,
    ) -> Value:
        """``node``'s value where ``rows`` is TRUE; where it is not, the value
        may be NULL: an ANSI error raised by a row outside ``rows`` is ignored."""
        compute = compute or Evaluator.value
        try:
            return compute(self, node)
        except SparkRuntimeException:
            if pc.all(rows).as_py() is not False:
                raise
        sub = Evaluator(self.sql, self.table.filter(rows), self.now, ansi=self.ansi)
        part = sub.array(compute(sub, node))
        positions = pc.subtract(pc.cumulative_sum(rows.cast(pa.int64())), 1)
        return pc.take(part, pc.if_else(rows, positions, pa.scalar(None, pa.int64())))

    def choose(self, conditions: list[Value], results: list[Value], default: Value | None) -> Value:
        values = [*results, *([default] if default is not None else [])]
        common = common_type([v.type for v in values])
        arrays = [self.array(cast(v, common)) for v in values]
        struct = pc.make_struct(*[pc.fill_null(self.array(c), False) for c in conditions])
        return pc.case_when(struct, *arrays)

    def string(self, node: exp.Expr) -> Value:
        value = self.value(node)
        if pa.types.is_string(value.type):
            return value
        if pa.types.is_large_string(value.type):
            return value.cast(pa.string())
        return cast(value, pa.string())

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


_ARITHMETIC_ERRORS = frozenset(
    {
        "DIVIDE_BY_ZERO",
        "REMAINDER_BY_ZERO",
        "ARITHMETIC_OVERFLOW",
        "CAST_OVERFLOW",
        "NUMERIC_VALUE_OUT_OF_RANGE",
    }
)
_OPERATORS: dict[type[exp.Expr], str] = {
    exp.Add: "+",
    exp.Sub: "-",
    exp.Mul: "*",
    exp.Div: "/",
    exp.IntDiv: "div",
    exp.Mod: "%",
}


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


def unsupported(node: exp.Expr, sql: str) -> UnsupportedExpressionError:
    """The typed refusal of a construct raydelta does not evaluate, naming it."""
    if isinstance(node, exp.Func):
        name = str(node.name).lower() if isinstance(node, exp.Anonymous) else node.sql_name()
        return UnsupportedExpressionError(
            f"raydelta does not have the Spark SQL function {name.lower()!r}"
            f" ({node.sql('spark')!r} in {sql!r})",
            sql,
        )
    return UnsupportedExpressionError(
        f"raydelta cannot evaluate {node.sql('spark')!r} ({type(node).__name__}) in {sql!r}",
        sql,
    )


def check_arity(function: SparkFunction, node: exp.Expr, sql: str) -> None:
    count = len(node.expressions)
    low, high = function.arity
    if count < low or (high is not None and count > high):
        raise InvalidExpressionError(
            f"{node.name.lower()} takes {low}{'' if high == low else f' to {high}'}"
            f" arguments, got {count} in {sql!r}",
            sql,
        )


# Syntax the evaluator computes itself; functions come from FUNCTIONS.
HANDLERS: dict[type[exp.Expr], Callable[[Evaluator, Any], Value]] = {
    exp.Column: Evaluator.column,
    exp.Dot: Evaluator.column,
    exp.Literal: Evaluator.literal,
    exp.Boolean: lambda self, node: pa.scalar(bool(node.this), pa.bool_()),
    exp.Null: lambda self, node: pa.scalar(None, pa.null()),
    exp.Paren: Evaluator.paren,
    exp.And: Evaluator.and_or,
    exp.Or: Evaluator.and_or,
    exp.Not: Evaluator.not_,
    exp.Is: Evaluator.is_,
    exp.NullSafeEQ: Evaluator.null_safe_eq,
    exp.NullSafeNEQ: Evaluator.null_safe_eq,
    exp.In: Evaluator.in_,
    exp.Between: Evaluator.between,
    exp.Like: Evaluator.like,
    exp.ILike: Evaluator.like,
    exp.RegexpLike: Evaluator.like,
    exp.Escape: Evaluator.escape,
    exp.Add: Evaluator.arithmetic,
    exp.Sub: Evaluator.arithmetic,
    exp.Mul: Evaluator.arithmetic,
    exp.Div: Evaluator.arithmetic,
    exp.IntDiv: Evaluator.arithmetic,
    exp.Mod: Evaluator.arithmetic,
    exp.Neg: Evaluator.neg,
    exp.Cast: Evaluator.cast,
    exp.TryCast: Evaluator.cast,
    exp.Case: Evaluator.case,
}

# The Spark spellings of the syntax above, for the README's list.
SYNTAX: tuple[str, ...] = (
    "column references (`a`, `` `a b` ``, nested `s.f`)",
    "literals (integers; decimals, `1.5` is `DECIMAL(2,1)`; doubles `1e3`, `1.5D`; strings,"
    " `TRUE`/`FALSE`, `NULL`, `DATE '...'`, `TIMESTAMP '...'`, `TIMESTAMP_NTZ '...'`)",
    "`= == <> != < <= > >= <=>`",
    "`AND OR NOT`",
    "`IS [NOT] NULL`, `IS [NOT] TRUE/FALSE`",
    "`[NOT] IN (...)`, `[NOT] BETWEEN`",
    "`[NOT] LIKE`/`ILIKE` (with `ESCAPE`), `RLIKE`/`REGEXP`",
    "`+ - * / % DIV`, unary `-`",
    "`CAST(x AS t)`, `x::t`, `TRY_CAST(x AS t)`",
    "`CASE [x] WHEN ... THEN ... [ELSE ...] END`",
)

# Nodes that only occur as parts of a construct above or of a function.
PARTS: tuple[type[exp.Expr], ...] = (
    exp.Identifier,
    exp.DataType,
    exp.DataTypeParam,
    exp.ColumnDef,
    exp.PropertyEQ,
    exp.Var,
)
