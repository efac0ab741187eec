"""Property: a commit with random defects is stored only if valid, else refused and harmless.

Hypothesis mutates valid ``add``/``remove``/``metaData``/``protocol`` actions
(paths, sizes, stats, partition values, deletion vectors, table properties,
protocol versions and features) and sends each request to a real
``TableActor``. Each is either accepted, and then the table still loads with
``load_snapshot`` and with deltalake (``DeltaTable``, its add actions parsed),
or refused with a typed :class:`RaydeltaError` and the ``_delta_log`` bytes
and ``version()`` unchanged. Never an unhandled exception, never a stored
action a reader then chokes on. Few examples: every one is a real commit.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from raydelta.actors.table.client import TableClient
from raydelta.protocol.actions import Action, AddFile, Protocol, RemoveFile
from raydelta.protocol.deletion_vectors import DeletionVectorDescriptor
from raydelta.protocol.errors import RaydeltaError
from raydelta.protocol.events import CommitRequest, ReadSet
from raydelta.storage.snapshot import load_snapshot

NewTable = Callable[..., tuple[str, TableClient]]
GOOD_DV = DeletionVectorDescriptor.inline([0, 1])

PATHS = st.sampled_from(
    [
        "{n}.parquet",
        "date=2024-01-01/{n}.parquet",
        "a b {n}.parquet",
        "a%20b%20{n}.parquet",
        "",
        "../{n}.parquet",
        "x/%2e%2e/%2e%2e/{n}.parquet",
        "/etc/{n}",
        "file:///etc/{n}",
        "s3://other/{n}.parquet",
        "{root}/in-{n}.parquet",
        "{root}-sibling/{n}.parquet",
    ]
)
STATS = st.one_of(
    st.none(),
    st.sampled_from(
        [
            '{"numRecords":10}',
            '{"numRecords":10,"minValues":{"value":1},"maxValues":{"value":9},'
            '"nullCount":{"value":0}}',
            '{"numRecords":-1}',
            '{"numRecords":1.5}',
            '{"numRecords":10,"minValues":{"value":"x"}}',
            '{"numRecords":10,"maxValues":{"value":NaN}}',
            '{"numRecords":10,"nullCount":{"value":-3}}',
            '{"numRecords":10,"minValues":7}',
            '{"numRecords":10,"tightBounds":"yes"}',
            '{"numRecords":10,"minValues":{"unknownColumn":"ok"}}',
            "not json",
            "[]",
            "null",
            '{"numRecords":10} trailing',
        ]
    ),
)
PARTITIONS = st.sampled_from(
    [{"date": "2024-01-01"}, {"date": None}, {}, {"other": "x"}, {"date": "x", "extra": "y"}]
)
DVS = st.sampled_from(
    [
        None,
        GOOD_DV,
        {"storage_type": "x"},
        {"cardinality": -1},
        {"cardinality": 5},
        {"size_in_bytes": 0},
        {"size_in_bytes": 2**40},
        {"offset": 3},
        {"storage_type": "p", "path_or_inline_dv": "file:///etc/dv.bin", "offset": 1},
        {"storage_type": "u", "path_or_inline_dv": "../ab^-aqEH.-t@S}K{vb[*k^", "offset": 1},
    ]
)
SIZES = st.one_of(st.integers(-5, 10_000), st.sampled_from([2**63, -(2**63) - 1]))
PROPERTIES = st.dictionaries(
    st.sampled_from(
        [
            "delta.logRetentionDuration",
            "delta.checkpointInterval",
            "delta.isolationLevel",
            "delta.deletedFileRetentionDuration",
            "raydelta.allowExternalFiles",
            "some.engine.property",
        ]
    ),
    st.sampled_from(["interval 30 days", "soon", "10", "-1", "true", "maybe", "Serializable"]),
    max_size=2,
)
PROTOCOLS = st.sampled_from(
    [
        Protocol(minReaderVersion=1, minWriterVersion=2),
        Protocol(minReaderVersion=1, minWriterVersion=1),
        Protocol(
            minReaderVersion=3, minWriterVersion=7, readerFeatures=["x"], writerFeatures=["x"]
        ),
        Protocol(
            minReaderVersion=1, minWriterVersion=7, writerFeatures=["appendOnly", "invariants"]
        ),
    ]
)


def dv_of(choice: Any) -> DeletionVectorDescriptor | None:
    if choice is None or isinstance(choice, DeletionVectorDescriptor):
        return choice
    body: dict[str, Any] = {
        "storage_type": "i",
        "path_or_inline_dv": GOOD_DV.path_or_inline_dv,
        "offset": None,
        "size_in_bytes": GOOD_DV.size_in_bytes,
        "cardinality": GOOD_DV.cardinality,
    }
    body.update(choice)
    return DeletionVectorDescriptor.model_construct(**body)


VALID_PATHS = st.sampled_from(
    ["{n}.parquet", "date=2024-01-01/{n}.parquet", "a b {n}.parquet", "{root}/in-{n}.parquet"]
)
VALID_STATS = st.sampled_from(
    [None, '{"numRecords":10}', '{"numRecords":10,"minValues":{"value":1},"nullCount":{}}']
)


@st.composite
def file_actions(draw: st.DrawFn, root: str) -> Action:
    """A file action; half of them with only valid choices (so some commits are accepted)."""
    if draw(st.booleans()):
        path = draw(VALID_PATHS).format(n=uuid.uuid4().hex[:8], root=root)
        add = AddFile(
            path=path,
            partitionValues={"date": "2024-01-01"},
            size=draw(st.integers(0, 10_000)),
            modificationTime=1_700_000_000_000,
            stats=draw(VALID_STATS),
        )
        dv = draw(st.sampled_from([None, GOOD_DV]))
        return (
            add
            if dv is None or add.stats is None
            else add.model_copy(update={"deletion_vector": dv})
        )
    path = draw(PATHS).format(n=uuid.uuid4().hex[:8], root=root)
    if draw(st.booleans()):
        add = AddFile(
            path="placeholder",
            partitionValues={"date": "2024-01-01"},
            size=1,
            modificationTime=1_700_000_000_000,
        )
        return add.model_copy(
            update={
                "path": path,
                "size": draw(SIZES),
                "stats": draw(STATS),
                "partition_values": draw(PARTITIONS),
                "deletion_vector": dv_of(draw(DVS)),
            }
        )
    remove = RemoveFile(path="placeholder", deletionTimestamp=1_700_000_000_000)
    return remove.model_copy(
        update={
            "path": path,
            "size": draw(st.one_of(st.none(), SIZES)),
            "deletion_vector": dv_of(draw(DVS)),
        }
    )


def log_bytes(uri: str) -> dict[str, bytes]:
    root = os.path.join(uri.removeprefix("file://"), "_delta_log")
    out = {}
    for directory, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(directory, name), "rb") as handle:
                out[os.path.relpath(os.path.join(directory, name), root)] = handle.read()
    return out


def commit_raw(table: TableClient, actions: list[Action]) -> int:
    request = CommitRequest(
        txn_id=str(uuid.uuid4()),
        read_set=ReadSet(read_version=table.version()),
        actions=tuple(actions),
        commit_time_ms=int(time.time() * 1000),
    )
    return int(table._call("commit", request).raise_if_conflict().version)


@pytest.fixture(scope="module")
def dv_table(module_table: NewTable) -> tuple[str, TableClient]:
    return module_table(properties={"delta.enableDeletionVectors": "true"})


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_every_defective_commit_is_stored_valid_or_refused_harmlessly(
    dv_table: tuple[str, TableClient], data: st.DataObject
) -> None:
    uri, table = dv_table
    actions: list[Action] = data.draw(st.lists(file_actions(uri), min_size=1, max_size=2))
    extra = data.draw(st.sampled_from(["none", "metadata", "protocol"]))
    if extra == "metadata":
        current = table.head().metadata
        assert current is not None
        configuration = {**current.configuration, **data.draw(PROPERTIES)}
        actions.append(current.model_copy(update={"configuration": configuration}))
    elif extra == "protocol":
        actions.append(data.draw(PROTOCOLS))

    before, version = log_bytes(uri), table.version()
    try:
        won = commit_raw(table, actions)
    except RaydeltaError as refusal:
        event(f"refused: {type(refusal).__name__}")
        assert log_bytes(uri) == before
        assert table.version() == version
        return
    event("accepted")
    assert won == version + 1
    snapshot = load_snapshot(uri)
    assert snapshot.version == won
    peer = DeltaTable(uri)
    assert peer.version() == won
    peer.get_add_actions(flatten=True)  # every stored add parses for delta-rs
    json.dumps([a.to_json_dict() for a in snapshot.add_files()])
