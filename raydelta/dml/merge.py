"""MERGE: ``Table.merge(source, predicate, ...)`` returns a :class:`TableMerger`
(deltalake's builder: ``when_matched_update(...)``, ...,
``execute()``).

``execute()`` checks everything it can before a file is read (aliases,
clause columns, types, determinism, the schema evolution), picks the
candidate target files (:func:`merge_prune_sql`: the condition's target-only
terms and, for each ``target.k = source.k`` term, the range or the values of
the source's keys, so partitions and files the source cannot match are not
read), runs :func:`raydelta.storage.data.merge.merge_files` on groups of
them (Ray tasks through :mod:`raydelta.dml.execution`), writes the source
rows no target row matched through the inserting clauses, and commits once.

Invariants:
- Bad input raises a typed error and the table is unchanged: unknown
  columns and type mismatches (:class:`InvalidExpressionError`, or
  :class:`InvalidArgumentError` for an unknown assigned column),
  non-deterministic conditions (:class:`NonDeterministicExpressionError`),
  several source rows matching one target row
  (:class:`DeltaUnsupportedOperationException`,
  ``DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE``); files already
  written are deleted.
- The commit records the pruning predicate as read (the whole table when
  nothing prunes, e.g. with ``when_not_matched_by_source`` clauses) and
  every candidate file, at the table's isolation level: a concurrent
  commit that removes a file the MERGE read makes it fail with
  delta-spark's exception class.
- ``merge_schema=True`` adds the source's new columns (nullable) to the
  schema; the new metadata is in the same commit as the data.
- A MERGE that changes no row commits nothing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from raydelta.dml.execution import (
    candidate_files,
    plan_groups,
    read_predicate,
    run_groups,
    tag_preserved,
)
from raydelta.dml.merge_checks import (
    check_deterministic,
    check_plan,
    evolved_metadata,
    to_source_table,
)
from raydelta.dml.operations import isolation_level_of
from raydelta.protocol.dml_metrics import MergeMetrics
from raydelta.protocol.errors import InvalidArgumentError
from raydelta.protocol.file_actions import row_to_add
from raydelta.protocol.merge_rules import (
    MergeClause,
    MergePlan,
    assigned,
    first_clause,
    join_keys,
    pair_table,
)
from raydelta.protocol.schema_arrow import to_arrow
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.protocol.write_rules import table_write_rules
from raydelta.storage.data.dml import RewriteSpec, _Writer
from raydelta.storage.data.merge import (
    MergeFileResult,
    MergeSpec,
    conform,
    delete_merge_written,
    merge_files,
)
from raydelta.storage.data.writer import check_writable, write_data

if TYPE_CHECKING:
    from raydelta.actors.table.client import TableClient
    from raydelta.storage.snapshot import Snapshot

Updates = Mapping[str, str]


class TableMerger:
    """A MERGE being described; :meth:`execute` runs it (deltalake's names)."""

    def __init__(
        self,
        table: TableClient,
        source: Any,
        predicate: str,
        *,
        source_alias: str = "source",
        target_alias: str = "target",
        merge_schema: bool = False,
        tasks: int | None = None,
    ) -> None:
        if not isinstance(predicate, str) or not predicate.strip():
            raise InvalidArgumentError("the merge predicate must be SQL text")
        for name, alias in (("source_alias", source_alias), ("target_alias", target_alias)):
            if not isinstance(alias, str) or not alias.isidentifier():
                raise InvalidArgumentError(f"{name} must be an identifier, got {alias!r}")
        if source_alias.lower() == target_alias.lower():
            raise InvalidArgumentError("source_alias and target_alias must differ")
        self._table = table
        self._source = to_source_table(source)
        self._predicate = predicate
        self._source_alias, self._target_alias = source_alias, target_alias
        self._merge_schema = bool(merge_schema)
        self._tasks = tasks
        self._clauses: list[tuple[MergeClause, str | None]] = []  # (clause, "*" for *_all)

    # --- clauses (each returns the builder) ------------------------------------------

    def _clause(
        self, kind: Any, action: Any, predicate: str | None, updates: Updates | None, star: bool
    ) -> TableMerger:
        if predicate is not None and not isinstance(predicate, str):
            raise InvalidArgumentError("a clause predicate must be SQL text or None")
        pairs: tuple[tuple[str, str], ...] = ()
        if updates is not None:
            if not isinstance(updates, Mapping) or not updates:
                raise InvalidArgumentError("updates must be a non-empty dict: column -> SQL text")
            for column, value in updates.items():
                if not isinstance(column, str) or not isinstance(value, str):
                    raise InvalidArgumentError(f"updates[{column!r}] must be SQL text")
            pairs = tuple(updates.items())
        self._clauses.append((MergeClause(kind, action, predicate, pairs), "*" if star else None))
        return self

    def when_matched_update(self, updates: Updates, predicate: str | None = None) -> TableMerger:
        return self._clause("matched", "update", predicate, updates, False)

    def when_matched_update_all(self, predicate: str | None = None) -> TableMerger:
        return self._clause("matched", "update", predicate, None, True)

    def when_matched_delete(self, predicate: str | None = None) -> TableMerger:
        return self._clause("matched", "delete", predicate, None, False)

    def when_not_matched_insert(
        self, updates: Updates, predicate: str | None = None
    ) -> TableMerger:
        return self._clause("not_matched", "insert", predicate, updates, False)

    def when_not_matched_insert_all(self, predicate: str | None = None) -> TableMerger:
        return self._clause("not_matched", "insert", predicate, None, True)

    def when_not_matched_by_source_update(
        self, updates: Updates, predicate: str | None = None
    ) -> TableMerger:
        return self._clause("not_matched_by_source", "update", predicate, updates, False)

    def when_not_matched_by_source_delete(self, predicate: str | None = None) -> TableMerger:
        return self._clause("not_matched_by_source", "delete", predicate, None, False)

    # --- running ---------------------------------------------------------------------

    def execute(self) -> MergeMetrics:
        """Run the MERGE and commit it once; return its metrics."""
        staged = self.stage()
        return staged.commit()

    def stage(self, *, snapshot: Snapshot | None = None) -> StagedMerge:
        """Write every file the MERGE needs; commit nothing (see :class:`StagedMerge`)."""
        started = time.perf_counter_ns()
        if not self._clauses:
            raise InvalidArgumentError("a MERGE needs at least one when_... clause")
        check_deterministic(self._predicate, "merge condition")
        snapshot = snapshot or self._table.snapshot()
        check_writable(snapshot.protocol, snapshot.metadata)
        metadata, protocol = evolved_metadata(
            snapshot, self._source, merge_schema=self._merge_schema
        )
        config = TableConfiguration(protocol or snapshot.protocol, metadata or snapshot.metadata)
        rules = table_write_rules(config.protocol, config.metadata)
        columns = tuple(f.name for f in config.schema.fields)
        plan = check_plan(
            MergePlan(
                predicate=self._predicate,
                source_alias=self._source_alias,
                target_alias=self._target_alias,
                target_columns=columns,
                clauses=(),
                join_keys=join_keys(
                    self._predicate,
                    source_alias=self._source_alias,
                    target_alias=self._target_alias,
                ),
            ),
            self._clauses,
            target_schema=to_arrow(config.schema),
            source=self._source,
            identity_columns=frozenset(i.column for i in rules.identities),
        )
        spec = MergeSpec(
            table_uri=self._table.uri,
            protocol=config.protocol,
            metadata=config.metadata,
            read_metadata=snapshot.metadata,
            plan=plan,
            use_deletion_vectors=config.enable_deletion_vectors,
            write_change_data=config.change_data_feed_enabled,
            storage_options=self._table.storage_options,
        )
        prune = merge_prune_sql(plan, snapshot, self._source)
        candidates = _candidates(snapshot, plan, prune)
        groups, local = plan_groups(candidates, tasks=self._tasks)
        results = run_groups(
            merge_files,
            (spec, self._source),
            groups,
            cleanup=lambda r: delete_merge_written(spec, r),
            local=local,
        )
        staged = StagedMerge(
            table=self._table,
            snapshot=snapshot,
            spec=spec,
            prune_sql=prune,
            candidates=candidates,
            results=results,
            started_ns=started,
            num_source_rows=self._source.num_rows,
            new_metadata=metadata,
            new_protocol=protocol,
        )
        try:
            inserted, written_metadata = _insert(spec, self._source, results)
            staged.results.append(inserted)
        except BaseException:
            staged.abort()
            raise
        if written_metadata is not None:  # identity high-water marks moved
            staged.new_metadata = written_metadata
        return staged


def _candidates(snapshot: Snapshot, plan: MergePlan, prune: str | None) -> pa.Table:
    if prune == "false":
        return snapshot.files.slice(0, 0)
    return candidate_files(snapshot, prune)


def _sql_literal(value: Any) -> str | None:
    import datetime as dt

    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return f"DATE '{value.isoformat()}'"
    return None


def merge_prune_sql(plan: MergePlan, snapshot: Snapshot, source: pa.Table) -> str | None:
    """A condition on target columns every matching target row satisfies (None:
    no pruning; ``"false"``: no target row can match)."""
    from sqlglot import exp

    from raydelta.protocol.expressions import parse_expression

    if plan.of_kind("not_matched_by_source"):
        return None
    terms: list[str] = []
    node = parse_expression(plan.predicate).node
    while isinstance(node, exp.Paren):
        node = node.this
    for term in node.flatten() if isinstance(node, exp.And) else [node]:
        refs = list(term.find_all(exp.Column))
        if refs and all(c.table.lower() == plan.target_alias.lower() for c in refs):
            bare = term.copy().transform(
                lambda n: exp.column(n.name, quoted=True) if isinstance(n, exp.Column) else n
            )
            terms.append(f"({bare.sql(dialect='spark')})")
    partition = {c.lower() for c in snapshot.metadata.partition_columns}
    for target_column, source_column in plan.join_keys:
        keys = source.column(source_column).drop_null()
        if len(keys) == 0:
            return "false"
        quoted = f"`{target_column}`"
        distinct = pc.unique(keys)
        if target_column.lower() in partition and len(distinct) <= 1000:
            literals = [_sql_literal(v) for v in distinct.to_pylist()]
            if all(literals):
                terms.append(f"{quoted} IN ({', '.join(str(v) for v in literals)})")
                continue
        low, high = pc.min_max(keys).values()
        lo, hi = _sql_literal(low.as_py()), _sql_literal(high.as_py())
        if lo is not None and hi is not None:
            terms.append(f"{quoted} >= {lo} AND {quoted} <= {hi}")
    return " AND ".join(terms) if terms else None


def _insert(
    spec: MergeSpec, source: pa.Table, results: list[MergeFileResult]
) -> tuple[MergeFileResult, Any]:
    """Write the source rows no target row matched, through the inserting
    clauses; with the metadata the writer moved (identity marks), or None."""
    plan = spec.plan
    inserting = plan.of_kind("not_matched")
    if not inserting or source.num_rows == 0:
        return MergeFileResult(), None
    matched = pa.array(sorted({i for r in results for i in r.matched_source_rows}), pa.int64())
    every = pa.array(range(source.num_rows), pa.int64())
    unmatched = every.filter(pc.invert(pc.is_in(every, value_set=matched)))
    if len(unmatched) == 0:
        return MergeFileResult(), None
    rows = source.take(unmatched)
    pairs = pair_table(plan, None, rows, rows.num_rows)
    chosen = first_clause(inserting, pairs)
    config = TableConfiguration(spec.protocol, spec.metadata)
    schema = to_arrow(config.schema)
    parts = []
    for index, clause in enumerate(inserting):
        take = pc.equal(chosen, index)
        if pc.sum(take).as_py():
            given = [name for name, _ in clause.assignments]
            made = assigned(clause, pairs.filter(take), given, None)
            parts.append(conform(made, pa.schema([schema.field(n) for n in given])))
    if not parts:
        return MergeFileResult(), None
    new_rows = pa.concat_tables(parts, promote_options="default")
    result = write_data(
        spec.table_uri,
        new_rows,
        protocol=spec.protocol,
        metadata=spec.metadata,
        storage_options=spec.storage_options,
    )
    written = [a.path for a in result.adds]
    cdc: tuple[Any, ...] = ()
    if spec.write_change_data:
        rewrite = RewriteSpec(
            table_uri=spec.table_uri,
            protocol=spec.protocol,
            metadata=spec.metadata,
            kind="update",
            condition=None,
            storage_options=spec.storage_options,
        )
        writer = _Writer(rewrite, config)
        full = _as_written(new_rows, spec, result)
        try:
            for key, part in _by_partition(full, config.partition_columns):
                writer.change(SimpleNamespace(partition_values=key), part, "insert")  # type: ignore[arg-type]
            cdc = writer.flush_changes()
        finally:
            written.extend(writer.written)
    return MergeFileResult(
        adds=result.adds,
        cdc=cdc,
        counts={
            "num_target_rows_inserted": new_rows.num_rows,
            "num_target_files_added": len(result.adds),
            "num_target_bytes_added": sum(a.size for a in result.adds),
            "num_target_change_files_added": len(cdc),
            "num_target_change_file_bytes": sum(c.size for c in cdc),
        },
        written=tuple(written),
    ), result.metadata


def _as_written(rows: pa.Table, spec: MergeSpec, result: Any) -> pa.Table:
    """The inserted rows as the writer stored them (computed columns filled),
    for the change data: read back from the files just written."""
    from raydelta.storage.data.files import read_logical_file

    config = TableConfiguration(spec.protocol, result.metadata or spec.metadata)
    tables = [
        read_logical_file(
            spec.table_uri,
            add.to_json_dict(),
            config.schema,
            config.partition_columns,
            column_mapping_mode=config.column_mapping_mode,
            storage_options=spec.storage_options,
        )
        for add in result.adds
    ]
    schema = to_arrow(config.schema)
    return pa.concat_tables([schema.empty_table(), *(conform(t, schema) for t in tables)])


def _by_partition(
    rows: pa.Table, partition_columns: list[str]
) -> list[tuple[dict[str, str], pa.Table]]:
    if not partition_columns:
        return [({}, rows)]
    keys = rows.select(partition_columns).to_pylist()
    groups: dict[tuple[Any, ...], list[int]] = {}
    for index, key in enumerate(keys):
        groups.setdefault(tuple(key.values()), []).append(index)
    return [
        ({c: repr(v) for c, v in zip(partition_columns, key, strict=True)}, rows.take(indices))
        for key, indices in groups.items()
    ]


class StagedMerge:
    """A MERGE whose files are written and not yet committed."""

    def __init__(
        self,
        *,
        table: TableClient,
        snapshot: Snapshot,
        spec: MergeSpec,
        prune_sql: str | None,
        candidates: pa.Table,
        results: list[MergeFileResult],
        started_ns: int,
        num_source_rows: int,
        new_metadata: Any,
        new_protocol: Any,
    ) -> None:
        self.table, self.snapshot, self.spec = table, snapshot, spec
        self.prune_sql, self.candidates, self.results = prune_sql, candidates, results
        self.started_ns, self.num_source_rows = started_ns, num_source_rows
        self.new_metadata, self.new_protocol = new_metadata, new_protocol
        self.version: int | None = None
        self.committed: Any = None

    def metrics(self) -> MergeMetrics:
        counts: dict[str, int] = {}
        for result in self.results:
            for key, value in result.counts.items():
                counts[key] = counts.get(key, 0) + value
        out = counts.get("num_target_rows_inserted", 0) + counts.get("num_target_rows_updated", 0)
        out += counts.get("num_target_rows_copied", 0)
        return MergeMetrics(
            num_source_rows=self.num_source_rows,
            num_output_rows=out,
            execution_time_ms=(time.perf_counter_ns() - self.started_ns) // 1_000_000,
            scan_time_ms=max((r.scan_time_ms for r in self.results), default=0),
            rewrite_time_ms=max((r.rewrite_time_ms for r in self.results), default=0),
            **counts,
        )

    def abort(self) -> None:
        """Delete every file staged; nothing was committed."""
        for result in self.results:
            delete_merge_written(self.spec, result)
        self.results = []

    def commit(self) -> MergeMetrics:
        """Commit through the TableActor (nothing when no row changed)."""
        if not any(r.adds or r.removes for r in self.results):
            self.abort()
            return self.metrics()
        txn = self.table.transaction(
            snapshot=self.snapshot, isolation_level=isolation_level_of(self.snapshot)
        )
        predicate = read_predicate(self.prune_sql)
        if predicate is None:
            txn.read_whole_table()
        else:
            txn.read(predicate)
        txn.read_files(row_to_add(row) for row in self.candidates.to_pylist())
        if self.new_protocol is not None:
            txn.upgrade_protocol(
                reader_features=self.new_protocol.reader_features or (),
                writer_features=self.new_protocol.writer_features or (),
            )
        if self.new_metadata is not None:
            txn.replace_metadata(self.new_metadata)
        for result in self.results:
            for remove in result.removes:
                txn.remove(remove)
            txn.add(*result.adds)
            txn.add_change_data(*result.cdc)
        metrics = self.metrics()
        txn.set_operation_metrics(metrics.operation_metrics())
        tag_preserved(txn, self.snapshot)
        try:
            self.version = txn.commit(operation="MERGE", operation_parameters=self.parameters())
            self.committed = txn.committed
        except BaseException:
            self.abort()
            raise
        return metrics

    def parameters(self) -> dict[str, Any]:
        """delta-spark's MERGE ``operationParameters``."""
        plan = self.spec.plan

        def described(kind: str) -> list[dict[str, str]]:
            out = []
            for clause in plan.of_kind(kind):  # type: ignore[arg-type]
                entry: dict[str, str] = {"actionType": str(clause.action)}
                if clause.condition is not None:
                    entry["predicate"] = clause.condition
                out.append(entry)
            return out

        return {
            "predicate": [plan.predicate],
            "matchedPredicates": described("matched"),
            "notMatchedPredicates": described("not_matched"),
            "notMatchedBySourcePredicates": described("not_matched_by_source"),
        }


__all__ = ["StagedMerge", "TableMerger", "merge_prune_sql"]
