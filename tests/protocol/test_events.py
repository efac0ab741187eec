"""Commit events: pickling, JSON round trips, typed replies that re-raise."""

from __future__ import annotations

import pickle

import pytest
from pydantic import TypeAdapter, ValidationError

from raydelta.protocol import errors
from raydelta.protocol.actions import (
    AddCDCFile,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    Txn,
    UnknownAction,
)
from raydelta.protocol.deletion_vectors import DeletionVectorDescriptor
from raydelta.protocol.events import (
    CommitCommitted,
    CommitConflict,
    CommitPublished,
    CommitRejected,
    CommitReply,
    CommitRequest,
    FileRef,
    IsolationLevel,
    ReadSet,
    is_append_only,
)
from raydelta.protocol.predicates import parse_predicate

REPLY: TypeAdapter[CommitReply] = TypeAdapter(CommitReply)

DV = DeletionVectorDescriptor.model_validate(
    {
        "storageType": "u",
        "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
        "offset": 4,
        "sizeInBytes": 40,
        "cardinality": 6,
    }
)


def every_action() -> list[object]:
    return [
        CommitInfo(operation="WRITE", inCommitTimestamp=5),
        Protocol(
            minReaderVersion=3,
            minWriterVersion=7,
            readerFeatures=["deletionVectors"],
            writerFeatures=["deletionVectors", "domainMetadata"],
        ),
        Metadata(id="t", schemaString='{"type":"struct","fields":[]}', partitionColumns=[]),
        AddFile(
            path="a.parquet",
            size=1,
            modificationTime=2,
            stats='{"numRecords":3}',
            deletionVector=DV,
            baseRowId=7,
        ),
        RemoveFile(path="b.parquet", dataChange=False, deletionTimestamp=9),
        AddCDCFile(path="_change_data/c.parquet", size=3),
        Txn(appId="app", version=4),
        DomainMetadata(domain="my.domain", configuration="{}"),
        UnknownAction(name="futureAction", body={"x": 1}),
    ]


def request(**overrides: object) -> CommitRequest:
    fields: dict[str, object] = {
        "txn_id": "txn-1",
        "read_set": ReadSet(
            read_version=3,
            predicates=(parse_predicate("date = '2024-01-01' AND region IN ('eu', 'us')"),),
            files_read=(FileRef(path="x.parquet", dv_id="uabc", partition_values={"d": None}),),
            app_ids_read=("app",),
            domains_read=("my.domain",),
            isolation_level=IsolationLevel.SERIALIZABLE,
        ),
        "actions": every_action(),
        "operation": "MERGE",
        "operation_parameters": {"predicate": "x = 1", "n": 3},
        "engine_info": "spark/4",
        "commit_time_ms": 1_700_000_000_000,
        "staged_commit_path": "_delta_log/_staged_commits/00000000000000000004.u.json",
        "expected_version": 4,
    }
    fields.update(overrides)
    return CommitRequest(**fields)  # type: ignore[arg-type]


def test_request_pickles_and_round_trips_through_json() -> None:
    original = request()
    assert pickle.loads(pickle.dumps(original)) == original
    again = CommitRequest.model_validate_json(original.model_dump_json())
    assert again == original
    assert [type(a) for a in again.actions] == [type(a) for a in original.actions]


def test_actions_serialize_as_log_wrappers_and_are_accepted_as_wrappers() -> None:
    dumped = request().model_dump(mode="json")
    assert dumped["actions"][3]["add"]["path"] == "a.parquet"
    assert dumped["actions"][8] == {"futureAction": {"x": 1}}
    from_wrappers = request(actions=dumped["actions"])
    assert from_wrappers.actions == request().actions
    with pytest.raises(ValidationError):
        request(actions=[{}])


def test_ray_cloudpickle_round_trip() -> None:
    cloudpickle = pytest.importorskip("ray.cloudpickle")
    original = request()
    assert cloudpickle.loads(cloudpickle.dumps(original)) == original


def test_events_are_frozen() -> None:
    original = request()
    with pytest.raises(ValidationError):
        original.txn_id = "other"
    with pytest.raises(ValidationError):
        original.read_set.read_version = 9


def test_defaults_and_isolation_levels() -> None:
    read = ReadSet(read_version=0)
    assert read.isolation_level is IsolationLevel.WRITE_SERIALIZABLE
    assert [level.value for level in IsolationLevel] == [
        "Serializable",
        "WriteSerializable",
        "SnapshotIsolation",
    ]
    assert ReadSet(read_version=0, isolation_level="Serializable").isolation_level is (  # type: ignore[arg-type]
        IsolationLevel.SERIALIZABLE
    )
    with pytest.raises(ValidationError):
        ReadSet(read_version=-2)


