"""The Ray tasks of a checkpoint: map tasks over the previous checkpoint,
one task per sidecar shard, the overflow sidecar, and the streamed V1 file.

Each task opens its own log store from the table URI (tasks run on any
node) and returns a :class:`~raydelta.actors.checkpoint.results.TaskReport`
about itself. :class:`raydelta.actors.checkpoint.runner.CheckpointRunner`
plans and launches them.

Invariants:
- A shard task writes at most one sidecar, a fresh UUID-named file; a task
  that dies and is retried by Ray writes another, and the dead attempt's
  file is never referenced (the runner only names the sidecars of the
  results it collected).
- A task never writes the top-level checkpoint or ``_last_checkpoint``: the
  runner does, after every sidecar exists.
- A map task decodes its piece a bounded batch at a time (``read_rows``,
  :mod:`raydelta.storage.log.read_bound`) and cuts each batch by shard
  right away: it holds one decoded batch plus its (slimmed) output, never
  its piece's row groups decoded whole.
- Map task outputs are one object per group of consecutive shards (a group
  lies within one node's shards, so shard tasks on that node slice their
  rows out of objects already local to them); each object is a tuple of
  chunks, one per decoded batch, in file order, so a shard's rows keep the
  order of the previous checkpoint.
- Every task keys rows relative to the table root its job (or argument)
  carries, the one the driver cut the committed actions with
  (``LogDelta.head.table_root``).
- Crash points :data:`MAP_TASK_FAULT` and :data:`SHARD_TASK_FAULT` (test
  hooks) fire after the task's reading / sidecar writing.
"""

from __future__ import annotations

import bisect
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import ray

from raydelta.actors.checkpoint.process_memory import memory_mb, peak_rss_mb
from raydelta.actors.checkpoint.results import TaskReport
from raydelta.actors.faults import crash_point
from raydelta.protocol.actions import Metadata, Protocol, Sidecar
from raydelta.protocol.checkpoint_plan import ShardWork
from raydelta.protocol.checkpoint_schema import CheckpointLayout
from raydelta.protocol.last_checkpoint import LastCheckpointInfo
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.storage.checkpoint.fingerprints import fingerprint_footer, with_fingerprints
from raydelta.storage.checkpoint.incremental import overflow_tags
from raydelta.storage.checkpoint.shards import (
    full_rows,
    group_bounds,
    merge_shard_rows,
    partition_rows,
    partition_rows_grouped,
    select_shard_rows,
    shard_slice,
    shards_of_rows,
    slim_rows,
)
from raydelta.storage.checkpoint.sources import (
    LogDelta,
    SourcePiece,
    iter_file_action_batches,
    read_file_actions,
    write_v1_streaming,
)
from raydelta.storage.checkpoint.writer import write_shard_sidecar, write_sidecar
from raydelta.storage.log.read_bound import READS
from raydelta.storage.log.store import LogStore, log_store_for

SHARD_TASK_FAULT = "shard_task"
"""Crash point inside a shard task, after its sidecar is written (test hook)."""
MAP_TASK_FAULT = "map_task"
"""Crash point inside a map task, after it read and split its piece (test hook)."""


@dataclass(frozen=True)
class ShardJob:
    """One shard sidecar to build.

    Its previous rows come from map tasks (the ``mapped`` task arguments,
    already filtered), or from its previous sidecar and the previous
    overflow sidecar's rows of the shard (both filtered in the task).
    """

    shard: int
    num_shards: int
    previous_sidecar: str | None
    """Filesystem path of the shard's previous sidecar."""
    previous_overflow: str | None
    """Filesystem path of the previous overflow sidecar, when it holds rows of this shard."""
    delta_adds: pa.Table
    delta_removes: pa.Table
    table_root: str | None
    """The table root keys are relative to (``table_root_key`` spelling)."""
    read_rows: int | None = None
    """Rows the task decodes at a time (None: the worker's own read bound)."""


@dataclass(frozen=True)
class OverflowJob:
    """The overflow sidecar to write: the previous one's rows that stay, plus
    the committed actions of the shards that are not rebuilt."""

    num_shards: int
    previous_overflow: str | None
    rebuilt: frozenset[int]
    """Shards rebuilt by shard tasks: their rows leave the overflow."""
    delta_adds: pa.Table
    delta_removes: pa.Table
    touched_keys: pa.Array
    """Key strings of every committed action (they replace the previous overflow's rows)."""
    table_root: str | None
    """The table root keys are relative to (``table_root_key`` spelling)."""
    read_rows: int | None = None
    """Rows the task decodes at a time (None: the worker's own read bound)."""


