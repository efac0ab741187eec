"""Row tracking: the ``delta.rowTracking`` domain and fresh row ids.

A table supporting ``rowTracking`` gives every row a stable id: each ``add``
carries ``baseRowId`` (its rows take ``baseRowId + row index``) and
``defaultRowCommitVersion``, and the ``delta.rowTracking`` metadata domain
records the high-water mark, the highest id ever assigned (PROTOCOL.md,
"Row Tracking").

The spec's text names the domain's key ``highWaterMark``; delta-spark,
delta-kernel-java and delta-kernel-rs all write and read
``{"rowIdHighWaterMark": N, "domainName": "delta.rowTracking"}``. A writer
that used the spec's spelling would make delta-spark read a high-water mark
of 0 and hand out row ids again, so raydelta writes delta-spark's shape and
reads either key (``rowIdHighWaterMark`` first).

Invariants:
- Pure: values in, values out.
- :func:`assign_row_tracking` gives the fresh adds of one commit disjoint,
  consecutive id ranges above the high-water mark it is given, and the
  domain it emits covers them; adds that keep a committed ``baseRowId``
  keep it.
- :func:`stable_row_ids` / :func:`stable_commit_versions` give a row's
  stable values (materialized, else default generated); writers that copy
  or update rows carry them in the :class:`MaterializedColumns` (a copied
  row keeps both, an updated row its id, its commit version NULL so it
  takes the new file's), so delta-spark reads the same ``_metadata.row_id``.
- :func:`high_water_mark_of` refuses a domain without an integer
  ``rowIdHighWaterMark`` (or ``highWaterMark``) (:class:`InvalidFileActionError`),
  never guesses one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from raydelta.protocol.actions import Action, AddFile, CommitInfo, DomainMetadata, RemoveFile
from raydelta.protocol.errors import InvalidFileActionError, InvalidTableError
from raydelta.protocol.table_properties import (
    MATERIALIZED_ROW_COMMIT_VERSION_COLUMN,
    MATERIALIZED_ROW_ID_COLUMN,
)

ROW_TRACKING_DOMAIN = "delta.rowTracking"
ROW_TRACKING_PRESERVED_TAG = "delta.rowTracking.preserved"
HIGH_WATER_MARK_KEY = "rowIdHighWaterMark"
"""The key delta-spark and the Delta kernels write (the spec's text says ``highWaterMark``)."""
SPEC_HIGH_WATER_MARK_KEY = "highWaterMark"


def high_water_mark_of(domain: DomainMetadata) -> int:
    """The high-water mark of a ``delta.rowTracking`` domain configuration
    (``rowIdHighWaterMark``, else the spec text's ``highWaterMark``)."""
    try:
        parsed = json.loads(domain.configuration)
        key = HIGH_WATER_MARK_KEY if HIGH_WATER_MARK_KEY in parsed else SPEC_HIGH_WATER_MARK_KEY
        value = parsed[key]
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidFileActionError(
            f"domain {ROW_TRACKING_DOMAIN} has no integer highWaterMark: {domain.configuration!r}"
        ) from exc
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidFileActionError(
            f"domain {ROW_TRACKING_DOMAIN} has no integer highWaterMark: {domain.configuration!r}"
        )
    return value


def row_tracking_domain(high_water_mark: int) -> DomainMetadata:
    return DomainMetadata(
        domain=ROW_TRACKING_DOMAIN,
        configuration=json.dumps(
            {HIGH_WATER_MARK_KEY: high_water_mark, "domainName": ROW_TRACKING_DOMAIN},
            separators=(",", ":"),
        ),
        removed=False,
    )


def assign_row_tracking(
    actions: Sequence[Action],
    high_water_mark: int | None,
    version: int,
    *,
    read_high_water_mark: int | None = None,
    read_version: int | None = None,
) -> list[Action]:
    """Give fresh row ids and row commit versions to the commit's new adds.

    An ``add`` is *fresh* when it has no ``baseRowId`` or one above the
    high-water mark the transaction read (``read_high_water_mark``, default
    ``high_water_mark``): such ids were provisional. Fresh adds get
    consecutive ranges ``[hwm + 1, hwm + numRecords]`` above
    ``high_water_mark`` (None: no row ids yet, -1); an add without
    ``numRecords`` in its stats is refused. Adds keeping a ``baseRowId``
    (copies of committed files) keep it. ``defaultRowCommitVersion`` becomes
    ``version`` when it is missing or newer than ``read_version`` (default
    ``version - 1``). Any ``delta.rowTracking`` domain of the commit is
    replaced by one with the new high-water mark, placed after a leading
    ``commitInfo``.
    """
    hwm = -1 if high_water_mark is None else high_water_mark
    fresh_above = hwm if read_high_water_mark is None else read_high_water_mark
    last_read_version = version - 1 if read_version is None else read_version
    out: list[Action] = []
    assigned = False
    had_domain = False
    for action in actions:
        if isinstance(action, DomainMetadata) and action.domain == ROW_TRACKING_DOMAIN:
            had_domain = True
            continue
        if isinstance(action, AddFile):
            update: dict[str, Any] = {}
            if action.base_row_id is None or action.base_row_id > fresh_above:
                records = action.num_records
                if records is None or records < 0:
                    raise InvalidFileActionError(
                        f"row tracking needs numRecords in the stats of add {action.path!r}"
                    )
                update["base_row_id"] = hwm + 1
                hwm += records
                assigned = True
                update["default_row_commit_version"] = version
            elif (
                action.default_row_commit_version is None
                or action.default_row_commit_version > last_read_version
            ):
                update["default_row_commit_version"] = version
            if update:
                action = action.model_copy(update=update)
        out.append(action)
    if (assigned or had_domain) and hwm >= 0:
        position = 1 if out and isinstance(out[0], CommitInfo) else 0
        out.insert(position, row_tracking_domain(hwm))
    return out


def with_row_tracking_preserved(info: CommitInfo, actions: Sequence[Action]) -> CommitInfo:
    """``info`` with ``delta.rowTracking.preserved`` in its tags, unless the writer set it.

    The spec asks writers of a table with row tracking enabled to tag whether
    every stable row id of an updated or copied row was preserved (through
    the materialized row-id column). raydelta's DML materializes them and
    tags its own commits ``true`` (the writer's tag wins). A commit without
    the tag that removes files and adds files under other paths (a rewrite
    by a writer that did not say it preserved ids: an overwrite, a plain
    client's replace) is tagged ``false``; one that copies no row (appends,
    whole-file deletes, deletion vectors on the same files) is tagged
    ``true``.
    """
    body = dict(info.to_json_dict())
    tags = dict(body.get("tags") or {})
    if ROW_TRACKING_PRESERVED_TAG in tags:
        return info
    removed = {a.path for a in actions if isinstance(a, RemoveFile)}
    rewritten = bool(removed) and any(
        isinstance(a, AddFile) and a.path not in removed for a in actions
    )
    tags[ROW_TRACKING_PRESERVED_TAG] = "false" if rewritten else "true"
    body["tags"] = tags
    return CommitInfo.model_validate(body)


# --- preserving stable row ids when rows are copied or updated ------------------------


@dataclass(frozen=True)
class MaterializedColumns:
    """The hidden columns that hold preserved stable row ids and row commit
    versions (named in the table's configuration, outside the schema)."""

    row_id: str
    row_commit_version: str

    @property
    def names(self) -> tuple[str, str]:
        return (self.row_id, self.row_commit_version)


def materialized_columns(
    configuration: Mapping[str, str], *, enabled: bool
) -> MaterializedColumns | None:
    """The materialized columns a writer must fill when rows are copied or
    updated: None unless row tracking is ``enabled`` (merely supported, ids
    cannot be preserved, per the spec). A table with row tracking enabled
    but without both column names cannot have its ids preserved: refused
    (:class:`InvalidTableError`), never written around."""
    if not enabled:
        return None
    row_id = configuration.get(MATERIALIZED_ROW_ID_COLUMN)
    version = configuration.get(MATERIALIZED_ROW_COMMIT_VERSION_COLUMN)
    if not row_id or not version:
        raise InvalidTableError(
            "row tracking is enabled but the table's configuration does not name its "
            f"materialized columns ({MATERIALIZED_ROW_ID_COLUMN}, "
            f"{MATERIALIZED_ROW_COMMIT_VERSION_COLUMN}); rows cannot be rewritten "
            "without losing their stable row ids"
        )
    return MaterializedColumns(row_id, version)


def stable_row_ids(
    add: AddFile, materialized: pa.Array | None, physical_positions: pa.Array
) -> pa.Array:
    """The stable row id of each row at ``physical_positions`` of ``add``'s file:
    the materialized id where the file has one, else ``baseRowId + position``.
    A file without ``baseRowId`` on a row-tracking table is refused."""
    if add.base_row_id is None:
        raise InvalidFileActionError(
            f"add {add.path!r} has no baseRowId on a table with row tracking enabled; "
            "its rows' stable ids are unknown"
        )
    default = pc.add(physical_positions.cast(pa.int64()), pa.scalar(add.base_row_id, pa.int64()))
    if materialized is None:
        return default
    return pc.coalesce(materialized.cast(pa.int64()), default)


def stable_commit_versions(add: AddFile, materialized: pa.Array | None, count: int) -> pa.Array:
    """The stable row commit version of ``count`` rows of ``add``'s file: the
    materialized one where present, else ``defaultRowCommitVersion`` (refused
    when the file has none)."""
    if add.default_row_commit_version is None:
        raise InvalidFileActionError(
            f"add {add.path!r} has no defaultRowCommitVersion on a table with row "
            "tracking enabled; its rows' commit versions are unknown"
        )
    default = pa.array([add.default_row_commit_version] * count, pa.int64())
    if materialized is None:
        return default
    return pc.coalesce(materialized.cast(pa.int64()), default)
