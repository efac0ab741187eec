"""A data file's live rows as DML reads them: the rows its deletion vector
does not delete, their physical positions, and (row tracking enabled) each
row's stable row id and row commit version.

Invariants:
- Positions are physical (the row's index in the parquet file), so a new
  deletion vector can mark them.
- Stable values follow the spec ("Row Tracking"): the materialized column
  where the file has a non-NULL value, else ``baseRowId + position`` and
  ``defaultRowCommitVersion`` (:mod:`raydelta.protocol.row_tracking`). A
  writer that copies rows carries both in the materialized columns
  (:func:`with_tracking`); one that updates rows carries the id and a NULL
  commit version (the row takes its new file's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap64

from raydelta.protocol.actions import AddFile
from raydelta.protocol.row_tracking import (
    MaterializedColumns,
    materialized_columns,
    stable_commit_versions,
    stable_row_ids,
)
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.storage.data.deletion_vectors import read_deleted_rows
from raydelta.storage.data.files import read_logical_file
from raydelta.storage.log.store import log_store_for


@dataclass(frozen=True)
class LiveRows:
    """A file's live rows, their physical positions, the rows its current
    deletion vector deletes, and, with row tracking enabled, each live
    row's stable row id and row commit version."""

    rows: pa.Table
    positions: pa.Array
    deleted: BitMap64
    row_ids: pa.Array | None = None
    commit_versions: pa.Array | None = None

    def tracking(self, mask: pa.Array | None, *, updated: bool = False) -> _Tracking:
        """The stable values of the rows ``mask`` selects (all for None);
        an updated row's commit version is NULL (it takes its new file's)."""
        if self.row_ids is None or self.commit_versions is None:
            return None
        ids = self.row_ids if mask is None else self.row_ids.filter(mask)
        if updated:
            return ids, pa.nulls(len(ids), pa.int64())
        versions = self.commit_versions if mask is None else self.commit_versions.filter(mask)
        return ids, versions

    def take_tracking(self, indices: pa.Array, *, updated: bool = False) -> _Tracking:
        """As :meth:`tracking`, for the live rows at ``indices``."""
        if self.row_ids is None or self.commit_versions is None:
            return None
        ids = self.row_ids.take(indices)
        if updated:
            return ids, pa.nulls(len(ids), pa.int64())
        return ids, self.commit_versions.take(indices)


_Tracking: TypeAlias = "tuple[pa.Array, pa.Array] | None"


def with_tracking(
    rows: pa.Table, columns: MaterializedColumns | None, tracking: _Tracking
) -> pa.Table:
    """``rows`` with the materialized row id / commit version columns appended
    (hidden columns the writer carries into the files)."""
    if columns is None or tracking is None:
        return rows
    ids, versions = tracking
    return rows.append_column(columns.row_id, ids).append_column(
        columns.row_commit_version, versions
    )


def tracking_columns(config: TableConfiguration) -> MaterializedColumns | None:
    """The materialized columns to fill (row tracking enabled), else None."""
    return materialized_columns(config.configuration, enabled=config.row_tracking_enabled)


def read_live_rows(
    table_uri: str,
    storage_options: dict[str, Any] | None,
    config: TableConfiguration,
    add: AddFile,
) -> LiveRows:
    """The file's live rows (see :class:`LiveRows`)."""
    raw = dict(add.to_json_dict())
    raw["deletionVector"] = None
    rows = read_logical_file(
        table_uri,
        raw,
        config.schema,
        config.partition_columns,
        column_mapping_mode=config.column_mapping_mode,
        storage_options=storage_options,
    )
    positions = pa.array(np.arange(rows.num_rows, dtype=np.uint64))
    columns = tracking_columns(config)
    row_ids = versions = None
    if columns is not None:
        stored = _materialized(table_uri, storage_options, add, columns)
        row_ids = stable_row_ids(add, stored.get(columns.row_id), positions)
        versions = stable_commit_versions(
            add, stored.get(columns.row_commit_version), rows.num_rows
        )
    old = BitMap64()
    if add.deletion_vector is not None:
        old = read_deleted_rows(add.deletion_vector, table_uri, storage_options=storage_options)
        if len(old):
            live = pc.invert(pc.is_in(positions, value_set=pa.array(list(old), pa.uint64())))
            rows, positions = rows.filter(live), positions.filter(live)
            if row_ids is not None and versions is not None:
                row_ids, versions = row_ids.filter(live), versions.filter(live)
    return LiveRows(rows, positions, old, row_ids, versions)


def _materialized(
    table_uri: str,
    storage_options: dict[str, Any] | None,
    add: AddFile,
    columns: MaterializedColumns,
) -> dict[str, pa.Array]:
    """The materialized columns the file holds (a file may lack them: all NULL)."""
    import pyarrow.parquet as pq

    store = log_store_for(table_uri, storage_options)
    with store.open_input(store.data_path(add.path)) as handle:
        parquet = pq.ParquetFile(handle)
        present = [c for c in columns.names if c in parquet.schema_arrow.names]
        if not present:
            return {}
        table = parquet.read(columns=present)
    return {name: table.column(name).combine_chunks() for name in present}


__all__ = ["LiveRows", "read_live_rows", "tracking_columns", "with_tracking"]
