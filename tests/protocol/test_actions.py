"""Action models: lenient parse, faithful serialize, nothing unknown dropped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raydelta.protocol.actions import (
    AddFile,
    CommitInfo,
    Metadata,
    RemoveFile,
    UnknownAction,
    parse_action,
    parse_actions,
    serialize_action,
    serialize_actions,
)
from raydelta.protocol.errors import CorruptLogError


def test_unknown_fields_survive_a_round_trip() -> None:
    line = (
        '{"add":{"path":"a","partitionValues":{},"size":1,"modificationTime":2,'
        '"dataChange":true,"futureField":{"nested":[1,2]},"stats":"{}"}}'
    )
    action = parse_action(line)
    assert isinstance(action, AddFile)
    assert json.loads(serialize_action(action)) == json.loads(line)


def test_unknown_action_types_survive_a_round_trip() -> None:
    line = '{"someFutureAction":{"x":1,"y":[true,null]}}'
    action = parse_action(line)
    assert isinstance(action, UnknownAction)
    assert json.loads(serialize_action(action)) == json.loads(line)


def test_commit_info_keeps_free_form_provenance() -> None:
    line = (
        '{"commitInfo":{"timestamp":1,"operation":"WRITE","operationParameters":'
        '{"mode":"Append","n":3,"nested":{"a":[1]}},"notebook":{"notebookId":"1"}}}'
    )
    action = parse_action(line)
    assert isinstance(action, CommitInfo)
    assert json.loads(serialize_action(action)) == json.loads(line)


def test_null_partition_values_are_kept() -> None:
    line = (
        '{"add":{"path":"p","partitionValues":{"d":null},"size":1,'
        '"modificationTime":0,"dataChange":true}}'
    )
    action = parse_action(line)
    assert isinstance(action, AddFile)
    assert action.partition_values == {"d": None}
    assert json.loads(serialize_action(action)) == json.loads(line)


@pytest.mark.parametrize(
    "bad", ["not json", "[1,2]", '{"add":{"path":"x"}}', '{"add":1}', '{"add":{},"remove":{}}']
)
def test_malformed_lines_raise_corrupt_log_error(bad: str) -> None:
    with pytest.raises(CorruptLogError):
        parse_action(bad)


def test_empty_and_null_lines_are_ignored() -> None:
    assert parse_actions(b'{}\n\n{"txn":null}\n') == []


def test_models_are_frozen() -> None:
    metadata = Metadata(id="x", schemaString="{}", partitionColumns=[], configuration={})
    with pytest.raises(ValueError):
        metadata.id = "y"  # type: ignore[misc]


def test_every_golden_commit_round_trips(golden_root: Path) -> None:
    """Every line of every JSON commit of the golden tables parses and writes back equal."""
    lines = 0
    for commit in sorted(golden_root.rglob("_delta_log/*.json")):
        data = commit.read_bytes()
        originals = [json.loads(line) for line in data.splitlines() if line.strip()]
        parsed = parse_actions(data)
        written = [json.loads(line) for line in serialize_actions(parsed).splitlines()]
        assert written == [o for o in originals if o and any(v is not None for v in o.values())], (
            commit
        )
        lines += len(originals)
    assert lines > 500


# --- AddFile.to_remove: the one AddFile -> RemoveFile, for both of its old hand-built copies ---

FULL_ADD = AddFile(
    path="p=1/a.parquet",
    partitionValues={"p": "1", "q": None},
    size=123,
    modificationTime=5,
    dataChange=False,
    stats='{"numRecords":4}',
    tags={"INSERTION_TIME": "5", "x": None},
    deletionVector={
        "storageType": "u",
        "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
        "offset": 1,
        "sizeInBytes": 34,
        "cardinality": 2,
    },
    baseRowId=10,
    defaultRowCommitVersion=3,
    clusteringProvider="liquid",
)


@pytest.mark.parametrize("add", [FULL_ADD, AddFile(path="a", size=1, modificationTime=2)])
def test_to_remove_is_what_dml_built_by_hand(add: AddFile) -> None:
    """storage/data/dml.remove_of, before it became ``to_remove``: stats and tags kept."""
    before = RemoveFile(
        path=add.path,
        deletionTimestamp=99,
        dataChange=True,
        extendedFileMetadata=True,
        partitionValues=add.partition_values,
        size=add.size,
        stats=add.stats,
        tags=add.tags,
        deletionVector=add.deletion_vector,
        baseRowId=add.base_row_id,
        defaultRowCommitVersion=add.default_row_commit_version,
    )
    after = add.to_remove(deletion_timestamp=99)
    assert after == before
    assert after.model_fields_set == before.model_fields_set
    assert serialize_action(after) == serialize_action(before)


@pytest.mark.parametrize("add", [FULL_ADD, AddFile(path="a", size=1, modificationTime=2)])
@pytest.mark.parametrize("data_change", [True, False])
def test_to_remove_without_stats_and_tags_is_what_transaction_remove_builds(
    add: AddFile, data_change: bool
) -> None:
    """``Transaction.remove(add)`` (actors/table/transaction.py) builds this by hand."""
    before = RemoveFile(
        path=add.path,
        deletionTimestamp=99,
        dataChange=data_change,
        extendedFileMetadata=True,
        partitionValues=add.partition_values,
        size=add.size,
        deletionVector=add.deletion_vector,
        baseRowId=add.base_row_id,
        defaultRowCommitVersion=add.default_row_commit_version,
    )
    after = add.to_remove(deletion_timestamp=99, data_change=data_change, keep_stats_and_tags=False)
    assert after == before
    assert after.model_fields_set == before.model_fields_set
    assert serialize_action(after) == serialize_action(before)
    assert after.stats is None and after.tags is None
