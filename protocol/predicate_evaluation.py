"""Evaluating partition predicates over a file's partition values.

:func:`evaluate` answers SQL's question for one row of partition values;
:func:`matches` answers the conflict checker's conservative question "may
this transaction have read a file with these partition values?" (the
language itself is :mod:`raydelta.protocol.predicates`).

Invariants:
- Comparisons are typed: a partition value string is parsed by its column
  type (``partition_values.parse_partition_value``) and so is a string
  literal (``date < '2024-02-01'`` compares dates, ``id > 9`` integers).
  A literal that cannot be read as the column's type makes the comparison
  unknown (NULL), never a silent string comparison.
- :func:`evaluate` is SQL three-valued logic: ``None`` is NULL/unknown. A
  null partition value makes a comparison NULL; ``IS NULL`` is never NULL.
- :func:`matches` never answers False for a file the transaction could have
  read (it may answer True for one it did not): a column that is not a
  partition column may make a comparison true, false or NULL.
- Numbers compare in Spark's order: NaN = NaN, NaN above every number.
- Column names resolve exactly first, then case-insensitively (Spark's
  default resolution).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from raydelta.protocol.errors import InvalidPredicateError, RaydeltaError
from raydelta.protocol.partition_values import parse_partition_value
from raydelta.protocol.predicates import (
    AlwaysTrue,
    And,
    Comparison,
    In,
    IsNull,
    Not,
    Or,
    Predicate,
)
from raydelta.protocol.schema import DataType, DecimalType, PrimitiveType

_STRING = PrimitiveType("string")

# Outcome sets: which of TRUE / FALSE / NULL a node may evaluate to over the
# rows of one file. Partition columns give a single outcome; other columns all.
_TRUE: frozenset[bool | None] = frozenset({True})
_FALSE: frozenset[bool | None] = frozenset({False})
_NULL: frozenset[bool | None] = frozenset({None})
_ANY: frozenset[bool | None] = frozenset({True, False, None})


def _kleene_and(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


def _kleene_or(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    if a is None or b is None:
        return None
    return False


def _combine(
    parts: Iterable[frozenset[bool | None]], op: Any, start: bool
) -> frozenset[bool | None]:
    result: frozenset[bool | None] = frozenset({start})
    for part in parts:
        result = frozenset(op(a, b) for a in result for b in part)
    return result


class _Columns:
    """Resolves predicate column names against one file's partition values."""

    __slots__ = ("_types", "_types_folded", "_values", "_values_folded")

    def __init__(
        self, partition_values: Mapping[str, str | None], column_types: Mapping[str, DataType]
    ) -> None:
        self._values = partition_values
        self._types = column_types
        self._values_folded = {k.lower(): k for k in partition_values}
        self._types_folded = {k.lower(): k for k in column_types}

    def lookup(self, column: str) -> tuple[bool, str | None, DataType] | None:
        """``(known, raw value, type)`` for a partition column, None for any other.

        ``known`` is False for a partition column (it has a type) whose value
        the file does not carry: such a file is judged as "may match".
        """
        type_key = column if column in self._types else self._types_folded.get(column.lower())
        value_key = column if column in self._values else self._values_folded.get(column.lower())
        if type_key is None and value_key is None:
            return None
        dtype = self._types[type_key] if type_key is not None else _STRING
        if value_key is None:
            return (False, None, dtype)
        return (True, self._values[value_key], dtype)


def _typed(text: str | None, dtype: DataType) -> Any:
    return parse_partition_value(text, dtype)


