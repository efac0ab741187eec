"""Writer-side commit rules: one passing and one failing case per rule."""

from __future__ import annotations

import json
from typing import Any

import pytest

from raydelta.protocol.actions import (
    Action,
    AddCDCFile,
    AddFile,
    CheckpointMetadata,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    Sidecar,
    Txn,
    UnknownAction,
)
from raydelta.protocol.commit_rules import validate_commit
from raydelta.protocol.deletion_vectors import DeletionVectorDescriptor
from raydelta.protocol.errors import (
    AppendOnlyViolationError,
    DuplicateActionError,
    IllegalActionError,
    InvalidCommitError,
    InvalidCommitInfoError,
    InvalidFileActionError,
    InvalidMetadataChangeError,
    ProtocolDowngradeError,
    UnsupportedTableFeatureException,
)
from raydelta.protocol.table_configuration import TableConfiguration


def field(name: str, type_: str) -> dict[str, Any]:
    return {"name": name, "type": type_, "nullable": True, "metadata": {}}


SCHEMA = json.dumps({"type": "struct", "fields": [field("date", "date"), field("v", "long")]})
LEGACY = Protocol(minReaderVersion=1, minWriterVersion=2)
FEATURES = Protocol(
    minReaderVersion=3,
    minWriterVersion=7,
    readerFeatures=["deletionVectors"],
    writerFeatures=[
        "appendOnly",
        "invariants",
        "deletionVectors",
        "domainMetadata",
        "inCommitTimestamp",
    ],
)
ROW_TRACKING = FEATURES.model_copy(
    update={"writer_features": [*(FEATURES.writer_features or []), "rowTracking"]}
)
METADATA = Metadata(id="t", schemaString=SCHEMA, partitionColumns=["date"])
ICT_METADATA = METADATA.model_copy(
    update={"configuration": {"delta.enableInCommitTimestamps": "true"}}
)
LEGACY_CONFIG = TableConfiguration(LEGACY, METADATA)
FEATURE_CONFIG = TableConfiguration(FEATURES, METADATA)

DV = DeletionVectorDescriptor.model_validate(
    {
        "storageType": "u",
        "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
        "offset": 4,
        "sizeInBytes": 40,
        "cardinality": 6,
    }
)
OTHER_DV = DV.model_copy(update={"offset": 50})


def add(path: str = "f.parquet", **kw: Any) -> AddFile:
    fields: dict[str, Any] = {
        "path": path,
        "partitionValues": {"date": "2024-01-01"},
        "size": 1,
        "modificationTime": 1,
        "stats": '{"numRecords":10}',
    }
    fields.update(kw)
    return AddFile.model_validate(fields)


def remove(path: str = "f.parquet", **kw: Any) -> RemoveFile:
    return RemoveFile.model_validate({"path": path, **kw})


def ok(actions: list[Action], config: TableConfiguration = LEGACY_CONFIG, **kw: Any) -> None:
    validate_commit(actions, is_create=False, table_configuration=config, **kw)


def bad(
    error: type[Exception],
    actions: list[Action],
    config: TableConfiguration = LEGACY_CONFIG,
    **kw: Any,
) -> None:
    with pytest.raises(error):
        validate_commit(actions, is_create=False, table_configuration=config, **kw)


def test_a_plain_append_is_valid_and_returns_the_configuration() -> None:
    after = validate_commit(
        [CommitInfo(), add()], is_create=False, protocol=LEGACY, metadata=METADATA
    )
    assert after.partition_columns == ["date"]


# --- reconciling actions --------------------------------------------------------------


@pytest.mark.parametrize(
    "actions",
    [
        [METADATA, METADATA],
        [LEGACY, LEGACY],
        [CommitInfo(), CommitInfo()],
        [Txn(appId="a", version=1), Txn(appId="a", version=2)],
        [add("x"), add("x")],
        [add("x", deletionVector=DV), add("x", deletionVector=OTHER_DV)],
        [remove("x"), remove("x")],
        [add("x", deletionVector=DV), remove("x", deletionVector=DV.model_dump(by_alias=True))],
        [add("x"), remove("x")],
        [AddCDCFile(path="c", size=1), AddCDCFile(path="c", size=2)],
    ],
    ids=[
        "metadata",
        "protocol",
        "commitInfo",
        "txn",
        "add-twice",
        "add-two-dvs",
        "remove-twice",
        "add-and-remove-same-dv",
        "add-and-remove-no-dv",
        "cdc-twice",
    ],
)
def test_duplicate_actions_are_refused(actions: list[Action]) -> None:
    bad(DuplicateActionError, actions, FEATURE_CONFIG)


