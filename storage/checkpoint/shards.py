"""Cutting checkpoint rows by shard and merging a shard's rows.

A V2 checkpoint's file actions are hash-sharded by logical-file key
(:func:`raydelta.protocol.shard_hash.shard_of`): map tasks cut the
previous checkpoint's rows by shard (:func:`partition_rows`,
:func:`partition_rows_grouped`), the committed actions are cut the same way
(:func:`split_delta`), and each shard task merges its previous rows with
its committed ones (:func:`merge_shard_rows`).

Invariants:
- A shard's new rows = its previous rows minus every key the commits
  touched, plus the commits' newest actions, minus the tombstones older
  than the retention cutoff. Each key lands in exactly one shard.
- Every key (shard, exclusion, fingerprint) is the canonical key relative
  to the table root (``table_root``, as
  :func:`raydelta.protocol.file_actions.table_root_key` spells it;
  :func:`raydelta.protocol.checkpoint_plan.key_strings`), so a file named
  relatively and by an absolute URI under the root is one key in one shard.
  Callers pass the same ``table_root`` to every function of one checkpoint.
- Rows stay canonical (:mod:`raydelta.protocol.file_actions`) and carry
  their :data:`~raydelta.storage.checkpoint.fingerprints.FINGERPRINT_COLUMN`;
  :func:`slim_rows` / :func:`full_rows` only drop and restore all-null
  columns for shipping between tasks.
- Groups made by :func:`partition_rows_grouped` hold consecutive shards
  sorted by shard; :func:`shard_slice` cuts one shard out without copying.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from raydelta.protocol.checkpoint_plan import (
    SHARD_HASH,
    key_strings,
    shard_hash,
    shard_of,
    split_by_shard_ids,
)
from raydelta.protocol.file_actions import ADD_SCHEMA, REMOVE_SCHEMA, conform_table
from raydelta.storage.checkpoint.fingerprints import (
    FINGERPRINT_COLUMN,
    fingerprints_of_hashes,
    with_fingerprints,
)


def drop_keys(table: pa.Table, keys: pa.Array, *, table_root: str | None = None) -> pa.Table:
    """Rows of a canonical table whose key string (relative to ``table_root``)
    is not in ``keys``."""
    if table.num_rows == 0 or len(keys) == 0:
        return table
    hit = pc.is_in(key_strings(table, table_root), value_set=keys.cast(pa.string()))
    if not pc.any(hit).as_py():
        return table
    return table.filter(pc.invert(hit))


def drop_expired_tombstones(removes: pa.Table, cutoff_ms: int) -> pa.Table:
    """Tombstones deleted at or after ``cutoff_ms`` (a missing timestamp counts as 0)."""
    if removes.num_rows == 0:
        return removes
    stamps = pc.fill_null(removes.column("deletionTimestamp"), 0)
    keep = pc.greater_equal(stamps, pa.scalar(cutoff_ms, pa.int64()))
    if pc.all(keep).as_py():
        return removes
    return removes.filter(keep)


def _surviving(
    table: pa.Table,
    *,
    exclude_keys: pa.Array,
    hash_name: str,
    cutoff_ms: int | None,
    table_root: str | None,
) -> tuple[pa.Table, pa.Array, pa.Array | None]:
    """Every row (unfiltered) with its fingerprint, the 64-bit shard hash of
    every row, and the positions of the rows that survive (None: all do).

    Rows are not filtered here: the caller copies the survivors once, in
    the order it needs (a filter and then a take would copy them twice).
    """
    if table.num_rows == 0:
        empty = table.append_column(FINGERPRINT_COLUMN, pa.array([], type=pa.uint32()))
        return empty, pa.array([], type=pa.uint64()), None
    keys = key_strings(table, table_root)
    drop: pa.Array | None = None
    if len(exclude_keys):
        drop = pc.is_in(keys, value_set=exclude_keys.cast(pa.string()))
    if cutoff_ms is not None:
        stamps = pc.fill_null(table.column("deletionTimestamp"), 0)
        expired = pc.less(stamps, pa.scalar(cutoff_ms, pa.int64()))
        drop = expired if drop is None else pc.or_(drop, expired)
    hashes = shard_hash(keys, hash_name)
    rows = table.append_column(FINGERPRINT_COLUMN, fingerprints_of_hashes(hashes))
    if drop is None or not pc.any(drop).as_py():
        return rows, hashes, None
    return rows, hashes, pc.indices_nonzero(pc.invert(drop))


def _shard_ids(
    table: pa.Table,
    num_shards: int,
    *,
    exclude_keys: pa.Array,
    hash_name: str,
    cutoff_ms: int | None,
    table_root: str | None,
) -> tuple[pa.Table, pa.Array]:
    """The surviving rows (with fingerprints) and the shard of each."""
    if table.num_rows and cutoff_ms is not None:
        table = drop_expired_tombstones(table, cutoff_ms)
    if table.num_rows == 0:
        empty = table.append_column(FINGERPRINT_COLUMN, pa.array([], type=pa.uint32()))
        return empty, pa.array([], type=pa.int32())
    keys = key_strings(table, table_root)
    if len(exclude_keys):
        keep = pc.invert(pc.is_in(keys, value_set=exclude_keys.cast(pa.string())))
        if not pc.all(keep).as_py():
            table, keys = table.filter(keep), keys.filter(keep)
    hashes = shard_hash(keys, hash_name)
    shards = pc.modulo(hashes, pa.scalar(num_shards, pa.uint64())).cast(pa.int32())
    return table.append_column(FINGERPRINT_COLUMN, fingerprints_of_hashes(hashes)), shards


def _split(
    table: pa.Table,
    num_shards: int,
    *,
    exclude_keys: pa.Array,
    hash_name: str,
    table_root: str | None,
    cutoff_ms: int | None = None,
) -> list[pa.Table]:
    rows, shards = _shard_ids(
        table,
        num_shards,
        exclude_keys=exclude_keys,
        hash_name=hash_name,
        cutoff_ms=cutoff_ms,
        table_root=table_root,
    )
    if rows.num_rows == 0:
        return [rows] * num_shards
    return split_by_shard_ids(rows, shards, num_shards)


SHARD_OFFSETS_KEY = b"raydelta.shardOffsets"


def _group_split(
    table: pa.Table, shards: pa.Array, bounds: Sequence[int], positions: pa.Array | None = None
) -> list[pa.Table]:
    """Rows sorted by shard, cut into groups of consecutive shards.

    Only the rows at ``positions`` are kept (all when None; ``shards`` has
    one id per kept row). Group ``g`` holds shards ``bounds[g] ..
    bounds[g+1]-1``; its schema metadata records where each shard's rows
    start (:func:`shard_slice`). Each group owns compact buffers (see
    :func:`split_by_shard_ids`): one ``take`` per group, the only copy of
    the rows.
    """
    num_groups = len(bounds) - 1
    if len(shards) == 0:
        empty = table.slice(0, 0).replace_schema_metadata({SHARD_OFFSETS_KEY: b"{}"})
        return [empty] * num_groups
    order = pc.array_sort_indices(shards)
    if positions is not None:
        order = positions.take(order)
    tally = pc.value_counts(shards)
    sizes = dict(
        zip(tally.field("values").to_pylist(), tally.field("counts").to_pylist(), strict=True)
    )
    table = table.combine_chunks()
    groups = []
    start = 0
    for g in range(num_groups):
        offsets: dict[str, list[int]] = {}
        length = 0
        for shard in range(bounds[g], bounds[g + 1]):
            size = sizes.get(shard, 0)
            if size:
                offsets[str(shard)] = [length, size]
            length += size
        part = table.take(order.slice(start, length)) if length else table.slice(0, 0)
        start += length
        metadata = {SHARD_OFFSETS_KEY: json.dumps(offsets, separators=(",", ":")).encode()}
        groups.append(part.replace_schema_metadata(metadata))
    return groups


def shard_slice(group: pa.Table, shard: int) -> pa.Table:
    """Shard ``shard``'s rows of a group made by :func:`partition_rows_grouped` (zero-copy)."""
    offsets = json.loads((group.schema.metadata or {}).get(SHARD_OFFSETS_KEY, b"{}"))
    start, length = offsets.get(str(shard), (0, 0))
    return group.slice(start, length).replace_schema_metadata(None)


