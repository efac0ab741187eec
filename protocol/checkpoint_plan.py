"""Planning a checkpoint: non-file rows, shards of file actions, sidecar reuse.

A V2 checkpoint's file actions (``add`` / ``remove``) are split into shards,
one sidecar file per shard, so independent tasks can write them in parallel
and a later checkpoint can keep every shard no commit touched since.

Invariants:
- The shard of a file action depends on its logical-file key
  ``(path, deletionVector.uniqueId)``, ``num_shards`` and the named shard
  hash only: :data:`SHARD_HASH` (``words64-fmix64-rooted``,
  :func:`words_hash64` of keys relative to the table root, used for new
  sidecars), :data:`SHARD_HASH_WORDS` (``words64-fmix64``, the same hash of
  root-free keys) or :data:`SHARD_HASH_FNV` (``fnv1a64-fmix64``,
  :func:`stable_hash64`, one byte per step, root-free keys), the last two
  written by earlier versions. All are the same in every process, Python
  and pyarrow version. Python's ``hash()`` (salted per process) is never used.
- The key string hashed is the path when the action has no deletion vector,
  else ``path + "\\x00" + uniqueId``; :func:`key_strings` (vectorized) and
  :func:`key_string` (one key) agree with :func:`raydelta.protocol.file_actions.file_key`.
  The path is canonical and, given the table root (``table_root``, as
  :func:`raydelta.protocol.file_actions.table_root_key` spells it), relative
  to it: a file referenced as ``a.parquet`` and as ``file:///root/a.parquet``
  is one logical file, so both spellings land in one shard and have one
  fingerprint. Every function that keys, shards or excludes rows takes the
  same keyword-only ``table_root``; the sidecars they shape are tagged
  ``words64-fmix64-rooted``, so sidecars keyed root-free by earlier
  versions are never taken for aligned ones.
- An add and a remove of the same key land in the same shard, so a shard
  holds every reference to its logical files.
- A sidecar written for shard ``s`` of ``n`` records ``s``, ``n``, the hash
  name (a sidecar is only located by the hash that wrote it), the
  file-action layout and its counts in its ``tags`` (:func:`shard_tags`);
  :func:`reusable_sidecars` keeps a previous sidecar only if all of them
  still match and no key of the shard was touched since.
- Checkpoints carry no ``commitInfo`` / ``cdc``; removed ``domainMetadata``
  tombstones are dropped (a checkpoint is a complete replay, so there is no
  earlier domain action for them to suppress).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc

from raydelta.protocol.actions import (
    Action,
    AddFile,
    CheckpointMetadata,
    RemoveFile,
    Sidecar,
)
from raydelta.protocol.checkpoint_schema import CheckpointLayout
from raydelta.protocol.errors import MissingMetadataError, MissingProtocolError
from raydelta.protocol.file_actions import (
    FileKey,
    action_key,
    canonical_path,
    odd_path_rows,
)
from raydelta.protocol.reconciliation import TableState
from raydelta.protocol.shard_hash import (
    SHARD_HASH as SHARD_HASH,
)
from raydelta.protocol.shard_hash import (
    SHARD_HASH_FNV as SHARD_HASH_FNV,
)
from raydelta.protocol.shard_hash import (
    SHARD_HASH_ROOTED as SHARD_HASH_ROOTED,
)
from raydelta.protocol.shard_hash import (
    SHARD_HASH_WORDS as SHARD_HASH_WORDS,
)
from raydelta.protocol.shard_hash import (
    shard_hash as shard_hash,
)
from raydelta.protocol.shard_hash import (
    shard_of as shard_of,
)
from raydelta.protocol.shard_hash import (
    stable_hash64 as stable_hash64,
)
from raydelta.protocol.shard_hash import (
    words_hash64 as words_hash64,
)
from raydelta.protocol.table_configuration import TableConfiguration

DEFAULT_TARGET_ACTIONS_PER_SIDECAR = 50_000

TAG_SHARD = "raydelta.shard"
TAG_NUM_SHARDS = "raydelta.numShards"
TAG_SHARD_HASH = "raydelta.shardHash"
TAG_LAYOUT = "raydelta.layout"
TAG_NUM_ADDS = "raydelta.numAdds"
TAG_NUM_REMOVES = "raydelta.numRemoves"
TAG_MIN_DELETION_TIMESTAMP = "raydelta.minDeletionTimestamp"

_KEY_SEPARATOR = "\x00"
# --- keys and the stable hash -------------------------------------------------------


def key_string(key: FileKey, *, table_root: str | None = None) -> str:
    """The string hashed for one logical-file key (its path already canonical:
    :func:`raydelta.protocol.file_actions.canonical_path`).

    With ``table_root``, a path under the root is made relative to it; the
    path is not decoded again (decoding is done once, by ``canonical_path``).
    """
    path, dv_id = key
    if table_root and path.startswith(table_root + "/"):
        path = path[len(table_root) + 1 :]
    return path if dv_id is None else f"{path}{_KEY_SEPARATOR}{dv_id}"


def dv_unique_ids(deletion_vectors: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``uniqueId`` of each DV descriptor of a struct column (null where no DV)."""
    if isinstance(deletion_vectors, pa.ChunkedArray):
        deletion_vectors = deletion_vectors.combine_chunks()
    if len(deletion_vectors) == 0 or deletion_vectors.null_count == len(deletion_vectors):
        return pa.nulls(len(deletion_vectors), pa.string())
    storage = deletion_vectors.field("storageType").cast(pa.string())
    location = deletion_vectors.field("pathOrInlineDv").cast(pa.string())
    offset = deletion_vectors.field("offset").cast(pa.string())
    base = pc.binary_join_element_wise(storage, location, "")
    with_offset = pc.binary_join_element_wise(base, offset, "@")
    unique = pc.if_else(pc.is_null(offset), base, with_offset)
    valid = pc.is_valid(deletion_vectors)
    return pc.if_else(valid, unique, pa.nulls(len(unique), pa.string()))


