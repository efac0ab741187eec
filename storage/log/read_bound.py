"""How many checkpoint rows one read may decode at once, and the one way
checkpoint parquet is read in bounded batches.

A checkpoint's layout is its writer's choice: one row group of a million
rows is as valid as sixteen of 64k. Reading a row group whole makes the
writer decide a reader's memory, so every reader of checkpoint or sidecar
parquet goes through :func:`iter_checkpoint_batches`, which never hands out
more than ``read_rows`` rows at a time, whatever the row groups hold.

The bound, per process: :func:`checkpoint_read_rows` (an explicit value,
else the environment variable :data:`READ_ROWS_ENV`, else
:data:`DEFAULT_CHECKPOINT_READ_ROWS`).

Invariants:
- No batch handed out has more than the bound's rows (pyarrow's
  ``iter_batches`` over one row group at a time, ``batch_size`` = the bound).
- Files are opened with a read buffer (:data:`READ_BUFFER_BYTES`): a column
  chunk is read a buffer at a time, never whole (without it pyarrow reads
  each column chunk of a row group into memory before decoding a row).
- :data:`READS` counts every batch handed out in this process (the largest
  one since its last reset): the bound is observable, by Ray tasks' reports
  and by tests, without wrapping anything.
- A bad value in the environment is a :class:`ValueError` naming the
  variable, never silently the default.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Collection, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raydelta.storage.log.store import LogStore

READ_ROWS_ENV = "RAYDELTA_CHECKPOINT_READ_ROWS"
"""Environment variable that sets the bound for the processes that see it."""

DEFAULT_CHECKPOINT_READ_ROWS = 32_768
"""Rows a checkpoint read decodes at a time, sized for 2 GB per process.

Derivation (measured on the 10M-file table: ~380 B of JSON stats per file):
a decoded ``add`` row is ~380 B of stats, ~100 B of path, ~40 B of sizes,
times and flags, and ~70 B of offsets and validity over its ~15 leaves:
~600 B. While a batch is turned into the canonical layout its raw and
canonical copies coexist (x2): ~1.2 KB per row in flight. A process keeps
most of its 2 GB for what it builds (a snapshot's file list, a task's
output), so the decoding slices get at most 1/8 of it, 256 MB, shared by
up to 8 files decoded at once (:func:`raydelta.storage.log.reader.read_checkpoint`
reads 8 concurrently): 32 MB per reader / 1.2 KB = ~27k rows, rounded up to
2^15 = 32,768 (~39 MB per reader, ~315 MB for eight). Smaller bounds cost
only per-batch overhead (a few microseconds per batch and column)."""

READ_BUFFER_BYTES = 1 << 20
"""Read buffer per column of an open checkpoint file (pyarrow ``buffer_size``)."""


class ReadTally:
    """Batches :func:`iter_checkpoint_batches` handed out in this process since
    :meth:`reset`, and the most rows one of them had (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.largest = 0
        self.batches = 0

    def reset(self) -> None:
        with self._lock:
            self.largest = 0
            self.batches = 0

    def record(self, rows: int) -> None:
        with self._lock:
            self.batches += 1
            self.largest = max(self.largest, rows)


READS = ReadTally()
"""This process's tally (a checkpoint task resets it when it starts)."""


def checkpoint_read_rows(explicit: int | None = None) -> int:
    """The bound in force: ``explicit`` when given, else :data:`READ_ROWS_ENV`,
    else :data:`DEFAULT_CHECKPOINT_READ_ROWS`; :class:`ValueError` below 1."""
    if explicit is not None:
        value = explicit
        source = "read_rows"
    else:
        text = os.environ.get(READ_ROWS_ENV)
        if text is None or not text.strip():
            return DEFAULT_CHECKPOINT_READ_ROWS
        source = READ_ROWS_ENV
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{READ_ROWS_ENV} must be a whole number, got {text!r}") from None
    if value < 1:
        raise ValueError(f"{source} must be >= 1, got {value}")
    return value


def iter_checkpoint_batches(
    parquet: pq.ParquetFile,
    *,
    columns: Sequence[str],
    read_rows: int,
    row_groups: Sequence[int] | None = None,
    use_threads: bool = False,
) -> Iterator[pa.RecordBatch]:
    """The ``columns`` of ``row_groups`` (all when None) of a checkpoint file, in
    file order, at most ``read_rows`` rows per batch.

    One row group at a time, so a caller that skips some row groups (by
    footer statistics) never decodes them.
    """
    groups = range(parquet.metadata.num_row_groups) if row_groups is None else row_groups
    for group in groups:
        for batch in parquet.iter_batches(
            batch_size=read_rows,
            row_groups=[group],
            columns=list(columns),
            use_threads=use_threads,
        ):
            READS.record(batch.num_rows)
            yield batch


def open_checkpoint_parquet(store: LogStore, path: str) -> pq.ParquetFile:
    """A checkpoint or sidecar file opened for bounded reads (a read buffer per
    column, :data:`~raydelta.storage.log.read_bound.READ_BUFFER_BYTES`)."""
    # No memory map: mapped pages of the file count in the reader's RSS for as
    # long as a decoded buffer might point into them; plain reads do not.
    return store.open_parquet(path, buffer_size=READ_BUFFER_BYTES)


def row_groups_with_rows(
    metadata: pq.FileMetaData, columns: Sequence[str], groups: Sequence[int] | None = None
) -> list[int]:
    """Row groups where some leaf of the top-level ``columns`` is not all null.

    Every non-file action has a required field, so a row group whose leaves
    of that column are all null (per the footer's statistics) holds none of
    it and is not read: a classic checkpoint's million ``add`` rows cost
    footer bytes only. A row group without statistics is read.
    """
    wanted = set(columns)
    found: list[int] = []
    for index in range(metadata.num_row_groups) if groups is None else groups:
        group = metadata.row_group(index)
        for position in range(group.num_columns):
            chunk = group.column(position)
            if chunk.path_in_schema.split(".", 1)[0] not in wanted:
                continue
            stats = chunk.statistics
            if stats is None or not stats.has_null_count or stats.null_count < chunk.num_values:
                found.append(index)
                break
    return found


def rows_holding(batch: pa.RecordBatch, names: Collection[str]) -> pa.RecordBatch:
    """The rows of ``batch`` where some top-level column in ``names`` is not null."""
    mask: pa.Array | None = None
    for name in names:
        if name in batch.schema.names:
            valid = batch.column(name).is_valid()
            mask = valid if mask is None else pc.or_(mask, valid)
    if mask is None:
        return batch.slice(0, 0)
    return batch.filter(mask)
