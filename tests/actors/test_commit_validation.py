"""The commit boundary end to end: what ``validate_commit`` refuses, through a real ``TableActor``.

One test per class of refusal (paths, file values, duplicates, metadata,
protocol). Each bad request must come back as its typed error, leave the
``_delta_log`` byte-for-byte unchanged, leave the actor's ``version()`` and
``snapshot()`` as they were, and the next good commit must succeed. The
cases of one class share a table (a refusal changes nothing). Accepted
neighbours (an absolute URI under the root, an external file on a table
that allows them, a blind remove) are committed and read back by
``load_snapshot`` and deltalake.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from raydelta.actors.table.client import TableClient
from raydelta.protocol.actions import Action, AddFile, Metadata, Protocol, RemoveFile
from raydelta.protocol.deletion_vectors import DeletionVectorDescriptor
from raydelta.protocol.errors import (
    DuplicateActionError,
    InvalidFileActionError,
    InvalidMetadataChangeError,
    InvalidStatisticsError,
    ProtocolDowngradeError,
    RaydeltaError,
    UnsafePathError,
    UnsupportedTableFeatureException,
)
from raydelta.protocol.events import CommitRequest, ReadSet
from raydelta.protocol.table_properties import ALLOW_EXTERNAL_FILES
from raydelta.storage.snapshot import load_snapshot

NewTable = Callable[..., tuple[str, TableClient]]
MakeAdd = Callable[..., AddFile]
LogFiles = Callable[[str], dict[str, bytes]]
Send = Callable[[str, TableClient, MakeAdd], Any]

P1 = "2024-01-01"
DV_TABLE = {"properties": {"delta.enableDeletionVectors": "true"}}
TYPED_SCHEMA = pa.schema([("day", pa.date32()), ("value", pa.int64())])
TYPED_TABLE = {"schema": TYPED_SCHEMA, "partition_by": ("day",)}
GOOD_DV = DeletionVectorDescriptor.inline([0, 1])


def commit_raw(table: TableClient, actions: list[Action]) -> int:
    """Send actions as they are (a request the ``Transaction`` builder would not make)."""
    request = CommitRequest(
        txn_id=str(uuid.uuid4()),
        read_set=ReadSet(read_version=table.version()),
        actions=tuple(actions),
        commit_time_ms=int(time.time() * 1000),
    )
    return int(table._call("commit", request).raise_if_conflict().version)


def raw_dv(**fields: Any) -> DeletionVectorDescriptor:
    """A descriptor built without validation (as a hostile or buggy client could ship one)."""
    body: dict[str, Any] = {
        "storage_type": "i",
        "path_or_inline_dv": GOOD_DV.path_or_inline_dv,
        "offset": None,
        "size_in_bytes": GOOD_DV.size_in_bytes,
        "cardinality": GOOD_DV.cardinality,
    }
    body.update(fields)
    return DeletionVectorDescriptor.model_construct(**body)


def assert_refused(
    uri: str,
    table: TableClient,
    error: type[RaydeltaError],
    send: Callable[[], Any],
    log_files: LogFiles,
    good: Callable[[], int],
) -> None:
    """``send`` raises ``error``; the log, version and snapshot are unchanged; ``good`` commits."""
    before_files = log_files(uri)
    before_version = table.version()
    before_snapshot = table.snapshot()
    with pytest.raises(error):
        send()
    assert log_files(uri) == before_files
    assert table.version() == before_version
    after_snapshot = table.snapshot()
    assert after_snapshot.version == before_snapshot.version
    assert after_snapshot.state.adds.equals(before_snapshot.state.adds)
    assert after_snapshot.state.removes.equals(before_snapshot.state.removes)
    assert good() == before_version + 1


def good_append(table: TableClient, make_add: MakeAdd) -> Callable[[], int]:
    return lambda: table.append_files(make_add(f"date={P1}/good-{uuid.uuid4().hex}.parquet"))


# --- paths --------------------------------------------------------------------------------------

PATH_CASES: dict[str, Callable[[str, MakeAdd], list[Action]]] = {
    "empty": lambda uri, make_add: [make_add("")],
    "dot-dot": lambda uri, make_add: [make_add("../outside.parquet")],
    "dot-dot-deep": lambda uri, make_add: [make_add(f"date={P1}/../../x.parquet")],
    "dot-dot-encoded": lambda uri, make_add: [make_add("a/%2e%2e/%2E%2E/x.parquet")],
    "absolute-local": lambda uri, make_add: [make_add("/etc/passwd")],
    "absolute-uri-outside": lambda uri, make_add: [make_add("file:///etc/passwd")],
    "sibling-of-root": lambda uri, make_add: [make_add(f"{uri}-other/x.parquet")],
    "other-bucket": lambda uri, make_add: [make_add("s3://elsewhere/t/x.parquet")],
    "remove-outside": lambda uri, make_add: [RemoveFile(path="../x.parquet", deletionTimestamp=1)],
}


@pytest.mark.parametrize("case", sorted(PATH_CASES))
def test_paths_outside_the_table_root_are_refused(
    case: str, module_table: NewTable, make_add: MakeAdd, log_files: LogFiles
) -> None:
    uri, table = module_table()
    actions = PATH_CASES[case](uri, make_add)
    assert_refused(
        uri,
        table,
        UnsafePathError,
        lambda: commit_raw(table, actions),
        log_files,
        good_append(table, make_add),
    )


def test_absolute_uris_under_the_root_and_allowed_external_files_commit(
    new_table: NewTable, make_add: MakeAdd, tmp_path: Any
) -> None:
    uri, table = new_table()
    inside = f"{uri}/date={P1}/absolute.parquet"
    version = commit_raw(table, [make_add(inside)])
    assert [a.path for a in load_snapshot(uri).add_files()] == [inside]
    # the same file spelled relatively in the same commit is a duplicate
    with pytest.raises(DuplicateActionError):
        commit_raw(
            table, [make_add(f"date={P1}/x.parquet"), make_add(f"{uri}/date={P1}/x.parquet")]
        )
    assert table.version() == version

    external_uri, external = new_table(properties={ALLOW_EXTERNAL_FILES: "true"})
    outside = f"file://{tmp_path}/elsewhere/x.parquet"
    commit_raw(external, [make_add(outside)])
    assert [a.path for a in load_snapshot(external_uri).add_files()] == [outside]
    with pytest.raises(UnsafePathError):  # '..' and scheme-less paths stay refused
        commit_raw(external, [make_add("../x.parquet")])

    # a table cannot grant itself external files in the commit that adds one
    with pytest.raises(UnsafePathError):
        metadata = table.head().metadata
        assert metadata is not None
        granted = metadata.model_copy(
            update={"configuration": {**metadata.configuration, ALLOW_EXTERNAL_FILES: "true"}}
        )
        commit_raw(table, [granted, make_add(outside)])
    assert table.version() == version


# --- file values ----------------------------------------------------------------------------------

VALUE_CASES: dict[str, tuple[dict[str, Any], type[RaydeltaError], Send]] = {
    "negative-size": (
        {},
        InvalidFileActionError,
        lambda uri, t, make_add: commit_raw(
            t, [make_add("a.parquet").model_copy(update={"size": -1})]
        ),
    ),
    "size-beyond-long": (
        {},
        InvalidFileActionError,
        lambda uri, t, make_add: commit_raw(
            t, [make_add("a.parquet").model_copy(update={"size": 2**63})]
        ),
    ),
    "negative-num-records": (
        {},
        InvalidStatisticsError,
        lambda uri, t, make_add: commit_raw(t, [make_add("a.parquet", records=-5)]),
    ),
    "stats-not-json": (
        {},
        InvalidStatisticsError,
        lambda uri, t, make_add: commit_raw(t, [make_add("a.parquet", stats="{numRecords:")]),
    ),
    "stats-not-an-object": (
        {},
        InvalidStatisticsError,
        lambda uri, t, make_add: commit_raw(t, [make_add("a.parquet", stats="[1, 2]")]),
    ),
    "stats-value-of-the-wrong-type": (
        {},
        InvalidStatisticsError,
        lambda uri, t, make_add: commit_raw(
            t,
            [
                make_add(
                    "a.parquet",
                    stats=json.dumps({"numRecords": 1, "minValues": {"value": "not a long"}}),
                )
            ],
        ),
    ),
    "stats-bare-nan": (
        {},
        InvalidStatisticsError,
        lambda uri, t, make_add: commit_raw(
            t, [make_add("a.parquet", stats='{"numRecords":1,"maxValues":{"value":NaN}}')]
        ),
    ),
    "partition-keys-differ": (
        {},
        InvalidFileActionError,
        lambda uri, t, make_add: commit_raw(
            t, [make_add("a.parquet", partitionValues={"other": "x"})]
        ),
    ),
    "partition-value-not-a-date": (
        TYPED_TABLE,
        InvalidFileActionError,
        lambda uri, t, make_add: commit_raw(
            t, [make_add("a.parquet", partitionValues={"day": "2024-13-45"})]
        ),
    ),
    "dv-unknown-storage-type": (
        DV_TABLE,
        InvalidFileActionError,
        lambda uri, t, make_add: commit_raw(
            t,
            [
                make_add("a.parquet").model_copy(
                    update={"deletion_vector": raw_dv(storage_type="x")}
                )
            ],
        ),
    ),
    "dv-negative-cardinality": (
        DV_TABLE,
        InvalidFileActionError,
        lambda uri, t, make_add: commit_raw(
            t,
            [make_add("a.parquet").model_copy(update={"deletion_vector": raw_dv(cardinality=-1)})],
        ),
    ),
    "dv-cardinality-beyond-the-bitmap": (
        DV_TABLE,
        InvalidFileActionError,
        lambda uri, t, make_add: commit_raw(
            t, [make_add("a.parquet").model_copy(update={"deletion_vector": raw_dv(cardinality=3)})]
        ),
    ),
    "dv-size-zero": (
        DV_TABLE,
        InvalidFileActionError,
        lambda uri, t, make_add: commit_raw(
            t,
            [make_add("a.parquet").model_copy(update={"deletion_vector": raw_dv(size_in_bytes=0)})],
        ),
    ),
    "dv-path-outside-the-root": (
        DV_TABLE,
        UnsafePathError,
        lambda uri, t, make_add: commit_raw(
            t,
            [
                make_add("a.parquet").model_copy(
                    update={
                        "deletion_vector": raw_dv(
                            storage_type="p",
                            path_or_inline_dv="file:///etc/dv.bin",
                            offset=1,
                            size_in_bytes=34,
                        )
                    }
                )
            ],
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(VALUE_CASES))
def test_bad_file_values_are_refused(
    case: str, module_table: NewTable, make_add: MakeAdd, log_files: LogFiles
) -> None:
    options, error, send = VALUE_CASES[case]
    uri, table = module_table(**options)
    good = (
        (lambda: table.append_files(make_add("typed.parquet", partitionValues={"day": P1})))
        if options is TYPED_TABLE
        else good_append(table, make_add)
    )
    assert_refused(uri, table, error, lambda: send(uri, table, make_add), log_files, good)


# --- duplicates and removes -------------------------------------------------------------------


def test_two_actions_for_one_path_are_refused_and_blind_removes_are_tombstones(
    module_table: NewTable, make_add: MakeAdd, log_files: LogFiles
) -> None:
    uri, table = module_table()
    for actions in (
        [make_add("a b.parquet"), make_add("a%20b.parquet")],  # one file, decoded once
        [make_add("c.parquet"), make_add("c.parquet", size=7)],
        [RemoveFile(path="d.parquet"), RemoveFile(path="d%2Eparquet")],
    ):
        assert_refused(
            uri,
            table,
            DuplicateActionError,
            lambda actions=actions: commit_raw(table, actions),  # type: ignore[misc]
            log_files,
            good_append(table, make_add),
        )
    # a remove of a file the table never held is legal (a tombstone, PROTOCOL.md)
    version = commit_raw(table, [RemoveFile(path="never-added.parquet", deletionTimestamp=1)])
    snapshot = load_snapshot(uri)
    assert snapshot.version == version
    assert "never-added.parquet" in snapshot.state.removes.column("path").to_pylist()
    assert DeltaTable(uri).version() == version


# --- metadata ------------------------------------------------------------------------------

METADATA_CASES: dict[str, Callable[[Metadata], Metadata]] = {
    "schema-not-json": lambda m: m.model_copy(update={"schema_string": "{not json"}),
    "schema-unknown-type": lambda m: m.model_copy(
        update={
            "schema_string": json.dumps(
                {
                    "type": "struct",
                    "fields": [
                        {"name": "date", "type": "nosuch", "nullable": True, "metadata": {}}
                    ],
                }
            )
        }
    ),
    "partition-column-missing": lambda m: m.model_copy(update={"partition_columns": ["nope"]}),
    "log-retention-soon": lambda m: m.model_copy(
        update={"configuration": {"delta.logRetentionDuration": "soon"}}
    ),
    "checkpoint-interval-not-a-number": lambda m: m.model_copy(
        update={"configuration": {"delta.checkpointInterval": "often"}}
    ),
    "append-only-maybe": lambda m: m.model_copy(
        update={"configuration": {"delta.appendOnly": "maybe"}}
    ),
    "isolation-level-unknown": lambda m: m.model_copy(
        update={"configuration": {"delta.isolationLevel": "Chaos"}}
    ),
}


@pytest.mark.parametrize("case", sorted(METADATA_CASES))
def test_bad_metadata_is_refused(
    case: str, module_table: NewTable, make_add: MakeAdd, log_files: LogFiles
) -> None:
    uri, table = module_table()
    current = table.head().metadata
    assert current is not None
    bad = METADATA_CASES[case](current)
    assert_refused(
        uri,
        table,
        InvalidMetadataChangeError,
        lambda: commit_raw(table, [bad]),
        log_files,
        good_append(table, make_add),
    )


# --- protocol -----------------------------------------------------------------------------------

PROTOCOL_CASES: dict[str, tuple[Protocol, type[RaydeltaError]]] = {
    "lower-writer-version": (
        Protocol(minReaderVersion=1, minWriterVersion=1),
        ProtocolDowngradeError,
    ),
    "unknown-writer-feature": (
        Protocol(
            minReaderVersion=1,
            minWriterVersion=7,
            writerFeatures=["appendOnly", "invariants", "noSuchFeature"],
        ),
        UnsupportedTableFeatureException,
    ),
    "unknown-reader-feature": (
        Protocol(
            minReaderVersion=3,
            minWriterVersion=7,
            readerFeatures=["noSuchReaderFeature"],
            writerFeatures=["appendOnly", "invariants", "noSuchReaderFeature"],
        ),
        UnsupportedTableFeatureException,
    ),
}


@pytest.mark.parametrize("case", sorted(PROTOCOL_CASES))
def test_protocol_downgrades_and_unsupported_features_are_refused(
    case: str, module_table: NewTable, make_add: MakeAdd, log_files: LogFiles
) -> None:
    uri, table = module_table()
    protocol, error = PROTOCOL_CASES[case]
    assert_refused(
        uri,
        table,
        error,
        lambda: commit_raw(table, [protocol]),
        log_files,
        good_append(table, make_add),
    )
