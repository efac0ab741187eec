"""The metrics of DML operations (DELETE, UPDATE, RESTORE, and later MERGE,
OPTIMIZE) as typed reports, and as delta-spark records them in
``commitInfo.operationMetrics``.

A report's fields are snake_case (deltalake's Python names:
``num_deleted_rows``, ``execution_time_ms``...); :meth:`DmlMetrics.operation_metrics`
gives delta-spark's camelCase names (``numDeletedRows``, ``executionTimeMs``)
with every value as text, which is how delta-spark writes the map.

Invariants:
- Pure and frozen: a report is built once, from counts the operation made.
- :meth:`DmlMetrics.operation_metrics` names every field of the report and
  nothing else; counts are never negative.
- :class:`FileChangeCounts` adds up: per-file outcomes summed with ``+``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class DmlMetrics(BaseModel):
    """The base of every DML report."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, alias_generator=to_camel)

    def operation_metrics(self) -> dict[str, str]:
        """delta-spark's ``operationMetrics``: camelCase names, text values."""
        return {k: str(v) for k, v in self.model_dump(by_alias=True).items()}

    def to_dict(self) -> dict[str, Any]:
        """The report as deltalake returns it: a dict of snake_case names."""
        return self.model_dump()

    def __getitem__(self, name: str) -> Any:
        """``report["num_deleted_rows"]``, as deltalake's dict is read."""
        return getattr(self, name)


class FileChangeCounts(BaseModel):
    """What the per-file tasks of a DML did (summed over tasks with ``+``)."""

    model_config = ConfigDict(frozen=True)

    num_added_files: int = Field(default=0, ge=0)
    num_removed_files: int = Field(default=0, ge=0)
    num_added_bytes: int = Field(default=0, ge=0)
    num_removed_bytes: int = Field(default=0, ge=0)
    num_deleted_rows: int = Field(default=0, ge=0)
    num_updated_rows: int = Field(default=0, ge=0)
    num_copied_rows: int = Field(default=0, ge=0)
    num_added_change_files: int = Field(default=0, ge=0)
    change_file_bytes: int = Field(default=0, ge=0)
    num_deletion_vectors_added: int = Field(default=0, ge=0)
    num_deletion_vectors_removed: int = Field(default=0, ge=0)
    num_deletion_vectors_updated: int = Field(default=0, ge=0)

    def __add__(self, other: FileChangeCounts) -> FileChangeCounts:
        return FileChangeCounts(
            **{
                name: getattr(self, name) + getattr(other, name)
                for name in FileChangeCounts.model_fields
            }
        )


class _RewrittenFiles(DmlMetrics):
    """The file counts DELETE and UPDATE both report."""

    num_added_files: int = 0
    num_removed_files: int = 0
    num_copied_rows: int = 0
    num_added_change_files: int = 0
    change_file_bytes: int = 0
    num_added_bytes: int = 0
    num_removed_bytes: int = 0
    num_deletion_vectors_added: int = 0
    num_deletion_vectors_removed: int = 0
    num_deletion_vectors_updated: int = 0


class _RewriteTimes(DmlMetrics):
    """The timings DELETE and UPDATE both report."""

    execution_time_ms: int = 0
    scan_time_ms: int = 0
    rewrite_time_ms: int = 0


class _DeletedRows(DmlMetrics):
    num_deleted_rows: int = 0


class _SkippedFiles(DmlMetrics):
    num_files_before_skipping: int = 0
    num_files_after_skipping: int = 0


class _UpdatedRows(DmlMetrics):
    num_updated_rows: int = 0


# The reports below keep delta-spark's field order, the order of
# ``commitInfo.operationMetrics``: pydantic lists a model's fields base by
# base from its LAST base to its first, so each report names its parts last
# to first (tests/protocol/test_dml_metrics.py holds the order).


class DeleteMetrics(_RewriteTimes, _SkippedFiles, _RewrittenFiles, _DeletedRows):
    """``Table.delete``'s report; delta-spark's DELETE metrics: rows deleted,
    the files rewritten, files before and after skipping, timings."""


class UpdateMetrics(_RewriteTimes, _RewrittenFiles, _UpdatedRows):
    """``Table.update``'s report; delta-spark's UPDATE metrics: rows updated,
    the files rewritten, timings."""


class RestoreMetrics(DmlMetrics):
    """``Table.restore``'s report; delta-spark's RESTORE metrics."""

    table_size_after_restore: int = 0
    num_of_files_after_restore: int = 0
    num_removed_files: int = 0
    num_restored_files: int = 0
    removed_files_size: int = 0
    restored_files_size: int = 0


def from_counts(
    kind: type[DeleteMetrics] | type[UpdateMetrics], counts: FileChangeCounts, **timings: int
) -> Any:
    """A report of ``kind`` holding the counts it has a field for, plus ``timings``."""
    values = {k: v for k, v in counts.model_dump().items() if k in kind.model_fields}
    values.update(timings)
    return kind(**values)


class MergeMetrics(DmlMetrics):
    """``Table.merge(...).execute()``'s report; delta-spark's MERGE metrics."""

    num_source_rows: int = 0
    num_target_rows_inserted: int = 0
    num_target_rows_updated: int = 0
    num_target_rows_matched_updated: int = 0
    num_target_rows_not_matched_by_source_updated: int = 0
    num_target_rows_deleted: int = 0
    num_target_rows_matched_deleted: int = 0
    num_target_rows_not_matched_by_source_deleted: int = 0
    num_target_rows_copied: int = 0
    num_output_rows: int = 0
    num_target_files_added: int = 0
    num_target_files_removed: int = 0
    num_target_bytes_added: int = 0
    num_target_bytes_removed: int = 0
    num_target_change_files_added: int = 0
    num_target_change_file_bytes: int = 0
    num_target_deletion_vectors_added: int = 0
    num_target_deletion_vectors_removed: int = 0
    num_target_deletion_vectors_updated: int = 0
    execution_time_ms: int = 0
    scan_time_ms: int = 0
    rewrite_time_ms: int = 0


class OptimizeMetrics(DmlMetrics):
    """``Table.optimize.compact/z_order``'s report; delta-spark's OPTIMIZE
    metrics (file sizes in bytes, over the files added)."""

    num_added_files: int = 0
    num_removed_files: int = 0
    num_added_bytes: int = 0
    num_removed_bytes: int = 0
    min_file_size: int = 0
    p25_file_size: int = 0
    p50_file_size: int = 0
    p75_file_size: int = 0
    max_file_size: int = 0
    num_deletion_vectors_removed: int = 0
    partitions_optimized: int = 0
    num_batches: int = 0
    total_considered_files: int = 0
    total_files_skipped: int = 0

    def operation_metrics(self) -> dict[str, str]:
        """delta-spark's names only (``partitionsOptimized``... are deltalake's)."""
        own = (
            "partitions_optimized",
            "num_batches",
            "total_considered_files",
            "total_files_skipped",
        )
        return {
            k: v
            for k, v in super().operation_metrics().items()
            if k not in {OptimizeMetrics.model_fields[n].alias for n in own}
        }