MapChunks = tuple[tuple[pa.Table, pa.Table], ...]
"""One map output group: ``(adds, removes)`` chunks, one per decoded batch
that kept rows of the group, in file order (see :func:`map_rows`)."""


@dataclass(frozen=True)
class ShardResult:
    shard: int
    """The shard, or -1 for the overflow sidecar."""
    sidecar: Sidecar | None
    num_adds: int
    num_removes: int
    report: TaskReport


OVERFLOW_SHARD = -1


def task_report(
    kind: Literal["map", "shard", "overflow", "v1"],
    start: float,
    rows: int,
    output_bytes: int = 0,
) -> TaskReport:
    return TaskReport(
        kind=kind,
        pid=os.getpid(),
        seconds=time.perf_counter() - start,
        peakRssMb=peak_rss_mb(),
        rows=rows,
        outputBytes=output_bytes,
        endedAt=time.time(),
        memoryMb=memory_mb(),
        largestReadRows=READS.largest,
    )


def begin_task() -> None:
    """What every checkpoint task does first: count its own reads only."""
    READS.reset()


def map_rows(
    store: LogStore,
    piece: SourcePiece,
    num_shards: int,
    num_groups: int,
    exclude_keys: pa.Array,
    tombstone_cutoff_ms: int,
    table_root: str | None,
    *,
    read_rows: int | None = None,
    slim: bool = False,
) -> tuple[list[MapChunks], TaskReport]:
    """One piece of the previous checkpoint read and cut: its surviving rows
    (keyed relative to ``table_root``) in ``num_groups`` groups of
    consecutive shards, and a report (what a map task does).

    The piece is decoded at most ``read_rows`` rows at a time (None: this
    process's read bound) and each batch is cut at once, so the task holds
    one decoded batch and its output; ``slim`` drops each chunk's all-null
    columns (:func:`slim_rows`, for shipping)."""
    start = time.perf_counter()
    chunks: list[list[tuple[pa.Table, pa.Table]]] = [[] for _ in range(num_groups)]
    rows = 0
    for adds, removes, _ in iter_file_action_batches(store, piece, read_rows=read_rows):
        rows += adds.num_rows + removes.num_rows
        groups = partition_rows_grouped(
            adds,
            removes,
            num_shards=num_shards,
            num_groups=num_groups,
            exclude_keys=exclude_keys,
            tombstone_cutoff_ms=tombstone_cutoff_ms,
            table_root=table_root,
        )
        del adds, removes
        for kept, (a, r) in zip(chunks, groups, strict=True):
            if a.num_rows or r.num_rows:
                kept.append(slim_rows(a, r) if slim else (a, r))
        del groups
    crash_point(MAP_TASK_FAULT)
    output = sum(a.nbytes + r.nbytes for group in chunks for a, r in group)
    return [tuple(group) for group in chunks], task_report("map", start, rows, output)


def _map_piece(
    table_uri: str,
    storage_options: dict[str, Any] | None,
    piece: SourcePiece,
    num_shards: int,
    num_groups: int,
    exclude_keys: pa.Array,
    tombstone_cutoff_ms: int,
    table_root: str | None,
    read_rows: int | None = None,
) -> tuple[Any, ...]:
    """:func:`map_rows` as a map task: one object per group (its chunks
    slimmed for shipping), then the report."""
    begin_task()
    store = log_store_for(table_uri, storage_options)
    groups, report = map_rows(
        store,
        piece,
        num_shards,
        num_groups,
        exclude_keys,
        tombstone_cutoff_ms,
        table_root,
        read_rows=read_rows,
        slim=True,
    )
    return (*groups, report)