def _literal(value: Any, dtype: DataType) -> Any:
    """The literal as a value of the column's type; raises when it is not one."""
    if isinstance(dtype, DecimalType):
        if isinstance(value, str):
            return _typed(value, dtype)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{value!r} is not a decimal")
        # the literal as written (1.1 is 1.1, not the binary double nearest to it)
        return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    if not isinstance(dtype, PrimitiveType):
        raise TypeError(f"cannot compare a column of type {dtype}")
    name = dtype.name
    if name == "string":
        if not isinstance(value, str):
            raise TypeError(f"{value!r} is not a string")
        return value
    if isinstance(value, str):
        parsed = _typed(value, dtype)
        if parsed is None:
            raise TypeError(f"{value!r} is not a {name}")
        return parsed
    if name == "boolean":
        if not isinstance(value, bool):
            raise TypeError(f"{value!r} is not a boolean")
        return value
    if name in ("byte", "short", "integer", "long", "float", "double"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{value!r} is not a number")
        return value
    raise TypeError(f"cannot compare {value!r} with a {name} column")


def _nan_last(value: Any) -> Any:
    """A number keyed in Spark's order, where NaN is above every number."""
    return (1, 0.0) if isinstance(value, float) and math.isnan(value) else (0, value)


def _compare(left: Any, op: str, right: Any) -> bool:
    if any(isinstance(v, float) and math.isnan(v) for v in (left, right)):
        left, right = _nan_last(left), _nan_last(right)  # Spark: NaN = NaN, NaN above all
    if op == "=":
        return bool(left == right)
    if op == "!=":
        return bool(left != right)
    if op == "<":
        return bool(left < right)
    if op == "<=":
        return bool(left <= right)
    if op == ">":
        return bool(left > right)
    return bool(left >= right)


def _comparison_outcome(
    columns: _Columns, column: str, op: str, literal: Any
) -> frozenset[bool | None]:
    found = columns.lookup(column)
    if found is None:
        return _ANY
    known, raw, dtype = found
    if not known:
        return _ANY
    try:
        value = _typed(raw, dtype)
        if value is None:
            return _NULL
        return _TRUE if _compare(value, op, _literal(literal, dtype)) else _FALSE
    except (RaydeltaError, TypeError, ValueError, ArithmeticError):
        return _ANY


def _outcomes(predicate: Predicate, columns: _Columns) -> frozenset[bool | None]:
    if isinstance(predicate, AlwaysTrue):
        return _TRUE
    if isinstance(predicate, Comparison):
        return _comparison_outcome(columns, predicate.column, predicate.op, predicate.value)
    if isinstance(predicate, In):
        parts = (_comparison_outcome(columns, predicate.column, "=", v) for v in predicate.values)
        return _combine(parts, _kleene_or, False)
    if isinstance(predicate, IsNull):
        found = columns.lookup(predicate.column)
        if found is None or not found[0]:
            return frozenset({True, False})
        try:
            return _TRUE if _typed(found[1], found[2]) is None else _FALSE
        except (RaydeltaError, TypeError, ValueError, ArithmeticError):
            return frozenset({True, False})
    if isinstance(predicate, Not):
        return frozenset(None if v is None else not v for v in _outcomes(predicate.child, columns))
    if isinstance(predicate, And):
        return _combine((_outcomes(c, columns) for c in predicate.children), _kleene_and, True)
    if isinstance(predicate, Or):
        return _combine((_outcomes(c, columns) for c in predicate.children), _kleene_or, False)
    raise InvalidPredicateError(f"not a predicate: {predicate!r}")


def evaluate(
    predicate: Predicate,
    partition_values: Mapping[str, str | None],
    column_types: Mapping[str, DataType],
) -> bool | None:
    """SQL three-valued evaluation over one file's partition values.

    Returns None (NULL/unknown) when a null partition value makes the result
    NULL, and also when the result depends on a column that is not a
    partition column (it cannot be known from partition values).
    """
    result = _outcomes(predicate, _Columns(partition_values, column_types))
    return next(iter(result)) if len(result) == 1 else None


def matches(
    predicate: Predicate,
    partition_values: Mapping[str, str | None] | None,
    column_types: Mapping[str, DataType],
) -> bool:
    """Whether a file with these partition values may hold a row the predicate selects.

    Conservative (see the module docstring): unknown partition values
    (``None``, e.g. a ``remove`` without extended metadata) match everything.
    """
    if partition_values is None:
        return True
    return True in _outcomes(predicate, _Columns(partition_values, column_types))
