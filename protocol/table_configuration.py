"""The one validated view over a table's (protocol, metadata) pair.

Raw ``Protocol`` and ``Metadata`` models are parsed leniently from the log;
:class:`TableConfiguration` validates them together once and offers the typed
facts the rest of raydelta trusts: the parsed schema, partition columns and
their types, the column-mapping mode, supported/active features, and table
properties with the spec's (and delta-spark's) defaults.

Invariants:
- Construction validates: the protocol's shape (``validate_protocol``), a
  parseable schema (an absent ``schemaString`` is the empty schema, as in
  delta-spark), partition columns that exist at the top level and are
  not repeated, and, under column mapping, a physical name and id on every
  field. It does *not* check that raydelta implements the features: call
  :meth:`TableConfiguration.ensure_readable` / ``ensure_writable``.
- ``delta.columnMapping.mode`` is honoured only when the protocol supports
  ``columnMapping`` (spec); otherwise the mode is ``none``.
- Property getters parse on access and raise :class:`InvalidTableError`
  naming the property when its value is malformed; absent properties take
  their default.
- Durations use Spark's interval syntax (``interval 30 days``, ``1 week``,
  ``168 hours``, ``interval 1 day 12 hours``): see :func:`parse_interval_ms`.
  Months and years are refused, as Delta refuses them for retention.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Literal

import pyarrow as pa

from raydelta.protocol.actions import Metadata, Protocol
from raydelta.protocol.errors import InvalidTableError, SchemaError
from raydelta.protocol.feature_activation import active_features
from raydelta.protocol.schema import (
    COLUMN_MAPPING_ID_KEY,
    COLUMN_MAPPING_PHYSICAL_NAME_KEY,
    ColumnMappingMode,
    StructField,
    StructType,
    column_mapping_mode_from,
    parse_schema,
    physical_name,
    walk_fields,
)
from raydelta.protocol.schema_arrow import to_arrow
from raydelta.protocol.statistics import stats_schema
from raydelta.protocol.table_features import (
    APPEND_ONLY,
    CATALOG_MANAGED,
    CATALOG_OWNED_PREVIEW,
    CHANGE_DATA_FEED,
    COLUMN_MAPPING,
    DELETION_VECTORS,
    IN_COMMIT_TIMESTAMP,
    ROW_TRACKING,
    V2_CHECKPOINT,
    ensure_readable,
    ensure_writable,
    supported_features,
    validate_protocol,
)
from raydelta.protocol.table_properties import (
    ALLOW_EXTERNAL_FILES,
    CHECKPOINT_INTERVAL,
    CHECKPOINT_POLICY,
    CHECKPOINT_RETENTION_DURATION,
    COLUMN_MAPPING_MAX_ID,
    COLUMN_MAPPING_MODE,
    COMPACTION_INTERVAL,
    DATA_SKIPPING_NUM_INDEXED_COLS,
    DEFAULT_ALLOW_EXTERNAL_FILES,
    DEFAULT_CHECKPOINT_INTERVAL,
    DEFAULT_CHECKPOINT_POLICY,
    DEFAULT_CHECKPOINT_RETENTION,
    DEFAULT_DELETED_FILE_RETENTION,
    DEFAULT_ENABLE_EXPIRED_LOG_CLEANUP,
    DEFAULT_ISOLATION_LEVEL,
    DEFAULT_LOG_RETENTION,
    DEFAULT_NUM_INDEXED_COLS,
    DEFAULT_WRITE_STATS_AS_JSON,
    DEFAULT_WRITE_STATS_AS_STRUCT,
    DELETED_FILE_RETENTION_DURATION,
    ENABLE_CHANGE_DATA_FEED,
    ENABLE_DELETION_VECTORS,
    ENABLE_EXPIRED_LOG_CLEANUP,
    ENABLE_ICEBERG_COMPAT_V1,
    ENABLE_ICEBERG_COMPAT_V2,
    ENABLE_ICEBERG_COMPAT_V3,
    ENABLE_IN_COMMIT_TIMESTAMPS,
    ENABLE_ROW_TRACKING,
    ICT_ENABLEMENT_TIMESTAMP,
    ICT_ENABLEMENT_VERSION,
    IS_APPEND_ONLY,
    ISOLATION_LEVEL,
    LOG_RETENTION_DURATION,
    REQUIRE_CHECKPOINT_PROTECTION_BEFORE_VERSION,
    SET_TRANSACTION_RETENTION_DURATION,
    WRITE_STATS_AS_JSON,
    WRITE_STATS_AS_STRUCT,
    parse_bool_property,
)

CheckpointPolicy = Literal["classic", "v2"]

TABLE_ISOLATION_LEVELS = frozenset({"Serializable", "WriteSerializable"})
"""The values delta-spark accepts for ``delta.isolationLevel``."""

BOOLEAN_PROPERTIES = (
    IS_APPEND_ONLY,
    ENABLE_CHANGE_DATA_FEED,
    ENABLE_DELETION_VECTORS,
    ENABLE_ROW_TRACKING,
    ENABLE_IN_COMMIT_TIMESTAMPS,
    ENABLE_ICEBERG_COMPAT_V1,
    ENABLE_ICEBERG_COMPAT_V2,
    ENABLE_ICEBERG_COMPAT_V3,
    ENABLE_EXPIRED_LOG_CLEANUP,
    WRITE_STATS_AS_JSON,
    WRITE_STATS_AS_STRUCT,
    ALLOW_EXTERNAL_FILES,
)
"""Known boolean table properties: ``true``/``false`` (any case) or absent."""

# --- intervals --------------------------------------------------------------------------

_MS_PER_UNIT = {
    "week": Decimal(7 * 24 * 3600 * 1000),
    "day": Decimal(24 * 3600 * 1000),
    "hour": Decimal(3600 * 1000),
    "minute": Decimal(60 * 1000),
    "second": Decimal(1000),
    "millisecond": Decimal(1),
    "microsecond": Decimal("0.001"),
}
_MONTH_UNITS = frozenset({"month", "year"})
_PAIR_RE = re.compile(r"([+-]?\d+(?:\.\d+)?)\s*([a-z]+)")


def parse_interval_ms(text: str) -> int:
    """Milliseconds of a Spark calendar-interval string.

    Accepts an optional ``interval`` prefix and one or more ``<number>
    <unit>`` pairs, units week, day, hour, minute, second, millisecond,
    microsecond (singular or plural, any case): ``interval 30 days``,
    ``1 week``, ``168 hours``, ``interval 1 day 12 hours``, ``1.5 seconds``.
    Month and year units (not a fixed duration) and negative totals are
    refused with :class:`InvalidTableError`.
    """
    body = text.strip().lower()
    if body.startswith("interval"):
        body = body[len("interval") :]
    body = body.strip()
    total = Decimal(0)
    position = 0
    matched = False
    while position < len(body):
        match = _PAIR_RE.match(body, position)
        if match is None:
            raise InvalidTableError(f"invalid interval {text!r}")
        number, unit = match.groups()
        if unit.endswith("s") and (unit[:-1] in _MS_PER_UNIT or unit[:-1] in _MONTH_UNITS):
            unit = unit[:-1]
        if unit in _MONTH_UNITS:
            raise InvalidTableError(
                f"interval {text!r} uses {unit}s, which have no fixed length; use days or weeks"
            )
        if unit not in _MS_PER_UNIT:
            raise InvalidTableError(f"invalid interval unit {unit!r} in {text!r}")
        try:
            total += Decimal(number) * _MS_PER_UNIT[unit]
        except InvalidOperation as exc:
            raise InvalidTableError(f"invalid interval {text!r}") from exc
        matched = True
        position = match.end()
        while position < len(body) and body[position] == " ":
            position += 1
    if not matched:
        raise InvalidTableError(f"invalid interval {text!r}: no duration")
    if total < 0:
        raise InvalidTableError(f"interval {text!r} is negative")
    return int(total)


# --- the view -------------------------------------------------------------------------------


class TableConfiguration:
    """Validated protocol + metadata of one table version.

    >>> from raydelta.protocol.actions import Metadata, Protocol
    >>> schema = '{"type":"struct","fields":[{"name":"a","type":"long","nullable":true,'
    >>> schema += '"metadata":{}}]}'
    >>> config = TableConfiguration(
    ...     Protocol(minReaderVersion=1, minWriterVersion=2),
    ...     Metadata(id="t", schemaString=schema, configuration={"delta.appendOnly": "true"}),
    ... )
    >>> config.append_only, config.checkpoint_interval
    (True, 10)
    """

    __slots__ = (
        "_active",
        "_column_mapping_mode",
        "_partition_fields",
        "_schema",
        "_supported",
        "metadata",
        "protocol",
    )

    def __init__(self, protocol: Protocol, metadata: Metadata) -> None:
        validate_protocol(protocol)
        self.protocol = protocol
        self.metadata = metadata
        # A metaData without schemaString (hand-written delta-spark test logs)
        # reads as an empty schema, as delta-spark reads it.
        text = metadata.schema_string
        self._schema = StructType() if text is None else parse_schema(text)
        self._supported = supported_features(protocol)
        self._active: frozenset[str] | None = None
        mode = column_mapping_mode_from(metadata.configuration.get(COLUMN_MAPPING_MODE))
        self._column_mapping_mode = (
            mode if COLUMN_MAPPING in self._supported else ColumnMappingMode.NONE
        )
        self._partition_fields = self._validated_partition_fields()
        if self._column_mapping_mode is not ColumnMappingMode.NONE:
            self._validate_column_mapping()

    def _validated_partition_fields(self) -> tuple[StructField, ...]:
        columns = self.metadata.partition_columns
        if len(set(columns)) != len(columns):
            raise InvalidTableError(f"partition columns are repeated: {columns}")
        fields = []
        for name in columns:
            found = self._schema.get(name)
            if found is None:
                raise InvalidTableError(
                    f"partition column {name!r} is not a column of the schema "
                    f"({self._schema.field_names})"
                )
            fields.append(found)
        return tuple(fields)

    def _validate_column_mapping(self) -> None:
        for path, f in walk_fields(self._schema):
            if COLUMN_MAPPING_PHYSICAL_NAME_KEY not in f.metadata:
                raise SchemaError(
                    f"column {'.'.join(path)!r} has no physical name under column mapping"
                )
            if self._column_mapping_mode is ColumnMappingMode.ID and (
                COLUMN_MAPPING_ID_KEY not in f.metadata
            ):
                raise SchemaError(f"column {'.'.join(path)!r} has no id under column mapping")

    def __repr__(self) -> str:
        return (
            f"TableConfiguration(reader={self.protocol.min_reader_version}, "
            f"writer={self.protocol.min_writer_version}, "
            f"features={sorted(self._supported)}, columns={self._schema.field_names})"
        )

    def __reduce__(self) -> tuple[type[TableConfiguration], tuple[Protocol, Metadata]]:
        return (TableConfiguration, (self.protocol, self.metadata))

    # --- schema and partitions ---------------------------------------------------------

    @property
    def schema(self) -> StructType:
        return self._schema

    @property
    def configuration(self) -> Mapping[str, str]:
        return self.metadata.configuration

    @property
    def column_mapping_mode(self) -> ColumnMappingMode:
        return self._column_mapping_mode

    @property
    def partition_columns(self) -> list[str]:
        return list(self.metadata.partition_columns)

    @property
    def partition_fields(self) -> tuple[StructField, ...]:
        """The partition columns' fields (name, type...), in partition order."""
        return self._partition_fields

    @property
    def partition_schema(self) -> StructType:
        return StructType(self._partition_fields)

    @property
    def physical_partition_columns(self) -> list[str]:
        """The keys of ``add.partitionValues``."""
        return [physical_name(f, self._column_mapping_mode) for f in self._partition_fields]

    def physical_name(self, field: StructField) -> str:
        return physical_name(field, self._column_mapping_mode)

    def arrow_schema(self, *, physical: bool = False) -> pa.Schema:
        return to_arrow(
            self._schema,
            physical=physical and self._column_mapping_mode is not ColumnMappingMode.NONE,
        )

    def stats_schema(self) -> pa.StructType:
        """The Arrow type of ``stats_parsed`` for this table."""
        return stats_schema(
            self._schema,
            physical=self._column_mapping_mode is not ColumnMappingMode.NONE,
            partition_columns=self.metadata.partition_columns,
            num_indexed_cols=self.data_skipping_num_indexed_cols,
        )

    # --- features ---------------------------------------------------------------------

    @property
    def supported_features(self) -> frozenset[str]:
        return self._supported

    @property
    def active_features(self) -> frozenset[str]:
        if self._active is None:
            self._active = active_features(self.protocol, self.metadata)
        return self._active

    def is_feature_supported(self, name: str) -> bool:
        return name in self._supported

    def is_feature_active(self, name: str) -> bool:
        return name in self.active_features

    def ensure_readable(self) -> None:
        ensure_readable(self.protocol)

    def ensure_writable(self) -> None:
        ensure_writable(self.protocol)

    # --- properties ---------------------------------------------------------------------

    def _bool(self, key: str, default: bool) -> bool:
        return parse_bool_property(self.metadata.configuration, key, default)

    def _int(self, key: str, default: int | None) -> int | None:
        value = self.metadata.configuration.get(key)
        if value is None:
            return default
        try:
            return int(value.strip())
        except ValueError as exc:
            raise InvalidTableError(
                f"table property {key} must be an integer, got {value!r}"
            ) from exc

    def _interval(self, key: str, default: str) -> int:
        value = self.metadata.configuration.get(key, default)
        try:
            return parse_interval_ms(value)
        except InvalidTableError as exc:
            raise InvalidTableError(f"table property {key}: {exc}") from exc

    @property
    def checkpoint_interval(self) -> int:
        """Commits between checkpoints (``delta.checkpointInterval``, default 10)."""
        value = self._int(CHECKPOINT_INTERVAL, DEFAULT_CHECKPOINT_INTERVAL)
        assert value is not None
        if value <= 0:
            raise InvalidTableError(f"{CHECKPOINT_INTERVAL} must be positive, got {value}")
        return value

    @property
    def log_retention_ms(self) -> int:
        """How long commits are kept (``delta.logRetentionDuration``, 30 days)."""
        return self._interval(LOG_RETENTION_DURATION, DEFAULT_LOG_RETENTION)

    @property
    def deleted_file_retention_ms(self) -> int:
        """How long removed files are kept (``delta.deletedFileRetentionDuration``, 1 week)."""
        return self._interval(DELETED_FILE_RETENTION_DURATION, DEFAULT_DELETED_FILE_RETENTION)

    @property
    def checkpoint_retention_ms(self) -> int:
        """``delta.checkpointRetentionDuration`` (2 days)."""
        return self._interval(CHECKPOINT_RETENTION_DURATION, DEFAULT_CHECKPOINT_RETENTION)

    @property
    def set_transaction_retention_ms(self) -> int | None:
        """``delta.setTransactionRetentionDuration``; None (keep forever) when unset."""
        if SET_TRANSACTION_RETENTION_DURATION not in self.metadata.configuration:
            return None
        return self._interval(SET_TRANSACTION_RETENTION_DURATION, "")

    @property
    def enable_expired_log_cleanup(self) -> bool:
        return self._bool(ENABLE_EXPIRED_LOG_CLEANUP, DEFAULT_ENABLE_EXPIRED_LOG_CLEANUP)

    @property
    def append_only(self) -> bool:
        """Whether the append-only rules are in force (supported and ``delta.appendOnly``)."""
        return APPEND_ONLY in self.active_features

    @property
    def enable_deletion_vectors(self) -> bool:
        """Whether writers may write new deletion vectors."""
        return DELETION_VECTORS in self.active_features

    @property
    def change_data_feed_enabled(self) -> bool:
        return CHANGE_DATA_FEED in self.active_features

    @property
    def in_commit_timestamps_enabled(self) -> bool:
        return IN_COMMIT_TIMESTAMP in self.active_features

    @property
    def in_commit_timestamp_enablement(self) -> tuple[int, int] | None:
        """``(version, timestamp)`` at which In-Commit Timestamps were enabled, if recorded."""
        version = self._int(ICT_ENABLEMENT_VERSION, None)
        timestamp = self._int(ICT_ENABLEMENT_TIMESTAMP, None)
        if version is None or timestamp is None:
            return None
        return version, timestamp

    @property
    def row_tracking_enabled(self) -> bool:
        return ROW_TRACKING in self.active_features

    @property
    def write_stats_as_json(self) -> bool:
        """``delta.checkpoint.writeStatsAsJson`` (default true)."""
        return self._bool(WRITE_STATS_AS_JSON, DEFAULT_WRITE_STATS_AS_JSON)

    @property
    def write_stats_as_struct(self) -> bool:
        """``delta.checkpoint.writeStatsAsStruct`` (default false)."""
        return self._bool(WRITE_STATS_AS_STRUCT, DEFAULT_WRITE_STATS_AS_STRUCT)

    @property
    def checkpoint_policy(self) -> CheckpointPolicy:
        """``delta.checkpointPolicy``: ``classic`` (default) or ``v2``."""
        configuration = self.metadata.configuration
        value = configuration.get(CHECKPOINT_POLICY, DEFAULT_CHECKPOINT_POLICY).strip().lower()
        if value == "classic":
            return "classic"
        if value == "v2":
            return "v2"
        raise InvalidTableError(f"{CHECKPOINT_POLICY} must be classic or v2, got {value!r}")

    @property
    def writes_v2_checkpoints(self) -> bool:
        """Policy ``v2`` on a table that supports ``v2Checkpoint``."""
        return self.checkpoint_policy == "v2" and V2_CHECKPOINT in self._supported

    @property
    def is_catalog_managed(self) -> bool:
        return CATALOG_MANAGED in self._supported or CATALOG_OWNED_PREVIEW in self._supported

    @property
    def max_column_id(self) -> int | None:
        """``delta.columnMapping.maxColumnId``, or None when unset."""
        return self._int(COLUMN_MAPPING_MAX_ID, None)

    @property
    def data_skipping_num_indexed_cols(self) -> int:
        """``delta.dataSkippingNumIndexedCols`` (32; -1 means all columns)."""
        value = self._int(DATA_SKIPPING_NUM_INDEXED_COLS, DEFAULT_NUM_INDEXED_COLS)
        assert value is not None
        if value < -1:
            raise InvalidTableError(
                f"{DATA_SKIPPING_NUM_INDEXED_COLS} must be -1 or more, got {value}"
            )
        return value

    @property
    def isolation_level(self) -> str:
        """``delta.isolationLevel`` (``WriteSerializable`` by default)."""
        return self.metadata.configuration.get(ISOLATION_LEVEL, DEFAULT_ISOLATION_LEVEL)

    @property
    def allow_external_files(self) -> bool:
        """``raydelta.allowExternalFiles`` (false): may file actions name absolute
        URIs outside the table root."""
        return self._bool(ALLOW_EXTERNAL_FILES, DEFAULT_ALLOW_EXTERNAL_FILES)

    def validate_properties(self) -> None:
        """Parse every known table property that has a parser; raise
        :class:`InvalidTableError` naming the first malformed one.

        Covers the booleans of :data:`BOOLEAN_PROPERTIES`, the intervals
        (``delta.logRetentionDuration``...), the integers
        (``delta.checkpointInterval``, ``delta.dataSkippingNumIndexedCols``,
        ``delta.columnMapping.maxColumnId``, the ICT enablement pair,
        ``delta.requireCheckpointProtectionBeforeVersion``,
        ``raydelta.compactionInterval``), ``delta.checkpointPolicy`` and
        ``delta.isolationLevel``. Unknown keys are not judged (tables carry
        other engines' properties).
        """
        configuration = self.metadata.configuration
        for key in BOOLEAN_PROPERTIES:
            parse_bool_property(configuration, key, False)
        _ = (
            self.checkpoint_interval,
            self.log_retention_ms,
            self.deleted_file_retention_ms,
            self.checkpoint_retention_ms,
            self.set_transaction_retention_ms,
            self.checkpoint_policy,
            self.max_column_id,
            self.data_skipping_num_indexed_cols,
            self.in_commit_timestamp_enablement,
            self.require_checkpoint_protection_before_version,
        )
        for key in (ICT_ENABLEMENT_VERSION, ICT_ENABLEMENT_TIMESTAMP, COLUMN_MAPPING_MAX_ID):
            value = self._int(key, None)
            if value is not None and value < 0:
                raise InvalidTableError(f"table property {key} must be ≥ 0, got {value}")
        compaction = self._int(COMPACTION_INTERVAL, None)
        if compaction is not None and compaction <= 0:
            raise InvalidTableError(f"{COMPACTION_INTERVAL} must be positive, got {compaction}")
        level = configuration.get(ISOLATION_LEVEL)
        if level is not None and level not in TABLE_ISOLATION_LEVELS:
            raise InvalidTableError(
                f"{ISOLATION_LEVEL} must be one of {sorted(TABLE_ISOLATION_LEVELS)}, got {level!r}"
            )

    @property
    def require_checkpoint_protection_before_version(self) -> int:
        value = self._int(REQUIRE_CHECKPOINT_PROTECTION_BEFORE_VERSION, 0)
        assert value is not None
        return value