def build_shard(
    store: LogStore,
    job: ShardJob,
    protocol: Protocol,
    metadata: Metadata,
    now_ms: int,
    tombstone_cutoff_ms: int,
    mapped: Sequence[MapChunks] = (),
) -> ShardResult:
    """Merge and write one shard's sidecar (what a shard task does).

    ``mapped``: groups made by :func:`map_rows` (slimmed or not), one per
    piece in piece order, holding the shard's previous rows; without them
    the rows come from the job's previous sidecar and overflow sidecar.
    """
    start = time.perf_counter()
    layout = CheckpointLayout.for_table(TableConfiguration(protocol, metadata))
    if mapped:
        base = [
            full_rows(shard_slice(a, job.shard), shard_slice(r, job.shard))
            for group in mapped
            for a, r in group
        ]
    else:
        base = []
        bound = job.read_rows
        if job.previous_sidecar is not None:
            piece = SourcePiece(job.previous_sidecar)
            base.append(read_file_actions(store, piece, with_fingerprints=True, read_rows=bound))
        if job.previous_overflow is not None:
            rows = read_file_actions(store, SourcePiece(job.previous_overflow), read_rows=bound)
            base.append(
                select_shard_rows(*rows, job.shard, job.num_shards, table_root=job.table_root)
            )
    adds, removes = merge_shard_rows(
        base,
        job.delta_adds,
        job.delta_removes,
        tombstone_cutoff_ms=tombstone_cutoff_ms,
        base_filtered=bool(mapped),
        table_root=job.table_root,
    )
    sidecar = None
    if adds.num_rows or removes.num_rows:
        work = ShardWork(job.shard, job.num_shards, adds, removes)
        sidecar = write_shard_sidecar(
            store,
            work,
            layout=layout,
            now_ms=now_ms,
            footer_metadata=fingerprint_footer(adds, removes),
        )
    crash_point(SHARD_TASK_FAULT)
    rows_out = adds.num_rows + removes.num_rows
    size = 0 if sidecar is None else sidecar.size_in_bytes
    return ShardResult(
        job.shard,
        sidecar,
        adds.num_rows,
        removes.num_rows,
        task_report("shard", start, rows_out, size),
    )


def _write_shard(
    table_uri: str,
    storage_options: dict[str, Any] | None,
    job: ShardJob,
    protocol: Protocol,
    metadata: Metadata,
    now_ms: int,
    tombstone_cutoff_ms: int,
    *mapped: MapChunks,
) -> ShardResult:
    """:func:`build_shard` as a shard task (the unit of parallel work)."""
    begin_task()
    store = log_store_for(table_uri, storage_options)
    return build_shard(store, job, protocol, metadata, now_ms, tombstone_cutoff_ms, mapped)


MAP_CALLS_PER_WORKER = 6
"""A worker runs at most this many map tasks, then Ray replaces it: each map
task writes its outputs (~70 MB per 250,000 actions) into the object store
through the worker's own mapping, and those shared pages stay in the
worker's resident memory. Bounding the calls bounds every worker's RSS at
any table size (measured before: 3.0 GB task workers at 10M files)."""
SHARD_CALLS_PER_WORKER = 30
"""Likewise for shard tasks, which touch their slice of every map output."""

map_piece = ray.remote(num_cpus=1, max_calls=MAP_CALLS_PER_WORKER)(_map_piece)
write_shard = ray.remote(num_cpus=1, max_calls=SHARD_CALLS_PER_WORKER)(_write_shard)


def build_overflow(
    store: LogStore,
    job: OverflowJob,
    protocol: Protocol,
    metadata: Metadata,
    now_ms: int,
    tombstone_cutoff_ms: int,
) -> ShardResult:
    """Write the overflow sidecar
    (see :class:`raydelta.storage.checkpoint.incremental.AlignedPlan`)."""
    start = time.perf_counter()
    layout = CheckpointLayout.for_table(TableConfiguration(protocol, metadata))
    base: list[tuple[pa.Table, pa.Table]] = []
    if job.previous_overflow is not None:
        old_adds, old_removes = read_file_actions(
            store, SourcePiece(job.previous_overflow), read_rows=job.read_rows
        )
        kept = [
            (a, r)
            for shard, (a, r) in enumerate(
                partition_rows(
                    old_adds,
                    old_removes,
                    num_shards=job.num_shards,
                    exclude_keys=job.touched_keys,
                    tombstone_cutoff_ms=tombstone_cutoff_ms,
                    table_root=job.table_root,
                )
            )
            if shard not in job.rebuilt
        ]
        base.extend(kept)
    adds, removes = merge_shard_rows(
        base,
        job.delta_adds,
        job.delta_removes,
        tombstone_cutoff_ms=tombstone_cutoff_ms,
        base_filtered=True,
        table_root=job.table_root,
    )
    sidecar = None
    if adds.num_rows or removes.num_rows:
        tags = overflow_tags(
            job.num_shards,
            shards_of_rows(adds, removes, job.num_shards, table_root=job.table_root),
            layout=layout.fingerprint,
            adds=adds,
            removes=removes,
        )
        sidecar = write_sidecar(store, adds, removes, layout=layout, tags=tags, now_ms=now_ms)
    rows = adds.num_rows + removes.num_rows
    size = 0 if sidecar is None else sidecar.size_in_bytes
    return ShardResult(
        OVERFLOW_SHARD,
        sidecar,
        adds.num_rows,
        removes.num_rows,
        task_report("overflow", start, rows, size),
    )


