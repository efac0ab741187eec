"""OPTIMIZE: ``Table.optimize.compact(...)`` and ``Table.optimize.z_order(...)``
(deltalake's ``TableOptimizer`` names and keyword arguments).

Planning (on the driver, from the snapshot): the files of the partitions
``partition_filters`` selects are grouped by partition. ``compact`` takes
the files smaller than the target size and every file with a deletion
vector, sorts them by size and packs them greedily into bins of at most the
target size; a bin of one file without a deletion vector is left alone
(rewriting it would change nothing). ``z_order`` puts every file of a
partition into one bin, so the whole partition is sorted by the z-order key
(:mod:`raydelta.protocol.zorder`). Bins are rewritten by Ray tasks
(:mod:`raydelta.storage.data.optimize`), at most ``max_concurrent_tasks``
at once, and committed once.

The target size is ``target_size``, else the table's ``delta.targetFileSize``,
else 1 GiB (delta-spark's ``optimize.maxFileSize``); it is measured on the
Arrow data written, so files on disk come out at most about that big.

Invariants:
- Adds and removes carry ``dataChange=false``; rows are unchanged (rows
  deleted by a deletion vector are purged from the new files).
- The commit reads the files it removes, at ``SnapshotIsolation``: a
  concurrent append never conflicts, a concurrent removal of a compacted
  file does (delta-spark's ``ConcurrentDeleteReadException``).
- ``commitInfo``: operation ``OPTIMIZE``, parameters ``predicate`` (the
  partition filters as SQL), ``zOrderBy``, ``auto``, ``clusterBy``, and
  delta-spark's OPTIMIZE metrics.
- Nothing to rewrite commits nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from raydelta.dml.execution import run_groups, tag_preserved
from raydelta.protocol.dml_metrics import OptimizeMetrics
from raydelta.protocol.errors import InvalidArgumentError
from raydelta.protocol.events import CommitCommitted, IsolationLevel
from raydelta.protocol.file_actions import row_to_add
from raydelta.protocol.partition_values import parse_partition_value
from raydelta.storage.data.optimize import (
    BinResult,
    OptimizeSpec,
    compact_bins,
    delete_bin_written,
)
from raydelta.storage.data.writer import check_writable

if TYPE_CHECKING:
    from raydelta.actors.table.client import TableClient
    from raydelta.storage.snapshot import Snapshot

DEFAULT_TARGET_SIZE = 1024 * 1024 * 1024
"""delta-spark's ``spark.databricks.delta.optimize.maxFileSize``."""
TARGET_FILE_SIZE_KEY = "delta.targetFileSize"
FilterTuple = tuple[str, str, Any]
_OPERATORS = ("=", "!=", "<", "<=", ">", ">=", "in", "not in")


class TableOptimizer:
    """``Table.optimize``: compaction and z-ordering of a table's files."""

    def __init__(
        self,
        table: TableClient,
        *,
        on_committed: Callable[[CommitCommitted | None], None] | None = None,
    ) -> None:
        self._table = table
        self._on_committed = on_committed

    def compact(
        self,
        partition_filters: Sequence[FilterTuple] | None = None,
        target_size: int | None = None,
        max_concurrent_tasks: int | None = None,
        min_commit_interval: int | timedelta | None = None,
    ) -> OptimizeMetrics:
        """Bin-pack the small files (and files with deletion vectors) of the
        selected partitions into files of about ``target_size`` bytes."""
        return optimize(
            self._table,
            z_order=(),
            partition_filters=partition_filters,
            target_size=target_size,
            max_concurrent_tasks=max_concurrent_tasks,
            min_commit_interval=min_commit_interval,
            on_committed=self._on_committed,
        )

    def z_order(
        self,
        columns: Sequence[str],
        partition_filters: Sequence[FilterTuple] | None = None,
        target_size: int | None = None,
        max_concurrent_tasks: int | None = None,
        max_spill_size: int | None = None,
        min_commit_interval: int | timedelta | None = None,
    ) -> OptimizeMetrics:
        """Rewrite the selected partitions sorted by the z-order key of
        ``columns``, so each file has tight min/max on them."""
        if isinstance(columns, str) or not columns:
            raise InvalidArgumentError("columns must be a non-empty list of column names")
        return optimize(
            self._table,
            z_order=tuple(columns),
            partition_filters=partition_filters,
            target_size=target_size,
            max_concurrent_tasks=max_concurrent_tasks,
            min_commit_interval=min_commit_interval,
            on_committed=self._on_committed,
        )


