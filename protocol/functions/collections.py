"""Structs, arrays and maps: ``struct``, ``named_struct``, ``array``, ``map``,
``element_at``, ``x[i]``/``m[k]``, ``size``/``cardinality``,
``array_contains``, ``map_keys``, ``map_values``, ``map_contains_key``,
``array_position``, ``array_distinct``... (field access ``s.f`` is a column
reference of the evaluator).

Invariants (Spark's, ANSI):
- ``array(...)`` elements and ``map(...)`` keys and values are brought to
  their common type; a NULL map key or a duplicate key raises.
- ``element_at(array, i)`` is 1-based (negative from the end) and ``a[i]``
  0-based; an index out of range raises (ANSI; NULL in legacy mode),
  ``element_at(a, 0)`` raises;
  a key a map lacks is NULL.
- ``size`` of NULL is NULL (ANSI; -1 in legacy mode); ``array_contains`` is NULL when the value
  is NULL, or when it is absent and the array holds a NULL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from raydelta.protocol.errors import InvalidExpressionError
from raydelta.protocol.expression_types import Value, cast, common_type
from raydelta.protocol.functions.registry import Registry
from raydelta.protocol.functions.values import arguments, rowwise

if TYPE_CHECKING:
    from raydelta.protocol.expression_evaluation import Evaluator

REGISTRY = Registry("collections")


@REGISTRY.function("struct", "named_struct", nodes=(exp.Struct,))
def struct(ev: Evaluator, node: exp.Struct) -> Value:
    """A struct of the arguments (named by ``named_struct``, or by the columns)."""
    names: list[str] = []
    values: list[pa.Array] = []
    for i, item in enumerate(node.expressions, start=1):
        if isinstance(item, exp.PropertyEQ):
            names.append(item.this.name)
            values.append(ev.array(ev.value(item.expression)))
        else:
            names.append(f"col{i}")
            values.append(ev.array(ev.value(item)))
    if not values:
        raise ev.fail("struct() needs at least one field")
    return pa.StructArray.from_arrays(values, names=names)


def _common(ev: Evaluator, nodes: list[exp.Expr]) -> tuple[list[pa.Array], pa.DataType]:
    values = [ev.value(n) for n in nodes]
    common = common_type([v.type for v in values])
    if pa.types.is_null(common):
        common = pa.null()
    return [ev.array(cast(v, common)) for v in values], common


@REGISTRY.function("array", nodes=(exp.Array,))
def array(ev: Evaluator, node: exp.Array) -> Value:
    """An array of the arguments (their common type)."""
    columns, common = _common(ev, list(node.expressions))
    if not columns:
        return pa.scalar([], pa.list_(pa.null()))
    rows = ev.rows
    width = len(columns)
    flat = pa.concat_arrays(columns)
    order = pa.array([j * rows + i for i in range(rows) for j in range(width)], pa.int64())
    offsets = pa.array(range(0, rows * width + 1, width), pa.int32())
    return pa.ListArray.from_arrays(offsets, flat.take(order), type=pa.list_(common))


@REGISTRY.function("map", nodes=(exp.VarMap, exp.Map))
def map_(ev: Evaluator, node: exp.Expr) -> Value:
    """``map(k1, v1, ...)``: a map of the pairs."""
    keys_node, values_node = node.args.get("keys"), node.args.get("values")
    key_nodes = list(keys_node.expressions) if keys_node is not None else []
    value_nodes = list(values_node.expressions) if values_node is not None else []
    keys, key_type = _common(ev, key_nodes)
    values, value_type = _common(ev, value_nodes)
    if not keys:
        return pa.scalar([], pa.map_(pa.string(), pa.string()))
    out: list[Any] = []
    key_rows = list(zip(*[k.to_pylist() for k in keys], strict=True))
    value_rows = list(zip(*[v.to_pylist() for v in values], strict=True))
    for row_keys, row_values in zip(key_rows, value_rows, strict=True):
        if any(k is None for k in row_keys):
            raise InvalidExpressionError(f"a map key is NULL in {ev.sql!r}", ev.sql)
        if len(set(row_keys)) != len(row_keys):
            raise InvalidExpressionError(f"duplicate map key in {ev.sql!r}", ev.sql)
        out.append(list(zip(row_keys, row_values, strict=True)))
    return pa.array(out, type=pa.map_(key_type, value_type))


def _index(ev: Evaluator, items: list[Any], index: int, one_based: bool) -> Any:
    if one_based:
        if index == 0:
            raise InvalidExpressionError(f"element_at index 0 in {ev.sql!r}", ev.sql)
        position = index - 1 if index > 0 else len(items) + index
    else:
        position = index
    if not 0 <= position < len(items):
        if not ev.ansi:
            return None  # legacy mode
        error_class = "INVALID_ARRAY_INDEX_IN_ELEMENT_AT" if one_based else "INVALID_ARRAY_INDEX"
        raise ev.ansi_error(
            error_class, f"index {index} is out of bounds for an array of {len(items)}"
        )
    return items[position]


@REGISTRY.function("element_at", "[]", nodes=(exp.Bracket,))
def element_at(ev: Evaluator, node: exp.Bracket) -> Value:
    """``element_at(a, i)`` (1-based), ``a[i]`` (0-based), ``element_at(m, k)``, ``m[k]``."""
    if len(node.expressions) != 1:
        raise ev.refuse("a subscript with several indexes")
    container = ev.value(node.this)
    key = ev.value(node.expressions[0])
    if pa.types.is_map(container.type):
        key = cast(key, container.type.key_type) if not pa.types.is_null(key.type) else key
        return rowwise(lambda m, k: dict(m).get(k), [container, key], container.type.item_type)
    if not pa.types.is_list(container.type):
        raise ev.fail(f"a subscript needs an array or a map, got {container.type}")
    one_based = node.args.get("offset") == 1
    index = cast(key, pa.int32()) if not pa.types.is_null(key.type) else key.cast(pa.int32())
    return rowwise(
        lambda items, i: _index(ev, items, i, one_based),
        [container, index],
        container.type.value_type,
    )


@REGISTRY.function("size", "cardinality", nodes=(exp.ArraySize,), anonymous=("cardinality",))
def size(ev: Evaluator, node: exp.Expr) -> Value:
    """The number of elements of an array or entries of a map (int)."""
    target = arguments(node)[0] if isinstance(node, exp.Anonymous) else node.this
    value = ev.array(ev.value(target))
    if pa.types.is_map(value.type) or pa.types.is_list(value.type):
        sizes = pc.list_value_length(value).cast(pa.int32())
        # legacy mode: Spark's spark.sql.legacy.sizeOfNull (default true) applies
        return sizes if ev.ansi else pc.fill_null(sizes, pa.scalar(-1, pa.int32()))
    raise ev.fail(f"size needs an array or a map, got {value.type}")


def _contains(items: list[Any], wanted: Any) -> bool | None:
    if wanted in items or (wanted != wanted and any(i is not None and i != i for i in items)):
        return True  # NaN equals NaN in Spark (x != x only for NaN)
    return None if any(i is None for i in items) else False


@REGISTRY.function("array_contains", nodes=(exp.ArrayContains,))
def array_contains(ev: Evaluator, node: exp.ArrayContains) -> Value:
    """Whether the array holds the value (three-valued)."""
    container = ev.value(node.this)
    if not pa.types.is_list(container.type):
        raise ev.fail(f"array_contains needs an array, got {container.type}")
    wanted = ev.value(node.expression)
    element = container.type.value_type
    if not pa.types.is_null(wanted.type) and not pa.types.is_null(element):
        wanted = cast(wanted, element)
    return rowwise(_contains, [container, wanted], pa.bool_())


@REGISTRY.function("map_keys", nodes=(exp.MapKeys,))
def map_keys(ev: Evaluator, node: exp.MapKeys) -> Value:
    """The keys of a map, as an array."""
    value = ev.value(node.this)
    return rowwise(lambda m: [k for k, _ in m], [value], pa.list_(value.type.key_type))


@REGISTRY.function("map_values", anonymous=("map_values",), arity=(1, 1))
def map_values(ev: Evaluator, node: exp.Anonymous) -> Value:
    """The values of a map, as an array."""
    value = ev.value(arguments(node)[0])
    return rowwise(lambda m: [v for _, v in m], [value], pa.list_(value.type.item_type))


@REGISTRY.function("map_contains_key", nodes=(exp.MapContainsKey,))
def map_contains_key(ev: Evaluator, node: exp.MapContainsKey) -> Value:
    """Whether the map has the key."""
    container = ev.value(node.this)
    key = cast(ev.value(node.args["key"]), container.type.key_type)
    return rowwise(lambda m, k: any(k == mk for mk, _ in m), [container, key], pa.bool_())
