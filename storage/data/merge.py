"""Per-file work of MERGE: read candidate target files, join them with the
source, and write what replaces the rows the clauses touch. Nothing here
commits.

One :func:`merge_files` call handles a group of target files (a Ray task,
or the caller's process) against the whole source and returns a
:class:`MergeFileResult`: the actions to commit, the counts behind the
metrics, and the source rows matched (the caller inserts the others).

It reuses the DELETE/UPDATE pieces of :mod:`raydelta.storage.data.dml`
(live rows with their positions, the task's writer, DV files, removes).
A file none of whose rows an update or delete clause takes is left alone.
Otherwise the touched rows are marked in a deletion vector (with
``use_deletion_vectors``; the file is re-added with it, ``baseRowId``
kept) or the file is copied without them; updated rows go to new files.

Invariants:
- Every new data file goes through the one data writer with the table's
  (possibly evolved) metadata; a value that does not fit its column raises
  :class:`InvalidExpressionError` before anything is committed; on any
  failure every file this call wrote is deleted.
- A target row matched by several source rows raises the multiple-match
  error before any file of the call is written for that row's file, and the
  files already written by the call are deleted.
- Row tracking enabled: copied rows keep their stable row id and commit
  version, updated rows their stable row id (materialized columns; see
  :mod:`raydelta.storage.data.dml`).
- Change data (``write_change_data``): ``update_preimage`` /
  ``update_postimage`` for updated rows and ``delete`` for deleted rows,
  in ``_change_data/`` files with ``cdc`` actions.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap64

from raydelta.protocol.actions import AddCDCFile, AddFile, Metadata, Protocol, RemoveFile
from raydelta.protocol.errors import InvalidExpressionError
from raydelta.protocol.expressions import SqlExpression, evaluate
from raydelta.protocol.file_actions import row_to_add
from raydelta.protocol.merge_rules import (
    MergeClause,
    MergePlan,
    assigned,
    check_single_match,
    first_clause,
    matching_pairs,
    pair_table,
    unique_source_key,
)
from raydelta.protocol.merge_rules import positions as row_positions
from raydelta.protocol.row_tracking import MaterializedColumns
from raydelta.protocol.schema_arrow import to_arrow
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.protocol.write_rules import table_write_rules
from raydelta.storage.data.deletion_vectors import write_deletion_vector_file
from raydelta.storage.data.dml import RewriteSpec, _with_dv, _Writer
from raydelta.storage.data.files import remove_data_files
from raydelta.storage.data.live_rows import (
    LiveRows,
    read_live_rows,
    tracking_columns,
    with_tracking,
)


@dataclass(frozen=True)
class MergeSpec:
    """What a MERGE does to each target file (picklable)."""

    table_uri: str
    protocol: Protocol
    metadata: Metadata
    """The metadata files are written with (evolved when the MERGE adds columns)."""
    read_metadata: Metadata
    """The metadata of the snapshot read (files are read with its schema)."""
    plan: MergePlan
    use_deletion_vectors: bool = False
    write_change_data: bool = False
    storage_options: dict[str, Any] | None = None


@dataclass(frozen=True)
class MergeFileResult:
    adds: tuple[AddFile, ...] = ()
    removes: tuple[RemoveFile, ...] = ()
    cdc: tuple[AddCDCFile, ...] = ()
    matched_source_rows: tuple[int, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)
    written: tuple[str, ...] = ()
    scan_time_ms: int = 0
    rewrite_time_ms: int = 0


def conform(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` cast to ``schema`` (a value that does not fit raises
    :class:`InvalidExpressionError` naming the column)."""
    columns = []
    for f in schema:
        column = (
            rows.column(f.name) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
        )
        try:
            columns.append(column.cast(f.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
            raise InvalidExpressionError(
                f"cannot set column {f.name!r} ({f.type}) to a {column.type} value: {error}",
                f.name,
            ) from error
    return pa.Table.from_arrays(columns, schema=schema)


def widened(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """Rows read with the old schema, with NULL for columns the MERGE added."""
    for f in schema:
        if f.name not in rows.column_names:
            rows = rows.append_column(f, pa.nulls(rows.num_rows, f.type))
    return rows


def _count(counts: dict[str, int], **more: int) -> None:
    for key, value in more.items():
        counts[key] = counts.get(key, 0) + value


def merge_files(
    argument: tuple[MergeSpec, pa.Table], files: Sequence[Mapping[str, Any]]
) -> MergeFileResult:
    """Apply the MERGE to ``files`` (canonical ``add`` rows) against the source."""
    spec, source = argument
    task = _MergeTask(spec, source)
    try:
        for row in files:
            task.merge_file(row_to_add(dict(row)))
        task.flush_data()
        task.add_deletion_vectors()
        cdc = task.flush_changes()
    except BaseException:
        task.writer.delete_written()
        raise
    return task.result(cdc)


class _MergeTask:
    """One :func:`merge_files` call: its writer, and the actions, counts and
    timings of the files merged so far."""

    def __init__(self, spec: MergeSpec, source: pa.Table) -> None:
        plan = spec.plan
        self.spec, self.source, self.plan = spec, source, plan
        self.read_config = TableConfiguration(spec.protocol, spec.read_metadata)
        config = TableConfiguration(spec.protocol, spec.metadata)
        self.schema = to_arrow(config.schema)
        rewrite = RewriteSpec(
            table_uri=spec.table_uri,
            protocol=spec.protocol,
            metadata=spec.metadata,
            kind="update",
            condition=None,
            storage_options=spec.storage_options,
        )
        self.writer = _Writer(rewrite, config)
        self.tracked = tracking_columns(config)
        self.now_ms = int(time.time() * 1000)
        self.adds: list[AddFile] = []
        self.removes: list[RemoveFile] = []
        self.counts: dict[str, int] = {}
        self.matched_sources: list[pa.Array] = []
        self.dv_pending: list[tuple[AddFile, BitMap64, bool]] = []
        self.written: list[AddFile] = []  # new data files (copied and updated rows)
        self.matched_clauses = plan.of_kind("matched")
        self.by_source = plan.of_kind("not_matched_by_source")
        self.scan_ns = self.rewrite_ns = 0
        self.unique = unique_source_key(plan, source)
        self.generated = table_write_rules(spec.protocol, spec.metadata).generated

    def merge_file(self, add: AddFile) -> None:
        """Join one target file with the source; rewrite it if a clause
        touches any of its rows (else it is left alone)."""
        spec, schema = self.spec, self.schema
        started = time.perf_counter_ns()
        live = read_live_rows(spec.table_uri, spec.storage_options, self.read_config, add)
        rows = widened(live.rows, schema).select(schema.names)
        t_idx, s_idx = matching_pairs(self.plan, rows, self.source, unique_source=self.unique)
        self.matched_sources.append(s_idx)
        self.scan_ns += time.perf_counter_ns() - started
        started = time.perf_counter_ns()
        outcome = _outcome(
            self.plan,
            rows,
            self.source,
            t_idx,
            s_idx,
            self.matched_clauses,
            self.by_source,
            self.generated,
        )
        if not outcome.touched:
            return
        self._rewrite(add, live, rows, outcome)
        self.rewrite_ns += time.perf_counter_ns() - started

    def _rewrite(self, add: AddFile, live: LiveRows, rows: pa.Table, outcome: _Outcome) -> None:
        """Remove ``add``; stage its updated rows, and its untouched rows (or
        mark the touched ones in a deletion vector); record change data."""
        spec, schema, tracked, counts = self.spec, self.schema, self.tracked, self.counts
        touched = outcome.touched
        updated = pa.concat_tables(
            [
                (schema if tracked is None else _tracked_schema(schema, tracked)).empty_table(),
                *(
                    with_tracking(conform(p, schema), tracked, live.take_tracking(at, updated=True))
                    for p, at in zip(outcome.new_rows, outcome.new_rows_at, strict=True)
                ),
            ]
        )
        mask = pc.is_in(
            row_positions(rows.num_rows), value_set=pa.array(sorted(touched), pa.int64())
        )
        kept = rows.filter(pc.invert(mask))
        self.removes.append(add.to_remove(deletion_timestamp=self.now_ms))
        _count(
            counts,
            num_target_files_removed=1,
            num_target_bytes_removed=add.size,
            **outcome.counts,
        )
        if spec.use_deletion_vectors:
            bitmap = BitMap64(live.deleted)
            bitmap.update(live.positions.filter(mask).to_pylist())
            if kept.num_rows > 0:
                self.dv_pending.append((add, bitmap, add.deletion_vector is not None))
            elif add.deletion_vector is not None:
                _count(counts, num_target_deletion_vectors_removed=1)
        else:
            self.written.extend(
                self.writer.stage(with_tracking(kept, tracked, live.tracking(pc.invert(mask))))
            )
            _count(counts, num_target_rows_copied=kept.num_rows)
            if add.deletion_vector is not None:
                _count(counts, num_target_deletion_vectors_removed=1)
        self.written.extend(self.writer.stage(updated))
        if spec.write_change_data:
            for before, after in outcome.updates:
                self.writer.change(add, before, "update_preimage")
                self.writer.change(add, conform(after, schema), "update_postimage")
            for gone in outcome.deletes:
                self.writer.change(add, gone, "delete")

    def flush_data(self) -> None:
        """Write the rows still staged; every new data file is an add."""
        self.written.extend(self.writer.flush_data())
        self.adds.extend(self.written)
        _count(
            self.counts,
            num_target_files_added=len(self.written),
            num_target_bytes_added=sum(a.size for a in self.written),
        )

    def add_deletion_vectors(self) -> None:
        """Write the pending deletion vectors (one file) and re-add their files."""
        if not self.dv_pending:
            return
        spec = self.spec
        descriptors = write_deletion_vector_file(
            spec.table_uri,
            [bitmap for _, bitmap, _ in self.dv_pending],
            storage_options=spec.storage_options,
        )
        self.writer.written.extend(d.relative_path() for d in descriptors[:1])
        for (add, _, had_dv), descriptor in zip(self.dv_pending, descriptors, strict=True):
            self.adds.append(_with_dv(add, descriptor, self.now_ms))
            _count(
                self.counts,
                num_target_files_added=1,
                num_target_bytes_added=add.size,
                num_target_deletion_vectors_added=0 if had_dv else 1,
                num_target_deletion_vectors_updated=1 if had_dv else 0,
            )

    def flush_changes(self) -> tuple[AddCDCFile, ...]:
        """Write the change data (with ``write_change_data``)."""
        cdc = self.writer.flush_changes() if self.spec.write_change_data else ()
        _count(
            self.counts,
            num_target_change_files_added=len(cdc),
            num_target_change_file_bytes=sum(c.size for c in cdc),
        )
        return cdc

    def result(self, cdc: tuple[AddCDCFile, ...]) -> MergeFileResult:
        matched = (
            pc.unique(pa.concat_arrays(self.matched_sources))
            if self.matched_sources
            else pa.array([], pa.int64())
        )
        return MergeFileResult(
            adds=tuple(self.adds),
            removes=tuple(self.removes),
            cdc=cdc,
            matched_source_rows=tuple(matched.to_pylist()),
            counts=self.counts,
            written=tuple(self.writer.written),
            scan_time_ms=self.scan_ns // 1_000_000,
            rewrite_time_ms=self.rewrite_ns // 1_000_000,
        )


@dataclass
class _Outcome:
    touched: set[int] = field(default_factory=set)
    new_rows: list[pa.Table] = field(default_factory=list)
    new_rows_at: list[pa.Array] = field(default_factory=list)
    """For each of ``new_rows``, the indices of the target rows it updates."""
    updates: list[tuple[pa.Table, pa.Table]] = field(default_factory=list)
    deletes: list[pa.Table] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


def _outcome(
    plan: MergePlan,
    rows: pa.Table,
    source: pa.Table,
    t_idx: pa.Array,
    s_idx: pa.Array,
    matched_clauses: list[MergeClause],
    by_source: list[MergeClause],
    generated: Sequence[tuple[str, SqlExpression]] = (),
) -> _Outcome:
    """What the clauses do to the rows of one target file. Updated rows get
    the generated columns their clause does not set computed from their new
    values (as delta-spark's MERGE does); the writer checks the others."""
    out = _Outcome()
    columns = list(rows.column_names)
    if matched_clauses and len(t_idx):
        targets = rows.take(t_idx)
        pairs = pair_table(plan, targets, source.take(s_idx), len(t_idx))
        check_single_match(plan, t_idx, pairs)
        chosen = first_clause(matched_clauses, pairs)
        for index, clause in enumerate(matched_clauses):
            take = pc.equal(chosen, index)
            hits = pc.sum(take).as_py() or 0
            if not hits:
                continue
            positions = t_idx.filter(take)
            before = targets.filter(take)
            out.touched.update(positions.to_pylist())
            if clause.action == "delete":
                out.deletes.append(before)
                _count(
                    out.counts, num_target_rows_deleted=hits, num_target_rows_matched_deleted=hits
                )
            else:
                after = _generate(
                    assigned(clause, pairs.filter(take), columns, before), clause, generated
                )
                out.new_rows.append(after)
                out.new_rows_at.append(positions)
                out.updates.append((before, after))
                _count(
                    out.counts, num_target_rows_updated=hits, num_target_rows_matched_updated=hits
                )
    if by_source:
        every = row_positions(rows.num_rows)
        unmatched_at = every.filter(pc.invert(pc.is_in(every, value_set=t_idx)))
        if len(unmatched_at):
            targets = rows.take(unmatched_at)
            alone = pair_table(plan, targets, None, len(unmatched_at))
            chosen = first_clause(by_source, alone)
            for index, clause in enumerate(by_source):
                take = pc.equal(chosen, index)
                hits = pc.sum(take).as_py() or 0
                if not hits:
                    continue
                before = targets.filter(take)
                out.touched.update(unmatched_at.filter(take).to_pylist())
                if clause.action == "delete":
                    out.deletes.append(before)
                    _count(
                        out.counts,
                        num_target_rows_deleted=hits,
                        num_target_rows_not_matched_by_source_deleted=hits,
                    )
                else:
                    after = _generate(
                        assigned(clause, alone.filter(take), columns, before), clause, generated
                    )
                    out.new_rows.append(after)
                    out.new_rows_at.append(unmatched_at.filter(take))
                    out.updates.append((before, after))
                    _count(
                        out.counts,
                        num_target_rows_updated=hits,
                        num_target_rows_not_matched_by_source_updated=hits,
                    )
    return out


def _tracked_schema(schema: pa.Schema, columns: MaterializedColumns) -> pa.Schema:
    return schema.append(pa.field(columns.row_id, pa.int64())).append(
        pa.field(columns.row_commit_version, pa.int64())
    )


def _generate(
    rows: pa.Table, clause: MergeClause, generated: Sequence[tuple[str, SqlExpression]]
) -> pa.Table:
    """``rows`` with each generated column ``clause`` does not assign computed."""
    given = {name for name, _ in clause.assignments}
    for name, expression in generated:
        if name in given or name not in rows.column_names:
            continue
        index = rows.column_names.index(name)
        wanted = rows.schema.field(index).type
        value = evaluate(expression, rows)
        if not pa.types.is_null(wanted):
            value = value.cast(wanted)
        rows = rows.set_column(index, rows.schema.field(index).with_type(value.type), value)
    return rows


def delete_merge_written(spec: MergeSpec, result: MergeFileResult) -> None:
    """Remove the files one call wrote (the MERGE is not committed)."""
    remove_data_files(spec.table_uri, result.written, storage_options=spec.storage_options)


__all__ = [
    "MergeFileResult",
    "MergeSpec",
    "conform",
    "delete_merge_written",
    "merge_files",
    "widened",
]
