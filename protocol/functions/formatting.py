"""Java's text for numbers and Java's ``Formatter`` (``format_string``/``printf``).

Invariants:
- ``java_double_text`` (in :mod:`raydelta.protocol.expression_types`) is
  Java's ``Double.toString`` (``Float.toString`` for float32) on the
  shortest digits that read back as the value:
  plain notation with at least one fractional digit for ``1e-3 <= |x| < 1e7``,
  else ``d.dddE±n``; ``NaN``, ``Infinity``, ``-Infinity``, ``-0.0``. This is
  Spark's ``CAST(x AS STRING)`` for doubles and floats.
- :func:`java_format` supports the conversions ``d s S f e E x X o c b %% n``
  with flags, width and precision; ``%g``, ``%a``, dates and argument indexes
  are refused. A NULL argument prints ``null`` (``false`` for ``%b``).
"""

from __future__ import annotations

import decimal
import re
from typing import Any

from raydelta.protocol.errors import InvalidExpressionError, UnsupportedExpressionError
from raydelta.protocol.expression_types import java_double_text

_SPEC = re.compile(r"%([-#+ 0,(]*)(\d+)?(\.\d+)?([a-zA-Z%])")


def java_format(pattern: str, args: list[Any], bits: list[int | None], sql: str) -> str:
    """``String.format(pattern, args)`` for the supported conversions.

    ``bits`` is each argument's integer width (for two's complement ``%x``),
    None for non-integers."""
    out: list[str] = []
    position = 0
    index = 0
    for match in _SPEC.finditer(pattern):
        out.append(pattern[position : match.start()])
        position = match.end()
        flags, width, precision, conversion = match.groups()
        if conversion == "%":
            out.append("%")
            continue
        if conversion == "n":
            out.append("\n")
            continue
        if index >= len(args):
            raise InvalidExpressionError(f"format_string is missing an argument in {sql!r}", sql)
        value, width_bits = args[index], bits[index]
        index += 1
        out.append(_one(flags, width, precision, conversion, value, width_bits, sql))
    out.append(pattern[position:])
    return "".join(out)


def _one(
    flags: str,
    width: str | None,
    precision: str | None,
    conversion: str,
    value: Any,
    bits: int | None,
    sql: str,
) -> str:
    if "," in flags or "(" in flags or "#" in flags:
        raise UnsupportedExpressionError(f"format_string flags {flags!r} in {sql!r}", sql)
    spec = "%" + flags + (width or "") + (precision or "")
    lower = conversion.lower()
    if value is None and lower != "b":
        text = "null"
        return (spec.replace("0", "") + "s") % text if width else text
    if lower == "s":
        text = _as_text(value)
        text = text.upper() if conversion == "S" else text
        return (spec + "s") % text
    if lower == "b":
        return (spec + "s") % ("false" if value is None or value is False else "true")
    if lower == "c":
        return str((spec + "c") % value)
    if lower in "dxo":
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidExpressionError(f"%{conversion} needs an integer in {sql!r}", sql)
        if lower != "d" and value < 0 and bits is not None:
            value += 1 << bits
        return str((spec + conversion) % value)
    if conversion == "f" and isinstance(value, float | decimal.Decimal):
        return _fixed(flags, width, precision, value)
    if lower in "fe":
        if not isinstance(value, float | int | decimal.Decimal) or isinstance(value, bool):
            raise InvalidExpressionError(f"%{conversion} needs a number in {sql!r}", sql)
        if isinstance(value, int):
            raise InvalidExpressionError(f"%{conversion} needs a fraction type in {sql!r}", sql)
        return str((spec + conversion) % value)
    raise UnsupportedExpressionError(f"format_string conversion %{conversion} in {sql!r}", sql)


def _fixed(
    flags: str, width: str | None, precision: str | None, value: float | decimal.Decimal
) -> str:
    """Java's ``%f``: the value's shortest decimal digits rounded half up."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        # Java: NaN/Infinity unpadded by zeros, justified with spaces; + or ' ' signs Infinity
        text = java_double_text(value)
        if value == float("inf") and ("+" in flags or " " in flags):
            text = ("+" if "+" in flags else " ") + text
        size = int(width) if width else 0
        return text.ljust(size) if "-" in flags else text.rjust(size)
    exact = decimal.Decimal(repr(value)) if isinstance(value, float) else value
    places = int(precision[1:]) if precision else 6
    with decimal.localcontext() as context:
        context.prec = 1000
        rounded = exact.quantize(decimal.Decimal(1).scaleb(-places), rounding=decimal.ROUND_HALF_UP)
    text = format(rounded, "f")
    if not text.startswith("-") and ("+" in flags or " " in flags):
        text = ("+" if "+" in flags else " ") + text
    size = int(width) if width else 0
    if len(text) >= size:
        return text
    if "-" in flags:
        return text.ljust(size)
    if "0" in flags:
        sign = text[0] if text[0] in "+- " else ""
        return sign + text[len(sign) :].rjust(size - len(sign), "0")
    return text.rjust(size)


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_double_text(value)
    return str(value)
