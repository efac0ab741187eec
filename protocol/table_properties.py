"""Table-property keys (``metaData.configuration``) and their defaults.

Every ``delta.*`` table property raydelta reads or writes, and raydelta's
own ``raydelta.*`` properties, is spelled here once; the rest of the code
refers to these names, never to a string literal. Typed, validated access
to the values goes through
:class:`raydelta.protocol.table_configuration.TableConfiguration`.

Invariants:
- Constants and two readers of raw boolean values (:func:`is_true`,
  lenient; :func:`parse_bool_property`, strict); it imports only the error
  hierarchy, so every other module (protocol, storage, actors, the face)
  may import it.
- Keys are spelled exactly as the Delta protocol (and delta-spark) spell
  them; the defaults are the spec's (or delta-spark's, where the spec is
  silent). Durations are Spark interval strings, parsed by
  :func:`raydelta.protocol.table_configuration.parse_interval_ms`.
- Field-metadata keys of the schema (``delta.columnMapping.id`` on a
  column, ``delta.invariants``...) are not table properties and live with
  the schema; metadata-domain names and ``commitInfo`` tags neither.
"""

from __future__ import annotations

from collections.abc import Mapping

from raydelta.protocol.errors import InvalidTableError

# --- checkpoints ---------------------------------------------------------------------------

CHECKPOINT_INTERVAL = "delta.checkpointInterval"
DEFAULT_CHECKPOINT_INTERVAL = 10
CHECKPOINT_POLICY = "delta.checkpointPolicy"
DEFAULT_CHECKPOINT_POLICY = "classic"
WRITE_STATS_AS_JSON = "delta.checkpoint.writeStatsAsJson"
DEFAULT_WRITE_STATS_AS_JSON = True
WRITE_STATS_AS_STRUCT = "delta.checkpoint.writeStatsAsStruct"
DEFAULT_WRITE_STATS_AS_STRUCT = False

# raydelta's own: compact the log every k commits (unset: never).
COMPACTION_INTERVAL = "raydelta.compactionInterval"

# raydelta's own: the table gets a table host of its own instead of sharing one
# of the pool's (a hot table: its commits never share a process). Read when the
# table is activated; ``open_table(dedicated=True)`` does the same for one cluster.
DEDICATED_HOST = "raydelta.dedicatedHost"

# --- where data files may live --------------------------------------------------------------

# raydelta's own: whether file actions may name absolute URIs outside the table root
# (shallow clones, imported files). Off by default: a commit may then only reference
# files under the table root, so no reader is ever sent to a file the table's owner did
# not put there. delta-spark has no table property for this; it writes absolute paths
# only for shallow clones and its VACUUM refuses them unless the session sets
# spark.databricks.delta.vacuum.relativize.ignoreError. Judged on the table as it is
# before the commit (and the commit's own metaData when it creates the table).
ALLOW_EXTERNAL_FILES = "raydelta.allowExternalFiles"
DEFAULT_ALLOW_EXTERNAL_FILES = False

# --- retention and cleanup -----------------------------------------------------------------

LOG_RETENTION_DURATION = "delta.logRetentionDuration"
DEFAULT_LOG_RETENTION = "interval 30 days"
DELETED_FILE_RETENTION_DURATION = "delta.deletedFileRetentionDuration"
DEFAULT_DELETED_FILE_RETENTION = "interval 1 week"
CHECKPOINT_RETENTION_DURATION = "delta.checkpointRetentionDuration"
DEFAULT_CHECKPOINT_RETENTION = "interval 2 days"
SET_TRANSACTION_RETENTION_DURATION = "delta.setTransactionRetentionDuration"
ENABLE_EXPIRED_LOG_CLEANUP = "delta.enableExpiredLogCleanup"
DEFAULT_ENABLE_EXPIRED_LOG_CLEANUP = True
REQUIRE_CHECKPOINT_PROTECTION_BEFORE_VERSION = "delta.requireCheckpointProtectionBeforeVersion"

# --- writer and reader features turned on by a property ------------------------------------

IS_APPEND_ONLY = "delta.appendOnly"
ENABLE_CHANGE_DATA_FEED = "delta.enableChangeDataFeed"
ENABLE_DELETION_VECTORS = "delta.enableDeletionVectors"
ENABLE_ROW_TRACKING = "delta.enableRowTracking"
MATERIALIZED_ROW_ID_COLUMN = "delta.rowTracking.materializedRowIdColumnName"
MATERIALIZED_ROW_COMMIT_VERSION_COLUMN = "delta.rowTracking.materializedRowCommitVersionColumnName"
ENABLE_IN_COMMIT_TIMESTAMPS = "delta.enableInCommitTimestamps"
ICT_ENABLEMENT_VERSION = "delta.inCommitTimestampEnablementVersion"
ICT_ENABLEMENT_TIMESTAMP = "delta.inCommitTimestampEnablementTimestamp"
ENABLE_ICEBERG_COMPAT_V1 = "delta.enableIcebergCompatV1"
ENABLE_ICEBERG_COMPAT_V2 = "delta.enableIcebergCompatV2"
ENABLE_ICEBERG_COMPAT_V3 = "delta.enableIcebergCompatV3"
CONSTRAINTS_PREFIX = "delta.constraints."

# --- column mapping ------------------------------------------------------------------------

COLUMN_MAPPING_MODE = "delta.columnMapping.mode"
DEFAULT_COLUMN_MAPPING_MODE = "none"
COLUMN_MAPPING_MAX_ID = "delta.columnMapping.maxColumnId"

# --- data skipping and isolation -----------------------------------------------------------

DATA_SKIPPING_NUM_INDEXED_COLS = "delta.dataSkippingNumIndexedCols"
DEFAULT_NUM_INDEXED_COLS = 32
ISOLATION_LEVEL = "delta.isolationLevel"
DEFAULT_ISOLATION_LEVEL = "WriteSerializable"


def is_true(value: str | None) -> bool:
    """Whether a boolean property's raw value reads ``true`` (lenient: any case,
    surrounding blanks; anything else, or absent, is false). Strict parsing
    that refuses malformed values is :func:`parse_bool_property`."""
    return value is not None and value.strip().lower() == "true"


def parse_bool_property(configuration: Mapping[str, str], key: str, default: bool) -> bool:
    """A boolean table property (``true``/``false``, any case); absent → ``default``."""
    value = configuration.get(key)
    if value is None:
        return default
    text = value.strip().lower()
    if text == "true":
        return True
    if text == "false":
        return False
    raise InvalidTableError(f"table property {key} must be true or false, got {value!r}")
