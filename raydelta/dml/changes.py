"""Reading the change data feed: ``Table.changes(starting_version, ending_version)``.

Per version, following the spec ("Reader Requirements for AddCDCFile") and
delta-spark's reading of deletion vectors:

- a version with ``cdc`` actions is read from its change data files only
  (their ``_change_type`` column as written);
- otherwise its data-changing ``add``s are inserts and ``remove``s deletes;
  a file removed and re-added in the same version with another deletion
  vector contributes only the difference: rows the new DV marks and the old
  did not are deletes, rows the old marked and the new does not are inserts.
  ``dataChange=false`` actions (compaction) change nothing.

Invariants:
- Rows have the table's columns at ``ending_version`` (logical names; column
  mapping resolved; columns a file lacks are NULL) plus ``_change_type``,
  ``_commit_version`` (long) and ``_commit_timestamp`` (UTC; the in-commit
  timestamp when enabled), ordered by version.
- The feed must be on (``delta.enableChangeDataFeed``) at ``starting_version``
  and not turned off within the range; otherwise a typed error, as delta-spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from raydelta.protocol.actions import Action, AddCDCFile, AddFile, Metadata, RemoveFile
from raydelta.protocol.errors import InvalidArgumentError, VersionNotFoundError
from raydelta.protocol.file_names import LogFileKind
from raydelta.protocol.schema import (
    COLUMN_MAPPING_PHYSICAL_NAME_KEY,
    PrimitiveType,
    StructField,
    StructType,
)
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.protocol.table_properties import ENABLE_CHANGE_DATA_FEED, is_true
from raydelta.storage.data.deletion_vectors import read_deleted_rows
from raydelta.storage.data.dml import CHANGE_TYPE_COLUMN
from raydelta.storage.data.files import read_logical_file
from raydelta.storage.history import load_history
from raydelta.storage.log.reader import read_commits
from raydelta.storage.log.store import log_store_for

if TYPE_CHECKING:
    from raydelta.actors.table.client import TableClient

COMMIT_VERSION_COLUMN = "_commit_version"
COMMIT_TIMESTAMP_COLUMN = "_commit_timestamp"


class ChangeDataFeedNotEnabledError(InvalidArgumentError):
    """The change data feed was off for a version in the requested range."""


def _check_version(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"{name} must be a non-negative int, got {value!r}")


def read_changes(
    table: TableClient, starting_version: int, ending_version: int | None = None
) -> pa.Table:
    _check_version("starting_version", starting_version)
    latest = table.snapshot()
    ending = latest.version if ending_version is None else ending_version
    _check_version("ending_version", ending)
    if ending > latest.version:
        raise VersionNotFoundError(
            f"ending_version {ending} is after the latest version {latest.version}"
        )
    if starting_version > ending:
        raise InvalidArgumentError(
            f"starting_version {starting_version} is after ending_version {ending}"
        )
    start = table.snapshot(version=starting_version)
    if not start.table_configuration.change_data_feed_enabled:
        raise ChangeDataFeedNotEnabledError(
            f"the change data feed is not enabled at version {starting_version} "
            f"(set {ENABLE_CHANGE_DATA_FEED}=true)"
        )
    end = table.snapshot(version=ending) if ending != latest.version else latest
    config = end.table_configuration
    store = log_store_for(table.uri, table.storage_options)
    files = [
        f
        for f in store.list_from(starting_version)
        if f.kind is LogFileKind.COMMIT and starting_version <= f.require_version() <= ending
    ]
    files.sort(key=lambda f: f.require_version())
    timestamps = {
        e.version: e.timestamp
        for e in load_history(table.uri, storage_options=table.storage_options)
    }
    reader = _Reader(table, config)
    parts: list[pa.Table] = []
    for file, actions in zip(files, read_commits(store, files), strict=True):
        version = file.require_version()
        for action in actions:
            if isinstance(action, Metadata) and not is_true(
                action.configuration.get(ENABLE_CHANGE_DATA_FEED)
            ):
                raise ChangeDataFeedNotEnabledError(
                    f"the change data feed was turned off at version {version}"
                )
        rows = reader.version_changes(actions)
        if rows.num_rows:
            parts.append(_stamped(rows, version, timestamps.get(version, 0)))
    if not parts:
        return _stamped(reader.empty(), 0, 0).slice(0, 0)
    return pa.concat_tables(parts, promote_options="permissive")


def _stamped(rows: pa.Table, version: int, timestamp_ms: int) -> pa.Table:
    rows = rows.append_column(
        COMMIT_VERSION_COLUMN, pa.array([version] * rows.num_rows, pa.int64())
    )
    return rows.append_column(
        COMMIT_TIMESTAMP_COLUMN,
        pa.array([timestamp_ms * 1000] * rows.num_rows, pa.timestamp("us", tz="UTC")),
    )


class _Reader:
    def __init__(self, table: TableClient, config: TableConfiguration) -> None:
        self.table, self.config = table, config
        mapped = config.column_mapping_mode.value != "none"
        self.change_field = StructField(
            CHANGE_TYPE_COLUMN,
            PrimitiveType("string"),
            True,
            {COLUMN_MAPPING_PHYSICAL_NAME_KEY: CHANGE_TYPE_COLUMN} if mapped else {},
        )
        self.cdc_schema = StructType((*config.schema.fields, self.change_field))

    def empty(self) -> pa.Table:
        from raydelta.protocol.schema_arrow import to_arrow

        return to_arrow(self.cdc_schema).empty_table()

    def _read(self, raw: dict[str, Any], schema: StructType) -> pa.Table:
        return read_logical_file(
            self.table.uri,
            raw,
            schema,
            self.config.partition_columns,
            column_mapping_mode=self.config.column_mapping_mode,
            storage_options=self.table.storage_options,
        )

    def _typed(self, rows: pa.Table, change_type: str) -> pa.Table:
        return rows.append_column(
            CHANGE_TYPE_COLUMN, pa.array([change_type] * rows.num_rows, pa.string())
        )

    def _physical_rows(self, action: AddFile | RemoveFile) -> pa.Table:
        raw = dict(action.to_json_dict())
        raw["deletionVector"] = None
        raw.setdefault("partitionValues", {})
        return self._read(raw, self.config.schema)

    def _deleted(self, action: AddFile | RemoveFile) -> list[int]:
        if action.deletion_vector is None:
            return []
        return list(
            read_deleted_rows(
                action.deletion_vector,
                self.table.uri,
                storage_options=self.table.storage_options,
            )
        )

    def _rows_at(self, action: AddFile | RemoveFile, keep: Sequence[int] | None) -> pa.Table:
        """The file's rows at positions ``keep`` (None: its live rows)."""
        rows = self._physical_rows(action)
        positions = pa.array(range(rows.num_rows), pa.int64())
        if keep is None:
            deleted = self._deleted(action)
            if not deleted:
                return rows
            mask = pc.invert(pc.is_in(positions, value_set=pa.array(deleted, pa.int64())))
        else:
            mask = pc.is_in(positions, value_set=pa.array(list(keep), pa.int64()))
        return rows.filter(mask)

    def version_changes(self, actions: Sequence[Action]) -> pa.Table:
        cdc = [a for a in actions if isinstance(a, AddCDCFile)]
        if cdc:
            parts = []
            for file in cdc:
                raw = dict(file.to_json_dict())
                raw.setdefault("partitionValues", {})
                rows = self._read(raw, self.cdc_schema)
                parts.append(rows)
            return pa.concat_tables(parts, promote_options="permissive")
        adds = {a.path: a for a in actions if isinstance(a, AddFile) and a.data_change}
        removes = {a.path: a for a in actions if isinstance(a, RemoveFile) and a.data_change}
        parts = []
        for path, remove in removes.items():
            add = adds.get(path)
            if add is None:
                parts.append(self._typed(self._rows_at(remove, None), "delete"))
                continue
            before, after = set(self._deleted(remove)), set(self._deleted(add))
            if after - before:
                parts.append(self._typed(self._rows_at(add, sorted(after - before)), "delete"))
            if before - after:
                parts.append(self._typed(self._rows_at(add, sorted(before - after)), "insert"))
        for path, add in adds.items():
            if path not in removes:
                parts.append(self._typed(self._rows_at(add, None), "insert"))
        if not parts:
            return self.empty()
        return pa.concat_tables(parts, promote_options="permissive")
