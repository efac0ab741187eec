"""Math functions: ``abs``, ``round``, ``bround``, ``floor``, ``ceil``, ``sqrt``,
``cbrt``, ``pow``, ``exp``, ``ln``/``log``, ``log10``, ``log2``, ``sign``,
``pi``, ``e``, trigonometry, ``degrees``, ``radians``.

Invariants (Spark's):
- ``round``/``bround`` keep the input's type (decimals get Spark's new
  precision and scale); a double is rounded as the decimal its shortest text
  shows (``round(2.675, 2)`` is 2.68, as Spark's ``BigDecimal(d)`` does), half
  up or half to even. NaN and infinities stay.
- ``floor``/``ceil`` of a double or an integer is a bigint (saturating, NaN
  is 0, as Java's conversion), of a decimal a decimal of scale 0.
- Transcendental functions take and return doubles; a logarithm of a value
  <= 0 is NULL; ``sqrt`` of a negative value is NaN.
"""

from __future__ import annotations

import decimal
import math
import struct
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from raydelta.protocol.expression_types import Value, cast, is_numeric
from raydelta.protocol.functions.registry import NUMERIC, Monotonic, Registry
from raydelta.protocol.functions.values import arguments, as_type, constant, rowwise

if TYPE_CHECKING:
    from raydelta.protocol.expression_evaluation import Evaluator

REGISTRY = Registry("math")
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def _number(ev: Evaluator, node: exp.Expr) -> Value:
    value = ev.value(node)
    if pa.types.is_null(value.type):
        return value.cast(pa.float64())
    if pa.types.is_string(value.type):
        return cast(value, pa.float64())
    if not is_numeric(value.type):
        raise ev.fail(f"a number is needed, got {value.type}")
    return value


@REGISTRY.function("abs", nodes=(exp.Abs,))
def abs_(ev: Evaluator, node: exp.Abs) -> Value:
    """The absolute value (ANSI: the smallest integer overflows; legacy: it wraps)."""
    return ev.overflowing(pc.abs_checked if ev.ansi else pc.abs, _number(ev, node.this))


def _decimal_text(value: float, is_float32: bool) -> str:
    if not is_float32:
        return repr(value)
    packed = struct.pack("<f", value)
    for digits in range(1, 10):
        text = f"{value:.{digits}g}"
        if struct.pack("<f", float(text)) == packed:
            return text
    return repr(value)


def _round_float(value: float, scale: int, mode: str, is_float32: bool) -> float:
    if math.isnan(value) or math.isinf(value):
        return value
    exact = decimal.Decimal(_decimal_text(value, is_float32))
    with decimal.localcontext() as context:
        context.prec = 400
        return float(exact.quantize(decimal.Decimal(1).scaleb(-scale), rounding=mode))


def _round_floats(value: Value, scale: int, mode: str) -> Value:
    """Doubles rounded to ``scale`` digits as Spark does (see the module doc).

    Arrow's rounding gives the same double except next to a tie or for huge
    scaled values; those rows are recomputed exactly."""
    is_float32 = value.type == pa.float32()
    arrow_mode = "half_up" if mode == decimal.ROUND_HALF_UP else "half_to_even"
    if isinstance(value, pa.Scalar) or not 0 <= scale <= 15 or is_float32:
        return _exact_round(value, scale, mode, is_float32)
    rounded = pc.round(value, ndigits=scale, round_mode=arrow_mode)
    scaled = pc.multiply(value, 10.0**scale)
    fraction = pc.abs(pc.subtract(scaled, pc.trunc(scaled)))
    doubtful = pc.or_(
        pc.less(pc.abs(pc.subtract(fraction, 0.5)), 1e-6),
        pc.greater_equal(pc.abs(scaled), 2.0**51),
    )
    doubtful = pc.fill_null(doubtful, False)
    if not pc.any(doubtful).as_py():
        return rounded
    exact = _exact_round(pc.filter(value, doubtful), scale, mode, is_float32)
    return pc.replace_with_mask(rounded, doubtful, exact)


def _exact_round(value: Value, scale: int, mode: str, is_float32: bool) -> Value:
    def one(v: float | None) -> float | None:
        return None if v is None else _round_float(v, scale, mode, is_float32)

    if isinstance(value, pa.Scalar):
        return pa.scalar(one(value.as_py()), value.type)
    return pa.array([one(v) for v in value.to_pylist()], type=value.type)


def _round_decimal_type(source: pa.Decimal128Type, scale: int) -> pa.DataType:
    integral = source.precision - source.scale + 1
    if scale < 0:
        return pa.decimal128(min(max(integral, -scale + 1), 38), 0)
    new_scale = min(source.scale, scale)
    return pa.decimal128(min(integral + new_scale, 38), new_scale)


