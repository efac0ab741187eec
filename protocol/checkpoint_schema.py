"""The Arrow layout of checkpoint and sidecar files, and rows in that layout.

PROTOCOL.md, "Checkpoint Schema" and "Checkpoints". One column per action
kind, each a struct; every row has exactly one non-null column.

Invariants:
- ``protocol.readerFeatures`` / ``writerFeatures`` are always in the schema
  as ``list<string>``; a row's value is a list (never null, ``[]`` when the
  action has none) when the table's reader version is >= 3 / writer version
  is >= 7, and null otherwise, as the spec requires.
- The ``add`` struct is the canonical ``add`` layout of
  :mod:`raydelta.protocol.file_actions`, without ``stats`` when
  ``delta.checkpoint.writeStatsAsJson`` is false, plus ``stats_parsed``
  (:meth:`TableConfiguration.stats_schema`) and, for a partitioned table,
  ``partitionValues_parsed`` when ``delta.checkpoint.writeStatsAsStruct`` is
  true. Both are keyed by physical column names under column mapping.
- The ``remove`` struct never has ``stats`` or ``tags`` (the canonical
  ``remove`` layout has neither).
- ``checkpointMetadata`` and ``sidecar`` columns exist only in V2 layouts.
- :attr:`CheckpointLayout.fingerprint` changes whenever the file-action
  layout changes, so a sidecar written under another layout is never reused.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from raydelta.protocol.actions import Action, Protocol, action_name
from raydelta.protocol.file_actions import ADD_TYPE, REMOVE_TYPE, STRING_MAP
from raydelta.protocol.partition_values import partition_values_to_arrow
from raydelta.protocol.schema import StructType
from raydelta.protocol.statistics import stats_to_arrow
from raydelta.protocol.table_configuration import TableConfiguration

STRING_LIST = pa.list_(pa.string())

PROTOCOL_TYPE = pa.struct(
    [
        pa.field("minReaderVersion", pa.int32()),
        pa.field("minWriterVersion", pa.int32()),
        pa.field("readerFeatures", STRING_LIST),
        pa.field("writerFeatures", STRING_LIST),
    ]
)

METADATA_TYPE = pa.struct(
    [
        pa.field("id", pa.string()),
        pa.field("name", pa.string()),
        pa.field("description", pa.string()),
        pa.field(
            "format",
            pa.struct([pa.field("provider", pa.string()), pa.field("options", STRING_MAP)]),
        ),
        pa.field("schemaString", pa.string()),
        pa.field("partitionColumns", STRING_LIST),
        pa.field("createdTime", pa.int64()),
        pa.field("configuration", STRING_MAP),
    ]
)

TXN_TYPE = pa.struct(
    [
        pa.field("appId", pa.string()),
        pa.field("version", pa.int64()),
        pa.field("lastUpdated", pa.int64()),
    ]
)

DOMAIN_METADATA_TYPE = pa.struct(
    [
        pa.field("domain", pa.string()),
        pa.field("configuration", pa.string()),
        pa.field("removed", pa.bool_()),
    ]
)

CHECKPOINT_METADATA_TYPE = pa.struct(
    [pa.field("version", pa.int64()), pa.field("tags", STRING_MAP)]
)

SIDECAR_TYPE = pa.struct(
    [
        pa.field("path", pa.string()),
        pa.field("sizeInBytes", pa.int64()),
        pa.field("modificationTime", pa.int64()),
        pa.field("tags", STRING_MAP),
    ]
)

CHECKPOINT_REMOVE_TYPE = REMOVE_TYPE

NON_FILE_TYPES: dict[str, pa.StructType] = {
    "checkpointMetadata": CHECKPOINT_METADATA_TYPE,
    "protocol": PROTOCOL_TYPE,
    "metaData": METADATA_TYPE,
    "txn": TXN_TYPE,
    "domainMetadata": DOMAIN_METADATA_TYPE,
    "sidecar": SIDECAR_TYPE,
}

V1_COLUMNS = ("protocol", "metaData", "txn", "add", "remove", "domainMetadata")
V2_COLUMNS = ("checkpointMetadata", *V1_COLUMNS, "sidecar")


def protocol_row(protocol: Protocol) -> dict[str, Any]:
    """The ``protocol`` struct value with the spec's rule on feature lists."""
    return {
        "minReaderVersion": protocol.min_reader_version,
        "minWriterVersion": protocol.min_writer_version,
        "readerFeatures": (
            list(protocol.reader_features or []) if protocol.min_reader_version >= 3 else None
        ),
        "writerFeatures": (
            list(protocol.writer_features or []) if protocol.min_writer_version >= 7 else None
        ),
    }