def _check_filters(filters: Sequence[FilterTuple] | None, snapshot: Snapshot) -> list[FilterTuple]:
    if filters is None:
        return []
    partition = list(snapshot.metadata.partition_columns)
    out = []
    for item in filters:
        if not isinstance(item, tuple | list) or len(item) != 3:
            raise InvalidArgumentError(f"a partition filter is (column, op, value), got {item!r}")
        column, op, value = item
        if column not in partition:
            raise InvalidArgumentError(
                f"partition_filters may name partition columns only ({partition}), got {column!r}"
            )
        if op not in _OPERATORS:
            raise InvalidArgumentError(f"unknown partition filter operator {op!r}")
        out.append((column, op, value))
    return out


def _holds(op: str, actual: Any, wanted: Any) -> bool:
    if op in ("in", "not in"):
        inside = actual in wanted
        return inside if op == "in" else not inside
    if actual is None or wanted is None:
        return False
    return bool(
        {
            "=": actual == wanted,
            "!=": actual != wanted,
            "<": actual < wanted,
            "<=": actual <= wanted,
            ">": actual > wanted,
            ">=": actual >= wanted,
        }[op]
    )


def _filter_sql(filters: list[FilterTuple]) -> list[str]:
    out = []
    for column, op, value in filters:
        if op in ("in", "not in"):
            values = ", ".join(repr(str(v)) for v in value)
            out.append(f"`{column}` {op.upper()} ({values})")
        else:
            out.append(f"`{column}` {op} {str(value)!r}")
    return out


def plan_bins(
    snapshot: Snapshot,
    filters: list[FilterTuple],
    *,
    target_size: int,
    z_order: bool,
) -> tuple[list[list[dict[str, Any]]], int]:
    """The bins to rewrite (lists of file rows) and how many files were considered."""
    config = snapshot.table_configuration
    fields = {c: config.schema.field(c) for c in snapshot.metadata.partition_columns}
    typed_filters = []
    for column, op, value in filters:
        dtype = fields[column].type
        if op in ("in", "not in"):
            typed = [parse_partition_value(str(v), dtype) for v in value]
        else:
            typed = parse_partition_value(str(value), dtype)
        typed_filters.append((column, op, typed))
    partitions: dict[tuple[tuple[str, str | None], ...], list[dict[str, Any]]] = {}
    considered = 0
    for row in snapshot.files.to_pylist():
        values = row.get("partitionValues") or {}
        if isinstance(values, list):
            values = dict(values)
        logical = {
            c: parse_partition_value(values.get(config.physical_name(f)), f.type)
            for c, f in fields.items()
        }
        if not all(_holds(op, logical[c], v) for c, op, v in typed_filters):
            continue
        considered += 1
        partitions.setdefault(tuple(sorted(values.items())), []).append(row)
    bins: list[list[dict[str, Any]]] = []
    for files in partitions.values():
        if z_order:
            bins.append(files)
            continue
        small = sorted(
            (f for f in files if (f.get("size") or 0) < target_size or f.get("deletionVector")),
            key=lambda f: f.get("size") or 0,
        )
        current: list[dict[str, Any]] = []
        current_size = 0
        for f in small:
            size = f.get("size") or 0
            if current and current_size + size > target_size:
                bins.append(current)
                current, current_size = [], 0
            current.append(f)
            current_size += size
        if current:
            bins.append(current)
    bins = [b for b in bins if z_order or len(b) > 1 or b[0].get("deletionVector")]
    return bins, considered


def _percentile(sizes: list[int], fraction: float) -> int:
    if not sizes:
        return 0
    ordered = sorted(sizes)
    return ordered[min(len(ordered) - 1, int(fraction * (len(ordered) - 1) + 0.5))]


