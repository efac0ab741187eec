"""Spark SQL's decimals for :mod:`raydelta.protocol.expression_evaluation`:
the type of a decimal literal, the result types of ``+ - * / %`` (Spark's
``DecimalPrecision`` rules with ``spark.sql.decimalOperations.
allowPrecisionLoss=true``, the default) and the arithmetic itself.

Invariants:
- ``1.5`` is ``DECIMAL(2,1)``: precision = the literal's significant digits,
  at least its scale; an integer literal beyond ``BIGINT`` is ``DECIMAL(p,0)``.
  More than 38 digits is refused (Spark's parser does too).
- An integer operand is its decimal equivalent (``TINYINT`` 3, ``SMALLINT``
  5, ``INT`` 10, ``BIGINT`` 20 digits), except an integer *literal*, which
  takes the fewest digits that hold it (Spark's
  ``spark.sql.legacy.literal.pickMinimumPrecision``, default true).
- Results are computed exactly, then rounded half-up to the result scale
  (division first to 39 places, as Spark's ``Decimal./``); a result with
  more digits than its precision is an overflow: ANSI raises
  ``NUMERIC_VALUE_OUT_OF_RANGE``, legacy mode gives NULL. A zero divisor:
  ANSI raises ``DIVIDE_BY_ZERO`` (``REMAINDER_BY_ZERO`` for ``%``), legacy
  gives NULL.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa
from sqlglot import exp

from raydelta.protocol.expression_types import INTEGER_DIGITS, Value, to_decimal

MAX_PRECISION = 38
MINIMUM_ADJUSTED_SCALE = 6
_EXACT = decimal.Context(prec=200, rounding=decimal.ROUND_HALF_UP, Emax=999999, Emin=-999999)


def literal_type(text: str) -> pa.Decimal128Type | None:
    """The ``DECIMAL(p,s)`` of a decimal literal's text; None beyond 38 digits."""
    value = Decimal(text)
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    scale = max(-exponent, 0)
    precision = max(len(digits) + max(exponent, 0), scale, 1)
    if precision > MAX_PRECISION:
        return None
    return pa.decimal128(precision, scale)


def integer_literal_type(value: int) -> pa.Decimal128Type:
    """The fewest-digit decimal type of an integer literal."""
    return pa.decimal128(max(len(str(abs(value))), 1), 0)


def as_decimal_type(t: pa.DataType) -> pa.Decimal128Type | None:
    """``t`` as a decimal type (integers by their width); None for other types."""
    if pa.types.is_decimal(t):
        return pa.decimal128(t.precision, t.scale)
    if pa.types.is_integer(t):
        return pa.decimal128(INTEGER_DIGITS[t.bit_width], 0)
    return None


def _adjust(precision: int, scale: int) -> pa.Decimal128Type:
    """Spark's ``adjustPrecisionScale``: keep the integral digits, give up
    scale (down to 6) when the precision exceeds 38."""
    if precision <= MAX_PRECISION:
        return pa.decimal128(precision, scale)
    integral = precision - scale
    kept = max(MAX_PRECISION - integral, min(scale, MINIMUM_ADJUSTED_SCALE))
    return pa.decimal128(MAX_PRECISION, kept)


def wider(a: pa.Decimal128Type, b: pa.Decimal128Type) -> pa.Decimal128Type:
    """The decimal type both fit in (bounded at 38 digits), for comparisons
    and common types."""
    scale = max(a.scale, b.scale)
    integral = max(a.precision - a.scale, b.precision - b.scale)
    return pa.decimal128(min(integral + scale, MAX_PRECISION), min(scale, MAX_PRECISION))


def result_type(op: str, a: pa.Decimal128Type, b: pa.Decimal128Type) -> pa.Decimal128Type:
    """The type of ``a <op> b`` for ``op`` in ``+ - * / %``."""
    p1, s1, p2, s2 = a.precision, a.scale, b.precision, b.scale
    if op in ("+", "-"):
        scale = max(s1, s2)
        return _adjust(max(p1 - s1, p2 - s2) + scale + 1, scale)
    if op == "*":
        return _adjust(p1 + p2 + 1, s1 + s2)
    if op == "/":
        scale = max(MINIMUM_ADJUSTED_SCALE, s1 + p2 + 1)
        return _adjust(p1 - s1 + s2 + scale, scale)
    if op == "%":
        scale = max(s1, s2)
        return _adjust(min(p1 - s1, p2 - s2) + scale, scale)
    raise ValueError(f"not a decimal operator: {op}")


