"""Spark SQL's comparisons and ordering over Arrow values, where they differ
from IEEE 754 (Arrow's kernels): NaN.

Invariants (Spark's ``SQLOrderingUtil``, used by ``=``, ``<``, ``IN``,
``greatest``/``least``, ``CASE x WHEN``, ``nullif`` and ``array_contains``):
- NaN equals NaN, and NaN is greater than every other value of its type,
  ``+Infinity`` included; ``0.0`` equals ``-0.0``.
- NULL compares to NULL (``<=>`` is built on top, never NULL).
- Operands are already of one type (the evaluator's coercion); types without
  NaN (integers, decimals, strings, dates...) use Arrow's kernels unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from raydelta.protocol.expression_types import Value

# The comparison kernel names the evaluator uses for = <> < <= > >=.
KERNELS = frozenset({"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"})


def _floating(left: Value, right: Value) -> bool:
    return bool(pa.types.is_floating(left.type) or pa.types.is_floating(right.type))


def spark_compare(kernel: str, left: Value, right: Value) -> Value:
    """``left <kernel> right`` with Spark's NaN order (``kernel`` is one of
    :data:`KERNELS`); NULL where either side is NULL."""
    if kernel not in KERNELS:
        raise ValueError(f"not a comparison kernel: {kernel}")
    if not _floating(left, right):
        return getattr(pc, kernel)(left, right)
    if kernel == "equal":
        return _equal(left, right)
    if kernel == "not_equal":
        return pc.invert(_equal(left, right))
    if kernel in ("greater", "greater_equal"):
        left, right = right, left
        kernel = "less" if kernel == "greater" else "less_equal"
    right_nan = pc.is_nan(right)
    if kernel == "less":
        # IEEE's x < y is false when either is NaN; Spark's is true when only y is.
        return pc.or_(pc.less(left, right), pc.and_(pc.invert(pc.is_nan(left)), right_nan))
    return pc.or_(pc.less_equal(left, right), right_nan)


def _equal(left: Value, right: Value) -> Value:
    return pc.or_(pc.equal(left, right), pc.and_(pc.is_nan(left), pc.is_nan(right)))


def spark_equal(left: Value, right: Value) -> Value:
    """``left = right`` (NaN = NaN is true)."""
    return spark_compare("equal", left, right)


def spark_extreme(values: Sequence[Value], *, greatest: bool) -> Value:
    """``greatest``/``least`` of values of one type: NULLs skipped (NULL only
    when all are), NaN the greatest of all."""
    result = (
        pc.max_element_wise(*values, skip_nulls=True)
        if greatest
        else (pc.min_element_wise(*values, skip_nulls=True))
    )
    if not pa.types.is_floating(result.type):
        return result
    # Arrow skips NaN as it skips NULL: a NaN argument decides greatest (it is
    # above all) and least only when every argument is NaN or NULL.
    nans = [pc.fill_null(pc.is_nan(v), False) for v in values]
    nan = pa.scalar(float("nan"), result.type)
    if greatest:
        any_nan = nans[0]
        for other in nans[1:]:
            any_nan = pc.or_(any_nan, other)
        return pc.if_else(any_nan, nan, result)
    only_nan = pc.and_(pc.is_null(result), nans[0])
    for other in nans[1:]:
        only_nan = pc.or_(only_nan, pc.and_(pc.is_null(result), other))
    return pc.if_else(only_nan, nan, result)
