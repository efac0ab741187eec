"""Incremental V2 checkpoints: which sidecars of the previous checkpoint are
reused, which shards are rebuilt, and the overflow sidecar.

When the previous checkpoint was sharded the same way (same hash, same
shard count: :class:`AlignedSidecars`), a shard is rewritten only if a
committed action may touch a key its sidecar holds, which the sidecar's
footer index of key fingerprints tells without reading it
(:mod:`raydelta.storage.checkpoint.fingerprints`). Actions on keys no
sidecar holds (new files) go to one small overflow sidecar instead of
rewriting a whole shard (:func:`plan_aligned`).

Invariants:
- Every logical file of the new checkpoint is in exactly one sidecar: its
  shard's sidecar or the overflow sidecar.
- The overflow sidecar is recognised by its tags only (:func:`is_overflow`):
  ``raydelta.overflow=true`` with the shard hash and count it was written
  for, and the shards it holds rows of.
- Pure planning: :func:`plan_aligned` reads nothing; the caller gives it the
  fingerprints it read.
- "Sharded the same way" includes the keying: the committed actions are cut
  (:func:`raydelta.storage.checkpoint.shards.split_delta`) and fingerprinted
  by their keys relative to the table root, as the aligned sidecars were
  (their hash name says so), so a file committed as ``a.parquet`` meets the
  row its sidecar holds as ``file:///root/a.parquet``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from raydelta.protocol.actions import Sidecar
from raydelta.protocol.checkpoint_plan import (
    SHARD_HASH,
    TAG_LAYOUT,
    TAG_MIN_DELETION_TIMESTAMP,
    TAG_NUM_SHARDS,
    TAG_SHARD,
    TAG_SHARD_HASH,
    shard_tags,
    sidecar_counts,
)
from raydelta.storage.checkpoint.fingerprints import FINGERPRINT_COLUMN

TAG_OVERFLOW = "raydelta.overflow"
"""``"true"`` on the overflow sidecar (see :func:`plan_aligned`)."""
TAG_OVERFLOW_SHARDS = "raydelta.overflowShards"
"""Comma-separated shards the overflow sidecar holds rows of."""


@dataclass(frozen=True)
class AlignedSidecars:
    """A V2 checkpoint's sidecars by shard, and its overflow sidecar if any."""

    base: dict[int, Sidecar]
    overflow: Sidecar | None = None

    @property
    def overflow_shards(self) -> frozenset[int]:
        return overflow_shards(self.overflow) if self.overflow is not None else frozenset()


def is_overflow(sidecar: Sidecar, num_shards: int, *, hash_name: str = SHARD_HASH) -> bool:
    """An overflow sidecar written for ``num_shards`` shards by ``hash_name``."""
    tags = sidecar.tags or {}
    return (
        tags.get(TAG_OVERFLOW) == "true"
        and tags.get(TAG_SHARD_HASH) == hash_name
        and tags.get(TAG_NUM_SHARDS) == str(num_shards)
        and sidecar_counts(sidecar) is not None
    )


def overflow_shards(sidecar: Sidecar) -> frozenset[int]:
    """The shards an overflow sidecar holds rows of (from its tags)."""
    text = (sidecar.tags or {}).get(TAG_OVERFLOW_SHARDS) or ""
    return frozenset(int(part) for part in text.split(",") if part)


@dataclass(frozen=True)
class AlignedPlan:
    """What an incremental V2 checkpoint does with a previous one sharded the same way.

    - ``rebuild``: shards whose sidecar is rewritten from its previous sidecar,
      its rows in the previous overflow sidecar and its committed actions;
    - ``reuse``: previous shard sidecars kept as they are;
    - ``overflow``: what happens to the overflow sidecar, which holds the
      committed actions of shards that are not rebuilt: ``"none"`` (there is
      none), ``"reuse"`` (the previous one, unchanged) or ``"rewrite"``.

    Invariant: every logical file is in exactly one sidecar of the new
    checkpoint: its shard's sidecar, or the overflow sidecar.
    """

    rebuild: frozenset[int]
    reuse: dict[int, Sidecar]
    overflow: str
    overflow_shards: frozenset[int]
    checked_shards: int = 0