def test_legal_pairs_of_file_actions() -> None:
    # same path in add and remove with different DVs (a DV update), and in cdc
    ok(
        [
            remove("x", deletionVector=DV.model_dump(by_alias=True)),
            add("x", deletionVector=OTHER_DV),
            AddCDCFile(path="x", size=1),
        ],
        FEATURE_CONFIG,
    )
    ok([Txn(appId="a", version=1), Txn(appId="b", version=1)])


def test_duplicate_domains_are_refused() -> None:
    d = DomainMetadata(domain="com.x", configuration="{}")
    ok([d], FEATURE_CONFIG)
    bad(DuplicateActionError, [d, d], FEATURE_CONFIG)


# --- action kinds ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "action",
    [
        Sidecar(path="s.parquet", sizeInBytes=1, modificationTime=1),
        CheckpointMetadata(version=3),
        UnknownAction(name="futureAction", body={}),
    ],
)
def test_checkpoint_only_and_unknown_actions_are_refused(action: Action) -> None:
    bad(IllegalActionError, [add(), action])


def test_system_domains() -> None:
    ok(
        [DomainMetadata(domain="delta.rowTracking", configuration='{"highWaterMark":1}')],
        FEATURE_CONFIG,
    )
    ok([DomainMetadata(domain="com.example", configuration="{}")], FEATURE_CONFIG)
    bad(
        IllegalActionError,
        [DomainMetadata(domain="delta.somethingElse", configuration="{}")],
        FEATURE_CONFIG,
    )
    # a domain needs the domainMetadata feature
    bad(IllegalActionError, [DomainMetadata(domain="com.example", configuration="{}")])


# --- file actions ---------------------------------------------------------------------------


def test_partition_values_must_name_exactly_the_partition_columns() -> None:
    ok([add(partitionValues={"date": None})])
    bad(InvalidFileActionError, [add(partitionValues={})])
    bad(InvalidFileActionError, [add(partitionValues={"date": "2024-01-01", "v": "1"})])
    bad(InvalidFileActionError, [add(partitionValues={"DATE": "2024-01-01"})])


def test_deletion_vectors_need_num_records_and_the_feature() -> None:
    ok([add(deletionVector=DV)], FEATURE_CONFIG)
    bad(InvalidFileActionError, [add(deletionVector=DV, stats=None)], FEATURE_CONFIG)
    bad(InvalidFileActionError, [add(deletionVector=DV, stats='{"minValues":{}}')], FEATURE_CONFIG)
    bad(InvalidFileActionError, [add(deletionVector=DV)], LEGACY_CONFIG)
    bad(
        InvalidFileActionError, [remove(deletionVector=DV.model_dump(by_alias=True))], LEGACY_CONFIG
    )


def test_cdc_files_do_not_change_data() -> None:
    ok([AddCDCFile(path="c", size=1)])
    bad(InvalidFileActionError, [AddCDCFile(path="c", size=1, dataChange=True)])


def test_append_only_tables_refuse_data_removal() -> None:
    append_only = TableConfiguration(
        LEGACY, METADATA.model_copy(update={"configuration": {"delta.appendOnly": "true"}})
    )
    ok([remove("a", dataChange=False), add("b", dataChange=False)], append_only)
    bad(AppendOnlyViolationError, [remove("a")], append_only)
    # writer version 1 does not support appendOnly: the property means nothing
    unsupported = TableConfiguration(
        Protocol(minReaderVersion=1, minWriterVersion=1),
        METADATA.model_copy(update={"configuration": {"delta.appendOnly": "true"}}),
    )
    ok([remove("a")], unsupported)


def test_row_tracking_fields_are_required_on_final_commits() -> None:
    config = TableConfiguration(ROW_TRACKING, METADATA)
    tracked = add(baseRowId=0, defaultRowCommitVersion=4)
    ok([tracked], config)
    bad(InvalidFileActionError, [add()], config)
    bad(InvalidFileActionError, [add(baseRowId=0)], config)
    ok([add()], config, final=False)  # the coordinator assigns them


# --- commitInfo ---------------------------------------------------------------------------


