"""Live files of a table streamed in Arrow batches, never the whole list at once.

:func:`iter_live_files` is for tables whose file list does not fit in one
process (ten million files and more): the checkpoint (its parts and
sidecars) is decoded one batch at a time, each batch is cut down to the
rows no later commit touched and handed out, then dropped; the files the
commits after the checkpoint added come last. Peak memory is one decoded
batch (at most the read bound's rows,
:func:`raydelta.storage.log.read_bound.checkpoint_read_rows`, however large
the checkpoint's row groups) plus the commits after the checkpoint, whatever
the table's size.

Invariants:
- The batches together hold exactly the live ``add`` rows of the snapshot
  :func:`raydelta.storage.snapshot.load_snapshot` returns at the same version
  (same rows, canonical layout; order may differ), each once.
- A checkpoint row is dropped when a commit after the checkpoint added or
  removed its logical file (``(path, deletionVector.uniqueId)``, the path in
  canonical spelling relative to the table root, as in reconciliation): that
  commit's action is newer. Everything else in the checkpoint is live (a
  checkpoint is reconciled).
- The table's protocol is checked readable (and catalog access enforced)
  before the first batch, exactly as for a snapshot.
- ``columns`` only narrows what is decoded and returned; the key columns
  needed to drop superseded rows are read regardless.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from raydelta.protocol.actions import AddFile, Sidecar, parse_actions
from raydelta.protocol.catalog_managed import RatifiedCommit
from raydelta.protocol.checkpoint_plan import key_string, key_strings, touched_keys_of
from raydelta.protocol.errors import CorruptLogError
from raydelta.protocol.file_actions import ADD_SCHEMA, actions_to_table
from raydelta.protocol.log_segment import LogSegment
from raydelta.protocol.reconciliation import TableState, apply_commits
from raydelta.storage.catalog.commits import InlineCommits, catalog_view
from raydelta.storage.log.read_bound import checkpoint_read_rows
from raydelta.storage.log.reader import (
    STREAM_BATCH_ROWS,
    CheckpointContents,
    checkpoint_head,
    iter_parquet_actions,
    read_valid_segment,
    require_add_column,
    sidecar_path,
)
from raydelta.storage.log.store import LogStore, log_store_for
from raydelta.storage.snapshot import _check_replayed, _listing, _read_units, _segment

_KEY_COLUMNS = ("path", "deletionVector", "size", "modificationTime")
"""Read whatever the caller asks for: the key, and the fields every checkpoint
``add`` row must have (checked as the rows are read)."""


def iter_live_files(
    uri: str,
    *,
    version: int | None = None,
    columns: Sequence[str] | None = None,
    batch_rows: int = STREAM_BATCH_ROWS,
    storage_options: dict[str, Any] | None = None,
    ratified_commits: Sequence[RatifiedCommit] | None = None,
    latest_ratified_version: int | None = None,
) -> Iterator[pa.Table]:
    """The live files (``add`` rows, canonical layout or ``columns`` of it) of
    the table at ``uri`` at its latest version or ``version``, in batches of at
    most ``batch_rows`` rows (see the module docstring). The catalog
    arguments are :func:`raydelta.storage.snapshot.load_snapshot`'s.

    >>> rows = sum(b.num_rows for b in iter_live_files("/tmp/t"))  # doctest: +SKIP
    """
    store = log_store_for(uri, storage_options)
    return iter_live_files_from_store(
        uri,
        store,
        version=version,
        columns=columns,
        batch_rows=batch_rows,
        ratified_commits=ratified_commits,
        latest_ratified_version=latest_ratified_version,
    )


def count_live_files(
    uri: str,
    *,
    version: int | None = None,
    storage_options: dict[str, Any] | None = None,
) -> int:
    """How many live files the table has (only the key columns are decoded)."""
    return sum(
        b.num_rows
        for b in iter_live_files(
            uri, version=version, columns=("path",), storage_options=storage_options
        )
    )


def iter_live_files_from_store(
    uri: str,
    store: LogStore,
    *,
    version: int | None = None,
    columns: Sequence[str] | None = None,
    batch_rows: int = STREAM_BATCH_ROWS,
    ratified_commits: Sequence[RatifiedCommit] | None = None,
    latest_ratified_version: int | None = None,
) -> Iterator[pa.Table]:
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
    wanted = list(ADD_SCHEMA.names if columns is None else columns)
    unknown = [c for c in wanted if c not in ADD_SCHEMA.names]
    if unknown:
        raise ValueError(f"unknown add columns {unknown}; known: {ADD_SCHEMA.names}")
    view = catalog_view(ratified_commits, latest_ratified_version)
    listing = _listing(uri, store, view)
    from raydelta.storage.log.reader import read_last_checkpoint

    hint = read_last_checkpoint(store)
    root = store.table_root_key

    def base_of(segment: LogSegment, _inline: InlineCommits) -> TableState:
        checkpoint = segment.checkpoint
        if checkpoint is None:
            return TableState(table_root=root)
        head = checkpoint_head(store, checkpoint.version, checkpoint.files)
        return TableState(
            checkpoint.version,
            head.protocol,
            head.metadata,
            head.txns,
            head.domain_actions,
            table_root=root,
        )

    segment, inline, base = read_valid_segment(
        lambda unusable: _segment(uri, store, listing, hint, version, view, unusable), base_of
    )
    units = _read_units(store, segment, inline)
    batches = [
        (u.end_version if u.end_version is not None else u.require_version(), actions)
        for u, actions in units
    ]
    after = apply_commits(base, batches)
    _check_replayed(uri, after, version, through_catalog=view is not None)
    touched = touched_keys_of([a for _, a in batches], table_root=root)
    return _generate(store, segment, after, touched, wanted, batch_rows, root)


def _generate(
    store: LogStore,
    segment: Any,
    after: TableState,
    touched: set[Any],
    wanted: list[str],
    batch_rows: int,
    root: str | None,
) -> Iterator[pa.Table]:
    superseded = pa.array(sorted(key_string(k, table_root=root) for k in touched), pa.string())
    checkpoint = segment.checkpoint
    if checkpoint is not None:
        for rows in _checkpoint_adds(store, checkpoint.files, wanted, batch_rows):
            if len(superseded) and rows.num_rows:
                keep = pc.invert(pc.is_in(key_strings(rows, root), value_set=superseded))
                rows = rows.filter(keep)
            if rows.num_rows:
                yield rows.select(wanted)
    adds = after.adds
    for start in range(0, adds.num_rows, batch_rows):
        yield adds.slice(start, batch_rows).select(wanted)


def _read_fields(wanted: list[str]) -> list[str]:
    return [c for c in ADD_SCHEMA.names if c in wanted or c in _KEY_COLUMNS]


def _checkpoint_adds(
    store: LogStore, parts: Sequence[Any], wanted: list[str], batch_rows: int
) -> Iterator[pa.Table]:
    """Canonical ``add`` rows of a checkpoint (its parts, then its sidecars),
    one decoded batch at a time."""
    sidecars: list[Sidecar] = []
    fields = _read_fields(wanted)
    # batches handed out are never larger than the read bound either
    batch_rows = min(batch_rows, checkpoint_read_rows())
    columns: list[set[str]] = []
    for part in parts:
        if part.name.endswith(".json"):
            actions = parse_actions(store.read(part.name))
            sidecars.extend(a for a in actions if isinstance(a, Sidecar))
            adds = [a for a in actions if isinstance(a, AddFile)]
            if adds:
                yield actions_to_table(adds, ADD_SCHEMA)
            columns.append(set())
            continue
        seen: set[str] = set()
        for table in iter_parquet_actions(
            store,
            store.path_of(part.name),
            ("add", "sidecar"),
            batch_rows=batch_rows,
            add_fields=fields,
        ):
            seen.update(table.column_names)
            contents = CheckpointContents()
            contents.add_parquet_table(table)
            sidecars.extend(contents.sidecars)
            yield from contents.adds
        columns.append(seen)
    # a part without "add" has no add rows; no part with one: nothing was yielded
    require_add_column(parts, columns, names_sidecars=bool(sidecars))
    for sidecar in sidecars:
        path = sidecar_path(store, sidecar)
        try:
            for table in iter_parquet_actions(
                store, path, ("add",), batch_rows=batch_rows, add_fields=fields
            ):
                contents = CheckpointContents()
                contents.add_parquet_table(table)
                yield from contents.adds
        except FileNotFoundError as exc:
            raise CorruptLogError(f"sidecar file missing: {path}") from exc
