"""Checkpoints built under a tiny read bound: no task reads more rows at
once, and the checkpoint is the one the default bound builds (issue 32).

Source tables: deltalake-written, V2-checkpoint-enabled, their classic
checkpoint re-laid by :mod:`tests.storage.checkpoint_layouts` (7-row groups,
one row group for the whole file, three parts). In this process every
pyarrow parquet read is counted at pyarrow's boundary while the map, shard
and V1 steps run on real files; on the Ray cluster each task reports the
largest batch its reads handed out (``largestReadRows``, the reader's own
tally). The sidecars built under the bound hold exactly the rows, in the
same order, with the same tags, as under the default bound, one task or
fanned out; deltalake reads the checkpoints written under the bound.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray

from raydelta.actors.checkpoint.actor import checkpoint_actor
from raydelta.actors.checkpoint.results import CheckpointSummary
from raydelta.actors.checkpoint.runner import CheckpointRunner
from raydelta.actors.checkpoint.tasks import map_output_groups, map_rows
from raydelta.protocol.file_names import parse_log_file_name
from raydelta.storage.checkpoint.shards import full_rows, shard_slice
from raydelta.storage.checkpoint.sources import (
    checkpoint_pieces,
    read_log_delta,
    write_v1_streaming,
)
from raydelta.storage.checkpoint.writer import read_checkpoint_sidecars
from raydelta.storage.log.read_bound import READ_ROWS_ENV, READS
from raydelta.storage.log.reader import sidecar_path
from raydelta.storage.log.store import log_store_for
from raydelta.storage.snapshot import load_snapshot
from tests.storage.checkpoint_layouts import LAYOUTS, table_with_checkpoint

BOUND = 3
NUM_SHARDS = 4
MODES = {"one_task": 10**9, "fan_out": 0}


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bounded")
    for layout in LAYOUTS:
        table_with_checkpoint(root / layout, layout, v2=True)
    return {layout: root / layout for layout in LAYOUTS}


@pytest.fixture
def largest_read(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """The most rows one pyarrow parquet read of this process returned since
    the last call (every read counted at pyarrow's boundary)."""
    seen = [0]

    def note(rows: int) -> None:
        seen[0] = max(seen[0], rows)

    def counted(method: Callable[..., Any]) -> Callable[..., Any]:
        def read(*args: Any, **kwargs: Any) -> Any:
            table = method(*args, **kwargs)
            note(table.num_rows)
            return table

        return read

    def counted_batches(method: Callable[..., Any]) -> Callable[..., Any]:
        def batches(*args: Any, **kwargs: Any) -> Iterator[pa.RecordBatch]:
            for batch in method(*args, **kwargs):
                note(batch.num_rows)
                yield batch

        return batches

    for name in ("read", "read_row_group", "read_row_groups"):
        monkeypatch.setattr(pq.ParquetFile, name, counted(getattr(pq.ParquetFile, name)))
    batches = counted_batches(pq.ParquetFile.iter_batches)
    monkeypatch.setattr(pq.ParquetFile, "iter_batches", batches)
    monkeypatch.setattr(pq, "read_table", counted(pq.read_table))

    def take() -> int:
        largest, seen[0] = seen[0], 0
        return largest

    return take


def _shard_rows(groups: list[Any]) -> list[tuple[list[str], list[str]]]:
    """Each shard's adds and removes (each in order) out of map outputs: what
    a shard task concatenates (chunk order is file order)."""
    out: list[tuple[list[str], list[str]]] = [([], []) for _ in range(NUM_SHARDS)]
    bounds = [g * NUM_SHARDS // len(groups) for g in range(len(groups) + 1)]
    for g, group in enumerate(groups):
        for shard in range(bounds[g], bounds[g + 1]):
            for adds, removes in group:
                a, r = full_rows(shard_slice(adds, shard), shard_slice(removes, shard))
                out[shard][0].extend(repr(row) for row in a.to_pylist())
                out[shard][1].extend(repr(row) for row in r.to_pylist())
    return out


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_map_and_v1_steps_read_at_most_the_bound(
    sources: dict[str, Path],
    layout: str,
    tmp_path: Path,
    largest_read: Callable[[], int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = log_store_for(str(sources[layout]))
    monkeypatch.setenv(READ_ROWS_ENV, str(BOUND))  # the driver's own reads
    delta = read_log_delta(store)
    assert largest_read() <= BOUND
    assert delta.previous is not None
    pieces = checkpoint_pieces(store, delta.previous)
    monkeypatch.delenv(READ_ROWS_ENV)
    args = (NUM_SHARDS, 2, delta.touched_key_strings(), 0, delta.head.table_root)
    for piece in pieces:
        READS.reset()  # as a map task does when it starts (this process is no task)
        bounded, report = map_rows(store, piece, *args, read_rows=BOUND)
        assert largest_read() <= BOUND
        assert 0 < report.largest_read_rows <= BOUND
        default, _ = map_rows(store, piece, *args)
        assert largest_read() > BOUND or piece.num_rows <= BOUND
        assert _shard_rows(bounded) == _shard_rows(default)
    # the streamed classic checkpoint: the same rows either way (a checkpoint's
    # rows are a set; each batch writes its adds, then its removes)
    written = {}
    for name, bound in (("bounded", BOUND), ("default", None)):
        copy = tmp_path / name
        shutil.copytree(sources[layout], copy)
        copy_store = log_store_for(str(copy))
        copy_delta = read_log_delta(copy_store)
        assert copy_delta.previous is not None
        copy_pieces = checkpoint_pieces(copy_store, copy_delta.previous)
        largest_read()
        write_v1_streaming(copy_store, copy_delta, copy_pieces, now_ms=0, read_rows=bound)
        if bound is not None:
            assert largest_read() <= BOUND
        name_v1 = f"{copy_delta.version:020d}.checkpoint.parquet"
        rows = pq.read_table(copy / "_delta_log" / name_v1).to_pylist()
        written[name] = sorted(repr(row) for row in rows)
    assert written["bounded"] == written["default"]


def _sidecars(path: Path, summary: CheckpointSummary) -> dict[str, Any]:
    """Each sidecar's tags (its file name left out) and rows, in file order."""
    store = log_store_for(str(path))
    parsed = parse_log_file_name(summary.top_level)
    assert parsed is not None
    out = {}
    for sidecar in read_checkpoint_sidecars(store, parsed):
        tags = dict(sidecar.tags or {})
        rows = pq.read_table(sidecar_path(store, sidecar)).to_pylist()
        out[repr(sorted(tags.items()))] = rows
    return out


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_checkpoints_under_a_tiny_bound_equal_the_default_ones(
    sources: dict[str, Path], layout: str, tmp_path: Path
) -> None:
    expected = load_snapshot(str(sources[layout]))
    for mode, fan_out_min in MODES.items():
        built: dict[str, tuple[Path, CheckpointSummary]] = {}
        # the bounded run also ships one map output object per shard
        for name, bound, per_output in (("bounded", BOUND, 1), ("default", None, 8)):
            copy = tmp_path / f"{mode}-{name}"
            shutil.copytree(sources[layout], copy)
            runner = CheckpointRunner(
                str(copy),
                target_actions_per_sidecar=16,
                fan_out_min_actions=fan_out_min,
                read_rows=bound,
                shards_per_map_output=per_output,
            )
            built[name] = copy, runner.run(kind="v2")
        (path, bounded), (default_path, default) = built["bounded"], built["default"]
        assert bounded.execution == default.execution == mode
        assert bounded.source == "shuffle"
        maps = [t for t in bounded.tasks if t.kind == "map"]
        assert maps and all(0 < t.largest_read_rows <= BOUND for t in maps)
        assert all(t.largest_read_rows <= BOUND for t in bounded.tasks)
        assert max(t.largest_read_rows for t in default.tasks if t.kind == "map") > BOUND
        assert (bounded.num_shards, bounded.num_adds, bounded.num_actions) == (
            default.num_shards,
            default.num_adds,
            default.num_actions,
        )
        assert _sidecars(path, bounded) == _sidecars(default_path, default)
        # the checkpoint alone is the table, for us and for deltalake
        for v in range(expected.version + 1):
            (path / "_delta_log" / f"{v:020d}.json").unlink(missing_ok=True)
        alone = load_snapshot(str(path))
        assert alone.log_segment is not None and alone.log_segment.checkpoint is not None
        peer = pa.table(deltalake.DeltaTable(str(path)).get_add_actions(flatten=True))
        paths = sorted(expected.files.column("path").to_pylist())
        assert sorted(alone.files.column("path").to_pylist()) == paths
        assert sorted(peer.column("path").to_pylist()) == paths


@pytest.mark.usefixtures("ray_cluster")
def test_a_classic_checkpoint_under_a_tiny_bound_reads_for_deltalake(
    sources: dict[str, Path], tmp_path: Path
) -> None:
    copy = tmp_path / "classic"
    shutil.copytree(sources["one_big_group"], copy)
    expected = load_snapshot(str(copy))
    summary = CheckpointRunner(str(copy), read_rows=BOUND).run(kind="classic")
    assert summary.kind == "classic" and summary.files_written
    assert all(0 < t.largest_read_rows <= BOUND for t in summary.tasks)
    peer = pa.table(deltalake.DeltaTable(str(copy)).get_add_actions(flatten=True))
    assert sorted(peer.column("path").to_pylist()) == sorted(
        expected.files.column("path").to_pylist()
    )


@pytest.mark.usefixtures("ray_cluster")
def test_the_checkpoint_actor_hands_its_tasks_the_bound_asked_for(
    sources: dict[str, Path], tmp_path: Path
) -> None:
    copy = tmp_path / "actor"
    shutil.copytree(sources["tiny_groups"], copy)
    handle = checkpoint_actor(str(copy), fan_out_min_actions=0)
    try:
        summary = ray.get(handle.checkpoint.remote(kind="v2", read_rows=BOUND))
    finally:
        ray.kill(handle)
    maps = [t for t in summary.tasks if t.kind == "map"]
    assert maps and all(t.largest_read_rows > 0 for t in maps)
    assert all(t.largest_read_rows <= BOUND for t in summary.tasks)


def test_map_output_groups_never_straddle_nodes() -> None:
    for shards in (1, 4, 25, 201):
        for nodes in (1, 2, 3, 4):
            for per_output in (1, 8, 1000):
                groups = map_output_groups(shards, nodes, per_output)
                assert 1 <= groups <= shards
                if groups % nodes == 0:
                    cut = {g * shards // groups for g in range(groups + 1)}
                    assert {n * shards // nodes for n in range(nodes + 1)} <= cut