def optimize(
    table: TableClient,
    *,
    z_order: tuple[str, ...],
    partition_filters: Sequence[FilterTuple] | None,
    target_size: int | None,
    max_concurrent_tasks: int | None,
    min_commit_interval: int | timedelta | None = None,
    snapshot: Snapshot | None = None,
    on_committed: Callable[[CommitCommitted | None], None] | None = None,
    auto: bool = False,
) -> OptimizeMetrics:
    """Plan, rewrite and commit (see the module). ``min_commit_interval`` is
    accepted for deltalake's signature; raydelta commits once, at the end.
    ``auto``: an automatic compaction (``operationParameters.auto``)."""
    started = time.perf_counter_ns()
    snapshot = snapshot or table.snapshot()
    check_writable(snapshot.protocol, snapshot.metadata)
    filters = _check_filters(partition_filters, snapshot)
    if target_size is None:
        configured = snapshot.metadata.configuration.get(TARGET_FILE_SIZE_KEY)
        target_size = int(configured) if configured else DEFAULT_TARGET_SIZE
    if not isinstance(target_size, int) or target_size <= 0:
        raise InvalidArgumentError(f"target_size must be a positive int, got {target_size!r}")
    if max_concurrent_tasks is not None and (
        not isinstance(max_concurrent_tasks, int) or max_concurrent_tasks <= 0
    ):
        raise InvalidArgumentError("max_concurrent_tasks must be a positive int")
    names = {f.name.lower(): f.name for f in snapshot.schema.fields}
    partition = {c.lower() for c in snapshot.metadata.partition_columns}
    resolved = []
    for column in z_order:
        if not isinstance(column, str) or column.lower() not in names:
            raise InvalidArgumentError(f"z-order column {column!r} does not exist in the table")
        if column.lower() in partition:
            raise InvalidArgumentError(
                f"{column!r} is a partition column; z-order by data columns only"
            )
        resolved.append(names[column.lower()])
    bins, considered = plan_bins(snapshot, filters, target_size=target_size, z_order=bool(z_order))
    spec = OptimizeSpec(
        table_uri=table.uri,
        protocol=snapshot.protocol,
        metadata=snapshot.metadata,
        target_size=target_size,
        z_order_columns=tuple(resolved),
        storage_options=table.storage_options,
    )
    tasks = len(bins) if max_concurrent_tasks is None else min(len(bins), max_concurrent_tasks)
    groups: list[list[dict[str, Any]]] = [[] for _ in range(max(tasks, 0))]
    for index, files in enumerate(bins):
        groups[index % tasks].append({"files": files})
    results = run_groups(compact_bins, spec, groups, cleanup=lambda r: delete_bin_written(spec, r))
    metrics = _metrics(results, bins, considered, started)
    if not any(r.removed for r in results):
        return metrics
    txn = table.transaction(snapshot=snapshot, isolation_level=IsolationLevel.SNAPSHOT_ISOLATION)
    removed = [add for r in results for add in r.removed]
    txn.read_files(removed)
    now_ms = int(time.time() * 1000)
    for add in removed:
        txn.remove(add, data_change=False, deletion_timestamp=now_ms)
    for result in results:
        txn.add(*result.adds)
    txn.set_operation_metrics(metrics.operation_metrics())
    tag_preserved(txn, snapshot)
    parameters = {
        "predicate": _filter_sql(filters),
        "zOrderBy": list(resolved),
        "auto": "true" if auto else "false",
        "clusterBy": [],
    }
    try:
        txn.commit(operation="OPTIMIZE", operation_parameters=parameters)
    except BaseException:
        for result in results:
            delete_bin_written(spec, result)
        raise
    if on_committed is not None:
        on_committed(txn.committed)
    return metrics


def auto_compact(table: TableClient, *, target_size: int) -> OptimizeMetrics:
    """Automatic compaction of the whole table's small files into files of
    about ``target_size`` (delta-spark's auto compact, recorded as ``OPTIMIZE``
    with ``auto = true``): what a catalog's maintenance runs on its managed
    tables (``CatalogActor(compactor=auto_compact)``)."""
    return optimize(
        table,
        z_order=(),
        partition_filters=None,
        target_size=target_size,
        max_concurrent_tasks=None,
        auto=True,
    )


def _metrics(
    results: list[BinResult], bins: list[list[dict[str, Any]]], considered: int, started: int
) -> OptimizeMetrics:
    added = [a.size for r in results for a in r.adds]
    removed = [a for r in results for a in r.removed]
    partitions = {tuple(sorted((row_to_add(b[0]).partition_values or {}).items())) for b in bins}
    return OptimizeMetrics(
        num_added_files=len(added),
        num_removed_files=len(removed),
        num_added_bytes=sum(added),
        num_removed_bytes=sum(a.size for a in removed),
        min_file_size=min(added, default=0),
        p25_file_size=_percentile(added, 0.25),
        p50_file_size=_percentile(added, 0.5),
        p75_file_size=_percentile(added, 0.75),
        max_file_size=max(added, default=0),
        num_deletion_vectors_removed=sum(1 for a in removed if a.deletion_vector is not None),
        partitions_optimized=len(partitions),
        num_batches=len(bins),
        total_considered_files=considered,
        total_files_skipped=considered - len(removed),
    )


__all__ = ["DEFAULT_TARGET_SIZE", "TableOptimizer", "auto_compact", "optimize", "plan_bins"]