def canonical_paths(paths: pa.Array, table_root: str | None = None) -> pa.Array:
    """:func:`raydelta.protocol.file_actions.canonical_path` of every value:
    plain relative paths as they are (vectorized), the odd ones (encoded,
    absolute, URIs) decoded one by one."""
    odd = odd_path_rows(paths)
    if not odd:
        return paths
    positions = pa.array(odd, pa.int64())
    fixed = [canonical_path(p, table_root) for p in pc.take(paths, positions).to_pylist()]
    mask = [False] * len(paths)
    for row in odd:
        mask[row] = True
    return pc.replace_with_mask(paths, pa.array(mask, pa.bool_()), pa.array(fixed, paths.type))


def key_strings(table: pa.Table, table_root: str | None = None) -> pa.Array:
    """The key string of every row of a canonical ``add``/``remove`` table (its
    path in canonical spelling, so ``file:/x``, ``/x`` and ``%2Fx`` shard together)."""
    paths = canonical_paths(table.column("path").combine_chunks().cast(pa.string()), table_root)
    if "deletionVector" not in table.column_names:
        return paths
    dvs = table.column("deletionVector").combine_chunks()
    if len(dvs) == 0 or dvs.null_count == len(dvs):
        return paths
    # only the rows with a DV get a suffix: compute it on them alone
    has_dv = pc.is_valid(dvs)
    dv_ids = dv_unique_ids(dvs.filter(has_dv))
    with_dv = paths.filter(has_dv)
    joined = pc.binary_join_element_wise(with_dv, dv_ids, _KEY_SEPARATOR)
    joined = pc.if_else(pc.is_null(dv_ids), with_dv, joined)
    return pc.replace_with_mask(paths, has_dv, joined)


def shards_of_keys(
    keys: Iterable[FileKey],
    num_shards: int,
    *,
    hash_name: str = SHARD_HASH,
    table_root: str | None = None,
) -> set[int]:
    """The shards a set of logical-file keys (canonical, root-free or relative
    to ``table_root``) fall in."""
    strings = pa.array([key_string(k, table_root=table_root) for k in keys], type=pa.string())
    return set(shard_of(strings, num_shards, hash_name=hash_name).to_pylist())


def shards_of_table(
    table: pa.Table,
    num_shards: int,
    *,
    hash_name: str = SHARD_HASH,
    table_root: str | None = None,
) -> pa.Array:
    """Shard of every row of a canonical ``add``/``remove`` table."""
    return shard_of(key_strings(table, table_root), num_shards, hash_name=hash_name)