def _fingerprint(*types: pa.DataType) -> str:
    text = "|".join(str(t) for t in types)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class CheckpointLayout:
    """How one table's checkpoints lay out their rows (built from its configuration)."""

    add_type: pa.StructType
    remove_type: pa.StructType
    write_stats_as_json: bool
    stats_type: pa.StructType | None
    """Type of ``add.stats_parsed``; None when it is not written."""
    partition_schema: StructType | None
    """Partition columns' fields when ``add.partitionValues_parsed`` is written."""
    partition_columns: tuple[str, ...]
    column_mapping_mode: str

    @classmethod
    def for_table(cls, config: TableConfiguration) -> CheckpointLayout:
        """The layout the table's properties ask for."""
        fields = [f for f in ADD_TYPE if f.name != "stats" or config.write_stats_as_json]
        stats_type: pa.StructType | None = None
        partition_schema: StructType | None = None
        if config.write_stats_as_struct:
            if config.partition_columns:
                partition_schema = config.partition_schema
                parsed = partition_values_to_arrow(
                    [],
                    partition_schema,
                    config.partition_columns,
                    column_mapping_mode=config.column_mapping_mode.value,
                )
                fields.append(pa.field("partitionValues_parsed", parsed.type))
            stats_type = config.stats_schema()
            fields.append(pa.field("stats_parsed", stats_type))
        return cls(
            add_type=pa.struct(fields),
            remove_type=CHECKPOINT_REMOVE_TYPE,
            write_stats_as_json=config.write_stats_as_json,
            stats_type=stats_type,
            partition_schema=partition_schema,
            partition_columns=tuple(config.partition_columns),
            column_mapping_mode=config.column_mapping_mode.value,
        )

    @property
    def fingerprint(self) -> str:
        """A short digest of the file-action layout (recorded in sidecar tags)."""
        return _fingerprint(self.add_type, self.remove_type)

    def schema(self, *, v2: bool = False) -> pa.Schema:
        """The schema of a checkpoint file (V1, or V2 with its two extra columns)."""
        columns = V2_COLUMNS if v2 else V1_COLUMNS
        return pa.schema([pa.field(name, self.column_type(name)) for name in columns])

    def sidecar_schema(self) -> pa.Schema:
        """The schema of a sidecar file: ``add`` and ``remove`` only."""
        return pa.schema([pa.field("add", self.add_type), pa.field("remove", self.remove_type)])

    def column_type(self, name: str) -> pa.StructType:
        if name == "add":
            return self.add_type
        if name == "remove":
            return self.remove_type
        return NON_FILE_TYPES[name]

    def add_array(self, adds: pa.Table) -> pa.StructArray:
        """Canonical ``add`` rows (see :mod:`raydelta.protocol.file_actions`) as ``add`` structs."""
        children: list[pa.Array] = []
        for field in self.add_type:
            if field.name == "stats_parsed":
                assert self.stats_type is not None
                texts = adds.column("stats").to_pylist()
                children.append(_stats_arrow(texts, self.stats_type))
            elif field.name == "partitionValues_parsed":
                assert self.partition_schema is not None
                children.append(
                    partition_values_to_arrow(
                        adds.column("partitionValues"),
                        self.partition_schema,
                        self.partition_columns,
                        column_mapping_mode=self.column_mapping_mode,
                    ).cast(field.type)
                )
            else:
                children.append(_column(adds, field))
        return pa.StructArray.from_arrays(children, fields=list(self.add_type))

    def remove_array(self, removes: pa.Table) -> pa.StructArray:
        """Canonical ``remove`` rows as ``remove`` structs (no stats, no tags)."""
        children = [_column(removes, field) for field in self.remove_type]
        return pa.StructArray.from_arrays(children, fields=list(self.remove_type))


def _stats_arrow(texts: Sequence[str | None], stats_type: pa.StructType) -> pa.Array:
    if not texts:
        return pa.array([], type=stats_type)
    return stats_to_arrow(texts, stats_type)


def _column(table: pa.Table, field: pa.Field) -> pa.Array:
    if field.name not in table.column_names:
        return pa.nulls(table.num_rows, field.type)
    column = table.column(field.name)
    array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return array if array.type == field.type else array.cast(field.type)


def non_file_rows(actions: Sequence[Action]) -> dict[str, pa.Array]:
    """Non-file actions as struct columns, one per action kind (in input order)."""
    bodies: dict[str, list[dict[str, Any]]] = {}
    for action in actions:
        name = action_name(action)
        if name not in NON_FILE_TYPES:
            raise ValueError(f"a {name!r} action cannot be a non-file checkpoint row")
        body = protocol_row(action) if isinstance(action, Protocol) else action.to_json_dict()
        bodies.setdefault(name, []).append(body)
    return {name: pa.array(rows, type=NON_FILE_TYPES[name]) for name, rows in bodies.items()}


def assemble_rows(schema: pa.Schema, blocks: Sequence[tuple[str, pa.Array]]) -> pa.Table:
    """A checkpoint table from blocks of rows, each block filling one column.

    Rows come out in block order; in every row exactly one column is set.
    """
    columns: list[pa.Array] = []
    for field in schema:
        pieces: list[pa.Array] = []
        position = 0
        for name, array in blocks:
            if name == field.name:
                if position:
                    pieces.append(pa.nulls(position, field.type))
                    position = 0
                pieces.append(array if array.type == field.type else array.cast(field.type))
            else:
                position += len(array)
        if position or not pieces:
            pieces.append(pa.nulls(position, field.type))
        columns.append(pa.concat_arrays(pieces) if len(pieces) > 1 else pieces[0])
    return pa.Table.from_arrays(columns, schema=schema)