def test_in_commit_timestamp_rules() -> None:
    config = TableConfiguration(FEATURES, ICT_METADATA)
    stamped = CommitInfo(inCommitTimestamp=5)
    ok([stamped, add()], config)
    bad(InvalidCommitInfoError, [add()], config)
    bad(InvalidCommitInfoError, [add(), stamped], config)
    bad(InvalidCommitInfoError, [CommitInfo(), add()], config)
    ok([add()], config, final=False)
    # the commit that enables ICT must follow the rule itself
    bad(InvalidCommitInfoError, [ICT_METADATA, add()], FEATURE_CONFIG)
    ok([stamped, ICT_METADATA, add()], FEATURE_CONFIG)
    # without the feature the property is inert
    ok([add()], TableConfiguration(LEGACY, ICT_METADATA))


def test_catalog_managed_commits_need_a_txn_id() -> None:
    protocol = Protocol(
        minReaderVersion=3,
        minWriterVersion=7,
        readerFeatures=["catalogManaged"],
        writerFeatures=["catalogManaged", "inCommitTimestamp"],
    )
    config = TableConfiguration(protocol, ICT_METADATA)
    ok([CommitInfo(inCommitTimestamp=1, txnId="t-1"), add()], config)
    bad(InvalidCommitInfoError, [CommitInfo(inCommitTimestamp=1), add()], config)


# --- protocol ---------------------------------------------------------------------------------


def test_protocol_upgrades_are_allowed() -> None:
    ok([LEGACY.model_copy(update={"min_writer_version": 4})])
    ok([FEATURES], LEGACY_CONFIG)


@pytest.mark.parametrize(
    "protocol",
    [
        Protocol(minReaderVersion=1, minWriterVersion=1),
        FEATURES.model_copy(
            update={"writer_features": ["appendOnly", "invariants", "deletionVectors"]}
        ),
        Protocol(
            minReaderVersion=3,
            minWriterVersion=7,
            readerFeatures=[],
            writerFeatures=["appendOnly", "invariants", "domainMetadata", "inCommitTimestamp"],
        ),
    ],
    ids=["lower-writer-version", "drop-writer-feature", "drop-reader-feature"],
)
def test_protocol_downgrades_are_refused(protocol: Protocol) -> None:
    bad(
        ProtocolDowngradeError,
        [protocol],
        FEATURE_CONFIG if protocol.writer_features else LEGACY_CONFIG,
    )


def test_malformed_and_unwritable_protocols_are_refused() -> None:
    bad(InvalidCommitError, [Protocol(minReaderVersion=3, minWriterVersion=5)])
    unknown = Protocol(
        minReaderVersion=1,
        minWriterVersion=7,
        writerFeatures=["appendOnly", "invariants", "futureFeature"],
    )
    bad(UnsupportedTableFeatureException, [unknown])
    bad(UnsupportedTableFeatureException, [add()], TableConfiguration(unknown, METADATA))


# --- metadata ---------------------------------------------------------------------------------


def test_metadata_changes_must_yield_a_valid_table() -> None:
    ok([METADATA.model_copy(update={"partition_columns": ["v"]})])
    after = validate_commit(
        [METADATA.model_copy(update={"partition_columns": []}), add(partitionValues={})],
        is_create=False,
        table_configuration=LEGACY_CONFIG,
    )
    assert after.partition_columns == []
    bad(InvalidMetadataChangeError, [METADATA.model_copy(update={"schema_string": "{nope"})])
    bad(
        InvalidMetadataChangeError, [METADATA.model_copy(update={"partition_columns": ["missing"]})]
    )
    bad(
        InvalidMetadataChangeError,
        [METADATA.model_copy(update={"partition_columns": ["date", "date"]})],
    )


# --- creation -------------------------------------------------------------------------------


def test_table_creation() -> None:
    after = validate_commit([CommitInfo(), LEGACY, METADATA, add()], is_create=True)
    assert after.protocol == LEGACY
    with pytest.raises(InvalidCommitError):
        validate_commit([METADATA, add()], is_create=True)
    with pytest.raises(InvalidCommitError):
        validate_commit([LEGACY], is_create=True)
    with pytest.raises(InvalidCommitInfoError):
        validate_commit([FEATURES, ICT_METADATA], is_create=True)
    with pytest.raises(InvalidCommitError):
        validate_commit([add()], is_create=False)  # no current table given