def split_by_shard(
    table: pa.Table,
    num_shards: int,
    *,
    hash_name: str = SHARD_HASH,
    table_root: str | None = None,
) -> list[pa.Table]:
    """``table`` cut into ``num_shards`` tables; rows keep their relative order."""
    if table.num_rows == 0:
        return [table.slice(0, 0) for _ in range(num_shards)]
    shards = shards_of_table(table, num_shards, hash_name=hash_name, table_root=table_root)
    return split_by_shard_ids(table, shards, num_shards)


def split_by_shard_ids(table: pa.Table, shards: pa.Array, num_shards: int) -> list[pa.Table]:
    """``table`` cut by precomputed shard ids (one per row); rows keep their order.

    Each part owns compact buffers (a ``take``, not a slice of one sorted
    table), so shipping one part to another process ships that part only:
    pickling a slice carries its parent's whole buffers.
    """
    if table.num_rows == 0:
        return [table.slice(0, 0) for _ in range(num_shards)]
    order = pc.array_sort_indices(shards)  # a stable sort
    tally = pc.value_counts(shards)
    sizes = dict(
        zip(tally.field("values").to_pylist(), tally.field("counts").to_pylist(), strict=True)
    )
    # a table of single-chunk columns takes ~3x faster than one of chunked columns
    table = table.combine_chunks()
    out = []
    start = 0
    for shard in range(num_shards):
        size = sizes.get(shard, 0)
        out.append(table.take(order.slice(start, size)) if size else table.slice(0, 0))
        start += size
    return out


def select_shard(
    table: pa.Table,
    shard: int,
    num_shards: int,
    *,
    hash_name: str = SHARD_HASH,
    table_root: str | None = None,
) -> pa.Table:
    """The rows of ``table`` in ``shard`` (what one parallel task writes)."""
    if not 0 <= shard < num_shards:
        raise ValueError(f"shard must be in [0, {num_shards}), got {shard}")
    if table.num_rows == 0:
        return table
    shards = shards_of_table(table, num_shards, hash_name=hash_name, table_root=table_root)
    return table.filter(pc.equal(shards, pa.scalar(shard, pa.int32())))


def choose_num_shards(
    num_file_actions: int,
    *,
    target_actions_per_sidecar: int = DEFAULT_TARGET_ACTIONS_PER_SIDECAR,
    previous_num_shards: int | None = None,
) -> int:
    """How many sidecars to write for ``num_file_actions`` adds and removes.

    ``ceil(n / target)``, at least 1. When the previous checkpoint used
    ``previous_num_shards`` and that still gives between half and twice the
    target per shard, it is kept, so unchanged shards stay reusable while the
    table grows or shrinks a little.
    """
    if target_actions_per_sidecar < 1:
        raise ValueError(
            f"target_actions_per_sidecar must be >= 1, got {target_actions_per_sidecar}"
        )
    if previous_num_shards is not None and previous_num_shards >= 1:
        per_shard = num_file_actions / previous_num_shards
        if per_shard <= 2 * target_actions_per_sidecar and (
            per_shard >= target_actions_per_sidecar / 2 or previous_num_shards == 1
        ):
            return previous_num_shards
    return max(1, math.ceil(num_file_actions / target_actions_per_sidecar))


# --- what a checkpoint holds ---------------------------------------------------------


def table_configuration(state: TableState) -> TableConfiguration:
    """The validated configuration of a state (which must have protocol and metadata)."""
    if state.protocol is None:
        raise MissingProtocolError(f"no protocol in the state at v{state.version}")
    if state.metadata is None:
        raise MissingMetadataError(f"no metadata in the state at v{state.version}")
    return TableConfiguration(state.protocol, state.metadata)


def checkpoint_view(state: TableState, config: TableConfiguration, *, now_ms: int) -> TableState:
    """``state`` as a checkpoint taken at ``now_ms`` keeps it.

    Tombstones whose ``deletionTimestamp`` is older than
    ``now_ms - delta.deletedFileRetentionDuration`` are dropped; when
    ``delta.setTransactionRetentionDuration`` is set, ``txn`` actions whose
    ``lastUpdated`` is older than ``now_ms`` minus it are dropped too (a
    ``txn`` without ``lastUpdated`` never expires).
    """
    view = state.without_expired_tombstones(now_ms - config.deleted_file_retention_ms)
    txn_retention = config.set_transaction_retention_ms
    if txn_retention is not None:
        cutoff = now_ms - txn_retention
        txns = {
            app_id: txn
            for app_id, txn in view.txns.items()
            if txn.last_updated is None or txn.last_updated >= cutoff
        }
        view = replace(view, txns=txns)
    return view