def _round_exact_values(value: Value, scale: int, mode: str, out: pa.DataType) -> Value:
    """Integers and decimals rounded with Python's exact decimals."""

    def one(v: Any) -> Any:
        if v is None:
            return None
        rounded = decimal.Decimal(v).quantize(decimal.Decimal(1).scaleb(-scale), rounding=mode)
        return int(rounded) if pa.types.is_integer(out) else rounded

    with decimal.localcontext() as context:
        context.prec = 80
        if isinstance(value, pa.Scalar):
            return pa.scalar(one(value.as_py()), out)
        return pa.array([one(v) for v in value.to_pylist()], type=out)


def _round(ev: Evaluator, node: exp.Expr, mode: str) -> Value:
    if isinstance(node, exp.Anonymous):
        args = arguments(node)
        subject, scale_node = args[0], (args[1] if len(args) > 1 else None)
    else:
        subject, scale_node = node.this, node.args.get("decimals")
    scale = constant(ev, scale_node, "the scale of round") if scale_node is not None else 0
    value = _number(ev, subject)
    if scale is None:
        return pa.scalar(None, value.type)
    scale = int(scale)
    if pa.types.is_floating(value.type):
        return _round_floats(value, scale, mode)
    if pa.types.is_integer(value.type):
        if scale >= 0:
            return value
        return _round_exact_values(value, scale, mode, value.type)
    out = _round_decimal_type(value.type, scale)
    return _round_exact_values(value, max(scale, 0) if scale >= 0 else scale, mode, out)


@REGISTRY.function("round", nodes=(exp.Round,), monotonic=Monotonic("this", NUMERIC))
def round_(ev: Evaluator, node: exp.Round) -> Value:
    """``round(x[, d])``: ``x`` rounded half up to ``d`` decimal places."""
    return _round(ev, node, decimal.ROUND_HALF_UP)


@REGISTRY.function("bround", anonymous=("bround",), arity=(1, 2), monotonic=Monotonic("0", NUMERIC))
def bround(ev: Evaluator, node: exp.Anonymous) -> Value:
    """``bround(x[, d])``: ``x`` rounded half to even to ``d`` decimal places."""
    return _round(ev, node, decimal.ROUND_HALF_EVEN)


def _to_long(value: Value) -> Value:
    """Doubles to bigint as Java converts them: saturating, NaN is 0."""
    value = pc.if_else(pc.is_nan(value), 0.0, value)
    value = pc.min_element_wise(
        pc.max_element_wise(value, float(_LONG_MIN), skip_nulls=False), 2.0**63, skip_nulls=False
    )
    big = pc.greater_equal(value, 2.0**63)
    as_long = pc.cast(
        pc.if_else(big, 0.0, value), options=pc.CastOptions(pa.int64(), allow_float_truncate=True)
    )
    return pc.if_else(big, pa.scalar(_LONG_MAX, pa.int64()), as_long)


def _floor_ceil(ev: Evaluator, node: exp.Expr, kernel: str) -> Value:
    if node.args.get("decimals") is not None or node.args.get("to") is not None:
        raise ev.refuse(f"{kernel} with a scale")
    value = _number(ev, node.this)
    if pa.types.is_integer(value.type):
        return cast(value, pa.int64())
    if pa.types.is_decimal(value.type):
        source = value.type
        out = (
            source
            if source.scale == 0
            else pa.decimal128(min(source.precision - source.scale + 1, 38), 0)
        )
        mode = decimal.ROUND_FLOOR if kernel == "floor" else decimal.ROUND_CEILING
        return _round_exact_values(value, 0, mode, out)
    result = getattr(pc, kernel)(value.cast(pa.float64()))
    if isinstance(result, pa.Scalar):
        return _to_long(pa.array([result.as_py()], pa.float64()))[0]
    return _to_long(result)


@REGISTRY.function("floor", nodes=(exp.Floor,), monotonic=Monotonic("this", NUMERIC))
def floor(ev: Evaluator, node: exp.Floor) -> Value:
    """The largest integer not above ``x`` (bigint, or decimal for decimals)."""
    return _floor_ceil(ev, node, "floor")


@REGISTRY.function("ceil", "ceiling", nodes=(exp.Ceil,), monotonic=Monotonic("this", NUMERIC))
def ceil(ev: Evaluator, node: exp.Ceil) -> Value:
    """The smallest integer not below ``x`` (bigint, or decimal for decimals)."""
    return _floor_ceil(ev, node, "ceil")


def _double(ev: Evaluator, node: exp.Expr) -> Value:
    return as_type(ev, node, pa.float64())


