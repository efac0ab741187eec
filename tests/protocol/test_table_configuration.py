"""TableConfiguration: validation, typed properties with defaults, interval parsing."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raydelta.protocol.actions import Metadata, Protocol, parse_actions
from raydelta.protocol.errors import (
    InvalidProtocolError,
    InvalidProtocolVersionException,
    InvalidTableError,
    SchemaError,
    UnsupportedTableFeatureException,
)
from raydelta.protocol.schema import DATE, STRING, ColumnMappingMode
from raydelta.protocol.table_configuration import TableConfiguration, parse_interval_ms

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "delta-spark-golden"
DAY_MS = 24 * 3600 * 1000


def field(name: str, dtype: str = "long", cid: int | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    if cid is not None:
        metadata = {
            "delta.columnMapping.id": cid,
            "delta.columnMapping.physicalName": f"col-{name}",
        }
    return {"name": name, "type": dtype, "nullable": True, "metadata": metadata}


def config_of(
    configuration: dict[str, str] | None = None,
    *,
    fields: list[dict[str, Any]] | None = None,
    partition_columns: list[str] | None = None,
    protocol: Protocol | None = None,
) -> TableConfiguration:
    schema = {"type": "struct", "fields": fields if fields is not None else [field("id")]}
    metadata = Metadata(
        id="t",
        schemaString=json.dumps(schema),
        partitionColumns=partition_columns or [],
        configuration=configuration or {},
    )
    return TableConfiguration(
        protocol or Protocol(minReaderVersion=1, minWriterVersion=2), metadata
    )


# --- intervals --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("interval 30 days", 30 * DAY_MS),
        ("interval 1 week", 7 * DAY_MS),
        ("interval 2 hours", 2 * 3600 * 1000),
        ("7 days", 7 * DAY_MS),
        ("168 hours", 7 * DAY_MS),
        ("INTERVAL 1 DAY", DAY_MS),
        ("interval 1 day 12 hours", DAY_MS + 12 * 3600 * 1000),
        ("interval 2 weeks 1 day", 15 * DAY_MS),
        ("10 minutes", 600_000),
        ("1.5 seconds", 1500),
        ("250 milliseconds", 250),
        ("2000 microseconds", 2),
        ("interval 0 days", 0),
        ("  interval   3   days  ", 3 * DAY_MS),
    ],
)
def test_parse_interval_ms(text: str, ms: int) -> None:
    assert parse_interval_ms(text) == ms


@pytest.mark.parametrize(
    "text",
    [
        "",
        "interval",
        "30",
        "days",
        "1 month",
        "interval 1 year",
        "-1 day",
        "1 fortnight",
        "1 day and 2 hours",
    ],
)
def test_invalid_intervals(text: str) -> None:
    with pytest.raises(InvalidTableError):
        parse_interval_ms(text)


_UNITS = {
    "week": 7 * DAY_MS,
    "day": DAY_MS,
    "hour": 3_600_000,
    "minute": 60_000,
    "second": 1000,
    "millisecond": 1,
}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 10_000), st.sampled_from(sorted(_UNITS))), min_size=1, max_size=4
    ),
    st.booleans(),
    st.booleans(),
)
def test_interval_is_the_sum_of_its_parts(
    parts: list[tuple[int, str]], prefix: bool, plural: bool
) -> None:
    text = " ".join(f"{n} {unit}{'s' if plural else ''}" for n, unit in parts)
    if prefix:
        text = "interval " + text
    assert parse_interval_ms(text) == sum(n * _UNITS[unit] for n, unit in parts)


# --- defaults and typed properties ---------------------------------------------------------


def test_defaults_follow_the_spec() -> None:
    config = config_of()
    assert config.checkpoint_interval == 10
    assert config.log_retention_ms == 30 * DAY_MS
    assert config.deleted_file_retention_ms == 7 * DAY_MS
    assert config.checkpoint_retention_ms == 2 * DAY_MS
    assert config.set_transaction_retention_ms is None
    assert config.enable_expired_log_cleanup is True
    assert config.append_only is False
    assert config.enable_deletion_vectors is False
    assert config.change_data_feed_enabled is False
    assert config.in_commit_timestamps_enabled is False
    assert config.in_commit_timestamp_enablement is None
    assert config.row_tracking_enabled is False
    assert config.write_stats_as_json is True
    assert config.write_stats_as_struct is False
    assert config.checkpoint_policy == "classic"
    assert config.writes_v2_checkpoints is False
    assert config.is_catalog_managed is False
    assert config.column_mapping_mode is ColumnMappingMode.NONE
    assert config.max_column_id is None
    assert config.data_skipping_num_indexed_cols == 32
    assert config.isolation_level == "WriteSerializable"
    assert config.require_checkpoint_protection_before_version == 0


def test_properties_are_read_and_typed() -> None:
    protocol = Protocol(
        minReaderVersion=3,
        minWriterVersion=7,
        readerFeatures=["deletionVectors", "v2Checkpoint", "catalogManaged"],
        writerFeatures=[
            "deletionVectors",
            "v2Checkpoint",
            "catalogManaged",
            "appendOnly",
            "inCommitTimestamp",
            "rowTracking",
            "domainMetadata",
            "changeDataFeed",
        ],
    )
    config = config_of(
        {
            "delta.checkpointInterval": "5",
            "delta.logRetentionDuration": "interval 2 days",
            "delta.deletedFileRetentionDuration": "48 hours",
            "delta.setTransactionRetentionDuration": "interval 1 day",
            "delta.appendOnly": "true",
            "delta.enableDeletionVectors": "true",
            "delta.enableChangeDataFeed": "true",
            "delta.enableInCommitTimestamps": "true",
            "delta.inCommitTimestampEnablementVersion": "4",
            "delta.inCommitTimestampEnablementTimestamp": "1700000000000",
            "delta.enableRowTracking": "true",
            "delta.checkpoint.writeStatsAsJson": "false",
            "delta.checkpoint.writeStatsAsStruct": "true",
            "delta.checkpointPolicy": "v2",
            "delta.dataSkippingNumIndexedCols": "-1",
        },
        protocol=protocol,
    )
    assert config.checkpoint_interval == 5
    assert config.log_retention_ms == 2 * DAY_MS
    assert config.deleted_file_retention_ms == 2 * DAY_MS
    assert config.set_transaction_retention_ms == DAY_MS
    assert config.append_only and config.enable_deletion_vectors
    assert config.change_data_feed_enabled
    assert config.in_commit_timestamps_enabled
    assert config.in_commit_timestamp_enablement == (4, 1_700_000_000_000)
    assert config.row_tracking_enabled
    assert not config.write_stats_as_json and config.write_stats_as_struct
    assert config.checkpoint_policy == "v2" and config.writes_v2_checkpoints
    assert config.is_catalog_managed
    assert config.data_skipping_num_indexed_cols == -1
    config.ensure_readable()
    config.ensure_writable()


def test_properties_need_their_feature_supported() -> None:
    # delta.appendOnly on a writer-version-1 table: append-only is not supported.
    config = config_of(
        {"delta.appendOnly": "true", "delta.enableDeletionVectors": "true"},
        protocol=Protocol(minReaderVersion=1, minWriterVersion=1),
    )
    assert not config.append_only
    assert not config.enable_deletion_vectors


@pytest.mark.parametrize(
    ("key", "value", "getter"),
    [
        ("delta.checkpointInterval", "ten", "checkpoint_interval"),
        ("delta.checkpointInterval", "0", "checkpoint_interval"),
        ("delta.logRetentionDuration", "1 month", "log_retention_ms"),
        ("delta.deletedFileRetentionDuration", "soon", "deleted_file_retention_ms"),
        ("delta.checkpoint.writeStatsAsJson", "maybe", "write_stats_as_json"),
        ("delta.checkpointPolicy", "v3", "checkpoint_policy"),
        ("delta.appendOnly", "1", "append_only"),
        ("delta.dataSkippingNumIndexedCols", "-5", "data_skipping_num_indexed_cols"),
    ],
)
def test_malformed_properties_name_the_property(key: str, value: str, getter: str) -> None:
    config = config_of({key: value})
    with pytest.raises(InvalidTableError, match=key.replace(".", r"\.")):
        getattr(config, getter)


# --- schema, partitions, column mapping ----------------------------------------------------


def test_partition_columns_and_types() -> None:
    config = config_of(
        fields=[field("date", "date"), field("region", "string"), field("v")],
        partition_columns=["region", "date"],
    )
    assert config.partition_columns == ["region", "date"]
    assert [(f.name, f.type) for f in config.partition_fields] == [
        ("region", STRING),
        ("date", DATE),
    ]
    assert config.partition_schema.field_names == ["region", "date"]
    assert config.physical_partition_columns == ["region", "date"]
    stats = config.stats_schema()
    min_values = stats.field("minValues").type
    assert [min_values.field(i).name for i in range(min_values.num_fields)] == ["v"]
    assert config.arrow_schema().names == ["date", "region", "v"]


@pytest.mark.parametrize("columns", [["missing"], ["v", "v"]])
def test_bad_partition_columns_are_refused(columns: list[str]) -> None:
    with pytest.raises(InvalidTableError):
        config_of(fields=[field("v")], partition_columns=columns)


def test_column_mapping_is_honoured_only_when_supported() -> None:
    fields = [field("a", cid=1), field("p", "string", cid=2)]
    mapped = config_of(
        {"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "2"},
        fields=fields,
        partition_columns=["p"],
        protocol=Protocol(minReaderVersion=2, minWriterVersion=5),
    )
    assert mapped.column_mapping_mode is ColumnMappingMode.NAME
    assert mapped.physical_partition_columns == ["col-p"]
    assert mapped.max_column_id == 2
    assert mapped.arrow_schema(physical=True).names == ["col-a", "col-p"]
    assert "columnMapping" in mapped.active_features
    unsupported = config_of(
        {"delta.columnMapping.mode": "name"}, fields=fields, partition_columns=["p"]
    )
    assert unsupported.column_mapping_mode is ColumnMappingMode.NONE
    assert unsupported.physical_partition_columns == ["p"]
    assert unsupported.arrow_schema(physical=True).names == ["a", "p"]


def test_column_mapping_requires_physical_names_and_ids() -> None:
    protocol = Protocol(minReaderVersion=2, minWriterVersion=5)
    with pytest.raises(SchemaError, match="physical name"):
        config_of({"delta.columnMapping.mode": "name"}, fields=[field("a")], protocol=protocol)
    no_id = {
        "name": "a",
        "type": "long",
        "nullable": True,
        "metadata": {"delta.columnMapping.physicalName": "col-a"},
    }
    config_of({"delta.columnMapping.mode": "name"}, fields=[no_id], protocol=protocol)
    with pytest.raises(SchemaError, match="id"):
        config_of({"delta.columnMapping.mode": "id"}, fields=[no_id], protocol=protocol)
    with pytest.raises(SchemaError):
        config_of({"delta.columnMapping.mode": "sideways"}, protocol=protocol)


def test_protocol_is_validated_and_gates_delegate() -> None:
    with pytest.raises(InvalidProtocolError):
        config_of(protocol=Protocol(minReaderVersion=3, minWriterVersion=5, readerFeatures=[]))
    future = config_of(protocol=Protocol(minReaderVersion=1, minWriterVersion=8))
    future.ensure_readable()
    with pytest.raises(InvalidProtocolVersionException, match="8"):
        future.ensure_writable()
    unknown = config_of(
        protocol=Protocol(
            minReaderVersion=3, minWriterVersion=7, readerFeatures=["x"], writerFeatures=["x"]
        )
    )
    with pytest.raises(UnsupportedTableFeatureException, match="x"):
        unknown.ensure_readable()


def test_missing_schema_string_is_the_empty_schema() -> None:
    metadata = Metadata(id="t")
    config = TableConfiguration(Protocol(minReaderVersion=1, minWriterVersion=2), metadata)
    assert len(config.schema) == 0
    assert config.stats_schema() == pa.struct(
        [pa.field("numRecords", pa.int64()), pa.field("tightBounds", pa.bool_())]
    )


def test_pickles() -> None:
    config = config_of({"delta.appendOnly": "true"})
    copy = pickle.loads(pickle.dumps(config))
    assert copy.protocol == config.protocol and copy.metadata == config.metadata
    assert copy.append_only


# --- golden tables ---------------------------------------------------------------------------


def _latest_protocol_and_metadata() -> list[tuple[str, Protocol, Metadata]]:
    found: list[tuple[str, Protocol, Metadata]] = []
    if not GOLDEN.is_dir():
        return found
    for log in sorted(GOLDEN.rglob("_delta_log")):
        protocol: Protocol | None = None
        metadata: Metadata | None = None
        for path in sorted(log.glob("*.json")):
            for action in parse_actions(path.read_bytes()):
                if isinstance(action, Protocol):
                    protocol = action
                elif isinstance(action, Metadata):
                    metadata = action
        if protocol is not None and metadata is not None:
            found.append((str(log.parent.relative_to(GOLDEN)), protocol, metadata))
    return found


GOLDEN_STATES = _latest_protocol_and_metadata()


@pytest.mark.parametrize(
    ("table", "protocol", "metadata"), GOLDEN_STATES, ids=[t for t, _, _ in GOLDEN_STATES]
)
def test_golden_table_configurations(table: str, protocol: Protocol, metadata: Metadata) -> None:
    config = TableConfiguration(protocol, metadata)
    if table == "deltalog-invalid-protocol-version":
        with pytest.raises(InvalidProtocolVersionException, match="99"):
            config.ensure_readable()
        return
    config.ensure_readable()
    assert config.checkpoint_interval >= 1
    assert config.log_retention_ms == 30 * DAY_MS
    mode = metadata.configuration.get("delta.columnMapping.mode", "none")
    assert config.column_mapping_mode.value == mode
    assert len(config.physical_partition_columns) == len(metadata.partition_columns)
    config.stats_schema()
    if "delta.checkpointPolicy" in metadata.configuration:
        assert config.writes_v2_checkpoints
