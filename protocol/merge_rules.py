"""MERGE semantics over Arrow: clauses, the join of source and target rows,
and which clause each row takes. Pure: values in, values out.

A MERGE is a :class:`MergePlan`: the merge condition, the source and target
aliases, and three ordered lists of :class:`MergeClause` (``matched``,
``not_matched`` (by target), ``not_matched_by_source``). Expressions are
Spark SQL (:mod:`raydelta.protocol.expressions`) evaluated over a *pair
table*: one struct column per alias (``target.x``, ``source.y``) plus the
columns of either side by their bare name when only one side has them (as
Spark resolves an unqualified name; a name on both sides must be qualified).

Invariants (delta-spark's semantics):
- A target row and a source row match when the merge condition is TRUE
  (NULL does not match). Equality terms ``target.a = source.b`` of the
  condition's top-level ``AND`` are used as a hash join; the whole condition
  is then evaluated on the joined pairs, so the result never depends on the
  join keys chosen.
- Each matched pair takes the first ``matched`` clause whose condition is
  TRUE; each unmatched source row the first ``not_matched`` clause; each
  unmatched target row the first ``not_matched_by_source`` clause. A row no
  clause takes is left as it is (a source row is not inserted).
- A target row matched by more than one source row, where a matched clause
  would act on those pairs, is refused with
  ``DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE`` unless the only
  matched clause is an unconditional DELETE (delta-spark allows that).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from raydelta.protocol.errors import DeltaUnsupportedOperationException, InvalidExpressionError
from raydelta.protocol.expressions import SqlExpression, evaluate, parse_expression

MULTIPLE_MATCH_ERROR = "DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE"
ClauseKind = Literal["matched", "not_matched", "not_matched_by_source"]
ClauseAction = Literal["update", "delete", "insert"]


@dataclass(frozen=True)
class MergeClause:
    """One WHEN clause: its kind, action, optional condition and, for update
    and insert, ``(target column, SQL value)`` pairs."""

    kind: ClauseKind
    action: ClauseAction
    condition: str | None = None
    assignments: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class MergePlan:
    """A checked MERGE (picklable: sent to the tasks that read target files)."""

    predicate: str
    source_alias: str
    target_alias: str
    target_columns: tuple[str, ...]
    """The target's logical columns after any schema evolution."""
    clauses: tuple[MergeClause, ...]
    join_keys: tuple[tuple[str, str], ...] = ()
    """``(target column, source column)`` equalities of the condition."""

    def of_kind(self, kind: ClauseKind) -> list[MergeClause]:
        return [c for c in self.clauses if c.kind == kind]

    @property
    def matched_delete_only(self) -> bool:
        matched = self.of_kind("matched")
        return len(matched) == 1 and matched[0].action == "delete" and matched[0].condition is None


@lru_cache(maxsize=512)
def parsed(sql: str) -> SqlExpression:
    """:func:`parse_expression`, once per text (a MERGE evaluates the same
    clauses on every file; the parsed tree is only read)."""
    return parse_expression(sql)


def positions(count: int) -> pa.Array:
    """``0 .. count - 1`` as int64."""
    import numpy as np

    return pa.array(np.arange(count, dtype=np.int64))


def join_keys(
    predicate: str, *, source_alias: str, target_alias: str
) -> tuple[tuple[str, str], ...]:
    """The ``target.a = source.b`` terms of the condition's top-level ``AND``."""
    node = parse_expression(predicate).node
    while isinstance(node, exp.Paren):
        node = node.this
    keys: list[tuple[str, str]] = []
    for term in node.flatten() if isinstance(node, exp.And) else [node]:
        if not isinstance(term, exp.EQ):
            continue
        sides = [term.this, term.expression]
        if not all(isinstance(s, exp.Column) and s.table for s in sides):
            continue
        by_alias = {s.table.lower(): s.name for s in sides}
        if set(by_alias) == {source_alias.lower(), target_alias.lower()}:
            keys.append((by_alias[target_alias.lower()], by_alias[source_alias.lower()]))
    return tuple(keys)


def pair_table(
    plan: MergePlan, target: pa.Table | None, source: pa.Table | None, rows: int
) -> pa.Table:
    """The table MERGE expressions are evaluated over (see the module)."""
    sides = [(plan.target_alias, target), (plan.source_alias, source)]
    columns: dict[str, pa.Array] = {}
    names: dict[str, int] = {}
    for _, side in sides:
        for name in side.column_names if side is not None else ():
            names[name.lower()] = names.get(name.lower(), 0) + 1
    for alias, side in sides:
        if side is None:
            continue
        arrays = [_array(side.column(i)) for i in range(side.num_columns)]
        columns[alias] = (
            pa.StructArray.from_arrays(arrays, names=side.column_names)
            if arrays
            else pa.nulls(rows, pa.struct([]))
        )
        for name, array in zip(side.column_names, arrays, strict=True):
            if names[name.lower()] == 1 and name.lower() not in (
                plan.source_alias.lower(),
                plan.target_alias.lower(),
            ):
                columns[name] = array
    return pa.table(columns) if columns else pa.table({"_": pa.nulls(rows)})


