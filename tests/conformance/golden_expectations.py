"""What each delta-spark golden table must do under raydelta: the catalogue as data.

Every directory under ``delta-spark-golden/`` that holds a ``_delta_log``
(nested ones included), every top-level directory that is not a table, and
every top-level directory that only groups nested tables has exactly one
:class:`GoldenTable` entry here. ``test_golden_tables.py`` checks that this
list and the directory tree agree, so a table can neither be forgotten nor
skipped silently.

Sources of the expectations (no expected value here is invented):
- ``tests/data/delta-spark-golden/README.md`` (delta-spark's own tests, restated);
- delta-spark's generator (``GoldenTables.scala``) and reader suites
  (standalone ``DeltaLogSuite`` / ``DeltaTimeTravelSuite``, kernel
  ``LogReplaySuite``), read through the search tools, for the tables the
  README leaves out (canonicalized paths, corrupted ``_last_checkpoint``,
  ``update-deleted-directory``, checkpoint missing its protocol);
- ``deltalake`` (delta-rs) as an independent oracle for every table it loads;
  where it refuses a table, ``deltalake_refusal`` records why (and the test
  checks it still refuses, so the entry cannot go stale).

Every loadable table is additionally checked against a naive line-by-line
replay of its JSON commits written in the test (every golden table keeps all
of its commits, so that replay sees each version, checkpoint or not).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from raydelta.protocol.errors import (
    InvalidProtocolVersionException,
    MissingMetadataError,
    MissingProtocolError,
    RaydeltaError,
    TableNotFoundError,
    VersionsNotContiguousError,
)


class Kind(enum.Enum):
    TABLE = "table"
    """Loads; compared with the naive replay (and deltalake unless it refuses)."""
    ERROR = "error"
    """Loading the latest version must raise ``error``."""
    NOT_A_TABLE = "not-a-table"
    """A directory without ``_delta_log`` (or only grouping nested tables)."""


@dataclass(frozen=True)
class GoldenTable:
    name: str
    """Path relative to the golden root (``hive/deltatbl-partitioned``)."""
    exercises: str
    kind: Kind = Kind.TABLE
    deltalake_refusal: str | None = None
    """Why deltalake cannot serve as the oracle (``None``: it does)."""
    error: type[RaydeltaError] | None = None
    error_match: tuple[str, ...] = ()
    """Substrings the error message must contain."""
    checks: tuple[str, ...] = ()
    """Names of table-specific checks in ``test_golden_tables.CHECKS``."""
    known_bugs: Mapping[str, str] = field(default_factory=dict)
    """check name -> where raydelta is wrong: that check is ``xfail(strict=True)``."""


_NO_SCHEMA = "deltalake requires metaData.schemaString, which this hand-written log omits"
"""raydelta reads an absent ``schemaString`` as the empty schema (delta-spark's
log suites load these tables too), so they are checked against the naive replay."""


TABLES: tuple[GoldenTable, ...] = (
    # --- not tables -------------------------------------------------------
    GoldenTable(
        "log-store-listFrom",
        "LogStore listing fixture (files 1, 2, 3), no _delta_log",
        Kind.NOT_A_TABLE,
        error=TableNotFoundError,
    ),
    GoldenTable(
        "log-store-read",
        "LogStore read fixture (files 0, 1), no _delta_log",
        Kind.NOT_A_TABLE,
        error=TableNotFoundError,
    ),
    GoldenTable(
        "no-delta-log-folder",
        "parquet files without _delta_log: table-not-found",
        Kind.NOT_A_TABLE,
        error=TableNotFoundError,
    ),
    GoldenTable(
        "data-reader-date-types-America",
        "groups the nested table America/Los_Angeles; itself not a table",
        Kind.NOT_A_TABLE,
        error=TableNotFoundError,
    ),
    GoldenTable(
        "data-reader-date-types-Asia",
        "groups the nested table Asia/Beirut; itself not a table",
        Kind.NOT_A_TABLE,
        error=TableNotFoundError,
    ),
    GoldenTable(
        "data-reader-date-types-Etc",
        "groups the nested table Etc/GMT+9; itself not a table",
        Kind.NOT_A_TABLE,
        error=TableNotFoundError,
    ),
    GoldenTable(
        "hive",
        "groups eleven nested Hive-connector tables; itself not a table",
        Kind.NOT_A_TABLE,
        error=TableNotFoundError,
    ),
    # --- errors -------------------------------------------------------------
    GoldenTable(
        "versions-not-contiguous",
        "0.json and 2.json only: the gap must be reported",
        Kind.ERROR,
        deltalake_refusal="deltalake: 'Expected contiguous commit files, but found gap'",
        error=VersionsNotContiguousError,
        error_match=("versions are not contiguous", "[0, 2]"),
        checks=("versions_not_contiguous",),
    ),
    GoldenTable(
        "deltalog-state-reconstruction-without-protocol",
        "a commit with metaData and add but no protocol",
        Kind.ERROR,
        deltalake_refusal="deltalake: 'No protocol found in delta log'",
        error=MissingProtocolError,
    ),
    GoldenTable(
        "deltalog-state-reconstruction-without-metadata",
        "a commit with protocol and add but no metaData",
        Kind.ERROR,
        deltalake_refusal="deltalake: 'No table metadata found in delta log'",
        error=MissingMetadataError,
    ),
    GoldenTable(
        "deltalog-state-reconstruction-from-checkpoint-missing-metadata",
        "checkpoint at v10 rewritten without its metaData row",
        Kind.ERROR,
        deltalake_refusal="deltalake: 'No table metadata found in delta log'",
        error=MissingMetadataError,
        checks=("versions_before_broken_checkpoint_load",),
    ),
    GoldenTable(
        "deltalog-state-reconstruction-from-checkpoint-missing-protocol",
        "checkpoint at v10 rewritten without its protocol row (delta-spark DeltaLogSuite "
        "expects failure)",
        Kind.ERROR,
        deltalake_refusal=_NO_SCHEMA,
        error=MissingProtocolError,
        checks=("versions_before_broken_checkpoint_load",),
    ),
    GoldenTable(
        "deltalog-invalid-protocol-version",
        "protocol with minReaderVersion 99",
        Kind.ERROR,
        deltalake_refusal="deltalake: 'Reader features must not be present when minimum "
        "reader version != 3' (it rejects the empty readerFeatures list first)",
        error=InvalidProtocolVersionException,
        error_match=("99",),
    ),
    GoldenTable(
        "data-reader-absolute-paths-escaped-chars",
        "absolute and %-escaped add paths, but the log has no metaData action at all",
        Kind.ERROR,
        deltalake_refusal="deltalake: 'No table metadata found in delta log'",
        error=MissingMetadataError,
    ),
    # --- tables with their own expectations ----------------------------------
    GoldenTable(
        "checkpoint",
        "15 commits (add i, remove i-1), classic checkpoint at v10 + 4 commits",
        checks=("checkpoint_v14_one_file",),
    ),
    GoldenTable(
        "corrupted-last-checkpoint-kernel",
        "empty _last_checkpoint: the listing finds checkpoint v10; v11 holds rows 0-99",
        checks=("corrupted_last_checkpoint_kernel",),
    ),
    GoldenTable(
        "corrupted-last-checkpoint",
        "checkpoint v10 with _last_checkpoint; an emptied or garbage _last_checkpoint "
        "(written into a copy) must give the same snapshot",
        deltalake_refusal=_NO_SCHEMA,
        checks=("corrupted_last_checkpoint",),
    ),
    GoldenTable(
        "multi-part-checkpoint",
        "multi-part checkpoint at v1 in 2 parts; _last_checkpoint size 12, parts 2",
        checks=("multi_part_checkpoint",),
    ),
    GoldenTable(
        "v2-checkpoint-json",
        "V2 (UUID-named) JSON checkpoint at v2 with 2 parquet sidecars",
        checks=("v2_checkpoint",),
    ),
    GoldenTable(
        "v2-checkpoint-parquet",
        "V2 (UUID-named) parquet checkpoint at v2 with 2 parquet sidecars",
        checks=("v2_checkpoint",),
    ),
    GoldenTable(
        "only-checkpoint-files",
        "classic checkpoints at v1 and v2; loads from checkpoints alone once the JSON "
        "commits are deleted (in a copy)",
        checks=("only_checkpoint_files", "only_checkpoint_files_before_first_checkpoint"),
    ),
    GoldenTable(
        "spark-variant-checkpoint",
        "variantType-preview table, classic checkpoint at v2",
        checks=("spark_variant_checkpoint",),
    ),
    GoldenTable(
        "update-deleted-directory",
        "checkpoint at v0 with 10 files; the table directory deleted (in a copy) is "
        "table-not-found",
        deltalake_refusal=_NO_SCHEMA,
        checks=("update_deleted_directory",),
    ),
    GoldenTable(
        "snapshot-data0",
        "snapshot chain step 0: append (version 0)",
        checks=("snapshot_chain",),
    ),
    GoldenTable(
        "snapshot-data1",
        "snapshot chain step 1: append (version 1)",
        checks=("snapshot_chain",),
    ),
    GoldenTable(
        "snapshot-data2",
        "snapshot chain step 2: overwrite (version 2)",
        checks=("snapshot_chain",),
    ),
    GoldenTable(
        "snapshot-data3",
        "snapshot chain step 3: append (version 3)",
        checks=("snapshot_chain",),
    ),
    GoldenTable(
        "snapshot-data2-deleted",
        "snapshot chain step 4: DELETE of the data2 rows (version 4)",
        checks=("snapshot_chain",),
    ),
    GoldenTable(
        "snapshot-repartitioned",
        "snapshot chain step 5: rewrite with dataChange=false into 2 files",
        checks=("snapshot_chain",),
    ),
    GoldenTable(
        "snapshot-vacuumed",
        "snapshot chain after VACUUM: every version 0-5 by time travel",
        checks=("snapshot_chain",),
    ),
    GoldenTable(
        "delete-re-add-same-file-different-transactions",
        "foo added, removed, re-added with a new modificationTime; then bar",
        checks=("delete_re_add_same_file",),
    ),
    GoldenTable(
        "log-replay-dv-key-cases",
        "same path re-added with three successive DVs: one live add, cardinality 3",
        checks=("log_replay_dv_key_cases",),
    ),
    GoldenTable(
        "dv-partitioned-with-checkpoint",
        "partitioned DV table with a checkpoint: 35 live rows",
        checks=("dv_35_live_rows",),
    ),
    GoldenTable(
        "dv-with-columnmapping",
        "DVs + column mapping (name) with a checkpoint: 35 live rows",
        checks=("dv_35_live_rows",),
    ),
    GoldenTable(
        "log-replay-special-characters",
        "add then remove of the %-encoded path 'special p@#h'",
        checks=("special_characters_removed",),
    ),
    GoldenTable(
        "log-replay-special-characters-a",
        "add then remove of the %-encoded path 'special p@#h': no files",
        checks=("special_characters_removed",),
    ),
    GoldenTable(
        "log-replay-special-characters-b",
        "add of the %-encoded path 'special p@#h': one file",
        checks=("special_characters_added",),
    ),
    GoldenTable(
        "log-replay-latest-metadata-protocol",
        "later commits change the schema and upgrade the protocol to (3, 7)",
        checks=("latest_metadata_protocol",),
    ),
    GoldenTable(
        "deltalog-getChanges",
        "cdc action, remove, and txn fakeAppId -> 3",
        checks=("get_changes_txn",),
    ),
    GoldenTable(
        "deltalog-commit-info",
        "a commitInfo with every optional field (job, notebook, metrics...)",
        deltalake_refusal=_NO_SCHEMA,
        checks=("commit_info",),
    ),
    GoldenTable(
        "basic-with-vacuum-protocol-check-feature",
        "reader+writer feature vacuumProtocolCheck; 100 rows",
        checks=("vacuum_protocol_check",),
    ),
    GoldenTable(
        "125-iterator-bug",
        "12 commits incl. empty parquet files and a checkpoint at v10; rows 1-5",
        checks=("iterator_bug_rows",),
    ),
    GoldenTable(
        "time-travel-start",
        "time travel: one commit at 'start' (file mtime, set in a copy)",
        checks=("time_travel_by_timestamp",),
    ),
    GoldenTable(
        "time-travel-start-start20",
        "time travel: commits at start, +20 min (file mtimes, set in a copy)",
        checks=("time_travel_by_timestamp",),
    ),
    GoldenTable(
        "time-travel-start-start20-start40",
        "time travel: commits at start, +20 min, +40 min (file mtimes, set in a copy)",
        checks=("time_travel_by_timestamp",),
    ),
    GoldenTable(
        "canonicalized-paths-normal-a",
        "add '/some/unqualified/absolute/path', remove 'file:/...': the same file",
        deltalake_refusal=_NO_SCHEMA,
        checks=("canonicalized_paths",),
    ),
    GoldenTable(
        "canonicalized-paths-normal-b",
        "add '/some/unqualified/absolute/path', remove 'file:///...': the same file",
        deltalake_refusal=_NO_SCHEMA,
        checks=("canonicalized_paths",),
    ),
    GoldenTable(
        "canonicalized-paths-special-a",
        "as normal-a with a %-encoded path ('with%20space/p@%23h')",
        deltalake_refusal=_NO_SCHEMA,
        checks=("canonicalized_paths",),
    ),
    GoldenTable(
        "canonicalized-paths-special-b",
        "as normal-b with a %-encoded path ('with%20space/p@%23h')",
        deltalake_refusal=_NO_SCHEMA,
        checks=("canonicalized_paths",),
    ),
    # --- tables checked against deltalake + the naive replay only ---------------
    GoldenTable("124-decimal-decode-bug", "decimal column, one WRITE"),
    GoldenTable("basic-decimal-table", "decimals, partitioned by a decimal column"),
    GoldenTable("basic-decimal-table-legacy", "decimals in legacy parquet format, partitioned"),
    GoldenTable(
        "basic-with-inserts-deletes-checkpoint",
        "inserts and DELETEs over 14 commits with a checkpoint at v10",
    ),
    GoldenTable("basic-with-inserts-merge", "insert then MERGE (removes + adds)"),
    GoldenTable("basic-with-inserts-overwrite-restore", "overwrite then RESTORE, checkpoint"),
    GoldenTable("basic-with-inserts-updates", "insert then UPDATE (file rewrite)"),
    GoldenTable(
        "collations-preview-table",
        "writer features domainMetadata + collations-preview, no files",
    ),
    GoldenTable("collations-table", "writer features domainMetadata + collations, no files"),
    GoldenTable(
        "commit-info-containing-arbitrary-operationParams-types",
        "CTAS, WRITE, OPTIMIZE with non-string operationParameters; changeDataFeed",
    ),
    GoldenTable("data-reader-array-complex-objects", "nested arrays / maps / structs schema"),
    GoldenTable("data-reader-array-primitives", "arrays of primitives schema"),
    GoldenTable(
        "data-reader-date-types-America/Los_Angeles",
        "timestamp/date written under America/Los_Angeles (nested table)",
    ),
    GoldenTable(
        "data-reader-date-types-Asia/Beirut",
        "timestamp/date written under Asia/Beirut (nested table)",
    ),
    GoldenTable(
        "data-reader-date-types-Etc/GMT+9",
        "timestamp/date written under Etc/GMT+9 (nested table, '+' in the path)",
    ),
    GoldenTable("data-reader-date-types-Iceland", "timestamp/date written under Iceland"),
    GoldenTable("data-reader-date-types-JST", "timestamp/date written under JST"),
    GoldenTable("data-reader-date-types-PST", "timestamp/date written under PST"),
    GoldenTable("data-reader-date-types-UTC", "timestamp/date written under UTC"),
    GoldenTable(
        "data-reader-escaped-chars",
        "partition values 'bar+%21'...: doubly %-encoded partition directories",
    ),
    GoldenTable("data-reader-map", "map columns schema"),
    GoldenTable("data-reader-nested-struct", "nested struct schema"),
    GoldenTable(
        "data-reader-nullable-field-invalid-schema-key",
        "array<string> with nulls",
    ),
    GoldenTable(
        "data-reader-partition-values",
        "12 partition columns of every type incl. nulls (__HIVE_DEFAULT_PARTITION__)",
    ),
    GoldenTable("data-reader-primitives", "every primitive type"),
    GoldenTable("data-reader-timestamp_ntz", "timestampNtz reader/writer feature, partitioned"),
    GoldenTable(
        "data-reader-timestamp_ntz-id-mode",
        "timestampNtz + columnMapping id mode",
    ),
    GoldenTable(
        "data-reader-timestamp_ntz-name-mode",
        "timestampNtz + columnMapping name mode",
    ),
    GoldenTable("data-skipping-basic-stats-all-types", "file stats for every type"),
    GoldenTable(
        "data-skipping-basic-stats-all-types-checkpoint",
        "file stats for every type, checkpointInterval 1",
    ),
    GoldenTable(
        "data-skipping-basic-stats-all-types-columnmapping-id",
        "stats keyed by physical names, column mapping id (protocol 2, 5)",
    ),
    GoldenTable(
        "data-skipping-basic-stats-all-types-columnmapping-name",
        "stats keyed by physical names, column mapping name (protocol 2, 5)",
    ),
    GoldenTable(
        "data-skipping-change-stats-collected-across-versions",
        "dataSkippingNumIndexedCols changed between writes",
    ),
    GoldenTable("data-skipping-partition-and-data-column", "4 appends with stats"),
    GoldenTable("decimal-various-scale-precision", "decimals of many scales/precisions"),
    GoldenTable(
        "hive/deltatbl-column-names-case-insensitive",
        "mixed-case partition column BarFoo (nested table)",
    ),
    GoldenTable("hive/deltatbl-deleted-path", "plain table used for a deleted-path test"),
    GoldenTable("hive/deltatbl-incorrect-format-config", "plain table (Hive format config test)"),
    GoldenTable("hive/deltatbl-map-types-correctly", "map types (nested table)"),
    GoldenTable("hive/deltatbl-non-partitioned", "non-partitioned table (nested table)"),
    GoldenTable("hive/deltatbl-not-allow-write", "plain table (Hive write refusal test)"),
    GoldenTable("hive/deltatbl-partition-prune", "partitioned by date, city"),
    GoldenTable("hive/deltatbl-partitioned", "partitioned by c2"),
    GoldenTable("hive/deltatbl-schema-match", "partitioned by b"),
    GoldenTable(
        "hive/deltatbl-special-chars-in-partition-column",
        "partition values with ' ', '=' and '%' (%-encoded twice in paths)",
    ),
    GoldenTable("hive/deltatbl-touch-files-needed-for-partitioned", "partitioned by c2"),
    GoldenTable("kernel-timestamp-INT96", "INT96 timestamps, partitioned"),
    GoldenTable("kernel-timestamp-PST", "timestamps written under PST, partitioned"),
    GoldenTable("kernel-timestamp-TIMESTAMP_MICROS", "TIMESTAMP_MICROS parquet timestamps"),
    GoldenTable("kernel-timestamp-TIMESTAMP_MILLIS", "TIMESTAMP_MILLIS parquet timestamps"),
    GoldenTable(
        "kernel-timestamp-partition-col-ISO8601",
        "timestamp partition column with ':' %-encoded in paths",
    ),
    GoldenTable("parquet-all-types", "every parquet type; timestampNtz feature"),
    GoldenTable("parquet-all-types-legacy-format", "legacy parquet layout; timestampNtz"),
    GoldenTable("parquet-decimal-dictionaries", "dictionary-encoded decimals"),
    GoldenTable("parquet-decimal-dictionaries-v2", "dictionary-encoded decimals, parquet v2"),
    GoldenTable("parquet-decimal-type", "decimal parquet physical types"),
    GoldenTable("table-with-columnmapping-mode-id", "column mapping id mode (protocol 2, 5)"),
    GoldenTable("table-with-columnmapping-mode-name", "column mapping name mode (protocol 2, 5)"),
    GoldenTable(
        "table-with-icebegCompatV2Enabled",
        "icebergCompatV2 + columnMapping writer features (protocol 2, 7)",
    ),
    GoldenTable("time-travel-partition-changes-a", "partitioned by part5"),
    GoldenTable(
        "time-travel-partition-changes-b",
        "overwriteSchema to a new partition column part2 (every old file removed)",
    ),
    GoldenTable("time-travel-schema-changes-a", "one append"),
    GoldenTable("time-travel-schema-changes-b", "append with mergeSchema (new column)"),
    GoldenTable("type-widening", "typeWidening-preview + timestampNtz; widened columns"),
    GoldenTable("type-widening-nested", "typeWidening-preview in nested fields"),
)

BY_NAME: dict[str, GoldenTable] = {t.name: t for t in TABLES}
assert len(BY_NAME) == len(TABLES), "duplicate golden table entry"
