"""Helpers the function families share: arguments as Python values, row-wise
application of a Python function, and Spark's implicit argument casts.

Invariants:
- :func:`rowwise` keeps one output per row; with ``strict`` (the default) a
  row with any NULL argument is NULL without calling the function (Spark's
  null-intolerant functions).
- :func:`constant` accepts only values that are the same for all rows
  (a literal or an expression of literals), so a pattern or a unit is read
  once, never per row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlglot import exp

from raydelta.protocol.errors import UnsupportedExpressionError
from raydelta.protocol.expression_types import Value, cast

if TYPE_CHECKING:
    from raydelta.protocol.expression_evaluation import Evaluator


def arguments(node: exp.Expr) -> list[exp.Expr]:
    """The arguments of an anonymous function call, in order."""
    return list(node.expressions)


def constant(ev: Evaluator, node: exp.Expr | None, what: str) -> Any:
    """The Python value of ``node``, which must not depend on the row."""
    if node is None:
        return None
    value = ev.value(node)
    if not isinstance(value, pa.Scalar):
        raise UnsupportedExpressionError(
            f"{what} must be a literal (the same for every row) in {ev.sql!r}", ev.sql
        )
    return value.as_py()


def as_type(ev: Evaluator, node: exp.Expr, target: pa.DataType) -> Value:
    """``node``'s value implicitly cast to ``target`` (Spark's input casts)."""
    value = ev.value(node)
    if pa.types.is_null(value.type):
        return value.cast(target)
    return cast(value, target)


def rowwise(
    fn: Callable[..., Any],
    values: Sequence[Value],
    out_type: pa.DataType,
    *,
    strict: bool = True,
) -> Value:
    """``fn`` applied to each row's Python values (a scalar when all inputs are)."""
    if all(isinstance(v, pa.Scalar) for v in values):
        args = [v.as_py() for v in values]
        result = None if strict and any(a is None for a in args) else fn(*args)
        return pa.scalar(result, out_type)
    length = next(len(v) for v in values if not isinstance(v, pa.Scalar))
    columns = [[v.as_py()] * length if isinstance(v, pa.Scalar) else v.to_pylist() for v in values]
    out: list[Any] = []
    for row in zip(*columns, strict=True):
        args = list(row)
        if strict and any(a is None for a in args):
            out.append(None)
        else:
            out.append(fn(*args))
    return pa.array(out, type=out_type)


def scalar_or_array(values: Sequence[Value]) -> bool:
    """True when every value is a scalar (the result is the same for all rows)."""
    return all(isinstance(v, pa.Scalar) for v in values)
