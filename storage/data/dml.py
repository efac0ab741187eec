"""Per-file work of DELETE and UPDATE: read candidate files, find the rows a
condition selects, and write what replaces them. Nothing here commits.

One :func:`rewrite_files` call handles a group of candidate files (a Ray task
in ``raydelta.dml``, or the caller's process for a small group) and returns a
:class:`FileRewrite`: the ``add``/``remove``/``cdc`` actions to commit and the
counts behind the operation's metrics.

For each file, the live rows (the file minus its current deletion vector)
are read with their physical row positions, and the condition is evaluated
with SQL semantics (a NULL condition does not select the row). A file with
no selected row is left alone. Otherwise:

- **Deletion vectors** (``use_deletion_vectors``): the file is removed and
  re-added with a deletion vector marking its old deleted rows plus the
  selected ones (one new DV file per task holds every bitmap of the task);
  ``baseRowId`` and ``defaultRowCommitVersion`` are kept (the physical rows
  and their ids did not change) and the stats say ``tightBounds: false``. A
  file whose every row ends up deleted is only removed. UPDATE writes the
  updated rows to new files.
- **Copy-on-write**: the file is removed and its unselected live rows (plus,
  for UPDATE, the updated rows) are written to new files.

Invariants:
- Every new data file goes through the one data writer
  (:func:`raydelta.storage.data.writer.write_data`, ``rewrite=True``): the
  table's constraints, generated columns (recomputed on UPDATE unless set)
  and column mapping apply, and a violation raises before anything is
  committed. On any failure every file this call wrote is deleted.
- With ``write_change_data``, the changed rows go to change data files under
  ``_change_data/`` (one per partition per task) with ``_change_type``
  ``delete``, or ``update_preimage`` and ``update_postimage``, and a ``cdc``
  action each (``dataChange=false``).
- The removes carry the removed add's partition values, size, deletion
  vector and row-tracking fields; a remove's path is the add's path as logged.
- Row tracking enabled: every copied row carries its stable row id and row
  commit version, every updated row its stable row id (commit version
  NULL), in the table's materialized columns; re-added DV files keep
  ``baseRowId``/``defaultRowCommitVersion``. So no stable id changes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap64

from raydelta.protocol.actions import AddCDCFile, AddFile, Metadata, Protocol, RemoveFile
from raydelta.protocol.deletion_vectors import DeletionVectorDescriptor
from raydelta.protocol.dml_metrics import FileChangeCounts
from raydelta.protocol.errors import InvalidExpressionError
from raydelta.protocol.expressions import evaluate
from raydelta.protocol.file_actions import row_to_add
from raydelta.protocol.merge_rules import parsed
from raydelta.protocol.schema import (
    COLUMN_MAPPING_PHYSICAL_NAME_KEY,
    PrimitiveType,
    StructField,
    StructType,
)
from raydelta.protocol.schema_arrow import data_type_to_arrow
from raydelta.protocol.stats_collection import StatsSpec
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.storage.data.deletion_vectors import (
    write_deletion_vector_file,
)
from raydelta.storage.data.files import remove_data_files, write_data_file
from raydelta.storage.data.live_rows import read_live_rows, tracking_columns, with_tracking
from raydelta.storage.data.writer import write_data

CHANGE_TYPE_COLUMN = "_change_type"
STAGED_BYTES = 128 * 1024 * 1024
"""Rows a task holds before writing them (Arrow bytes)."""
CHANGE_DATA_DIRECTORY = "_change_data"
Condition: TypeAlias = "str | pc.Expression | None"
"""SQL text, a pyarrow compute expression, or None (every row)."""


@dataclass(frozen=True)
class Literal_:
    """A literal new value of an UPDATE (deltalake's ``new_values``)."""

    value: Any


Assignment: TypeAlias = "str | Literal_"
"""A new value: a SQL expression over the row's old values, or a literal."""


@dataclass(frozen=True)
class RewriteSpec:
    """What one DML does to each candidate file (picklable: sent to Ray tasks)."""

    table_uri: str
    protocol: Protocol
    metadata: Metadata
    kind: Literal["delete", "update"]
    condition: Condition
    assignments: Mapping[str, Assignment] = field(default_factory=dict)
    use_deletion_vectors: bool = False
    write_change_data: bool = False
    storage_options: dict[str, Any] | None = None
    target_file_size: int | None = None


@dataclass(frozen=True)
class FileRewrite:
    """The outcome of :func:`rewrite_files` for a group of files."""

    adds: tuple[AddFile, ...] = ()
    removes: tuple[RemoveFile, ...] = ()
    cdc: tuple[AddCDCFile, ...] = ()
    counts: FileChangeCounts = field(default_factory=FileChangeCounts)
    written: tuple[str, ...] = ()
    """Relative paths of every file written (data, DV, change data), for cleanup."""
    scan_time_ms: int = 0
    rewrite_time_ms: int = 0


def condition_mask(condition: Condition, rows: pa.Table) -> pa.Array:
    """Which rows ``condition`` selects (NULL does not select)."""
    if condition is None:
        return pa.array([True] * rows.num_rows, pa.bool_())
    if isinstance(condition, str):
        values = evaluate(parsed(condition), rows)
    else:
        import pyarrow.dataset as ds

        values = (
            ds.dataset(rows)
            .to_table(columns={"selected": condition})
            .column("selected")
            .combine_chunks()
        )
    if not pa.types.is_boolean(values.type):
        raise InvalidExpressionError(
            f"the condition {condition!s} is of type {values.type}, not boolean", str(condition)
        )
    return pc.fill_null(values, False)


def assigned_values(
    assignments: Mapping[str, Assignment], rows: pa.Table, schema: StructType
) -> pa.Table:
    """``rows`` with each assigned column replaced by its new value (cast to the
    column's type; a value that does not fit raises :class:`InvalidExpressionError`)."""
    columns = {name: rows.column(name) for name in rows.column_names}
    for column, value in assignments.items():
        target = data_type_to_arrow(schema.field(column).type)
        if isinstance(value, Literal_):
            raw: pa.Array = pa.array([value.value] * rows.num_rows)
            text = repr(value.value)
        else:
            raw = evaluate(parsed(value), rows)
            text = value
        try:
            columns[column] = (
                pa.chunked_array([raw.cast(target)])
                if rows.num_rows
                else pa.chunked_array([], target)
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
            raise InvalidExpressionError(
                f"cannot set column {column!r} ({schema.field(column).type}) to {text}: {error}",
                text,
            ) from error
    return pa.table(columns, schema=rows.schema)


class _Writer:
    """Writes the new files of one task and remembers them for cleanup."""

    def __init__(self, spec: RewriteSpec, config: TableConfiguration) -> None:
        self.spec, self.config = spec, config
        self.written: list[str] = []
        self.staged: dict[str, list[pa.Table]] = {}
        self.staged_bytes = 0
        columns = tracking_columns(config)
        self.hidden_columns: tuple[str, ...] = columns.names if columns is not None else ()
        self.change_parts: dict[tuple[tuple[str, str | None], ...], list[pa.Table]] = {}
        self.change_values: dict[tuple[tuple[str, str | None], ...], dict[str, Any]] = {}

    def data(self, rows: pa.Table) -> tuple[AddFile, ...]:
        if rows.num_rows == 0:
            return ()
        kwargs: dict[str, Any] = {}
        if self.spec.target_file_size:
            kwargs["target_file_size"] = self.spec.target_file_size
        result = write_data(
            self.spec.table_uri,
            rows,
            protocol=self.spec.protocol,
            metadata=self.spec.metadata,
            storage_options=self.spec.storage_options,
            rewrite=True,
            hidden_columns=self.hidden_columns,
            **kwargs,
        )
        self.written.extend(a.path for a in result.adds)
        return result.adds

    def stage(self, rows: pa.Table) -> tuple[AddFile, ...]:
        """Keep ``rows`` for a later :meth:`flush_data` (written now, with what
        was kept before, once ``STAGED_BYTES`` are held): the rows of many
        rewritten files share new files instead of one small file each."""
        if rows.num_rows:
            self.staged.setdefault(str(rows.schema), []).append(rows)
            self.staged_bytes += rows.nbytes
        return self.flush_data() if self.staged_bytes >= STAGED_BYTES else ()

    def flush_data(self) -> tuple[AddFile, ...]:
        """Write every staged row (rows of one shape per call of the writer)."""
        out: list[AddFile] = []
        staged, self.staged, self.staged_bytes = self.staged, {}, 0
        for parts in staged.values():
            out.extend(self.data(pa.concat_tables(parts)))
        return tuple(out)

    def change(self, add: AddFile, rows: pa.Table, change_type: str) -> None:
        if rows.num_rows == 0:
            return
        key = tuple(sorted(add.partition_values.items()))
        partition_columns = self.config.partition_columns
        self.change_values.setdefault(
            key, {c: rows.column(c)[0].as_py() for c in partition_columns}
        )
        typed = rows.append_column(
            CHANGE_TYPE_COLUMN, pa.array([change_type] * rows.num_rows, pa.string())
        )
        self.change_parts.setdefault(key, []).append(typed)

    def flush_changes(self) -> tuple[AddCDCFile, ...]:
        schema = self.config.schema
        mapped = self.config.column_mapping_mode.value != "none"
        change_field = StructField(
            CHANGE_TYPE_COLUMN,
            PrimitiveType("string"),
            True,
            {COLUMN_MAPPING_PHYSICAL_NAME_KEY: CHANGE_TYPE_COLUMN} if mapped else {},
        )
        cdc_schema = StructType((*schema.fields, change_field))
        out = []
        for key, parts in self.change_parts.items():
            add = write_data_file(
                self.spec.table_uri,
                pa.concat_tables(parts),
                schema=cdc_schema,
                partition_columns=self.config.partition_columns,
                partition_values=self.change_values[key],
                column_mapping_mode=self.config.column_mapping_mode,
                storage_options=self.spec.storage_options,
                stats_spec=StatsSpec(
                    num_indexed_cols=0, mapping_mode=self.config.column_mapping_mode
                ),
                directory_prefix=CHANGE_DATA_DIRECTORY,
                file_prefix="cdc-00000",
            )
            self.written.append(add.path)
            out.append(
                AddCDCFile(
                    path=add.path,
                    partitionValues=add.partition_values,
                    size=add.size,
                    dataChange=False,
                )
            )
        self.change_parts.clear()
        return tuple(out)

    def delete_written(self) -> None:
        remove_data_files(
            self.spec.table_uri, self.written, storage_options=self.spec.storage_options
        )
        self.written.clear()


def _loose_stats(stats: str | None) -> str | None:
    """The stats of a file re-added with a deletion vector: ``tightBounds: false``."""
    if not stats:
        return stats
    try:
        parsed = json.loads(stats)
    except ValueError:
        return stats
    if not isinstance(parsed, dict):
        return stats
    parsed["tightBounds"] = False
    return json.dumps(parsed, separators=(",", ":"))


def rewrite_files(spec: RewriteSpec, files: Sequence[Mapping[str, Any]]) -> FileRewrite:
    """Apply ``spec`` to ``files`` (canonical ``add`` rows of the snapshot)."""
    task = _RewriteTask(spec)
    try:
        for row in files:
            task.rewrite_file(row_to_add(dict(row)))
        cdc = task.finish()
    except BaseException:
        task.writer.delete_written()
        raise
    return task.result(cdc)


class _RewriteTask:
    """One :func:`rewrite_files` call: its writer, and the actions, counts and
    timings of the files rewritten so far."""

    def __init__(self, spec: RewriteSpec) -> None:
        self.spec = spec
        self.config = config = TableConfiguration(spec.protocol, spec.metadata)
        self.writer = _Writer(spec, config)
        self.tracked = tracking_columns(config)
        self.now_ms = int(time.time() * 1000)
        self.adds: list[AddFile] = []
        self.removes: list[RemoveFile] = []
        self.counts = FileChangeCounts()
        self.dv_pending: list[tuple[AddFile, BitMap64, bool]] = []  # (add, new bitmap, had a DV)
        self.written: list[AddFile] = []  # new data files (copied and updated rows)
        self.scan_ns = self.rewrite_ns = 0

    def rewrite_file(self, add: AddFile) -> None:
        """Apply the condition to one file; rewrite it if it selects a row
        (else it is left alone)."""
        spec, config, writer, tracked = self.spec, self.config, self.writer, self.tracked
        started = time.perf_counter_ns()
        live = read_live_rows(spec.table_uri, spec.storage_options, config, add)
        rows, positions, old = live.rows, live.positions, live.deleted
        selected = condition_mask(spec.condition, rows)
        hits = rows.filter(selected)
        self.scan_ns += time.perf_counter_ns() - started
        if hits.num_rows == 0:
            return
        started = time.perf_counter_ns()
        kept = rows.filter(pc.invert(selected))
        new_rows = (
            assigned_values(spec.assignments, hits, config.schema)
            if spec.kind == "update"
            else None
        )
        self.removes.append(add.to_remove(deletion_timestamp=self.now_ms))
        file_counts: dict[str, int] = {
            "num_removed_files": 1,
            "num_removed_bytes": add.size,
        }
        if spec.kind == "delete":
            file_counts["num_deleted_rows"] = hits.num_rows
        else:
            file_counts["num_updated_rows"] = hits.num_rows
        if spec.use_deletion_vectors:
            bitmap = BitMap64(old)
            bitmap.update(positions.filter(selected).to_pylist())
            if kept.num_rows > 0:
                self.dv_pending.append((add, bitmap, add.deletion_vector is not None))
            elif add.deletion_vector is not None:
                file_counts["num_deletion_vectors_removed"] = 1
        else:
            copied = with_tracking(kept, tracked, live.tracking(pc.invert(selected)))
            self.written.extend(writer.stage(copied))
            file_counts["num_copied_rows"] = kept.num_rows
            if add.deletion_vector is not None:
                file_counts["num_deletion_vectors_removed"] = 1
        if new_rows is not None:
            self.written.extend(
                writer.stage(
                    with_tracking(
                        _without_recomputed(new_rows, spec, config),
                        tracked,
                        live.tracking(selected, updated=True),
                    )
                )
            )
        if spec.write_change_data:
            if spec.kind == "delete":
                writer.change(add, hits, "delete")
            else:
                assert new_rows is not None
                writer.change(add, hits, "update_preimage")
                writer.change(add, _recomputed(new_rows, spec, config), "update_postimage")
        self.counts = self.counts + FileChangeCounts(**file_counts)
        self.rewrite_ns += time.perf_counter_ns() - started

    def finish(self) -> tuple[AddCDCFile, ...]:
        """Write what is staged, the deletion vectors and the change data;
        the change files."""
        spec, writer = self.spec, self.writer
        started = time.perf_counter_ns()
        self.written.extend(writer.flush_data())
        self.adds.extend(self.written)
        self.counts = self.counts + FileChangeCounts(
            num_added_files=len(self.written), num_added_bytes=sum(a.size for a in self.written)
        )
        if self.dv_pending:
            descriptors = write_deletion_vector_file(
                spec.table_uri,
                [bitmap for _, bitmap, _ in self.dv_pending],
                storage_options=spec.storage_options,
            )
            writer.written.extend(_dv_relative_path(d) for d in descriptors[:1])
            for (add, _, had_dv), descriptor in zip(self.dv_pending, descriptors, strict=True):
                self.adds.append(_with_dv(add, descriptor, self.now_ms))
                self.counts = self.counts + FileChangeCounts(
                    num_added_files=1,
                    num_added_bytes=add.size,
                    num_deletion_vectors_added=0 if had_dv else 1,
                    num_deletion_vectors_updated=1 if had_dv else 0,
                )
        cdc = writer.flush_changes() if spec.write_change_data else ()
        self.counts = self.counts + FileChangeCounts(
            num_added_change_files=len(cdc), change_file_bytes=sum(c.size for c in cdc)
        )
        self.rewrite_ns += time.perf_counter_ns() - started
        return cdc

    def result(self, cdc: tuple[AddCDCFile, ...]) -> FileRewrite:
        return FileRewrite(
            adds=tuple(self.adds),
            removes=tuple(self.removes),
            cdc=cdc,
            counts=self.counts,
            written=tuple(self.writer.written),
            scan_time_ms=self.scan_ns // 1_000_000,
            rewrite_time_ms=self.rewrite_ns // 1_000_000,
        )


def _generated_to_recompute(spec: RewriteSpec, config: TableConfiguration) -> list[str]:
    """Generated columns the UPDATE does not set: the writer recomputes them
    (from the schema, once per table configuration)."""
    from raydelta.protocol.write_rules import GENERATION_EXPRESSION_KEY

    generated = [
        f.name
        for f in config.schema.fields
        if (f.metadata or {}).get(GENERATION_EXPRESSION_KEY) is not None
    ]
    return [name for name in generated if name not in spec.assignments]


def _without_recomputed(rows: pa.Table, spec: RewriteSpec, config: TableConfiguration) -> pa.Table:
    drop = [c for c in _generated_to_recompute(spec, config) if c in rows.column_names]
    return rows.drop_columns(drop) if drop else rows


def _recomputed(rows: pa.Table, spec: RewriteSpec, config: TableConfiguration) -> pa.Table:
    """The post-image as the writer stores it (generated columns recomputed)."""
    from raydelta.protocol.schema_enforcement import writer_arrow_schema
    from raydelta.protocol.write_rules import complete_rows, table_write_rules

    if not _generated_to_recompute(spec, config):
        return rows
    import datetime as dt

    rules = table_write_rules(spec.protocol, spec.metadata)
    rules = _allow_identity(rules)
    complete = complete_rows(
        _without_recomputed(rows, spec, config),
        rules,
        now=dt.datetime.now(dt.UTC),
        high_water_marks={},
    )
    return complete.cast(writer_arrow_schema(rules.schema)).cast(rows.schema)


def _allow_identity(rules: Any) -> Any:
    from dataclasses import replace

    return replace(
        rules, identities=tuple(replace(i, allow_explicit_insert=True) for i in rules.identities)
    )


def _with_dv(add: AddFile, descriptor: DeletionVectorDescriptor, now_ms: int) -> AddFile:
    return add.model_copy(
        update={
            "deletion_vector": descriptor,
            "data_change": True,
            "stats": _loose_stats(add.stats),
        }
    )


def _dv_relative_path(descriptor: DeletionVectorDescriptor) -> str:
    return descriptor.relative_path()


__all__ = [
    "CHANGE_DATA_DIRECTORY",
    "CHANGE_TYPE_COLUMN",
    "Assignment",
    "Condition",
    "FileRewrite",
    "Literal_",
    "RewriteSpec",
    "condition_mask",
    "rewrite_files",
]
