"""Per-bin work of OPTIMIZE: read the live rows of a bin of small files (rows
their deletion vectors delete are purged), optionally sort them by a
z-order key, and write them back as files of about the target size.
Nothing here commits.

Invariants:
- Rows are written through the one data writer with ``rewrite=True``
  (identity values kept, constraints checked): the table's rows do not
  change, only the files holding them.
- The new ``add`` actions carry ``dataChange=false`` (OPTIMIZE changes no
  data; streaming readers skip it).
- Row tracking enabled: every row keeps its stable row id and row commit
  version (written to the table's materialized columns).
- On any failure every file this call wrote is deleted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from raydelta.protocol.actions import AddFile, Metadata, Protocol
from raydelta.protocol.file_actions import row_to_add
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.protocol.zorder import z_order_indices
from raydelta.storage.data.files import remove_data_files
from raydelta.storage.data.live_rows import read_live_rows, tracking_columns, with_tracking
from raydelta.storage.data.writer import write_data


@dataclass(frozen=True)
class OptimizeSpec:
    """What OPTIMIZE does to each bin (picklable: sent to Ray tasks)."""

    table_uri: str
    protocol: Protocol
    metadata: Metadata
    target_size: int
    z_order_columns: tuple[str, ...] = ()
    storage_options: dict[str, Any] | None = None


@dataclass(frozen=True)
class BinResult:
    adds: tuple[AddFile, ...] = ()
    removed: tuple[AddFile, ...] = ()
    rows: int = 0

    @property
    def written(self) -> tuple[str, ...]:
        return tuple(a.path for a in self.adds)


def compact_bins(spec: OptimizeSpec, bins: Sequence[Mapping[str, Any]]) -> BinResult:
    """Rewrite each bin (``{"files": [add rows]}``) of one task."""
    adds: list[AddFile] = []
    removed: list[AddFile] = []
    rows = 0
    try:
        for item in bins:
            result = _compact_one(spec, [row_to_add(dict(f)) for f in item["files"]])
            adds.extend(result.adds)
            removed.extend(result.removed)
            rows += result.rows
    except BaseException:
        delete_bin_written(spec, BinResult(adds=tuple(adds)))
        raise
    return BinResult(adds=tuple(adds), removed=tuple(removed), rows=rows)


def _compact_one(spec: OptimizeSpec, files: list[AddFile]) -> BinResult:
    config = TableConfiguration(spec.protocol, spec.metadata)
    tracked = tracking_columns(config)
    parts = []
    for add in files:
        live = read_live_rows(spec.table_uri, spec.storage_options, config, add)
        parts.append(with_tracking(live.rows, tracked, live.tracking(None)))
    rows = pa.concat_tables(parts) if parts else None
    if rows is None or rows.num_rows == 0:
        return BinResult(removed=tuple(files))
    if spec.z_order_columns:
        rows = rows.take(z_order_indices(rows, spec.z_order_columns))
    result = write_data(
        spec.table_uri,
        rows,
        protocol=spec.protocol,
        metadata=spec.metadata,
        target_file_size=spec.target_size,
        storage_options=spec.storage_options,
        rewrite=True,
        hidden_columns=tracked.names if tracked is not None else (),
    )
    adds = tuple(a.model_copy(update={"data_change": False}) for a in result.adds)
    return BinResult(adds=adds, removed=tuple(files), rows=rows.num_rows)


def delete_bin_written(spec: OptimizeSpec, result: BinResult) -> None:
    """Remove the files a bin wrote (OPTIMIZE is not committed)."""
    remove_data_files(spec.table_uri, result.written, storage_options=spec.storage_options)


__all__ = ["BinResult", "OptimizeSpec", "compact_bins", "delete_bin_written"]
