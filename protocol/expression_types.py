"""Spark SQL types and implicit coercions for :mod:`raydelta.protocol.expression_evaluation`.

Invariants:
- :func:`common_type` picks the type two or more operands are brought to,
  following a subset of Spark's rules: integers widen, decimals and integers
  meet as the wider decimal (an integer as the decimal of its width), any
  other numeric mix is double; a string meets a
  date or timestamp as that temporal type and a number as that number; a
  zoned timestamp wins over a naive one (taken in UTC).
- :func:`cast` differs from Arrow's cast where Spark's does: strings are
  trimmed and read as dates (first 10 characters) or timestamps; naive and
  zoned timestamps convert through UTC; doubles and decimals truncate toward
  zero when cast to integers. A value that cannot be cast raises Arrow's
  error, which the evaluator turns into ``InvalidExpressionError``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
import struct
from collections.abc import Sequence
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from raydelta.protocol.errors import UnsupportedExpressionError

# An array with one value per row, or a scalar standing for all rows.
Value: TypeAlias = Any  # pa.Array | pa.Scalar (pyarrow ships no type stubs)


def is_numeric(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t))


def common_type(types: Sequence[pa.DataType]) -> pa.DataType:
    """The type Spark would coerce these operand types to (a subset of its rules)."""
    known = [t for t in types if not pa.types.is_null(t)]
    if not known:
        return pa.null()
    first = known[0]
    if all(t == first for t in known):
        return first
    if all(is_numeric(t) for t in known):
        if all(pa.types.is_integer(t) for t in known):
            return max(known, key=lambda t: t.bit_width)
        if all(pa.types.is_integer(t) or pa.types.is_decimal(t) for t in known):
            return _wider_decimal(known)
        return pa.float64()
    timestamps = [t for t in known if pa.types.is_timestamp(t)]
    if timestamps and all(
        pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_string(t) for t in known
    ):
        zoned = [t for t in timestamps if t.tz is not None]
        return pa.timestamp("us", tz="UTC") if zoned else pa.timestamp("us")
    if all(pa.types.is_date(t) or pa.types.is_string(t) for t in known):
        return pa.date32()
    numeric = [t for t in known if is_numeric(t)]
    if numeric and all(is_numeric(t) or pa.types.is_string(t) for t in known):
        return common_type(numeric)
    if all(pa.types.is_string(t) or pa.types.is_large_string(t) for t in known):
        return pa.string()
    if any(pa.types.is_string(t) for t in known):
        return pa.string()
    return first


INTEGER_DIGITS = {8: 3, 16: 5, 32: 10, 64: 20}


def _wider_decimal(types: Sequence[pa.DataType]) -> pa.DataType:
    """Spark's wider decimal of decimals and integers (an integer is the decimal
    of its width: INT is DECIMAL(10,0)), bounded at 38 digits."""
    scale, integral = 0, 0
    for t in types:
        p, s = (
            (t.precision, t.scale) if pa.types.is_decimal(t) else (INTEGER_DIGITS[t.bit_width], 0)
        )
        scale, integral = max(scale, s), max(integral, p - s)
    return pa.decimal128(min(integral + scale, 38), min(scale, 38))


def cast(value: Value, target: pa.DataType) -> Value:
    """``value`` as ``target`` with Spark's cast rules where Arrow's differ."""
    if value.type == target:
        return value
    if isinstance(value, pa.Scalar):
        return cast(pa.array([value.as_py()], type=value.type), target)[0]
    source = value.type
    special = _spark_cast(value, source, target)
    if special is not None:
        return special
    if pa.types.is_timestamp(target) and pa.types.is_string(source):
        naive = pc.utf8_trim(value, characters=" ").cast(pa.timestamp("us"))
        return naive if target.tz is None else pc.assume_timezone(naive, target.tz)
    if pa.types.is_timestamp(target) and pa.types.is_timestamp(source):
        if source.tz is None and target.tz is not None:
            return pc.assume_timezone(value.cast(pa.timestamp("us")), target.tz)
        if source.tz is not None and target.tz is None:
            return pc.local_timestamp(value).cast(target)
    if pa.types.is_timestamp(target) and pa.types.is_date(source):
        naive = value.cast(pa.timestamp("us"))
        return naive if target.tz is None else pc.assume_timezone(naive, target.tz)
    if pa.types.is_date(target) and pa.types.is_string(source):
        return pc.utf8_slice_codeunits(pc.utf8_trim(value, characters=" "), start=0, stop=10).cast(
            target
        )
    if pa.types.is_date(target) and pa.types.is_timestamp(source) and source.tz is not None:
        return pc.local_timestamp(value).cast(target)
    if pa.types.is_integer(target) and (
        pa.types.is_floating(source) or pa.types.is_decimal(source)
    ):
        if pa.types.is_floating(source):
            _check_integral_range(value, target)
        return pc.cast(
            value,
            options=pc.CastOptions(target, allow_float_truncate=True, allow_decimal_truncate=True),
        )
    return value.cast(target)


def legacy_cast(value: Value, target: pa.DataType) -> Value | None:
    """Spark's non-ANSI cast of a number to an integer type, where the JVM's
    conversions decide: a wider integer or a decimal keeps its low bits (wraps),
    a double saturates at INT's range (BIGINT's for BIGINT) before it is
    narrowed by bits, NaN is 0. None for any other cast (then a value that does
    not convert is NULL)."""
    source = value.type
    if pa.types.is_integer(target) and pa.types.is_string(source):
        bits = target.bit_width
        texts = [value.as_py()] if isinstance(value, pa.Scalar) else value.to_pylist()
        out = pa.array([None if t is None else _legacy_integer(t, bits) for t in texts], target)
        return out[0] if isinstance(value, pa.Scalar) else out
    if not pa.types.is_integer(target) or not is_numeric(source):
        return None
    width = target.bit_width
    through = 64 if width == 64 else 32

    def narrow(number: int, bits: int) -> int:
        number &= (1 << bits) - 1
        return number - (1 << bits) if number >= 1 << (bits - 1) else number

    def one(v: Any) -> int | None:
        if v is None:
            return None
        if isinstance(v, float):
            if math.isnan(v):
                return 0
            low, high = -(2 ** (through - 1)), 2 ** (through - 1) - 1
            v = low if v <= low else high if v >= high else int(v)
        return narrow(int(v), width)

    if isinstance(value, pa.Scalar):
        return pa.scalar(one(value.as_py()), target)
    return pa.array([one(v) for v in value.to_pylist()], target)


_LEGACY_INTEGER = re.compile(r"[+-]?[0-9]+(\.[0-9]*)?|[+-]?\.[0-9]+")


def _legacy_integer(text: str, bits: int) -> int | None:
    """Spark's non-ANSI ``UTF8String.toInt``/``toLong``: surrounding
    whitespace ignored, a fractional part checked and dropped; NULL for
    anything else or outside the type."""
    trimmed = text.strip(" \t\n\r\x0b\x0c")
    if not _LEGACY_INTEGER.fullmatch(trimmed):
        return None
    whole = trimmed.split(".")[0]
    number = int(whole) if whole.strip("+-") else 0
    return number if -(2 ** (bits - 1)) <= number < 2 ** (bits - 1) else None


def _shortest_float32(value: float) -> str:
    packed = struct.pack("<f", value)
    for digits in range(1, 10):
        text = f"{value:.{digits}g}"
        if struct.pack("<f", float(text)) == packed:
            return text
    return repr(value)


def java_double_text(value: float, *, float32: bool = False) -> str:
    """Java's ``Double.toString(value)`` (``Float.toString`` with ``float32``)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    if not float32 and abs(value) == 5e-324:
        return "-4.9E-324" if value < 0 else "4.9E-324"  # Java 17's text for Double.MIN_VALUE
    text = _shortest_float32(abs(value)) if float32 else repr(abs(value))
    sign = "-" if value < 0 else ""
    exact = decimal.Decimal(text).normalize()
    _, digits, exponent = exact.as_tuple()
    assert isinstance(exponent, int)
    scientific = len(digits) + exponent - 1
    if 1e-3 <= abs(value) < 1e7:
        plain = format(exact, "f")
        return sign + (plain if "." in plain else plain + ".0")
    mantissa = str(digits[0]) + "." + ("".join(map(str, digits[1:])) or "0")
    return f"{sign}{mantissa}E{scientific}"


