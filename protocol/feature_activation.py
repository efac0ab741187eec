"""Feature activation: when a supported table feature is *active*.

PROTOCOL.md, "Table Features": a feature the protocol supports is active
when its metadata requirement holds, e.g. ``appendOnly`` with
``delta.appendOnly=true``, ``columnMapping`` with a mode other than ``none``,
``invariants`` with a column carrying ``delta.invariants``.

Invariants:
- Active is a subset of supported (:func:`raydelta.protocol.table_features.supported_features`).
- Features without an activation rule, unknown ones included, are active as
  soon as they are supported.
- A malformed boolean property raises :class:`InvalidTableError` naming it
  (:func:`raydelta.protocol.table_properties.parse_bool_property`), never
  reads as false.
- The schema is parsed only when a column-metadata rule needs it, once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from raydelta.protocol.actions import Metadata, Protocol
from raydelta.protocol.schema import (
    ColumnMappingMode,
    StructType,
    column_mapping_mode_from,
    parse_schema,
    walk_fields,
)
from raydelta.protocol.table_features import (
    ALLOW_COLUMN_DEFAULTS,
    APPEND_ONLY,
    CHANGE_DATA_FEED,
    CHECK_CONSTRAINTS,
    COLUMN_MAPPING,
    DELETION_VECTORS,
    GENERATED_COLUMNS,
    ICEBERG_COMPAT_V1,
    ICEBERG_COMPAT_V2,
    ICEBERG_COMPAT_V3,
    IDENTITY_COLUMNS,
    IN_COMMIT_TIMESTAMP,
    INVARIANTS,
    ROW_TRACKING,
    feature,
    supported_features,
)
from raydelta.protocol.table_properties import (
    COLUMN_MAPPING_MODE,
    CONSTRAINTS_PREFIX,
    ENABLE_CHANGE_DATA_FEED,
    ENABLE_DELETION_VECTORS,
    ENABLE_ICEBERG_COMPAT_V1,
    ENABLE_ICEBERG_COMPAT_V2,
    ENABLE_ICEBERG_COMPAT_V3,
    ENABLE_IN_COMMIT_TIMESTAMPS,
    ENABLE_ROW_TRACKING,
    IS_APPEND_ONLY,
    parse_bool_property,
)


def _schema_metadata_has(schema: StructType, predicate: Callable[[str], bool]) -> bool:
    return any(predicate(key) for _, f in walk_fields(schema) for key in f.metadata)


ActivationRule = Callable[[Mapping[str, str], Callable[[], StructType]], bool]
"""Whether a supported feature is active, from the configuration and (lazily) the schema."""


def _property_rule(key: str) -> ActivationRule:
    return lambda configuration, _schema: parse_bool_property(configuration, key, False)


def _column_metadata_rule(predicate: Callable[[str], bool]) -> ActivationRule:
    return lambda _configuration, schema: _schema_metadata_has(schema(), predicate)


def _column_mapping_rule(configuration: Mapping[str, str], _schema: object) -> bool:
    mode = column_mapping_mode_from(configuration.get(COLUMN_MAPPING_MODE))
    return mode is not ColumnMappingMode.NONE


def _check_constraints_rule(configuration: Mapping[str, str], _schema: object) -> bool:
    return any(key.startswith(CONSTRAINTS_PREFIX) for key in configuration)


# Features absent from this table are active as soon as they are supported.
_ACTIVATION_RULES: dict[str, ActivationRule] = {
    APPEND_ONLY: _property_rule(IS_APPEND_ONLY),
    CHANGE_DATA_FEED: _property_rule(ENABLE_CHANGE_DATA_FEED),
    DELETION_VECTORS: _property_rule(ENABLE_DELETION_VECTORS),
    ROW_TRACKING: _property_rule(ENABLE_ROW_TRACKING),
    IN_COMMIT_TIMESTAMP: _property_rule(ENABLE_IN_COMMIT_TIMESTAMPS),
    ICEBERG_COMPAT_V1: _property_rule(ENABLE_ICEBERG_COMPAT_V1),
    ICEBERG_COMPAT_V2: _property_rule(ENABLE_ICEBERG_COMPAT_V2),
    ICEBERG_COMPAT_V3: _property_rule(ENABLE_ICEBERG_COMPAT_V3),
    COLUMN_MAPPING: _column_mapping_rule,
    CHECK_CONSTRAINTS: _check_constraints_rule,
    INVARIANTS: _column_metadata_rule(lambda key: key == "delta.invariants"),
    GENERATED_COLUMNS: _column_metadata_rule(lambda key: key == "delta.generationExpression"),
    ALLOW_COLUMN_DEFAULTS: _column_metadata_rule(lambda key: key == "CURRENT_DEFAULT"),
    IDENTITY_COLUMNS: _column_metadata_rule(lambda key: key.startswith("delta.identity.")),
}


def _activation(name: str) -> ActivationRule | None:
    known = feature(name)
    return _ACTIVATION_RULES.get(known.name if known else name)


def active_features(protocol: Protocol, metadata: Metadata) -> frozenset[str]:
    """The supported features whose metadata requirements hold.

    Features whose rules are table properties (``delta.appendOnly``,
    ``delta.enableDeletionVectors``, ``delta.enableRowTracking``,
    ``delta.enableInCommitTimestamps``, ``delta.enableChangeDataFeed``,
    ``delta.enableIcebergCompatV*``, ``delta.columnMapping.mode``) or column
    metadata (invariants, generation expressions, defaults, identity) or
    ``delta.constraints.*`` are active only when those are present; every
    other supported feature (including unknown ones) is active.
    """
    schema_cache: list[StructType] = []

    def schema() -> StructType:
        if not schema_cache:
            text = metadata.schema_string
            schema_cache.append(StructType() if text is None else parse_schema(text))
        return schema_cache[0]

    active: set[str] = set()
    for name in supported_features(protocol):
        rule = _activation(name)
        if rule is None or rule(metadata.configuration, schema):
            active.add(name)
    return frozenset(active)


def is_feature_active(protocol: Protocol, metadata: Metadata, name: str) -> bool:
    return name in active_features(protocol, metadata)
