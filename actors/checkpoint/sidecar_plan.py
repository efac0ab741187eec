"""Planning a V2 checkpoint's sidecars: how many shards, which sidecars of
the previous checkpoint are reused as they are, and what builds each of the
others (:class:`~raydelta.actors.checkpoint.tasks.ShardJob`, and an
:class:`~raydelta.actors.checkpoint.tasks.OverflowJob` for the overflow
sidecar). :class:`~raydelta.actors.checkpoint.runner.CheckpointRunner`
runs the plan.

Invariants:
- Where the previous checkpoint's sidecars align with the new shards, an
  untouched shard's sidecar is reused and a touched one rebuilt from it
  (its key index read from the sidecar's footer); else every shard is built
  from a shuffle of the previous checkpoint, the log delta's keys left out.
- Nothing is written here; the only reads are the previous checkpoint's
  listing and the footers of the touched shards' sidecars.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

import pyarrow as pa

from raydelta.actors.checkpoint.tasks import OVERFLOW_SHARD, OverflowJob, ShardJob, concat_rows
from raydelta.protocol.actions import Sidecar
from raydelta.protocol.checkpoint_plan import choose_num_shards
from raydelta.protocol.checkpoint_schema import CheckpointLayout
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.storage.checkpoint.fingerprints import read_fingerprints
from raydelta.storage.checkpoint.incremental import AlignedSidecars, plan_aligned
from raydelta.storage.checkpoint.shards import split_delta
from raydelta.storage.checkpoint.sources import (
    LogDelta,
    SourcePiece,
    checkpoint_pieces,
    estimated_file_actions,
)
from raydelta.storage.log.reader import sidecar_path
from raydelta.storage.log.store import LogStore


@dataclass
class SidecarPlan:
    """What :func:`plan_sidecars` decided for one V2 checkpoint."""

    estimate: int
    """File actions of the new checkpoint, estimated (picks one task or fan-out)."""
    num_shards: int
    cutoff: int
    """Tombstones deleted before this (ms) are dropped."""
    jobs: list[ShardJob] = field(default_factory=list)
    overflow_job: OverflowJob | None = None
    pieces: list[SourcePiece] = field(default_factory=list)
    """The previous checkpoint's parts to shuffle (only when nothing aligns)."""
    exclude: pa.Array = field(default_factory=lambda: pa.array([], type=pa.string()))
    """Keys the shuffle leaves out (the log delta's)."""
    reused: dict[int, Sidecar] = field(default_factory=dict)
    source: Literal["none", "sidecars", "shuffle", "stream"] = "none"
    checked: int = 0
    """Shards whose previous sidecar was checked for reuse."""


def plan_sidecars(
    store: LogStore,
    delta: LogDelta,
    config: TableConfiguration,
    now_ms: int,
    *,
    target_actions_per_sidecar: int,
    max_overflow_actions: int,
) -> SidecarPlan:
    """How many shards, and what builds each: the previous checkpoint's
    sidecars that can be reused, and jobs for the rest (from those
    sidecars where they align with the new shards, else from a shuffle of
    the previous checkpoint)."""
    layout = CheckpointLayout.for_table(config)
    cutoff = now_ms - config.deleted_file_retention_ms
    previous = delta.previous
    estimate = estimated_file_actions(store, previous)
    estimate += delta.adds.num_rows + delta.removes.num_rows
    num_shards = choose_num_shards(
        estimate,
        target_actions_per_sidecar=target_actions_per_sidecar,
        previous_num_shards=None if previous is None else previous.previous_num_shards(),
    )
    aligned = AlignedSidecars({}) if previous is None else previous.aligned_sidecars(num_shards)
    # every key of this checkpoint is relative to the table root (shards, exclusion, index)
    root = delta.head.table_root
    delta_parts = split_delta(delta.adds, delta.removes, num_shards, table_root=root)
    plan = SidecarPlan(estimate=estimate, num_shards=num_shards, cutoff=cutoff)
    if aligned is not None:
        _plan_from_aligned(store, delta, layout, aligned, delta_parts, plan, max_overflow_actions)
    else:
        assert previous is not None
        plan.source = "shuffle"
        plan.pieces = checkpoint_pieces(store, previous)
        plan.exclude = delta.touched_key_strings()
        plan.jobs = [
            ShardJob(shard, num_shards, None, None, *delta_parts[shard], root)
            for shard in range(num_shards)
        ]
    return plan


def _plan_from_aligned(
    store: LogStore,
    delta: LogDelta,
    layout: CheckpointLayout,
    aligned: AlignedSidecars,
    delta_parts: list[tuple[pa.Table, pa.Table]],
    plan: SidecarPlan,
    max_overflow_actions: int,
) -> None:
    """Fill ``plan`` from the previous sidecars aligned with its shards:
    which are reused as they are, a job per shard to rebuild, and the
    overflow sidecar's fate."""
    num_shards, root = plan.num_shards, delta.head.table_root
    fingerprints = _fingerprints(store, aligned, delta_parts)
    reuse = plan_aligned(
        aligned,
        delta_parts,
        fingerprints,
        layout=layout.fingerprint,
        tombstone_cutoff_ms=plan.cutoff,
        max_overflow_actions=max_overflow_actions,
    )
    plan.checked = reuse.checked_shards
    plan.reused = dict(reuse.reuse)
    if reuse.overflow == "reuse" and aligned.overflow is not None:
        plan.reused[OVERFLOW_SHARD] = aligned.overflow
    overflow_path = None if aligned.overflow is None else sidecar_path(store, aligned.overflow)
    for shard in sorted(reuse.rebuild):
        previous_sidecar = aligned.base.get(shard)
        from_overflow = overflow_path if shard in aligned.overflow_shards else None
        shard_adds, shard_removes = delta_parts[shard]
        if previous_sidecar is None and from_overflow is None:
            if not (shard_adds.num_rows or shard_removes.num_rows):
                continue
        else:
            plan.source = "sidecars"
        plan.jobs.append(
            ShardJob(
                shard,
                num_shards,
                None if previous_sidecar is None else sidecar_path(store, previous_sidecar),
                from_overflow,
                shard_adds,
                shard_removes,
                root,
            )
        )
    if reuse.overflow == "rewrite":
        stays = [delta_parts[s] for s in sorted(reuse.overflow_shards)]
        plan.overflow_job = OverflowJob(
            num_shards,
            overflow_path,
            reuse.rebuild,
            concat_rows([a for a, _ in stays], delta.adds),
            concat_rows([r for _, r in stays], delta.removes),
            delta.touched_key_strings(),
            root,
        )


def _fingerprints(
    store: LogStore,
    aligned: AlignedSidecars,
    delta_parts: list[tuple[pa.Table, pa.Table]],
) -> dict[int, pa.Array | None]:
    """The key index of every touched shard's previous sidecar (footers, read in parallel)."""
    wanted = [
        s
        for s, (adds, removes) in enumerate(delta_parts)
        if (adds.num_rows or removes.num_rows) and s in aligned.base
    ]
    if not wanted:
        return {}
    with ThreadPoolExecutor(max_workers=min(16, len(wanted))) as pool:
        found = pool.map(lambda s: read_fingerprints(store, aligned.base[s]), wanted)
        return dict(zip(wanted, found, strict=True))