# --- non-file actions ----------------------------------------------------------------


def non_file_actions(state: TableState, *, checkpoint_version: int | None = None) -> list[Action]:
    """The non-file rows of a checkpoint of ``state``, in writing order.

    ``checkpointMetadata`` first when ``checkpoint_version`` is given (V2),
    then ``protocol``, ``metaData``, ``txn`` (by app id), live
    ``domainMetadata`` (by domain).
    """
    if state.protocol is None:
        raise MissingProtocolError(f"no protocol in the state at v{state.version}")
    if state.metadata is None:
        raise MissingMetadataError(f"no metadata in the state at v{state.version}")
    actions: list[Action] = []
    if checkpoint_version is not None:
        actions.append(CheckpointMetadata(version=checkpoint_version))
    actions.append(state.protocol)
    actions.append(state.metadata)
    actions.extend(state.txns[app_id] for app_id in sorted(state.txns))
    live = state.domains
    actions.extend(live[domain] for domain in sorted(live))
    return actions


# --- sidecar tags and reuse ------------------------------------------------------------


def shard_tags(
    shard: int,
    num_shards: int,
    *,
    layout: str,
    adds: pa.Table,
    removes: pa.Table,
    hash_name: str = SHARD_HASH,
) -> dict[str, str | None]:
    """The ``tags`` of the sidecar holding ``shard``'s ``adds`` and ``removes``."""
    tags: dict[str, str | None] = {
        TAG_SHARD: str(shard),
        TAG_NUM_SHARDS: str(num_shards),
        TAG_SHARD_HASH: hash_name,
        TAG_LAYOUT: layout,
        TAG_NUM_ADDS: str(adds.num_rows),
        TAG_NUM_REMOVES: str(removes.num_rows),
    }
    if removes.num_rows:
        stamps = pc.fill_null(removes.column("deletionTimestamp"), 0)
        tags[TAG_MIN_DELETION_TIMESTAMP] = str(pc.min(stamps).as_py())
    return tags


def _int_tag(tags: Mapping[str, str | None], key: str) -> int | None:
    value = tags.get(key)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def sidecar_counts(sidecar: Sidecar) -> tuple[int, int] | None:
    """``(adds, removes)`` recorded in a sidecar's tags, or None if not recorded."""
    tags = sidecar.tags or {}
    adds, removes = _int_tag(tags, TAG_NUM_ADDS), _int_tag(tags, TAG_NUM_REMOVES)
    if adds is None or removes is None:
        return None
    return adds, removes


def sidecar_shard(sidecar: Sidecar, *, hash_name: str = SHARD_HASH) -> tuple[int, int] | None:
    """``(shard, num_shards)`` of a sidecar written by :func:`shard_tags` with the
    shard hash ``hash_name``, else None."""
    tags = sidecar.tags or {}
    if tags.get(TAG_SHARD_HASH) != hash_name:
        return None
    shard, num_shards = _int_tag(tags, TAG_SHARD), _int_tag(tags, TAG_NUM_SHARDS)
    if shard is None or num_shards is None or not 0 <= shard < num_shards:
        return None
    return shard, num_shards


def touched_keys_of(
    commits: Iterable[Sequence[Action]], *, table_root: str | None = None
) -> set[FileKey]:
    """Logical-file keys of every ``add``/``remove`` in ``commits`` (relative
    to ``table_root`` when given)."""
    return {
        action_key(action, table_root)
        for actions in commits
        for action in actions
        if isinstance(action, (AddFile, RemoveFile))
    }