def _positive_only(value: Value, result: Value) -> Value:
    """NULL where ``value <= 0`` (Spark's logarithms)."""
    return pc.if_else(pc.less_equal(value, 0.0), pa.scalar(None, pa.float64()), result)


_UNARY: dict[type[exp.Expr], tuple[str, str]] = {
    exp.Sqrt: ("sqrt", "sqrt"),
    exp.Exp: ("exp", "exp"),
    exp.Sin: ("sin", "sin"),
    exp.Cos: ("cos", "cos"),
    exp.Tan: ("tan", "tan"),
    exp.Asin: ("asin", "asin"),
    exp.Acos: ("acos", "acos"),
    exp.Atan: ("atan", "atan"),
}


@REGISTRY.function(*(name for name, _ in _UNARY.values()), nodes=tuple(_UNARY))
def unary_math(ev: Evaluator, node: exp.Expr) -> Value:
    """Square root, exponential and trigonometry over doubles."""
    kernel = _UNARY[type(node)][1]
    return getattr(pc, kernel)(_double(ev, node.this))


@REGISTRY.function("cbrt", nodes=(exp.Cbrt,))
def cbrt(ev: Evaluator, node: exp.Cbrt) -> Value:
    """The cube root (of negative values too)."""
    return rowwise(math.cbrt, [_double(ev, node.this)], pa.float64())


@REGISTRY.function("pow", "power", nodes=(exp.Pow,))
def pow_(ev: Evaluator, node: exp.Pow) -> Value:
    """``pow(x, y)``: ``x`` to the power ``y`` as doubles."""
    return pc.power(_double(ev, node.this), _double(ev, node.expression))


@REGISTRY.function("ln", "log", nodes=(exp.Ln,))
def ln(ev: Evaluator, node: exp.Ln) -> Value:
    """The natural logarithm; NULL for values <= 0."""
    value = _double(ev, node.this)
    return _positive_only(value, pc.ln(pc.max_element_wise(value, 5e-324, skip_nulls=False)))


@REGISTRY.function("log10", "log2", "log(base, x)", nodes=(exp.Log,))
def log(ev: Evaluator, node: exp.Log) -> Value:
    """A logarithm in a base; NULL for values (or bases) <= 0."""
    value = _double(ev, node.expression)
    safe = pc.max_element_wise(value, 5e-324, skip_nulls=False)
    base_literal = node.this.to_py() if isinstance(node.this, exp.Literal) else None
    if base_literal == 10:
        return _positive_only(value, pc.log10(safe))
    base = _double(ev, node.this)
    result = pc.divide(pc.ln(safe), pc.ln(pc.max_element_wise(base, 5e-324, skip_nulls=False)))
    return _positive_only(base, _positive_only(value, result))


@REGISTRY.function("log1p", anonymous=("log1p",), arity=(1, 1))
def log1p(ev: Evaluator, node: exp.Anonymous) -> Value:
    """``ln(1 + x)``; NULL for ``x <= -1``."""
    value = _double(ev, arguments(node)[0])
    result = pc.log1p(pc.max_element_wise(value, -1.0 + 1e-16, skip_nulls=False))
    return pc.if_else(pc.less_equal(value, -1.0), pa.scalar(None, pa.float64()), result)


@REGISTRY.function("sign", "signum", nodes=(exp.Sign,))
def sign(ev: Evaluator, node: exp.Sign) -> Value:
    """-1.0, 0.0 or 1.0 by the sign of ``x`` (a double)."""
    return pc.sign(_double(ev, node.this))


@REGISTRY.function("pi", nodes=(exp.Pi,))
def pi(ev: Evaluator, node: exp.Pi) -> Value:
    """The constant pi."""
    return pa.scalar(math.pi, pa.float64())


@REGISTRY.function("e", anonymous=("e",), arity=(0, 0))
def e(ev: Evaluator, node: exp.Anonymous) -> Value:
    """The constant e."""
    return pa.scalar(math.e, pa.float64())


@REGISTRY.function("degrees", "radians", nodes=(exp.Degrees, exp.Radians))
def degrees_radians(ev: Evaluator, node: exp.Expr) -> Value:
    """Radians to degrees, or degrees to radians (Java's constants)."""
    value = _double(ev, node.this)
    if isinstance(node, exp.Degrees):
        return pc.multiply(value, 180.0 / math.pi)
    return pc.multiply(value, math.pi / 180.0)


@REGISTRY.function("atan2", nodes=(exp.Atan2,))
def atan2(ev: Evaluator, node: exp.Atan2) -> Value:
    """``atan2(y, x)``: the angle of the point ``(x, y)``."""
    return pc.atan2(_double(ev, node.this), _double(ev, node.expression))
