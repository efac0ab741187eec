"""Conditional functions: ``if``, ``coalesce``/``nvl``/``ifnull``, ``nvl2``,
``nullif``, ``greatest``, ``least``, ``isnull``, ``isnotnull``, ``nanvl``.

Invariants (Spark's):
- Results are brought to the common type of the branches (``if``,
  ``coalesce``, ``nvl2``, ``greatest``, ``least``); ``nullif`` keeps its first
  argument's type.
- A NULL condition takes the other branch; ``greatest``/``least`` skip NULLs
  and are NULL only when every argument is; ``isnull``/``isnotnull`` are never
  NULL; ``nanvl`` replaces NaN only.
- ``nullif`` and ``greatest``/``least`` compare as Spark orders: NaN equals
  NaN and is above every other number (:mod:`raydelta.protocol.expression_compare`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from raydelta.protocol.expression_compare import spark_equal, spark_extreme
from raydelta.protocol.expression_types import Value, cast, common_type
from raydelta.protocol.functions.registry import Registry
from raydelta.protocol.functions.values import arguments

if TYPE_CHECKING:
    from raydelta.protocol.expression_evaluation import Evaluator

REGISTRY = Registry("conditionals")


@REGISTRY.function("if", nodes=(exp.If,))
def if_(ev: Evaluator, node: exp.If) -> Value:
    """``if(cond, a, b)``: ``a`` where ``cond`` is true, else ``b``."""
    return ev.choose_nodes([ev.boolean(node.this)], [node.args["true"]], node.args.get("false"))


def _common(ev: Evaluator, values: list[Value]) -> list[Value]:
    common = common_type([v.type for v in values])
    return [ev.array(cast(v, common)) for v in values]


@REGISTRY.function("coalesce", "nvl", "ifnull", nodes=(exp.Coalesce,))
def coalesce(ev: Evaluator, node: exp.Coalesce) -> Value:
    """The first argument that is not NULL."""
    values = [ev.value(node.this)]
    for argument in node.expressions:
        # lazy as Spark's: an argument is needed only where all before it are NULL
        pending = pc.is_null(ev.array(pc.coalesce(*_common(ev, values))))
        values.append(ev.lazily(argument, pending))
    return pc.coalesce(*_common(ev, values))


@REGISTRY.function("nvl2", nodes=(exp.Nvl2,))
def nvl2(ev: Evaluator, node: exp.Nvl2) -> Value:
    """``nvl2(x, a, b)``: ``a`` where ``x`` is not NULL, else ``b``."""
    test = pc.is_valid(ev.array(ev.value(node.this)))
    return ev.choose_nodes([test], [node.args["true"]], node.args.get("false"))


@REGISTRY.function("nullif", nodes=(exp.Nullif,))
def nullif(ev: Evaluator, node: exp.Nullif) -> Value:
    """``nullif(a, b)``: NULL where ``a = b``, else ``a``."""
    value = ev.value(node.this)
    left, right = ev.coerced(value, ev.value(node.expression))
    equal = pc.fill_null(ev.array(spark_equal(left, right)), False)
    array = ev.array(value)
    return pc.if_else(equal, pa.scalar(None, array.type), array)


def _extreme(ev: Evaluator, node: exp.Expr, kernel: str) -> Value:
    values = _common(ev, [ev.value(node.this), *(ev.value(e) for e in node.expressions)])
    if pa.types.is_null(values[0].type):
        return values[0]
    return spark_extreme(values, greatest=kernel == "max_element_wise")


@REGISTRY.function("greatest", nodes=(exp.Greatest,))
def greatest(ev: Evaluator, node: exp.Greatest) -> Value:
    """The largest argument, skipping NULLs."""
    return _extreme(ev, node, "max_element_wise")


@REGISTRY.function("least", nodes=(exp.Least,))
def least(ev: Evaluator, node: exp.Least) -> Value:
    """The smallest argument, skipping NULLs."""
    return _extreme(ev, node, "min_element_wise")


@REGISTRY.function("isnull", anonymous=("isnull",), arity=(1, 1))
def isnull(ev: Evaluator, node: exp.Anonymous) -> Value:
    """True where the argument is NULL."""
    return pc.is_null(ev.array(ev.value(arguments(node)[0])))


@REGISTRY.function("isnotnull", anonymous=("isnotnull",), arity=(1, 1))
def isnotnull(ev: Evaluator, node: exp.Anonymous) -> Value:
    """True where the argument is not NULL."""
    return pc.is_valid(ev.array(ev.value(arguments(node)[0])))


@REGISTRY.function("nanvl", nodes=(exp.Nanvl,))
def nanvl(ev: Evaluator, node: exp.Nanvl) -> Value:
    """``nanvl(a, b)``: ``b`` where ``a`` is NaN, else ``a`` (doubles)."""
    left = ev.array(cast(ev.value(node.this), pa.float64()))
    right = ev.array(cast(ev.value(node.expression), pa.float64()))
    return pc.if_else(pc.fill_null(pc.is_nan(left), False), right, left)