def _has_expired_tombstones(sidecar: Sidecar, cutoff_ms: int) -> bool:
    counts = sidecar_counts(sidecar)
    if counts is None:
        return True
    if not counts[1]:
        return False
    oldest = (sidecar.tags or {}).get(TAG_MIN_DELETION_TIMESTAMP)
    try:
        return oldest is None or int(oldest) < cutoff_ms
    except ValueError:
        return True


def plan_aligned(
    aligned: AlignedSidecars,
    delta_parts: Sequence[tuple[pa.Table, pa.Table]],
    fingerprints: Mapping[int, pa.Array | None],
    *,
    layout: str,
    tombstone_cutoff_ms: int,
    max_overflow_actions: int,
) -> AlignedPlan:
    """Which sidecars an incremental checkpoint rewrites (see :class:`AlignedPlan`).

    A shard is rebuilt when its previous sidecar was written under another
    layout, holds an expired tombstone, or may hold a key the commits
    touched: the key's fingerprint is in the sidecar's footer index
    (``fingerprints[shard]``; None means no index, so any touched key
    counts). The other touched shards' actions go to the overflow sidecar,
    unless it would exceed ``max_overflow_actions``: then every shard with
    overflow rows is rebuilt and the overflow is emptied.
    """
    touched = {s for s, (a, r) in enumerate(delta_parts) if a.num_rows or r.num_rows}
    rebuild: set[int] = set()
    for shard, sidecar in aligned.base.items():
        tags = sidecar.tags or {}
        if tags.get(TAG_LAYOUT) != layout or _has_expired_tombstones(sidecar, tombstone_cutoff_ms):
            rebuild.add(shard)
    checked = 0
    for shard in sorted(touched - rebuild):
        if shard not in aligned.base:
            continue
        checked += 1
        index = fingerprints.get(shard)
        adds, removes = delta_parts[shard]
        mine = [
            t.column(FINGERPRINT_COLUMN).combine_chunks() for t in (adds, removes) if t.num_rows
        ]
        if index is None or pc.any(pc.is_in(pa.concat_arrays(mine), value_set=index)).as_py():
            rebuild.add(shard)
    previous_overflow = aligned.overflow
    old_shards = aligned.overflow_shards
    pending = (touched | old_shards) - rebuild
    counts = sidecar_counts(previous_overflow) if previous_overflow is not None else (0, 0)
    estimate = sum(counts or (0, 0)) + sum(
        delta_parts[s][0].num_rows + delta_parts[s][1].num_rows for s in touched - rebuild
    )
    if estimate > max_overflow_actions:
        rebuild |= pending
        pending = set()
    reuse = {s: sc for s, sc in aligned.base.items() if s not in rebuild}
    if not pending:
        overflow = "none"
    elif (
        previous_overflow is not None
        and not (touched - rebuild)
        and not (old_shards & rebuild)
        and not _has_expired_tombstones(previous_overflow, tombstone_cutoff_ms)
        and (previous_overflow.tags or {}).get(TAG_LAYOUT) == layout
    ):
        overflow = "reuse"
    else:
        overflow = "rewrite"
    return AlignedPlan(frozenset(rebuild), reuse, overflow, frozenset(pending), checked)


def overflow_tags(
    num_shards: int,
    shards: Sequence[int],
    *,
    layout: str,
    adds: pa.Table,
    removes: pa.Table,
    hash_name: str = SHARD_HASH,
) -> dict[str, str | None]:
    """The ``tags`` of an overflow sidecar (shard tags without a shard, plus its shards)."""
    tags = shard_tags(0, num_shards, layout=layout, adds=adds, removes=removes, hash_name=hash_name)
    del tags[TAG_SHARD]
    tags[TAG_OVERFLOW] = "true"
    tags[TAG_OVERFLOW_SHARDS] = ",".join(str(s) for s in sorted(shards))
    return tags
