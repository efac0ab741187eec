"""A whole V2 checkpoint's sidecars built by one Ray task, for tables small
enough that fanning out costs more than it saves.

Below :data:`DEFAULT_FAN_OUT_MIN_ACTIONS` file actions, map tasks and one
task per sidecar spend more on Ray than on the work: every map output is
copied into the object store and out again, and each of ~25 tasks is
scheduled apart (measured at 1M files: 1.7-2.1 s fanned out against
~1 s in one process). :func:`write_in_one_task` runs the same steps as
those tasks (:func:`~raydelta.actors.checkpoint.tasks.map_rows`,
:func:`~raydelta.actors.checkpoint.tasks.build_shard`,
:func:`~raydelta.actors.checkpoint.tasks.build_overflow`) on a few threads
of one worker (pyarrow's decoding, hashing and encoding release the GIL),
with the map outputs handed over in memory.

Invariants:
- The sidecars are the ones the fanned-out tasks would write: the same
  functions, the same jobs, the same rows per shard.
- The task writes sidecars only (never the top-level file nor
  ``_last_checkpoint``); a task that dies is retried by Ray and writes
  fresh sidecars, and the dead attempt's files are never referenced (the
  runner names only the sidecars of the result it collected).
- The task asks Ray for as many CPUs as it runs threads.
- Reports are per step, as if each step were its own task (``kind``
  ``map`` / ``shard`` / ``overflow``, this worker's pid), so a summary
  reads the same either way.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import ray

from raydelta.actors.checkpoint.results import TaskReport
from raydelta.actors.checkpoint.tasks import (
    OverflowJob,
    ShardJob,
    ShardResult,
    begin_task,
    build_overflow,
    build_shard,
    map_rows,
)
from raydelta.protocol.actions import Metadata, Protocol
from raydelta.storage.checkpoint.sources import SourcePiece
from raydelta.storage.log.store import log_store_for

DEFAULT_FAN_OUT_MIN_ACTIONS = 1_500_000
"""Tables with fewer file actions (estimated) are checkpointed by one task."""
ONE_TASK_THREADS = 2
"""Threads (and Ray CPUs) of the one task."""


@dataclass(frozen=True)
class SidecarWork:
    """Every sidecar a checkpoint writes, whichever way it runs: map ``pieces``
    of the previous checkpoint (if any) into ``num_shards`` shards, then build
    every job's sidecar and the overflow's."""

    pieces: tuple[SourcePiece, ...]
    num_shards: int
    exclude_keys: pa.Array
    table_root: str | None
    jobs: tuple[ShardJob, ...]
    overflow: OverflowJob | None
    threads: int = ONE_TASK_THREADS
    """Threads of the one task (unused when fanned out)."""
    read_rows: int | None = None
    """Rows a read of the previous checkpoint decodes at a time (None: the
    worker's own read bound, :mod:`raydelta.storage.log.read_bound`)."""

    @property
    def empty(self) -> bool:
        return not self.jobs and self.overflow is None


def build_in_process(
    table_uri: str,
    storage_options: dict[str, Any] | None,
    work: SidecarWork,
    protocol: Protocol,
    metadata: Metadata,
    now_ms: int,
    tombstone_cutoff_ms: int,
) -> tuple[list[ShardResult], list[TaskReport]]:
    """The sidecars of ``work`` built here, on ``work.threads`` threads:
    (shard results in job order, then the overflow's; map reports)."""
    store = log_store_for(table_uri, storage_options)
    with ThreadPoolExecutor(max(1, work.threads)) as pool:
        mapped = list(
            pool.map(
                lambda piece: map_rows(
                    store,
                    piece,
                    work.num_shards,
                    1,
                    work.exclude_keys,
                    tombstone_cutoff_ms,
                    work.table_root,
                    read_rows=work.read_rows,
                ),
                work.pieces,
            )
        )
        groups = [g[0] for g, _ in mapped]
        map_reports = [report for _, report in mapped]
        del mapped
        results = list(
            pool.map(
                lambda job: build_shard(
                    store, job, protocol, metadata, now_ms, tombstone_cutoff_ms, groups
                ),
                work.jobs,
            )
        )
        if work.overflow is not None:
            results.append(
                build_overflow(
                    store, work.overflow, protocol, metadata, now_ms, tombstone_cutoff_ms
                )
            )
    return results, map_reports


@ray.remote(num_cpus=ONE_TASK_THREADS)
def write_in_one_task(
    table_uri: str,
    storage_options: dict[str, Any] | None,
    work: SidecarWork,
    protocol: Protocol,
    metadata: Metadata,
    now_ms: int,
    tombstone_cutoff_ms: int,
) -> tuple[list[ShardResult], list[TaskReport]]:
    """:func:`build_in_process` as one Ray task (launch it with
    ``num_cpus=work.threads``)."""
    begin_task()
    return build_in_process(
        table_uri, storage_options, work, protocol, metadata, now_ms, tombstone_cutoff_ms
    )
