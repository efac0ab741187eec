"""No checkpoint read materialises more rows than the read bound, whatever
the checkpoint's layout (issue 32).

Tables written and checkpointed by deltalake, their checkpoint rewritten in
other layouts (:mod:`tests.storage.checkpoint_layouts`: many tiny row groups, one row
group for the whole file, a multi-part checkpoint). Every pyarrow parquet
read in the process is counted (``ParquetFile.read*``/``iter_batches``
and ``pq.read_table`` wrapped, real files underneath): under a bound of 3
rows the snapshot load, the table head and the streamed file scan never
get a table or batch of more than 3 rows, and they return what they
return under the default bound, which is also what deltalake lists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from raydelta.storage.live_files import iter_live_files
from raydelta.storage.log.read_bound import (
    DEFAULT_CHECKPOINT_READ_ROWS,
    READ_ROWS_ENV,
    READS,
    checkpoint_read_rows,
)
from raydelta.storage.snapshot import load_snapshot, load_table_head
from tests.storage.checkpoint_layouts import LAYOUTS, table_with_checkpoint

BOUND = 3


class ParquetReads:
    """The largest table or batch any pyarrow parquet read returned."""

    def __init__(self) -> None:
        self.largest = 0
        self.calls = 0

    def saw(self, rows: int) -> None:
        self.calls += 1
        self.largest = max(self.largest, rows)

    def reset(self) -> None:
        self.largest = self.calls = 0


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> ParquetReads:
    """Every parquet read of this process counted at pyarrow's boundary."""
    seen = ParquetReads()

    def counted(method: Callable[..., Any]) -> Callable[..., Any]:
        def read(*args: Any, **kwargs: Any) -> Any:
            table = method(*args, **kwargs)
            seen.saw(table.num_rows)
            return table

        return read

    def counted_batches(method: Callable[..., Any]) -> Callable[..., Any]:
        def batches(*args: Any, **kwargs: Any) -> Iterator[pa.RecordBatch]:
            for batch in method(*args, **kwargs):
                seen.saw(batch.num_rows)
                yield batch

        return batches

    for name in ("read", "read_row_group", "read_row_groups"):
        monkeypatch.setattr(pq.ParquetFile, name, counted(getattr(pq.ParquetFile, name)))
    monkeypatch.setattr(
        pq.ParquetFile, "iter_batches", counted_batches(pq.ParquetFile.iter_batches)
    )
    monkeypatch.setattr(pq, "read_table", counted(pq.read_table))
    return seen


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("layouts")
    built = {}
    for layout in LAYOUTS:
        table_with_checkpoint(root / layout, layout)
        built[layout] = root / layout
    return built


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: (r["path"], repr(r)))


def test_the_bound_comes_from_the_argument_the_environment_or_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(READ_ROWS_ENV, raising=False)
    assert checkpoint_read_rows() == DEFAULT_CHECKPOINT_READ_ROWS
    monkeypatch.setenv(READ_ROWS_ENV, "17")
    assert checkpoint_read_rows() == 17
    assert checkpoint_read_rows(5) == 5
    for bad in ("0", "-2", "many"):
        monkeypatch.setenv(READ_ROWS_ENV, bad)
        with pytest.raises(ValueError, match=READ_ROWS_ENV):
            checkpoint_read_rows()
    with pytest.raises(ValueError, match="read_rows"):
        checkpoint_read_rows(0)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_snapshot_load_reads_at_most_the_bound(
    tables: dict[str, Path], layout: str, reads: ParquetReads, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tables[layout])
    monkeypatch.delenv(READ_ROWS_ENV, raising=False)
    expected = load_snapshot(uri)
    # the counter sees real reads: under the default bound a read holds more
    assert reads.largest > BOUND
    reads.reset()
    READS.reset()
    monkeypatch.setenv(READ_ROWS_ENV, str(BOUND))
    bounded = load_snapshot(uri)
    assert reads.calls > 0
    assert reads.largest <= BOUND
    assert 0 < READS.largest <= BOUND
    assert bounded.version == expected.version
    assert bounded.protocol == expected.protocol and bounded.metadata == expected.metadata
    assert _rows(bounded.files) == _rows(expected.files)
    assert _rows(bounded.all_tombstones) == _rows(expected.all_tombstones)
    assert bounded.log_segment.checkpoint is not None  # read from the re-laid checkpoint
    peer = pa.table(deltalake.DeltaTable(uri).get_add_actions(flatten=True)).column("path")
    assert sorted(bounded.files.column("path").to_pylist()) == sorted(peer.to_pylist())


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_head_and_streamed_scan_read_at_most_the_bound(
    tables: dict[str, Path], layout: str, reads: ParquetReads, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tables[layout])
    monkeypatch.delenv(READ_ROWS_ENV, raising=False)
    expected = load_snapshot(uri)
    reads.reset()
    monkeypatch.setenv(READ_ROWS_ENV, str(BOUND))
    head = load_table_head(uri)
    assert head.version == expected.version and head.metadata == expected.metadata
    assert reads.calls > 0 and reads.largest <= BOUND
    reads.reset()
    batches = list(iter_live_files(uri, batch_rows=1000))
    assert reads.calls > 0 and reads.largest <= BOUND
    assert _rows(pa.concat_tables(batches)) == _rows(expected.files)
