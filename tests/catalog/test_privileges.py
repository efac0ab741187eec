"""protocol.privileges: a commit is judged by its content (pure, no Ray)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from raydelta.protocol.actions import (
    AddFile,
    CommitInfo,
    DomainMetadata,
    Format,
    Metadata,
    Protocol,
    RemoveFile,
    Txn,
)
from raydelta.protocol.privileges import (
    Privilege,
    effective_privileges,
    missing_privileges,
    parse_privileges,
    required_privileges,
)

ADD = AddFile.model_validate(
    {
        "path": "a.parquet",
        "partitionValues": {},
        "size": 1,
        "modificationTime": 0,
        "dataChange": True,
        "stats": json.dumps({"numRecords": 1}),
    }
)
REMOVE = RemoveFile(path="a.parquet", deletionTimestamp=0, dataChange=True)
INFO = CommitInfo(timestamp=0, txnId="t")
METADATA = Metadata(
    id="m",
    format=Format(provider="parquet", options={}),
    schemaString='{"type":"struct","fields":[]}',
    partitionColumns=[],
    configuration={},
)
PROTOCOL = Protocol(minReaderVersion=1, minWriterVersion=2)

W, A = Privilege.WRITE, Privilege.ALTER


@pytest.mark.parametrize(
    ("actions", "needed"),
    [
        ([INFO, ADD], {W}),
        ([INFO, REMOVE], {W}),
        ([ADD, REMOVE], {W}),
        ([Txn(appId="app", version=3)], {W}),
        ([INFO], {W}),
        ([], {W}),
        ([DomainMetadata(domain="user.domain", configuration="{}")], {W}),
        ([DomainMetadata(domain="delta.rowTracking", configuration="{}"), ADD], {W}),
        ([INFO, METADATA], {A}),
        ([PROTOCOL], {A}),
        ([DomainMetadata(domain="delta.clustering", configuration="{}")], {A}),
        ([INFO, METADATA, ADD], {A, W}),
        ([PROTOCOL, REMOVE], {A, W}),
    ],
)
def test_required_privileges_by_content(actions: list[Any], needed: set[Privilege]) -> None:
    assert required_privileges(actions) == frozenset(needed)


def test_own_implies_every_privilege() -> None:
    assert effective_privileges({Privilege.OWN}) == frozenset(Privilege)
    assert effective_privileges({Privilege.WRITE}) == {Privilege.WRITE}
    assert missing_privileges({Privilege.OWN}, {A, W, Privilege.READ}) == ()


def test_missing_privileges_are_named_in_order() -> None:
    assert missing_privileges({W}, {A, W}) == (A,)
    assert missing_privileges({Privilege.READ}, {A, W}) == (W, A)
    assert missing_privileges(set(), {Privilege.READ}) == (Privilege.READ,)


def test_parse_privileges() -> None:
    assert parse_privileges("WRITE") == {W}
    assert parse_privileges(["read", Privilege.ALTER]) == {Privilege.READ, A}
    with pytest.raises(ValueError, match="unknown privilege 'delete'"):
        parse_privileges(["delete"])