def group_bounds(num_shards: int, num_groups: int) -> list[int]:
    """Shard boundaries of ``num_groups`` groups of consecutive shards."""
    num_groups = max(1, min(num_groups, num_shards))
    return [g * num_shards // num_groups for g in range(num_groups + 1)]


def partition_rows_grouped(
    adds: pa.Table,
    removes: pa.Table,
    *,
    num_shards: int,
    num_groups: int,
    exclude_keys: pa.Array,
    tombstone_cutoff_ms: int,
    hash_name: str = SHARD_HASH,
    table_root: str | None = None,
) -> list[tuple[pa.Table, pa.Table]]:
    """Like :func:`partition_rows`, in ``num_groups`` groups of consecutive shards.

    A map task returns one object per group instead of one per shard: every
    object costs Ray a serialization and a transfer, so a map task returns
    one per node (one in all on a single machine) and a shard task slices its
    rows out of its node's group (:func:`shard_slice`) without copying.
    """
    bounds = group_bounds(num_shards, num_groups)
    modulus = pa.scalar(num_shards, pa.uint64())
    parts = []
    for table, cutoff in ((adds, None), (removes, tombstone_cutoff_ms)):
        rows, hashes, positions = _surviving(
            table,
            exclude_keys=exclude_keys,
            hash_name=hash_name,
            cutoff_ms=cutoff,
            table_root=table_root,
        )
        if positions is not None:
            hashes = hashes.take(positions)
        shards = pc.modulo(hashes, modulus).cast(pa.int32())
        parts.append(_group_split(rows, shards, bounds, positions))
    add_groups, remove_groups = parts
    return list(zip(add_groups, remove_groups, strict=True))


def partition_rows(
    adds: pa.Table,
    removes: pa.Table,
    *,
    num_shards: int,
    exclude_keys: pa.Array,
    tombstone_cutoff_ms: int,
    hash_name: str = SHARD_HASH,
    table_root: str | None = None,
) -> list[tuple[pa.Table, pa.Table]]:
    """A piece's surviving rows, cut by shard: ``[(adds, removes)]`` per shard.

    Rows whose key (relative to ``table_root``) is in ``exclude_keys``
    (touched by a later commit) and expired tombstones are dropped first.
    Every part carries the rows' :data:`FINGERPRINT_COLUMN`.
    """
    add_parts = _split(
        adds, num_shards, exclude_keys=exclude_keys, hash_name=hash_name, table_root=table_root
    )
    remove_parts = _split(
        removes,
        num_shards,
        exclude_keys=exclude_keys,
        hash_name=hash_name,
        table_root=table_root,
        cutoff_ms=tombstone_cutoff_ms,
    )
    return list(zip(add_parts, remove_parts, strict=True))


def split_delta(
    delta_adds: pa.Table,
    delta_removes: pa.Table,
    num_shards: int,
    *,
    hash_name: str = SHARD_HASH,
    table_root: str | None = None,
) -> list[tuple[pa.Table, pa.Table]]:
    """The committed file actions cut by shard (unfiltered, with fingerprints)."""
    return partition_rows(
        delta_adds,
        delta_removes,
        num_shards=num_shards,
        exclude_keys=pa.array([], type=pa.string()),
        tombstone_cutoff_ms=-(2**62),
        hash_name=hash_name,
        table_root=table_root,
    )


ADD_ROWS_SCHEMA = ADD_SCHEMA.append(pa.field(FINGERPRINT_COLUMN, pa.uint32()))
REMOVE_ROWS_SCHEMA = REMOVE_SCHEMA.append(pa.field(FINGERPRINT_COLUMN, pa.uint32()))


def slim_rows(adds: pa.Table, removes: pa.Table) -> tuple[pa.Table, pa.Table]:
    """The rows without their all-null columns, for shipping between tasks.

    Most tables leave half the canonical columns null (tags, deletion
    vectors, row tracking...); every column costs several buffers to ship.
    :func:`full_rows` puts them back.
    """

    def slim(table: pa.Table) -> pa.Table:
        if table.num_rows == 0:
            return table.select([])
        keep = [
            n
            for n, c in zip(table.column_names, table.columns, strict=True)
            if c.null_count < len(c)
        ]
        return table.select(keep)

    return slim(adds), slim(removes)


def full_rows(adds: pa.Table, removes: pa.Table) -> tuple[pa.Table, pa.Table]:
    """Undo :func:`slim_rows` (missing columns come back as nulls)."""
    return conform_table(adds, ADD_ROWS_SCHEMA), conform_table(removes, REMOVE_ROWS_SCHEMA)


def select_shard_rows(
    adds: pa.Table,
    removes: pa.Table,
    shard: int,
    num_shards: int,
    *,
    hash_name: str = SHARD_HASH,
    table_root: str | None = None,
) -> tuple[pa.Table, pa.Table]:
    """The rows of ``shard`` (for reading an overflow sidecar's rows of one shard)."""
    parts = split_delta(adds, removes, num_shards, hash_name=hash_name, table_root=table_root)
    return parts[shard]


def merge_shard_rows(
    base: Sequence[tuple[pa.Table, pa.Table]],
    delta_adds: pa.Table,
    delta_removes: pa.Table,
    *,
    tombstone_cutoff_ms: int,
    base_filtered: bool,
    table_root: str | None = None,
) -> tuple[pa.Table, pa.Table]:
    """One shard's rows for the new checkpoint (with :data:`FINGERPRINT_COLUMN`).

    ``base`` are the shard's rows from the previous checkpoint; unless
    ``base_filtered`` (a map task already did it) the keys of the delta and
    expired tombstones are dropped from them here. Keys are relative to
    ``table_root``.
    """
    root = table_root
    if not base_filtered:
        exclude = _touched(delta_adds, delta_removes, table_root=root)
        cutoff = tombstone_cutoff_ms
        base = [
            (
                drop_keys(a, exclude, table_root=root),
                drop_expired_tombstones(drop_keys(r, exclude, table_root=root), cutoff),
            )
            for a, r in base
        ]
    adds = [with_fingerprints(a, table_root=root) for a, _ in base if a.num_rows]
    adds.append(with_fingerprints(delta_adds, table_root=root))
    removes = [with_fingerprints(r, table_root=root) for _, r in base if r.num_rows]
    delta_removes = drop_expired_tombstones(delta_removes, tombstone_cutoff_ms)
    removes.append(with_fingerprints(delta_removes, table_root=root))
    return _concat(adds), _concat(removes)


def _concat(tables: list[pa.Table]) -> pa.Table:
    if len(tables) == 1:
        return tables[0]
    schema = tables[0].schema
    return pa.concat_tables([t.select(schema.names) for t in tables])


def _touched(adds: pa.Table, removes: pa.Table, *, table_root: str | None) -> pa.Array:
    parts = [key_strings(t, table_root).cast(pa.string()) for t in (adds, removes) if t.num_rows]
    return pa.concat_arrays(parts) if parts else pa.array([], type=pa.string())


def shards_of_rows(
    adds: pa.Table,
    removes: pa.Table,
    num_shards: int,
    *,
    hash_name: str = SHARD_HASH,
    table_root: str | None = None,
) -> list[int]:
    """The shards some row of ``adds`` / ``removes`` falls in."""
    found: set[int] = set()
    for table in (adds, removes):
        if table.num_rows:
            keys = key_strings(table, table_root)
            found.update(shard_of(keys, num_shards, hash_name=hash_name).to_pylist())
    return sorted(found)
