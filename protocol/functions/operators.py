"""Operators and arithmetic functions: ``||``, ``& | ^ ~``, ``shiftleft``,
``shiftright``, ``shiftrightunsigned``, ``pmod``, ``negative``, ``positive``.

Invariants (Spark's):
- ``a || b`` is ``concat(a, b)``: NULL when either side is.
- Bitwise operators work on integers of the operands' common type; shifts
  keep the shifted value's type (int for byte/short/int, bigint for bigint)
  and take the shift count modulo its bit width, as Java does.
- ``pmod`` is never negative for a positive divisor; a zero divisor is NULL
  (as ``%`` here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from raydelta.protocol.expression_types import Value, cast, common_type
from raydelta.protocol.functions.registry import Registry
from raydelta.protocol.functions.values import arguments

if TYPE_CHECKING:
    from raydelta.protocol.expression_evaluation import Evaluator

REGISTRY = Registry("operators")


@REGISTRY.function("||", nodes=(exp.DPipe,))
def dpipe(ev: Evaluator, node: exp.DPipe) -> Value:
    """``a || b``: string concatenation, NULL if either side is NULL."""
    left, right = ev.array(ev.string(node.this)), ev.array(ev.string(node.expression))
    return pc.binary_join_element_wise(left, right, "", null_handling="emit_null")


def _integers(ev: Evaluator, *nodes: exp.Expr) -> list[Value]:
    values = [ev.value(n) for n in nodes]
    common = common_type([v.type for v in values])
    if pa.types.is_null(common):
        common = pa.int32()
    if not pa.types.is_integer(common):
        raise ev.fail(f"bitwise operators need integers, got {common}")
    return [cast(v, common) if not pa.types.is_null(v.type) else v.cast(common) for v in values]


_BITWISE: dict[type[exp.Expr], str] = {
    exp.BitwiseAnd: "bit_wise_and",
    exp.BitwiseOr: "bit_wise_or",
    exp.BitwiseXor: "bit_wise_xor",
}


@REGISTRY.function("&", "|", "^", nodes=tuple(_BITWISE))
def bitwise(ev: Evaluator, node: exp.Expr) -> Value:
    """Bitwise and, or, exclusive or of integers."""
    left, right = _integers(ev, node.this, node.expression)
    return getattr(pc, _BITWISE[type(node)])(left, right)


@REGISTRY.function("~", nodes=(exp.BitwiseNot,))
def bitwise_not(ev: Evaluator, node: exp.BitwiseNot) -> Value:
    """Bitwise complement of an integer."""
    (value,) = _integers(ev, node.this)
    return pc.bit_wise_not(value)


@REGISTRY.function("bit_count", nodes=(exp.BitwiseCount,))
def bit_count(ev: Evaluator, node: exp.BitwiseCount) -> Value:
    """The number of bits set (two's complement), as int."""
    (value,) = _integers(ev, node.this)
    mask = (1 << 64) - 1  # Spark counts the bits of the value widened to a long

    def count(v: int | None) -> int | None:
        return None if v is None else bin(v & mask).count("1")

    if isinstance(value, pa.Scalar):
        return pa.scalar(count(value.as_py()), pa.int32())
    return pa.array([count(v) for v in value.to_pylist()], pa.int32())


def _shift(ev: Evaluator, node: exp.Expr, kind: str) -> Value:
    value = ev.value(node.this if not isinstance(node, exp.Anonymous) else node.expressions[0])
    amount_node = node.expression if not isinstance(node, exp.Anonymous) else node.expressions[1]
    amount = cast(ev.value(amount_node), pa.int32())
    if pa.types.is_null(value.type):
        value = value.cast(pa.int32())
    if not pa.types.is_integer(value.type):
        raise ev.fail(f"shifts need an integer, got {value.type}")
    target = pa.int64() if value.type.bit_width == 64 else pa.int32()
    value = cast(value, target)
    width = target.bit_width
    amount = pc.bit_wise_and(amount, pa.scalar(width - 1, pa.int32())).cast(target)
    if kind == "left":
        return pc.shift_left(value, amount)
    if kind == "right":
        return pc.shift_right(value, amount)
    unsigned = pa.uint64() if width == 64 else pa.uint32()
    as_unsigned = value.view(unsigned) if isinstance(value, pa.Array) else value.cast(unsigned)
    shifted = pc.shift_right(as_unsigned, amount.cast(unsigned))
    return shifted.view(target) if isinstance(shifted, pa.Array) else shifted.cast(target)


@REGISTRY.function("shiftleft", "<<", nodes=(exp.BitwiseLeftShift,))
def shiftleft(ev: Evaluator, node: exp.Expr) -> Value:
    """``shiftleft(a, n)``: ``a`` shifted left by ``n`` bits (wrapping)."""
    return _shift(ev, node, "left")


@REGISTRY.function("shiftright", ">>", nodes=(exp.BitwiseRightShift,))
def shiftright(ev: Evaluator, node: exp.Expr) -> Value:
    """``shiftright(a, n)``: arithmetic (sign-keeping) right shift."""
    return _shift(ev, node, "right")


@REGISTRY.function("shiftrightunsigned", anonymous=("shiftrightunsigned",), arity=(2, 2))
def shiftrightunsigned(ev: Evaluator, node: exp.Anonymous) -> Value:
    """``shiftrightunsigned(a, n)``: logical (zero-filling) right shift."""
    return _shift(ev, node, "unsigned")


@REGISTRY.function("pmod", anonymous=("pmod",), arity=(2, 2))
def pmod(ev: Evaluator, node: exp.Anonymous) -> Value:
    """``pmod(a, b)``: the positive remainder of ``a / b``."""
    a, b = arguments(node)
    remainder = ev.value(exp.Mod(this=a.copy(), expression=b.copy()))
    if pa.types.is_null(remainder.type):
        return remainder
    divisor = cast(ev.value(b), remainder.type)
    negative = pc.less(remainder, pa.scalar(0, remainder.type))
    return pc.if_else(negative, _trunc_mod(pc.add(remainder, divisor), divisor), remainder)


def _trunc_mod(left: Value, right: Value) -> Value:
    floor_mod = pc.modulo(left, right)
    wrong_sign = pc.and_(
        pc.not_equal(floor_mod, pa.scalar(0, floor_mod.type)),
        pc.not_equal(pc.sign(floor_mod), pc.sign(left)),
    )
    return pc.if_else(wrong_sign, pc.subtract(floor_mod, right), floor_mod)


@REGISTRY.function("negative", nodes=(exp.Negative,))
def negative(ev: Evaluator, node: exp.Negative) -> Value:
    """``negative(a)``: ``-a``."""
    return ev.value(exp.Neg(this=node.this.copy()))


@REGISTRY.function("positive", anonymous=("positive",), arity=(1, 1))
def positive(ev: Evaluator, node: exp.Anonymous) -> Value:
    """``positive(a)``: ``a``."""
    return ev.value(arguments(node)[0])