def test_read_nothing_and_blind_append() -> None:
    assert ReadSet.blind_append(3).read_nothing
    assert not ReadSet.whole_table(3).read_nothing
    assert not ReadSet(read_version=3, app_ids_read=("a",)).read_nothing
    add = AddFile(path="a", size=1, modificationTime=1)
    blind = request(read_set=ReadSet.blind_append(3), actions=[CommitInfo(), add])
    assert blind.is_blind_append
    assert not request(
        read_set=ReadSet.blind_append(3), actions=[add, RemoveFile(path="b")]
    ).is_blind_append
    assert not request(actions=[add]).is_blind_append  # it read something
    rearrange = AddFile(path="a", size=1, modificationTime=1, dataChange=False)
    assert not is_append_only([rearrange])
    assert not is_append_only([Metadata(id="t")])


def test_file_ref_of_action() -> None:
    add = AddFile(
        path="p", size=1, modificationTime=1, partitionValues={"d": "1"}, deletionVector=DV
    )
    ref = FileRef.of(add)
    assert (ref.path, ref.dv_id, ref.partition_values) == ("p", DV.unique_id, {"d": "1"})


CONFLICT_CLASSES = [
    errors.ProtocolChangedException,
    errors.MetadataChangedException,
    errors.ConcurrentTransactionException,
    errors.ConcurrentAppendException,
    errors.ConcurrentDeleteReadException,
    errors.ConcurrentDeleteDeleteException,
]


@pytest.mark.parametrize("cls", CONFLICT_CLASSES)
def test_conflict_reply_reraises_its_class(
    cls: type[errors.DeltaConcurrentModificationException],
) -> None:
    reply = CommitConflict.from_exception("t", cls("boom at version 7", 7))
    assert reply.exception == cls.__name__
    decoded = REPLY.validate_json(REPLY.dump_json(reply))
    assert decoded == reply
    with pytest.raises(cls) as caught:
        decoded.raise_if_conflict()
    assert caught.value.winning_version == 7
    assert str(caught.value) == "boom at version 7"
    assert pickle.loads(pickle.dumps(caught.value)).winning_version == 7


def test_conflict_with_unknown_class_name_falls_back_to_the_base_class() -> None:
    reply = CommitConflict(txn_id="t", exception="NoSuchThing", message="m", winning_version=2)
    err = reply.error()
    assert type(err) is errors.DeltaConcurrentModificationException
    assert err.winning_version == 2


@pytest.mark.parametrize(
    "cls",
    [
        errors.AppendOnlyViolationError,
        errors.DuplicateActionError,
        errors.UnsupportedTableFeatureException,
        errors.InvalidCommitError,
    ],
)
def test_rejected_reply_reraises_its_class(cls: type[errors.RaydeltaError]) -> None:
    reply = CommitRejected.from_exception("t", cls("nope"))
    decoded = REPLY.validate_python(REPLY.dump_python(reply, mode="json"))
    assert isinstance(decoded, CommitRejected)
    with pytest.raises(cls, match="nope"):
        decoded.raise_if_conflict()


def test_rejected_with_a_richer_constructor_or_unknown_name() -> None:
    assert type(CommitRejected(txn_id="t", exception="Nope", message="m").error()) is (
        errors.RaydeltaError
    )
    versions = CommitRejected(txn_id="t", exception="VersionsNotContiguousError", message="m")
    assert isinstance(versions.error(), errors.VersionsNotContiguousError)


def test_committed_reply_passes_through() -> None:
    reply = CommitCommitted(
        txn_id="t",
        version=5,
        in_commit_timestamp=10,
        attempts=2,
        rebased_over=(4,),
        published=False,
    )
    decoded = REPLY.validate_json(REPLY.dump_json(reply))
    assert decoded == reply
    assert decoded.raise_if_conflict() is decoded


def test_commit_published_from_actions() -> None:
    actions = every_action()
    event = CommitPublished.from_actions("file:///t", 4, 123, actions)  # type: ignore[arg-type]
    assert (event.num_adds, event.num_removes) == (1, 1)
    assert event.has_metadata_change and event.has_protocol_change
    assert event.operation == "WRITE" and event.published
    assert pickle.loads(pickle.dumps(event)) == event
    assert CommitPublished.model_validate_json(event.model_dump_json()) == event
    plain = CommitPublished.from_actions("t", 1, 2, [], published=False)
    assert plain.operation is None and not plain.published