def reusable_sidecars(
    previous: Sequence[Sidecar],
    touched_keys: Iterable[FileKey],
    *,
    num_shards: int,
    layout: str,
    tombstone_cutoff_ms: int,
    hash_name: str = SHARD_HASH,
    table_root: str | None = None,
) -> dict[int, Sidecar]:
    """Shards of a previous V2 checkpoint that the next one can reference as they are.

    ``previous`` are the sidecar actions of the previous checkpoint,
    ``touched_keys`` the keys of every file action committed after it
    (canonical; root-free ones are made relative to ``table_root``). A
    sidecar is reused when it was written by this shard function with the
    same ``num_shards`` and ``layout``, no touched key hashes to its shard,
    and none of its tombstones is older than ``tombstone_cutoff_ms`` (those
    must be dropped, so the shard is rewritten). Returns ``{shard: sidecar}``.
    """
    touched = shards_of_keys(touched_keys, num_shards, hash_name=hash_name, table_root=table_root)
    by_shard: dict[int, Sidecar] = {}
    seen: set[int] = set()
    for sidecar in previous:
        located = sidecar_shard(sidecar, hash_name=hash_name)
        if located is None or located[1] != num_shards:
            continue
        shard = located[0]
        if shard in seen:  # two sidecars claim one shard: trust neither
            by_shard.pop(shard, None)
            continue
        seen.add(shard)
        tags = sidecar.tags or {}
        if shard in touched or tags.get(TAG_LAYOUT) != layout or sidecar_counts(sidecar) is None:
            continue
        oldest = _int_tag(tags, TAG_MIN_DELETION_TIMESTAMP)
        counts = sidecar_counts(sidecar)
        if counts is not None and counts[1] and (oldest is None or oldest < tombstone_cutoff_ms):
            continue
        by_shard[shard] = sidecar
    return by_shard


# --- a whole V2 plan ----------------------------------------------------------------------


@dataclass(frozen=True)
class ShardWork:
    """One sidecar to write: shard ``shard`` of ``num_shards``, canonical rows."""

    shard: int
    num_shards: int
    adds: pa.Table
    removes: pa.Table


@dataclass(frozen=True)
class V2CheckpointPlan:
    """What a V2 checkpoint of ``view`` needs: sidecars to write and to reuse.

    ``view`` is the state as the checkpoint keeps it (:func:`checkpoint_view`);
    ``to_write`` are the non-empty shards that need a new sidecar, ``reused``
    the previous sidecars kept as they are (by shard). Shards that are empty
    and not reused get no sidecar at all.
    """

    view: TableState
    layout: CheckpointLayout
    num_shards: int
    to_write: list[ShardWork]
    reused: dict[int, Sidecar]

    @property
    def version(self) -> int:
        return self.view.version


def plan_v2_checkpoint(
    state: TableState,
    *,
    now_ms: int,
    target_actions_per_sidecar: int = DEFAULT_TARGET_ACTIONS_PER_SIDECAR,
    previous_sidecars: Sequence[Sidecar] | None = None,
    touched_keys: Iterable[FileKey] | None = None,
) -> V2CheckpointPlan:
    """Shard ``state``'s file actions for a V2 checkpoint taken at ``now_ms``.

    With ``previous_sidecars`` (the previous V2 checkpoint's) and
    ``touched_keys`` (keys of every file action committed since it), shards
    no commit touched keep their previous sidecar (:func:`reusable_sidecars`).
    Without ``touched_keys`` nothing is reused. Keys are relative to
    ``state.table_root`` (when the state knows it).
    """
    config = table_configuration(state)
    root = state.table_root
    view = checkpoint_view(state, config, now_ms=now_ms)
    layout = CheckpointLayout.for_table(config)
    previous_num_shards = None
    for sidecar in previous_sidecars or ():
        located = sidecar_shard(sidecar)
        if located is not None:
            previous_num_shards = located[1]
            break
    num_shards = choose_num_shards(
        view.adds.num_rows + view.removes.num_rows,
        target_actions_per_sidecar=target_actions_per_sidecar,
        previous_num_shards=previous_num_shards,
    )
    reused: dict[int, Sidecar] = {}
    if previous_sidecars and touched_keys is not None:
        reused = reusable_sidecars(
            previous_sidecars,
            touched_keys,
            num_shards=num_shards,
            layout=layout.fingerprint,
            tombstone_cutoff_ms=now_ms - config.deleted_file_retention_ms,
            table_root=root,
        )
    add_shards = split_by_shard(view.adds, num_shards, table_root=root)
    remove_shards = split_by_shard(view.removes, num_shards, table_root=root)
    to_write = [
        ShardWork(shard, num_shards, add_shards[shard], remove_shards[shard])
        for shard in range(num_shards)
        if shard not in reused and (add_shards[shard].num_rows or remove_shards[shard].num_rows)
    ]
    return V2CheckpointPlan(view, layout, num_shards, to_write, reused)