def _check_integral_range(value: pa.Array, target: pa.DataType) -> None:
    """ANSI: a double outside ``target``'s range (or NaN) does not cast."""
    bound = 2.0 ** (target.bit_width - 1)
    truncated = pc.trunc(value)
    outside = pc.or_(
        pc.is_nan(value),
        pc.or_(pc.less(truncated, -bound), pc.greater_equal(truncated, bound)),
    )
    if pc.any(outside).as_py():
        raise pa.ArrowInvalid(f"a value overflows {target} (CAST_OVERFLOW)")


_TRUE = frozenset({"t", "true", "y", "yes", "1"})
_FALSE = frozenset({"f", "false", "n", "no", "0"})


def _to_boolean(text: str) -> bool:
    folded = text.strip().lower()
    if folded in _TRUE:
        return True
    if folded in _FALSE:
        return False
    raise pa.ArrowInvalid(f"cannot cast {text!r} to BOOLEAN")


def _timestamp_text(value: dt.datetime) -> str:
    text = value.strftime("%Y-%m-%d %H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond:06d}".rstrip("0")
    return text


def _spark_cast(value: pa.Array, source: pa.DataType, target: pa.DataType) -> pa.Array | None:
    """The casts where Spark's text or rules differ from Arrow's (None: Arrow's is Spark's)."""
    if pa.types.is_string(target) and pa.types.is_floating(source):
        float32 = source == pa.float32()
        return pa.array(
            [
                None if v is None else java_double_text(v, float32=float32)
                for v in value.to_pylist()
            ],
            pa.string(),
        )
    if pa.types.is_string(target) and pa.types.is_timestamp(source):
        moments = value if source.tz is None else pc.local_timestamp(value)
        return pa.array(
            [
                None if v is None else _timestamp_text(v)
                for v in moments.cast(pa.timestamp("us")).to_pylist()
            ],
            pa.string(),
        )
    if pa.types.is_boolean(target) and pa.types.is_string(source):
        return pa.array(
            [None if v is None else _to_boolean(v) for v in value.to_pylist()], pa.bool_()
        )
    if pa.types.is_boolean(target) and is_numeric(source):
        return pc.not_equal(
            value,
            pa.scalar(0, source) if not pa.types.is_decimal(source) else pa.scalar(0).cast(source),
        )
    if pa.types.is_floating(target) and pa.types.is_decimal(source):
        # Arrow's conversion is not correctly rounded (38.861 became 38.861000000000004)
        doubles = [None if v is None else float(v) for v in value.to_pylist()]
        return pa.array(doubles, pa.float64()).cast(target)
    if pa.types.is_decimal(target) and (is_numeric(source) or pa.types.is_string(source)):
        return pa.array(
            [None if v is None else to_decimal(v, target) for v in value.to_pylist()], target
        )
    if is_numeric(target) and pa.types.is_string(source):
        trimmed = pc.utf8_trim_whitespace(value)
        if pa.types.is_integer(target):
            return trimmed.cast(target)
        return pa.array(
            [None if v is None else _java_double(v) for v in trimmed.to_pylist()], pa.float64()
        ).cast(target)
    return None


_EXACT = decimal.Context(prec=200, rounding=decimal.ROUND_HALF_UP, Emax=999999, Emin=-999999)


def to_decimal(value: Any, target: pa.DataType) -> decimal.Decimal:
    """A number (or a number's text) as a value of the decimal type ``target``,
    rounded half-up to its scale (a double by its shortest text, as Spark's
    ``Decimal(double)``); a value with more integral digits than ``target``
    holds raises ``NUMERIC_VALUE_OUT_OF_RANGE`` (ANSI; NULL in legacy mode)."""
    if isinstance(value, str):
        try:
            exact = decimal.Decimal(value.strip())
        except decimal.InvalidOperation:
            raise pa.ArrowInvalid(f"cannot cast {value!r} to {target}") from None
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise pa.ArrowInvalid(f"cannot cast {value} to {target}")
        exact = decimal.Decimal(repr(value))
    else:
        exact = decimal.Decimal(value)
    if not exact.is_finite():
        raise pa.ArrowInvalid(f"cannot cast {value!r} to {target}")
    rounded = exact.quantize(decimal.Decimal(1).scaleb(-target.scale), context=_EXACT)
    if abs(rounded) >= decimal.Decimal(10) ** (target.precision - target.scale):
        raise pa.ArrowInvalid(
            f"NUMERIC_VALUE_OUT_OF_RANGE: {value} cannot be represented as"
            f" DECIMAL({target.precision}, {target.scale})"
        )
    return rounded


def _java_double(text: str) -> float:
    folded = text.lower().rstrip("df")
    if folded in ("nan", "infinity", "+infinity", "inf", "+inf"):
        return float("nan") if folded == "nan" else float("inf")
    if folded in ("-infinity", "-inf"):
        return float("-inf")
    try:
        return float(text.rstrip("dDfF"))
    except ValueError:
        raise pa.ArrowInvalid(f"cannot cast {text!r} to DOUBLE") from None


_TYPE_NAMES: dict[str, pa.DataType] = {
    "TINYINT": pa.int8(),
    "SMALLINT": pa.int16(),
    "INT": pa.int32(),
    "BIGINT": pa.int64(),
    "FLOAT": pa.float32(),
    "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(),
    "TEXT": pa.string(),
    "VARCHAR": pa.string(),
    "CHAR": pa.string(),
    "BINARY": pa.binary(),
    "DATE": pa.date32(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
    "TIMESTAMPLTZ": pa.timestamp("us", tz="UTC"),
    "TIMESTAMPTZ": pa.timestamp("us", tz="UTC"),
    "TIMESTAMPNTZ": pa.timestamp("us"),
    "DATETIME": pa.timestamp("us"),
}


def arrow_type(node: exp.DataType, sql: str) -> pa.DataType:
    name = node.this.name if hasattr(node.this, "name") else str(node.this)
    if name == "DECIMAL":
        params = [int(p.this.this) for p in node.expressions]
        precision, scale = (params + [10, 0][len(params) :])[:2] if params else (10, 0)
        return pa.decimal128(precision, scale)
    found = _TYPE_NAMES.get(name)
    if found is None:
        raise UnsupportedExpressionError(
            f"CAST to {node.sql('spark')} is not supported in {sql!r}", sql
        )
    return found
