"""DELETE and UPDATE: validate, stage (files written, nothing committed), commit.

``stage_delete``/``stage_update`` check the condition and new values against
the table's schema before any file is read, run the per-file work
(:mod:`raydelta.dml.execution`), and return a :class:`StagedDml`;
:meth:`StagedDml.commit` sends the one commit through the TableActor.
``Table.delete``/``Table.update`` do both; tests and MERGE use the stages
to put other commits in between.

Invariants:
- Bad input (unknown column, non-deterministic or unparsable SQL, a
  condition that is not boolean, a value that does not fit its column) is
  refused with a typed error before any file is written; a failure while
  writing deletes what was written; a refused commit (conflict, rejected)
  deletes the staged files too. The table is unchanged in every case.
- The commit records what the DML read at the snapshot it read: the
  condition as a read predicate (the whole table without one) and every
  candidate file, at the table's isolation level (``delta.isolationLevel``,
  default ``WriteSerializable``). So a concurrent append into the partitions
  the condition selects fails a ``Serializable`` DML with
  ``ConcurrentAppendException``, an append elsewhere does not, and a
  concurrent removal of a file read fails it with
  ``ConcurrentDeleteReadException``.
- A DML that changes no row commits nothing.
- ``commitInfo`` holds delta-spark's operation name (``DELETE``, ``UPDATE``),
  ``operationParameters.predicate`` as JSON text of a list of SQL strings
  (as delta-spark writes it) and ``operationMetrics`` with its metric names.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from raydelta.dml.execution import (
    candidate_files,
    delete_written,
    read_predicate,
    run_rewrites,
    tag_preserved,
)
from raydelta.protocol.dml_metrics import (
    DeleteMetrics,
    FileChangeCounts,
    UpdateMetrics,
    from_counts,
)
from raydelta.protocol.errors import (
    IdentityColumnError,
    InvalidArgumentError,
    InvalidExpressionError,
    NonDeterministicExpressionError,
)
from raydelta.protocol.events import IsolationLevel
from raydelta.protocol.expressions import evaluate, parse_expression
from raydelta.protocol.file_actions import row_to_add
from raydelta.protocol.schema import StructType
from raydelta.protocol.schema_arrow import to_arrow
from raydelta.protocol.statistics import num_records_of
from raydelta.protocol.table_properties import ISOLATION_LEVEL
from raydelta.storage.data.dml import (
    Assignment,
    Condition,
    FileRewrite,
    Literal_,
    RewriteSpec,
)
from raydelta.storage.snapshot import Snapshot

if TYPE_CHECKING:
    from raydelta.actors.table.client import TableClient

# Conditions and values are Spark SQL: load sqlglot's Spark dialect with the
# module (a one-time import otherwise paid inside the first DML of a process).
import sqlglot.dialects.spark  # noqa: F401

_NON_DETERMINISTIC = frozenset(
    {"rand", "randn", "random", "uuid", "shuffle", "monotonically_increasing_id", "rand_str"}
)


def _resolve_column(name: str, schema: StructType) -> str:
    for f in schema.fields:
        if f.name == name:
            return f.name
    folded = [f.name for f in schema.fields if f.name.lower() == name.lower()]
    if len(folded) == 1:
        return folded[0]
    raise InvalidArgumentError(
        f"column {name!r} does not exist in the table (columns: "
        f"{', '.join(f.name for f in schema.fields)})"
    )


def check_deterministic(sql: str, *, what: str, operations: str) -> Any:
    """Parse ``sql`` (refused when unparsable or non-deterministic: ``operations``
    names who refuses, e.g. "DELETE and UPDATE"); the parsed expression."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    try:
        node = sqlglot.parse_one(sql, read="spark")
    except SqlglotError as error:
        raise InvalidExpressionError(f"cannot parse {what} {sql!r}: {error}", sql) from error
    for child in node.walk():
        name = (
            child.name.lower() if isinstance(child, exp.Anonymous) else type(child).__name__.lower()
        )
        if name in _NON_DETERMINISTIC:
            raise NonDeterministicExpressionError(
                f"the {what} {sql!r} is non-deterministic ({child.sql('spark')}); "
                f"{operations} accept deterministic expressions only",
                sql,
            )
    return parse_expression(sql)


