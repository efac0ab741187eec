"""Checking a MERGE before any file is read: the source as Arrow, the schema
evolution ``merge_schema=True`` asks for, and every clause resolved and typed.

Invariants:
- :func:`check_plan` evaluates every expression over empty pair tables of
  the real types, so unknown columns, ambiguous bare names, non-boolean
  conditions and values that cannot become their column's type are refused
  (typed errors) before the MERGE reads or writes anything.
- Expressions a clause kind cannot see are refused: a ``not_matched``
  (insert) clause sees only the source, a ``not_matched_by_source`` clause
  only the target.
- ``*_all`` clauses assign every target column the source has (matched by
  name, case-insensitively); target columns the source lacks keep their
  value (update) or are NULL/default (insert). Identity columns are never
  updated: ``update_all`` leaves them, an explicit update is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from raydelta.dml.operations import _castable
from raydelta.dml.operations import check_deterministic as _parse_deterministic
from raydelta.protocol.errors import (
    IdentityColumnError,
    InvalidArgumentError,
    InvalidExpressionError,
)
from raydelta.protocol.expressions import evaluate, parse_expression
from raydelta.protocol.merge_rules import MergeClause, MergePlan, pair_table, truth

if TYPE_CHECKING:
    from raydelta.protocol.actions import Metadata, Protocol
    from raydelta.storage.snapshot import Snapshot


def to_source_table(source: Any) -> pa.Table:
    """The MERGE source as one Arrow table: Arrow, pandas, or a Ray Dataset."""
    if isinstance(source, pa.Table):
        return source
    if isinstance(source, pa.RecordBatchReader):
        return source.read_all()
    if isinstance(source, pa.RecordBatch):
        return pa.Table.from_batches([source])
    kind = type(source)
    if kind.__name__ == "DataFrame" and kind.__module__.split(".")[0] == "pandas":
        return pa.Table.from_pandas(source, preserve_index=False)
    if kind.__name__ in ("Dataset", "MaterializedDataset") and kind.__module__.startswith("ray."):
        import ray

        refs = source.to_arrow_refs()
        tables = list(ray.get(refs))
        if not tables:
            return source.schema().base_schema.empty_table()
        return pa.concat_tables(tables, promote_options="default")
    raise InvalidArgumentError(
        "the merge source must be a pyarrow.Table, a pandas DataFrame or a Ray Dataset, "
        f"got {kind.__name__}"
    )


def evolved_metadata(
    snapshot: Snapshot, source: pa.Table, *, merge_schema: bool
) -> tuple[Metadata | None, Protocol | None]:
    """The metadata (and protocol) with the source's new columns, or Nones."""
    if not merge_schema:
        return None, None
    from raydelta.storage.data.writer import _evolve

    known = {f.name.lower() for f in snapshot.schema.fields}
    new = [f.with_nullable(True) for f in source.schema if f.name.lower() not in known]
    if not new:
        return None, None
    return _evolve(snapshot.protocol, snapshot.metadata, pa.schema(new), "merge")


def _check_deterministic(sql: str, what: str) -> None:
    _parse_deterministic(sql, what=what, operations="MERGE")


def _check_condition(sql: str | None, table: pa.Table, what: str) -> None:
    if sql is None:
        return
    _check_deterministic(sql, what)
    truth(sql, table)


def _target_column(name: str, plan: MergePlan) -> str:
    bare = name
    prefix = plan.target_alias + "."
    if bare.lower().startswith(prefix.lower()):
        bare = bare[len(prefix) :]
    bare = bare.strip("`")
    for column in plan.target_columns:
        if column == bare:
            return column
    folded = [c for c in plan.target_columns if c.lower() == bare.lower()]
    if len(folded) == 1:
        return folded[0]
    raise InvalidArgumentError(
        f"column {name!r} does not exist in the target table (columns: "
        f"{', '.join(plan.target_columns)})"
    )


def _star(
    clause: MergeClause, plan: MergePlan, source: pa.Table, identity_columns: frozenset[str]
) -> MergeClause:
    by_name = {n.lower(): n for n in source.column_names}
    pairs = tuple(
        (column, f"{plan.source_alias}.`{by_name[column.lower()]}`")
        for column in plan.target_columns
        if column.lower() in by_name
        and not (clause.action == "update" and column in identity_columns)
    )
    if not pairs:
        raise InvalidArgumentError("the source has none of the target's columns")
    return replace(clause, assignments=pairs)


def check_plan(
    plan: MergePlan,
    clauses: Sequence[tuple[MergeClause, str | None]],
    *,
    target_schema: pa.Schema,
    source: pa.Table,
    identity_columns: frozenset[str] = frozenset(),
) -> MergePlan:
    """The plan with its clauses resolved and checked (see the module).
    An update clause may not assign an ``identity_columns`` column
    (:class:`IdentityColumnError`, delta-spark's
    ``IDENTITY_COLUMNS_UPDATE_NOT_SUPPORTED``); ``update_all`` leaves them
    as they are."""
    target = target_schema.empty_table()
    empty_source = source.schema.empty_table()
    both = pair_table(plan, target, empty_source, 0)
    views = {
        "matched": both,
        "not_matched": pair_table(plan, None, empty_source, 0),
        "not_matched_by_source": pair_table(plan, target, None, 0),
    }
    _check_deterministic(plan.predicate, "merge condition")
    truth(plan.predicate, both)
    resolved = []
    for clause, star in clauses:
        view = views[clause.kind]
        what = f"{clause.kind.replace('_', ' ')} {clause.action} condition"
        _check_condition(clause.condition, view, what)
        if star:
            clause = _star(clause, plan, source, identity_columns)
        pairs = []
        for column, value in clause.assignments:
            name = _target_column(column, plan)
            if clause.action == "update" and name in identity_columns:
                raise IdentityColumnError(
                    f"[IDENTITY_COLUMNS_UPDATE_NOT_SUPPORTED] the MERGE {clause.kind} update "
                    f"sets the identity column {name!r}; identity values cannot be updated",
                    name,
                )
            _check_deterministic(value, f"value of {name!r}")
            result = evaluate(parse_expression(value), view)
            wanted = target_schema.field(name).type
            if not pa.types.is_null(result.type) and not _castable(result.type, wanted):
                raise InvalidExpressionError(
                    f"cannot set column {name!r} ({wanted}) to {value!r} of type {result.type}",
                    value,
                )
            pairs.append((name, value))
        resolved.append(replace(clause, assignments=tuple(pairs)))
    keys = []
    by_name = {n.lower(): n for n in source.column_names}
    for key_target, key_source in plan.join_keys:
        if key_source.lower() not in by_name:
            raise InvalidExpressionError(
                f"no column {key_source!r} in the source (columns: {source.column_names})",
                plan.predicate,
            )
        keys.append((_target_column(key_target, plan), by_name[key_source.lower()]))
    plan = replace(plan, join_keys=tuple(keys))
    return replace(plan, clauses=tuple(resolved))


check_deterministic = _check_deterministic

__all__ = ["check_deterministic", "check_plan", "evolved_metadata", "to_source_table"]