@ray.remote(num_cpus=1)
def write_overflow(
    table_uri: str,
    storage_options: dict[str, Any] | None,
    job: OverflowJob,
    protocol: Protocol,
    metadata: Metadata,
    now_ms: int,
    tombstone_cutoff_ms: int,
) -> ShardResult:
    """:func:`build_overflow` as a task."""
    begin_task()
    store = log_store_for(table_uri, storage_options)
    return build_overflow(store, job, protocol, metadata, now_ms, tombstone_cutoff_ms)


@ray.remote(num_cpus=1)
def write_v1(
    table_uri: str,
    storage_options: dict[str, Any] | None,
    delta: LogDelta,
    pieces: list[SourcePiece],
    now_ms: int,
    read_rows: int | None = None,
) -> tuple[LastCheckpointInfo, bool, TaskReport]:
    """The classic V1 checkpoint, streamed: its info, whether it was written
    (not when a classic checkpoint of the version was already there), a report."""
    begin_task()
    start = time.perf_counter()
    store = log_store_for(table_uri, storage_options)
    info, written = write_v1_streaming(store, delta, pieces, now_ms=now_ms, read_rows=read_rows)
    return info, written, task_report("v1", start, info.size if written else 0)


def cpu_nodes() -> list[str]:
    """Ids of the alive nodes that have CPUs (one map output group per node)."""
    try:
        nodes = [
            n["NodeID"]
            for n in ray.nodes()  # type: ignore[no-untyped-call]
            if n.get("Alive") and float(n.get("Resources", {}).get("CPU", 0)) > 0
        ]
    except Exception:  # no cluster view: one group
        return [""]
    return nodes or [""]


def max_node_cpus() -> int:
    """The most CPUs one alive node has (1 when the cluster cannot be seen)."""
    try:
        counts = [
            int(float(n.get("Resources", {}).get("CPU", 0)))
            for n in ray.nodes()  # type: ignore[no-untyped-call]
            if n.get("Alive")
        ]
    except Exception:  # no cluster view
        return 1
    return max([1, *counts])


def node_strategy(node_id: str) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=True)


def concat_rows(tables: list[pa.Table], empty: pa.Table) -> pa.Table:
    """Tables of one layout, concatenated (``empty``'s schema plus fingerprints if none)."""
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return with_fingerprints(empty.slice(0, 0))
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


DEFAULT_SHARDS_PER_MAP_OUTPUT = 8
"""Shards per map output object when fanned out (the shuffle's grain).

A shard task pins every map output object it reads for as long as it runs;
with one object per node (as before), every shard task on one machine
pinned the whole shuffle (every previous row of the table: the 3.9 GB
raylets of issue 32 at 10M files), so nothing could be freed or spilled
until the last shard task ended. With one object per piece and group of
``8`` consecutive shards, a shard task pins ``8 / num_shards`` of the
shuffle (~110 MB of ~2.8 GB at 10M files and 201 shards, by the ~70 MB per
250,000 actions of MAP_CALLS_PER_WORKER), an object is freed as soon
as its group's shard tasks are done, and Ray can spill all the others to
disk when the object store is full: the store's footprint is bounded by its
capacity, not by the table. The price is objects: ``pieces * num_shards /
8`` (~1,000 at 10M files) instead of one per piece and node."""


def map_output_groups(num_shards: int, num_nodes: int, shards_per_output: int) -> int:
    """How many map output groups (each ~``shards_per_output`` consecutive
    shards, cut by :func:`~raydelta.storage.checkpoint.shards.group_bounds`):
    a multiple of ``num_nodes`` where it can be, so no group straddles two
    nodes' shard ranges (``group_bounds(s, k * n)`` cuts where
    ``group_bounds(s, n)`` does).

    >>> map_output_groups(201, 1, 8), map_output_groups(201, 3, 8), map_output_groups(4, 1, 8)
    (26, 27, 1)
    """
    per_node = -(-num_shards // (num_nodes * shards_per_output))
    return max(1, min(num_shards, per_node * num_nodes))


def node_of_group(bounds: list[int], group: int, num_shards: int, num_nodes: int) -> int:
    """The node (index) whose shard range holds group ``group``'s first shard."""
    nodes = group_bounds(num_shards, num_nodes)
    return max(0, bisect.bisect_right(nodes, bounds[group]) - 1)