def _compute(op: str, x: Decimal, y: Decimal) -> Decimal:
    if op == "+":
        return _EXACT.add(x, y)
    if op == "-":
        return _EXACT.subtract(x, y)
    if op == "*":
        return _EXACT.multiply(x, y)
    if op == "/":
        return _EXACT.divide(x, y).quantize(Decimal(1).scaleb(-39), context=_EXACT)
    return _EXACT.remainder(x, y)  # the sign of the dividend, as Java's


def fit(value: Decimal, target: pa.Decimal128Type) -> Decimal | None:
    """``value`` rounded half-up to ``target``'s scale; None when it then has
    more digits than ``target``'s precision."""
    try:
        return to_decimal(value, target)
    except pa.ArrowInvalid:
        return None


def arithmetic(
    op: str,
    left: Value,
    right: Value,
    target: pa.Decimal128Type,
    fail: Callable[[str, str], Exception] | None,
) -> Value:
    """``left <op> right`` as ``target`` (see the module); both operands are
    decimals or integers. ``fail(error_class, detail)`` builds the ANSI error;
    None is legacy mode (NULL)."""

    def one(x: Any, y: Any) -> Decimal | None:
        if x is None or y is None:
            return None
        x, y = Decimal(x), Decimal(y)
        if op in ("/", "%") and y == 0:
            if fail is not None:
                by_zero = "REMAINDER_BY_ZERO" if op == "%" else "DIVIDE_BY_ZERO"
                raise fail(by_zero, "Division by zero")
            return None
        out = fit(_compute(op, x, y), target)
        if out is None and fail is not None:
            raise fail(
                "NUMERIC_VALUE_OUT_OF_RANGE",
                f"{_compute(op, x, y)} cannot be represented as DECIMAL({target.precision},"
                f" {target.scale})",
            )
        return out

    return _rowwise(one, left, right, target)


def is_decimal_operation(left: Value, right: Value) -> bool:
    """Spark computes ``left <op> right`` as decimals: a decimal with a
    decimal or an integer (a double on either side makes it double)."""
    types = (left.type, right.type)
    return any(pa.types.is_decimal(t) for t in types) and all(
        pa.types.is_decimal(t) or pa.types.is_integer(t) for t in types
    )


def _operand_type(side: exp.Expr, value: Value) -> pa.Decimal128Type:
    while isinstance(side, exp.Paren):
        side = side.this
    if isinstance(side, exp.Literal) and pa.types.is_integer(value.type):
        return integer_literal_type(int(value.as_py()))
    found = as_decimal_type(value.type)
    assert found is not None
    return found


def operation_type(
    op: str, left: tuple[exp.Expr, Value], right: tuple[exp.Expr, Value]
) -> pa.Decimal128Type | None:
    """The decimal type of ``left <op> right`` (each operand as its node and
    value: an integer literal counts with its own digits), None when Spark
    does not compute it as decimals."""
    if op not in ("+", "-", "*", "/", "%") or not is_decimal_operation(left[1], right[1]):
        return None
    return result_type(op, _operand_type(*left), _operand_type(*right))


def integral_divide(
    left: Value, right: Value, fail: Callable[[str, str], Exception] | None
) -> Value:
    """``left DIV right`` of decimals: the exact quotient truncated toward
    zero, a BIGINT; a zero divisor or a quotient beyond BIGINT raises (ANSI)
    or is NULL (legacy)."""

    def one(x: Any, y: Any) -> int | None:
        if x is None or y is None:
            return None
        if Decimal(y) == 0:
            if fail is not None:
                raise fail("DIVIDE_BY_ZERO", "Division by zero")
            return None
        whole = int(_EXACT.divide_int(Decimal(x), Decimal(y)))
        if -(2**63) <= whole < 2**63:
            return whole
        if fail is not None:
            raise fail("ARITHMETIC_OVERFLOW", f"{whole} overflows BIGINT")
        return None

    return _rowwise(one, left, right, pa.int64())


def _rowwise(fn: Callable[[Any, Any], Any], left: Value, right: Value, out: pa.DataType) -> Value:
    if isinstance(left, pa.Scalar) and isinstance(right, pa.Scalar):
        return pa.scalar(fn(left.as_py(), right.as_py()), out)
    length = len(left) if not isinstance(left, pa.Scalar) else len(right)
    xs = [left.as_py()] * length if isinstance(left, pa.Scalar) else left.to_pylist()
    ys = [right.as_py()] * length if isinstance(right, pa.Scalar) else right.to_pylist()
    return pa.array([fn(x, y) for x, y in zip(xs, ys, strict=True)], out)