def check_sql(sql: str, schema: StructType, *, what: str) -> None:
    """Refuse SQL that is non-deterministic, unparsable, or names unknown columns."""
    parsed = check_deterministic(sql, what=what, operations="DELETE and UPDATE")
    for path in parsed.columns:
        _resolve_column(path[0], schema)


def check_condition(condition: Any, schema: StructType) -> Condition:
    """The condition, checked: SQL text (deterministic, known columns, boolean),
    a pyarrow compute expression, or None."""
    if condition is None or isinstance(condition, pc.Expression):
        return condition
    if not isinstance(condition, str):
        raise InvalidArgumentError(
            f"predicate must be SQL text or a pyarrow expression, got {type(condition).__name__}"
        )
    check_sql(condition, schema, what="predicate")
    empty = to_arrow(schema).empty_table()
    result = evaluate(parse_expression(condition), empty)
    if not pa.types.is_boolean(result.type) and not pa.types.is_null(result.type):
        raise InvalidExpressionError(
            f"the predicate {condition!r} is of type {result.type}, not boolean", condition
        )
    return condition


def check_assignments(
    updates: Mapping[str, str] | None,
    new_values: Mapping[str, Any] | None,
    schema: StructType,
) -> dict[str, Assignment]:
    """Column → new value, with each column resolved to its schema name."""
    if updates is None and new_values is None:
        raise InvalidArgumentError("update needs updates (SQL expressions) or new_values")
    if updates is not None and new_values is not None:
        raise InvalidArgumentError("pass either updates or new_values, not both")
    out: dict[str, Assignment] = {}
    if updates is not None:
        if not isinstance(updates, Mapping) or not updates:
            raise InvalidArgumentError("updates must be a non-empty dict: column -> SQL text")
        for column, sql in updates.items():
            if not isinstance(sql, str):
                raise InvalidArgumentError(
                    f"updates[{column!r}] must be SQL text, got {type(sql).__name__} "
                    "(use new_values= for literal values)"
                )
            check_sql(sql, schema, what=f"new value of {column!r}")
            out[_resolve_column(column, schema)] = sql
    else:
        assert new_values is not None
        if not isinstance(new_values, Mapping) or not new_values:
            raise InvalidArgumentError("new_values must be a non-empty dict: column -> value")
        for column, value in new_values.items():
            name = _resolve_column(column, schema)
            target = to_arrow(schema).field(name).type
            try:
                pa.array([value]).cast(target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
                raise InvalidExpressionError(
                    f"cannot set column {name!r} ({target}) to {value!r}: {error}", repr(value)
                ) from error
            out[name] = Literal_(value)
    empty = to_arrow(schema).empty_table()
    for column, value in out.items():  # type errors known from the types alone
        if isinstance(value, str):
            result = evaluate(parse_expression(value), empty)
            target = to_arrow(schema).field(column).type
            if not pa.types.is_null(result.type) and not _castable(result.type, target):
                raise InvalidExpressionError(
                    f"cannot set column {column!r} ({target}) to {value!r} of type {result.type}",
                    value,
                )
    return out


def _castable(source: pa.DataType, target: pa.DataType) -> bool:
    if source == target:
        return True
    numeric = (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal)
    if any(f(source) for f in numeric) and any(f(target) for f in numeric):
        return True
    if pa.types.is_string(source) or pa.types.is_large_string(source):
        return bool(pa.types.is_string(target) or pa.types.is_large_string(target))
    try:
        pa.array([], source).cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    return True


def isolation_level_of(snapshot: Snapshot) -> IsolationLevel:
    value = snapshot.metadata.configuration.get(ISOLATION_LEVEL, "WriteSerializable")
    try:
        return IsolationLevel(value)
    except ValueError:
        return IsolationLevel.WRITE_SERIALIZABLE


@dataclass
class StagedDml:
    """A DELETE or UPDATE whose files are written and not yet committed."""

    table: TableClient
    snapshot: Snapshot
    spec: RewriteSpec
    condition_text: str | None
    candidates: pa.Table
    results: list[FileRewrite]
    started_ns: int
    extra_removes: list[Any] = field(default_factory=list)
    version: int | None = None
    committed: Any = None

    @property
    def operation(self) -> str:
        return "DELETE" if self.spec.kind == "delete" else "UPDATE"

    @property
    def counts(self) -> FileChangeCounts:
        total = FileChangeCounts()
        for result in self.results:
            total = total + result.counts
        return total

    def metrics(self, execution_time_ms: int) -> DeleteMetrics | UpdateMetrics:
        kind = DeleteMetrics if self.spec.kind == "delete" else UpdateMetrics
        timings = {
            "execution_time_ms": execution_time_ms,
            "scan_time_ms": max((r.scan_time_ms for r in self.results), default=0),
            "rewrite_time_ms": max((r.rewrite_time_ms for r in self.results), default=0),
        }
        if kind is DeleteMetrics:
            timings["num_files_before_skipping"] = self.snapshot.num_files
            timings["num_files_after_skipping"] = self.candidates.num_rows
        counts = self.counts
        if self.extra_removes:
            counts = counts + FileChangeCounts(
                num_removed_files=len(self.extra_removes),
                num_removed_bytes=sum(r.size or 0 for r in self.extra_removes),
                num_deleted_rows=self._rows_of_whole_files(),
            )
        metrics: DeleteMetrics | UpdateMetrics = from_counts(kind, counts, **timings)
        return metrics

    def _rows_of_whole_files(self) -> int:
        total = 0
        for remove in self.extra_removes:
            records = num_records_of(remove.stats)
            dv = remove.deletion_vector
            total += max(0, (records or 0) - (dv.cardinality if dv is not None else 0))
        return total

    def abort(self) -> None:
        """Delete every file staged; nothing was committed."""
        for result in self.results:
            delete_written(self.spec, result)
        self.results = []

    def commit(self) -> DeleteMetrics | UpdateMetrics:
        """Commit through the TableActor (nothing when no row changed); return the metrics."""
        changed = any(r.removes for r in self.results) or self.extra_removes
        if not changed:
            return self.metrics(_elapsed_ms(self.started_ns))
        txn = self.table.transaction(
            snapshot=self.snapshot, isolation_level=isolation_level_of(self.snapshot)
        )
        predicate = read_predicate(self.spec.condition)
        if predicate is None:
            txn.read_whole_table()
        else:
            txn.read(predicate)
        txn.read_files(row_to_add(row) for row in self.candidates.to_pylist())
        for result in self.results:
            for remove in result.removes:
                txn.remove(remove)
            txn.add(*result.adds)
            txn.add_change_data(*result.cdc)
        for remove in self.extra_removes:
            txn.remove(remove)
        metrics = self.metrics(_elapsed_ms(self.started_ns))
        txn.set_operation_metrics(metrics.operation_metrics())
        tag_preserved(txn, self.snapshot)
        predicates = [] if self.condition_text is None else [self.condition_text]
        try:
            self.version = txn.commit(
                operation=self.operation, operation_parameters={"predicate": predicates}
            )
            self.committed = txn.committed
        except BaseException:
            self.abort()
            raise
        return metrics


def _elapsed_ms(started_ns: int) -> int:
    return (time.perf_counter_ns() - started_ns) // 1_000_000


def _condition_text(condition: Condition) -> str | None:
    if condition is None:
        return None
    return condition if isinstance(condition, str) else str(condition)


def _partition_only(condition: Condition, snapshot: Snapshot) -> bool:
    """Whether a SQL condition reads partition columns only (files are then
    selected or not as a whole, from the log)."""
    if not isinstance(condition, str) or not snapshot.metadata.partition_columns:
        return False
    partition = {c.lower() for c in snapshot.metadata.partition_columns}
    columns = parse_expression(condition).columns
    return bool(columns) and all(path[0].lower() in partition for path in columns)


def _whole_file_removes(
    snapshot: Snapshot, condition: Condition, candidates: pa.Table
) -> list[Any] | None:
    """For a condition on partition columns only (or none): the removes of the
    files it selects, decided per file from partition values; else None."""
    from raydelta.protocol.partition_values import parse_partition_value
    from raydelta.storage.data.dml import condition_mask

    if condition is not None and not _partition_only(condition, snapshot):
        return None
    now_ms = int(time.time() * 1000)
    config = snapshot.table_configuration
    fields = [snapshot.schema.field(c) for c in snapshot.metadata.partition_columns]
    removes = []
    for row in candidates.to_pylist():
        add = row_to_add(row)
        if condition is not None:
            values = {
                f.name: parse_partition_value(
                    add.partition_values.get(config.physical_name(f)), f.type
                )
                for f in fields
            }
            one_row = pa.table(
                {
                    f.name: pa.array([values[f.name]], to_arrow(StructType((f,))).field(0).type)
                    for f in fields
                }
            )
            if not condition_mask(condition, one_row)[0].as_py():
                continue
        removes.append(add.to_remove(deletion_timestamp=now_ms))
    return removes


def stage_delete(
    table: TableClient,
    predicate: Condition = None,
    *,
    tasks: int | None = None,
    snapshot: Snapshot | None = None,
) -> StagedDml:
    """Write what a DELETE of the rows ``predicate`` selects needs; commit nothing."""
    started = time.perf_counter_ns()
    snapshot = snapshot or table.snapshot()
    config = snapshot.table_configuration
    condition = check_condition(predicate, snapshot.schema)
    from raydelta.storage.data.writer import check_writable

    check_writable(snapshot.protocol, snapshot.metadata)
    candidates = candidate_files(snapshot, condition)
    spec = RewriteSpec(
        table_uri=table.uri,
        protocol=snapshot.protocol,
        metadata=snapshot.metadata,
        kind="delete",
        condition=condition,
        use_deletion_vectors=config.enable_deletion_vectors,
        write_change_data=config.change_data_feed_enabled,
        storage_options=table.storage_options,
    )
    whole = _whole_file_removes(snapshot, condition, candidates)
    if whole is not None:
        return StagedDml(
            table, snapshot, spec, _condition_text(condition), candidates, [], started, whole
        )
    results = run_rewrites(spec, candidates, tasks=tasks)
    return StagedDml(
        table, snapshot, spec, _condition_text(condition), candidates, results, started
    )


def _refuse_identity_updates(snapshot: Snapshot, assignments: Mapping[str, Any]) -> None:
    """delta-spark refuses to update an identity column
    (``IDENTITY_COLUMNS_UPDATE_NOT_SUPPORTED``)."""
    from raydelta.protocol.write_rules import table_write_rules

    rules = table_write_rules(snapshot.protocol, snapshot.metadata)
    for identity in rules.identities:
        if identity.column in assignments:
            raise IdentityColumnError(
                "[IDENTITY_COLUMNS_UPDATE_NOT_SUPPORTED] the UPDATE sets the identity column "
                f"{identity.column!r}; identity values cannot be updated",
                identity.column,
            )


def stage_update(
    table: TableClient,
    updates: Mapping[str, str] | None = None,
    *,
    new_values: Mapping[str, Any] | None = None,
    predicate: Condition = None,
    tasks: int | None = None,
    snapshot: Snapshot | None = None,
) -> StagedDml:
    """Write what an UPDATE needs (new files, DVs, change data); commit nothing."""
    started = time.perf_counter_ns()
    snapshot = snapshot or table.snapshot()
    config = snapshot.table_configuration
    assignments = check_assignments(updates, new_values, snapshot.schema)
    condition = check_condition(predicate, snapshot.schema)
    from raydelta.storage.data.writer import check_writable

    check_writable(snapshot.protocol, snapshot.metadata)
    _refuse_identity_updates(snapshot, assignments)
    candidates = candidate_files(snapshot, condition)
    spec = RewriteSpec(
        table_uri=table.uri,
        protocol=snapshot.protocol,
        metadata=snapshot.metadata,
        kind="update",
        condition=condition,
        assignments=assignments,
        use_deletion_vectors=config.enable_deletion_vectors,
        write_change_data=config.change_data_feed_enabled,
        storage_options=table.storage_options,
    )
    results = run_rewrites(spec, candidates, tasks=tasks)
    return StagedDml(
        table, snapshot, spec, _condition_text(condition), candidates, results, started
    )