def _array(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column


def truth(sql: str | None, table: pa.Table) -> pa.Array:
    """Where ``sql`` is TRUE over ``table`` (all rows for no condition)."""
    if sql is None:
        return pa.array([True] * table.num_rows, pa.bool_())
    values = evaluate(parsed(sql), table)
    if pa.types.is_null(values.type):
        return pa.array([False] * table.num_rows, pa.bool_())
    if not pa.types.is_boolean(values.type):
        raise InvalidExpressionError(
            f"the condition {sql!r} is of type {values.type}, not boolean", sql
        )
    return pc.fill_null(values, False)


def unique_source_key(plan: MergePlan, source: pa.Table) -> bool:
    """Whether the MERGE joins on one key whose source values are distinct and
    not NULL (then a target row can match one source row only)."""
    if len(plan.join_keys) != 1:
        return False
    keys = _array(source.column(plan.join_keys[0][1]))
    try:
        return keys.null_count == 0 and len(pc.unique(keys)) == len(keys)
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False


def matching_pairs(
    plan: MergePlan, target: pa.Table, source: pa.Table, *, unique_source: bool | None = None
) -> tuple[pa.Array, pa.Array]:
    """``(target row index, source row index)`` of every pair the condition
    matches. ``unique_source``: :func:`unique_source_key` of the source,
    when the caller knows it (it calls once for many target files)."""
    if target.num_rows == 0 or source.num_rows == 0:
        empty = pa.array([], pa.int64())
        return empty, empty
    if plan.join_keys:
        left = {f"k{i}": _array(target.column(t)) for i, (t, _) in enumerate(plan.join_keys)}
        right = {f"k{i}": _array(source.column(s)) for i, (_, s) in enumerate(plan.join_keys)}
        for key in left:
            if left[key].type != right[key].type:
                left[key], right[key] = _common(left[key], right[key])
        if unique_source is None:
            unique_source = unique_source_key(plan, source)
        t_idx, s_idx = _equi_join(left, right, unique=unique_source)
    else:
        t_idx = pa.array(
            [t for t in range(target.num_rows) for _ in range(source.num_rows)], pa.int64()
        )
        s_idx = pa.array(list(range(source.num_rows)) * target.num_rows, pa.int64())
    if len(t_idx) == 0:
        return t_idx, s_idx
    pairs = pair_table(plan, target.take(t_idx), source.take(s_idx), len(t_idx))
    keep = truth(plan.predicate, pairs)
    return t_idx.filter(keep), s_idx.filter(keep)


def _equi_join(
    left: dict[str, pa.Array], right: dict[str, pa.Array], *, unique: bool
) -> tuple[pa.Array, pa.Array]:
    """Index pairs where every key of ``left`` equals its key in ``right``
    (NULL equals nothing). One key whose source values are distinct
    (``unique``: an upsert's usual shape) is a hash lookup; anything else is
    a hash join."""
    if unique and len(left) == 1:
        (key,) = left
        probe, build = left[key], right[key]
        try:
            found = pc.index_in(probe, value_set=build)
            hit = pc.is_valid(found)
            return positions(len(probe)).filter(hit), found.filter(hit).cast(pa.int64())
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pass  # a key type without hashing kernels: the join below
    left = {**left, "__t": positions(len(next(iter(left.values()))))}
    right = {**right, "__s": positions(len(next(iter(right.values()))))}
    joined = pa.table(left).join(pa.table(right), list(left)[:-1], join_type="inner")
    return _array(joined.column("__t")), _array(joined.column("__s"))


def _common(left: pa.Array, right: pa.Array) -> tuple[pa.Array, pa.Array]:
    for target in (left.type, right.type):
        try:
            return left.cast(target), right.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            continue
    return left.cast(pa.string()), right.cast(pa.string())


def first_clause(clauses: Sequence[MergeClause], table: pa.Table) -> pa.Array:
    """For each row of ``table``, the index of the first clause whose condition
    is TRUE, or -1."""
    chosen = pa.array([-1] * table.num_rows, pa.int64())
    for index in reversed(range(len(clauses))):
        chosen = pc.if_else(truth(clauses[index].condition, table), index, chosen)
    return chosen


def check_single_match(plan: MergePlan, t_idx: pa.Array, pairs: pa.Table) -> None:
    """Refuse a target row matched by several source rows (see the module)."""
    matched = plan.of_kind("matched")
    if not matched or plan.matched_delete_only or len(t_idx) < 2:
        return
    acting = pc.not_equal(first_clause(matched, pairs), -1)
    targets = t_idx.filter(acting)
    if len(pc.unique(targets)) != len(targets):
        raise DeltaUnsupportedOperationException(
            "Cannot perform Merge as multiple source rows matched and attempted to modify "
            "the same target row in the Delta table in possibly conflicting ways. By SQL "
            "semantics of Merge, when multiple source rows match on the same target row, "
            "the result may be ambiguous as it is unclear which source row should be used "
            "to update or delete the matching target row. You can preprocess the source "
            "table to eliminate the possibility of multiple matches.",
            MULTIPLE_MATCH_ERROR,
        )


def assigned(
    clause: MergeClause, pairs: pa.Table, columns: Sequence[str], base: pa.Table | None
) -> pa.Table:
    """The target rows an update/insert clause produces over ``pairs``: each
    assigned column from its expression, the others from ``base`` (the old
    target row) or NULL."""
    values = dict(clause.assignments)
    out: dict[str, pa.Array] = {}
    for name in columns:
        if name in values:
            out[name] = evaluate(parsed(values[name]), pairs)
        elif base is not None and name in base.column_names:
            out[name] = _array(base.column(name))
        else:
            out[name] = pa.nulls(pairs.num_rows)
    return pa.table(out) if out else pa.table({})


__all__ = [
    "MULTIPLE_MATCH_ERROR",
    "MergeClause",
    "MergePlan",
    "assigned",
    "check_single_match",
    "first_clause",
    "join_keys",
    "matching_pairs",
    "pair_table",
    "parsed",
    "positions",
    "truth",
    "unique_source_key",
]
