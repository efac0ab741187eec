"""``readChangeFeed``: a table's row-level changes between two versions.

Rules (delta-spark's): the change data of a commit comes from its ``cdc``
files when it has any; otherwise it is derived from its data-changing file
actions: an ``add`` inserts its live rows, a ``remove`` deletes the rows
live at removal, and a ``remove`` + ``add`` of the same path (a deletion
vector update) deletes the rows the new deletion vector marks and the old
one did not. Actions with ``dataChange=false`` (compaction, ...) change no
row. Each row carries ``_change_type``, ``_commit_version`` and
``_commit_timestamp`` (the version's commit timestamp, in-commit timestamp
where enabled).

Invariants:
- ``startingVersion`` (or ``startingTimestamp``) is required; the end is
  ``endingVersion``/``endingTimestamp`` or the latest version.
- Every version of the range must have ``delta.enableChangeDataFeed=true``,
  otherwise :class:`~raydelta.protocol.errors.InvalidArgumentError` (delta-spark:
  DELTA_MISSING_CHANGE_DATA); a version of the range no longer in the log is
  :class:`~raydelta.protocol.errors.VersionNotFoundError`.
- The plan (which file each task reads, as which change) is made on the
  driver in :meth:`ChangeFeedReader.partitions`; tasks get only their own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, InputPartition

from raydelta.protocol.actions import AddCDCFile, AddFile, Metadata, RemoveFile
from raydelta.protocol.errors import InvalidArgumentError, VersionNotFoundError
from raydelta.protocol.schema import StructField, StructType, parse_schema
from raydelta.spark.options import ReadOptions

CHANGE_TYPE = "_change_type"
CHANGE_COLUMNS = (
    (CHANGE_TYPE, "string"),
    ("_commit_version", "long"),
    ("_commit_timestamp", "timestamp"),
)
CDF_PROPERTY = "delta.enableChangeDataFeed"


def change_feed_schema_json(uri: str, read: ReadOptions) -> str:
    """The table's schema at the range's end plus the three change columns."""
    from raydelta.spark.reader import spark_schema_json
    from raydelta.storage.snapshot import load_table_head

    head = load_table_head(uri, version=read.ending_version)
    assert head.metadata is not None
    schema = json.loads(spark_schema_json(parse_schema(head.metadata.schema_string or "")))
    schema["fields"].extend(
        {"name": name, "type": kind, "nullable": True, "metadata": {}}
        for name, kind in CHANGE_COLUMNS
    )
    return json.dumps(schema)


@dataclass
class ChangeSplit(InputPartition):
    """One file of one version, read as one kind of change."""

    kind: str
    """``cdc``, ``insert``, ``delete`` or ``dv_delete``."""
    file: dict[str, Any]
    old_dv: dict[str, Any] | None
    version: int
    timestamp_ms: int

    def __init__(
        self,
        kind: str,
        file: dict[str, Any],
        version: int,
        timestamp_ms: int,
        old_dv: dict[str, Any] | None = None,
    ) -> None:
        self.kind, self.file, self.version = kind, file, version
        self.timestamp_ms, self.old_dv = timestamp_ms, old_dv


def _file_dict(action: AddFile | RemoveFile | AddCDCFile) -> dict[str, Any]:
    body = action.to_json_dict()
    return {
        "path": body["path"],
        "partitionValues": body.get("partitionValues") or {},
        "deletionVector": body.get("deletionVector"),
    }


def changes_of_commit(actions: Sequence[Any], version: int, timestamp_ms: int) -> list[ChangeSplit]:
    """The change splits of one commit (module docstring's rules)."""
    cdc = [a for a in actions if isinstance(a, AddCDCFile)]
    if cdc:
        return [ChangeSplit("cdc", _file_dict(a), version, timestamp_ms) for a in cdc]
    adds = {a.path: a for a in actions if isinstance(a, AddFile) and a.data_change}
    removes = {a.path: a for a in actions if isinstance(a, RemoveFile) and a.data_change}
    splits = []
    for path, remove in removes.items():
        if path in adds:
            old = remove.deletion_vector
            splits.append(
                ChangeSplit(
                    "dv_delete",
                    _file_dict(adds[path]),
                    version,
                    timestamp_ms,
                    old_dv=None
                    if old is None
                    else old.model_dump(by_alias=True, exclude_none=True),
                )
            )
        else:
            splits.append(ChangeSplit("delete", _file_dict(remove), version, timestamp_ms))
    splits.extend(
        ChangeSplit("insert", _file_dict(add), version, timestamp_ms)
        for path, add in adds.items()
        if path not in removes
    )
    return splits


def _resolve_range(
    uri: str, read: ReadOptions, store: Any, listing: Any, config: Any
) -> tuple[int, int]:
    from raydelta.protocol.commit_timestamps import version_at_timestamp
    from raydelta.storage.snapshot import _parse_timestamp_ms, commit_timestamps

    latest = max(f.require_version() for f in listing if f.kind.name == "COMMIT")
    start, end = read.starting_version, read.ending_version
    if start is None and read.starting_timestamp is None:
        raise InvalidArgumentError(
            "readChangeFeed needs startingVersion or startingTimestamp (delta-spark's rule)"
        )
    stamps = None
    if read.starting_timestamp is not None or read.ending_timestamp is not None:
        stamps = commit_timestamps(store, listing, config)
    if start is None and stamps is not None:
        wanted = _parse_timestamp_ms(read.starting_timestamp or "")
        later = [c.version for c in stamps if c.timestamp_ms >= wanted]
        start = min(later) if later else latest + 1
    if end is None and read.ending_timestamp is not None and stamps is not None:
        end = version_at_timestamp(stamps, _parse_timestamp_ms(read.ending_timestamp))
    end = latest if end is None else min(end, latest)
    assert start is not None
    return start, end


def plan_changes(uri: str, read: ReadOptions) -> list[ChangeSplit]:
    """Every change split of the range, in version order."""
    from raydelta.protocol.file_names import LogFileKind
    from raydelta.storage.log.reader import read_commits
    from raydelta.storage.log.store import log_store_for
    from raydelta.storage.snapshot import commit_timestamps, load_table_head

    store = log_store_for(uri)
    listing = store.list_from(0)
    latest_head = load_table_head(uri)
    start, end = _resolve_range(uri, read, store, listing, latest_head.table_configuration)
    if start > end:
        return []
    commits = [
        f for f in listing if f.kind is LogFileKind.COMMIT and start <= f.require_version() <= end
    ]
    found = [f.require_version() for f in commits]
    if found != list(range(start, end + 1)):
        missing = sorted(set(range(start, end + 1)) - set(found))
        raise VersionNotFoundError(
            f"versions {missing[:5]} of {uri} are no longer in the log; cannot read changes"
        )
    stamps = {
        c.version: c.timestamp_ms
        for c in commit_timestamps(store, listing, latest_head.table_configuration)
    }
    head = load_table_head(uri, version=start - 1) if start > 0 else None
    metadata = head.metadata if head is not None else None
    splits: list[ChangeSplit] = []
    for file, actions in zip(commits, read_commits(store, commits), strict=True):
        version = file.require_version()
        metadata = next((a for a in actions if isinstance(a, Metadata)), metadata)
        if metadata is None or metadata.configuration.get(CDF_PROPERTY, "false").lower() != "true":
            raise InvalidArgumentError(
                f"[DELTA_MISSING_CHANGE_DATA] change data was not recorded for version {version}"
                f" of {uri}: {CDF_PROPERTY} is not true there"
            )
        splits.extend(changes_of_commit(actions, version, stamps[version]))
    return splits


class ChangeFeedReader(DataSourceReader):
    """Rows of the change feed; the schema is the table's at the range's end."""

    def __init__(self, uri: str, read: ReadOptions) -> None:
        from raydelta.storage.snapshot import load_table_head

        head = load_table_head(uri, version=read.ending_version)
        assert head.metadata is not None
        self.uri = uri
        self.read_options = read
        self.schema_string = head.metadata.schema_string or '{"type":"struct","fields":[]}'
        self.partition_columns = list(head.metadata.partition_columns)
        self.mapping_mode = head.table_configuration.column_mapping_mode

    def partitions(self) -> Sequence[InputPartition]:
        return list(plan_changes(self.uri, self.read_options)) or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ChangeSplit):
            return
        table = self._rows(partition)
        n = table.num_rows
        if CHANGE_TYPE not in table.column_names:
            table = table.append_column(CHANGE_TYPE, pa.array([_change_name(partition.kind)] * n))
        table = table.append_column(
            "_commit_version", pa.array([partition.version] * n, pa.int64())
        )
        table = table.append_column(
            "_commit_timestamp",
            pa.array([partition.timestamp_ms * 1000] * n, pa.timestamp("us", tz="UTC")),
        )
        yield from table.to_batches()

    def _rows(self, split: ChangeSplit) -> pa.Table:
        from raydelta.protocol.deletion_vectors import DeletionVectorDescriptor
        from raydelta.storage.data.deletion_vectors import read_deletion_vector
        from raydelta.storage.data.files import read_logical_file

        schema = parse_schema(self.schema_string)
        if split.kind == "cdc":
            with_type = StructType((*schema.fields, StructField(CHANGE_TYPE, _STRING, True)))
            return read_logical_file(
                self.uri,
                split.file,
                with_type,
                self.partition_columns,
                column_mapping_mode=self.mapping_mode,
            )
        if split.kind != "dv_delete":
            return read_logical_file(
                self.uri,
                split.file,
                schema,
                self.partition_columns,
                column_mapping_mode=self.mapping_mode,
            )
        raw = read_logical_file(
            self.uri,
            {**split.file, "deletionVector": None},
            schema,
            self.partition_columns,
            column_mapping_mode=self.mapping_mode,
        )
        new = split.file.get("deletionVector")
        new_rows = (
            read_deletion_vector(DeletionVectorDescriptor.model_validate(new), self.uri)
            if new
            else pa.array([], pa.uint64())
        )
        old_rows = (
            read_deletion_vector(DeletionVectorDescriptor.model_validate(split.old_dv), self.uri)
            if split.old_dv
            else pa.array([], pa.uint64())
        )
        positions = pa.array(range(raw.num_rows), type=pa.uint64())
        newly = pc.and_(
            pc.is_in(positions, value_set=new_rows),
            pc.invert(pc.is_in(positions, value_set=old_rows)),
        )
        return raw.filter(newly)


def _change_name(kind: str) -> str:
    return "insert" if kind == "insert" else "delete"


def _string_type() -> Any:
    from raydelta.protocol.schema import PrimitiveType

    return PrimitiveType("string")


_STRING = _string_type()
