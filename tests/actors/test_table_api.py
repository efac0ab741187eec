"""The public API end to end: ``create_table``, ``open_table``, ``Table``, ``Transaction``.

Every test goes through a real ``TableActor`` (a Ray actor process) and
checks the files it wrote. Bad requests must come back as the typed error of
``protocol.errors`` and leave the ``_delta_log`` byte-for-byte unchanged.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest

from raydelta.actors.table.client import TableClient
from raydelta.protocol.actions import (
    Action,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
)
from raydelta.protocol.deletion_vectors import DeletionVectorDescriptor
from raydelta.protocol.errors import (
    AppendOnlyViolationError,
    ConcurrentTransactionException,
    DuplicateActionError,
    IllegalActionError,
    InvalidFileActionError,
    InvalidMetadataChangeError,
    ProtocolDowngradeError,
    RaydeltaError,
    TableAlreadyExistsError,
    TableNotFoundError,
    UnsupportedTableFeatureException,
)
from raydelta.protocol.events import CommitRequest, ReadSet
from raydelta.protocol.row_tracking import high_water_mark_of
from raydelta.protocol.schema import parse_schema, serialize_schema
from raydelta.protocol.table_features import supported_features, upgrade_protocol
from raydelta.storage.history import load_history
from raydelta.storage.snapshot import load_snapshot

NewTable = Callable[..., tuple[str, TableClient]]
MakeAdd = Callable[..., AddFile]
LogFiles = Callable[[str], dict[str, bytes]]
LogCommits = Callable[[str], list[tuple[int, list[Action]]]]

P1, P2 = "2024-01-01", "2024-01-02"
DOMAIN_PROTOCOL = upgrade_protocol(
    Protocol(minReaderVersion=1, minWriterVersion=2), writer_features=["domainMetadata"]
)


def commit_adds(table: TableClient, *files: AddFile) -> int:
    return table.transaction().add(*files).commit()


def commit_raw(
    table: TableClient, actions: list[Action], *, read_version: int | None = None
) -> int:
    """Send actions the ``Transaction`` builder would not produce (bad requests)."""
    request = CommitRequest(
        txn_id=str(uuid.uuid4()),
        read_set=ReadSet(read_version=table.version() if read_version is None else read_version),
        actions=tuple(actions),
        commit_time_ms=int(time.time() * 1000),
    )
    reply = table._call("commit", request)
    return int(reply.raise_if_conflict().version)


def actor_id(table: TableClient) -> str:
    return str(table.actor._actor_id.hex())


# --- create_table -------------------------------------------------------------------------


def test_create_table_writes_schema_partitioning_and_properties(
    new_table: NewTable, log_commits: LogCommits
) -> None:
    schema = pa.schema(
        [
            ("date", pa.date32()),
            ("id", pa.int64()),
            ("name", pa.string()),
            ("score", pa.float64()),
            ("tags", pa.list_(pa.string())),
        ]
    )
    uri, table = new_table(
        schema=schema,
        partition_by=["date"],
        properties={"custom.owner": "team-a", "delta.logRetentionDuration": "interval 7 days"},
    )
    assert table.version() == 0
    snap = table.snapshot()
    assert snap.version == 0
    assert snap.metadata.partition_columns == ["date"]
    assert snap.metadata.configuration == {
        "custom.owner": "team-a",
        "delta.logRetentionDuration": "interval 7 days",
    }
    fields = parse_schema(snap.metadata.schema_string or "").fields
    assert [f.name for f in fields] == ["date", "id", "name", "score", "tags"]
    # no feature was asked for: the legacy (1, 2) protocol
    assert (snap.protocol.min_reader_version, snap.protocol.min_writer_version) == (1, 2)

    [(version, actions)] = log_commits(uri)
    assert version == 0
    info = actions[0]
    assert isinstance(info, CommitInfo) and info.operation == "CREATE TABLE"
    assert info.txn_id
    assert sum(isinstance(a, Protocol) for a in actions) == 1
    assert sum(isinstance(a, Metadata) for a in actions) == 1


@pytest.mark.parametrize(
    ("properties", "features"),
    [
        pytest.param(
            {"delta.enableDeletionVectors": "true"}, {"deletionVectors"}, id="deletion-vectors"
        ),
        pytest.param({"delta.enableInCommitTimestamps": "true"}, {"inCommitTimestamp"}, id="ict"),
        pytest.param(
            {"delta.enableRowTracking": "true"}, {"rowTracking", "domainMetadata"}, id="rows"
        ),
        pytest.param({"delta.appendOnly": "true"}, {"appendOnly"}, id="append-only"),
        pytest.param({"delta.enableChangeDataFeed": "true"}, {"changeDataFeed"}, id="cdf"),
    ],
)
def test_create_table_properties_turn_on_protocol_features(
    new_table: NewTable, properties: dict[str, str], features: set[str]
) -> None:
    _, table = new_table(properties=properties)
    snap = table.snapshot()
    assert features <= supported_features(snap.protocol)
    for key, value in properties.items():
        assert snap.metadata.configuration[key] == value


def test_create_table_twice_raises_and_leaves_the_table_unchanged(
    new_table: NewTable, make_add: MakeAdd, log_files: LogFiles
) -> None:
    uri, table = new_table()
    commit_adds(table, make_add(f"date={P1}/a.parquet"))
    before = log_files(uri)
    with pytest.raises(TableAlreadyExistsError):
        TableClient.create(uri, schema=pa.schema([("other", pa.string())]))
    assert log_files(uri) == before
    assert table.version() == 1


def test_a_refused_create_writes_nothing(reap_actors: str, log_files: LogFiles) -> None:
    uri = f"{reap_actors}/never-created"
    unknown = Protocol(minReaderVersion=1, minWriterVersion=7, writerFeatures=["noSuchFeature"])
    with pytest.raises(UnsupportedTableFeatureException):
        TableClient.create(uri, schema=pa.schema([("a", pa.int64())]), protocol=unknown)
    assert not any(name.endswith(".json") for name in log_files(uri))
    with pytest.raises(TableNotFoundError):
        TableClient.open(uri).transaction()


# --- open_table: one actor per table, from any process ----------------------------------------


def test_open_table_reaches_the_same_actor_from_another_process(
    new_table: NewTable, ray_cluster: Any
) -> None:
    uri, table = new_table()

    def commit_from_task(table_uri: str) -> tuple[str, int]:
        from raydelta.actors.table.client import TableClient as TaskTableClient
        from raydelta.protocol.actions import AddFile as TaskAddFile

        remote = TaskTableClient.open(table_uri)
        version = (
            remote.transaction()
            .add(
                TaskAddFile(
                    path="date=2024-01-01/from-task.parquet",
                    partitionValues={"date": "2024-01-01"},
                    size=1,
                    modificationTime=1,
                )
            )
            .commit()
        )
        return str(remote.actor._actor_id.hex()), version

    task = ray_cluster.remote(num_cpus=1)(commit_from_task)
    remote_id, version = ray_cluster.get(task.remote(uri))
    assert remote_id == actor_id(table)
    assert version == 1
    assert [f.path for f in table.snapshot().add_files()] == ["date=2024-01-01/from-task.parquet"]
    # every spelling of the location reaches the same actor
    local_path = uri[len("file://") :]
    assert actor_id(TableClient.open(local_path)) == actor_id(table)
    assert actor_id(TableClient.open(local_path + "/")) == actor_id(table)


# --- events to subscribers -----------------------------------------------------------------------


class _Collector:
    """A subscriber: remembers the events it was told about."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def on_commit(self, event: Any) -> None:
        self.events.append(event)

    def seen(self) -> list[Any]:
        return self.events


def test_subscribers_get_a_typed_event_after_each_commit(
    new_table: NewTable, make_add: MakeAdd, ray_cluster: Any
) -> None:
    _, table = new_table()
    collector = ray_cluster.remote(num_cpus=0)(_Collector).remote()
    ray_cluster.get(table.actor.subscribe.remote("collector", collector))
    txn = table.transaction().add(
        make_add(f"date={P1}/a.parquet"), make_add(f"date={P2}/b.parquet", P2)
    )
    txn.commit(operation="WRITE")
    table.transaction().set_metadata(properties={"custom.k": "v"}).commit()
    txn.commit()  # a retry of a commit already made is not a new commit
    deadline = time.monotonic() + 30
    while len(ray_cluster.get(collector.seen.remote())) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    events = ray_cluster.get(collector.seen.remote())
    assert [type(e).__name__ for e in events] == ["CommitPublished", "CommitPublished"]
    first, second = events
    assert (first.version, first.num_adds, first.operation, first.txn_id) == (
        1,
        2,
        "WRITE",
        txn.txn_id,
    )
    assert second.version == 2 and second.has_metadata_change
    assert first.table_uri == table.uri
    ray_cluster.kill(collector)


def test_commits_other_engines_wrote_are_published_once_picked_up(
    new_table: NewTable, make_add: MakeAdd, ray_cluster: Any
) -> None:
    deltalake = pytest.importorskip("deltalake")
    uri, table = new_table()
    collector = ray_cluster.remote(num_cpus=0)(_Collector).remote()
    ray_cluster.get(table.actor.subscribe.remote("collector", collector))
    commit_adds(table, make_add(f"date={P1}/ours.parquet"))  # v1
    rows = pa.table({"date": pa.array([P2]), "value": pa.array([7], pa.int64())})
    deltalake.write_deltalake(uri, rows, mode="append", partition_by=["date"])  # v2, foreign
    assert table.version() == 2  # the actor picks the foreign commit up
    commit_adds(table, make_add(f"date={P1}/ours-again.parquet"))  # v3
    deadline = time.monotonic() + 30
    while len(ray_cluster.get(collector.seen.remote())) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    events = ray_cluster.get(collector.seen.remote())
    assert [e.version for e in events] == [1, 2, 3]
    assert events[1].num_adds == 1 and events[1].txn_id != events[0].txn_id
    ray_cluster.kill(collector)


# --- snapshots ----------------------------------------------------------------------------------


def test_snapshot_latest_by_version_and_by_timestamp(
    new_table: NewTable, make_add: MakeAdd
) -> None:
    uri, table = new_table()
    for i in range(3):
        time.sleep(0.02)  # distinct commit timestamps (ms) for the time-travel lookups
        commit_adds(table, make_add(f"date={P1}/f{i}.parquet"))

    latest = table.snapshot()
    assert latest.version == 3
    fresh = load_snapshot(uri)
    assert sorted(f.path for f in latest.add_files()) == sorted(f.path for f in fresh.add_files())
    assert latest.metadata == fresh.metadata and latest.protocol == fresh.protocol

    # the cached snapshot is brought up to date with commits made through other handles
    commit_adds(TableClient.open(uri), make_add(f"date={P2}/other-handle.parquet", P2))
    assert table.snapshot().num_files == 4

    at_one = table.snapshot(version=1)
    assert at_one.version == 1
    assert [f.path for f in at_one.add_files()] == [f"date={P1}/f0.parquet"]

    history = {entry.version: entry.timestamp for entry in load_history(table.uri)}
    assert sorted(history) == [0, 1, 2, 3, 4]
    assert table.snapshot(timestamp=history[2]).version == 2
    assert table.snapshot(timestamp=history[2] + 0).num_files == 2
    as_datetime = datetime.fromtimestamp(history[1] / 1000, tz=UTC)
    assert table.snapshot(timestamp=as_datetime).version == 1
    as_text = datetime.fromtimestamp(history[3] / 1000, tz=UTC).isoformat()
    assert table.snapshot(timestamp=as_text).version == 3


def test_snapshot_of_a_missing_table_raises(reap_actors: str) -> None:
    table = TableClient.open(f"{reap_actors}/missing")
    assert table.version() == -1
    with pytest.raises(TableNotFoundError):
        table.snapshot()
    with pytest.raises(TableNotFoundError):
        table.transaction()


# --- app ids (idempotent streaming writes) --------------------------------------------------------


def write_batch(
    table: TableClient, app_id: str, batch: int, path: str, make_add: MakeAdd
) -> int | None:
    """The idempotent streaming pattern: skip a batch the table already has."""
    txn = table.transaction()
    done = txn.app_version(app_id)
    if done is not None and done >= batch:
        return None
    txn.add(make_add(path)).set_app_version(app_id, batch)
    return txn.commit(operation="STREAMING UPDATE", operation_parameters={"epochId": batch})


def test_app_version_makes_streaming_batches_idempotent(
    new_table: NewTable, make_add: MakeAdd
) -> None:
    _, table = new_table()
    assert write_batch(table, "stream-1", 0, f"date={P1}/b0.parquet", make_add) == 1
    assert write_batch(table, "stream-1", 1, f"date={P1}/b1.parquet", make_add) == 2
    # the batch is replayed after a crash of the stream: nothing is written twice
    assert write_batch(table, "stream-1", 1, f"date={P1}/b1-again.parquet", make_add) is None
    assert write_batch(table, "stream-2", 0, f"date={P1}/s2.parquet", make_add) == 3
    snap = table.snapshot()
    assert snap.txns == {"stream-1": 1, "stream-2": 0}
    assert sorted(f.path for f in snap.add_files()) == [
        f"date={P1}/b0.parquet",
        f"date={P1}/b1.parquet",
        f"date={P1}/s2.parquet",
    ]


def test_two_writers_of_the_same_batch_only_one_wins(
    new_table: NewTable, make_add: MakeAdd, log_files: LogFiles
) -> None:
    uri, table = new_table()
    first, second = table.transaction(), table.transaction()
    for txn, name in ((first, "first"), (second, "second")):
        assert txn.app_version("stream-1") is None
        txn.add(make_add(f"date={P1}/{name}.parquet")).set_app_version("stream-1", 0)
    assert first.commit() == 1
    before = log_files(uri)
    with pytest.raises(ConcurrentTransactionException) as caught:
        second.commit()
    assert caught.value.winning_version == 1
    assert "stream-1" in str(caught.value) and "version 1" in str(caught.value)
    assert log_files(uri) == before


# --- metadata, domains, protocol ---------------------------------------------------------------


def test_set_metadata_changes_only_what_is_given(new_table: NewTable) -> None:
    _, table = new_table(properties={"custom.a": "1", "custom.b": "2"})
    before = table.head().metadata
    assert before is not None
    wider = pa.schema([("date", pa.string()), ("value", pa.int64()), ("note", pa.string())])
    version = (
        table.transaction()
        .set_metadata(
            schema=wider,
            properties={"custom.b": "20", "custom.c": "3"},
            remove_properties=["custom.a"],
            description="events",
        )
        .commit(operation="SET TBLPROPERTIES")
    )
    assert version == 1
    after = table.snapshot().metadata
    assert after.id == before.id
    assert after.partition_columns == ["date"]
    assert after.configuration == {"custom.b": "20", "custom.c": "3"}
    assert after.description == "events"
    assert after.schema_string == serialize_schema(parse_schema(after.schema_string or ""))
    assert [f.name for f in parse_schema(after.schema_string or "").fields] == [
        "date",
        "value",
        "note",
    ]
    assert table.head().metadata == after


def test_set_domain_reads_and_removes(new_table: NewTable) -> None:
    _, table = new_table(protocol=DOMAIN_PROTOCOL)
    txn = table.transaction()
    assert txn.domain("com.example.cursor") is None
    txn.set_domain("com.example.cursor", json.dumps({"offset": 5}))
    assert txn.commit() == 1
    reader = table.transaction()
    assert reader.domain("com.example.cursor") == '{"offset": 5}'
    assert table.snapshot().domains["com.example.cursor"].configuration == '{"offset": 5}'

    table.transaction().set_domain("com.example.cursor", "", removed=True).commit()
    assert "com.example.cursor" not in table.snapshot().domains
    assert table.head().domain_actions["com.example.cursor"].removed


def test_upgrade_protocol_then_enable_the_feature(new_table: NewTable) -> None:
    _, table = new_table()
    assert "deletionVectors" not in supported_features(table.snapshot().protocol)
    table.transaction().upgrade_protocol(
        reader_features=["deletionVectors"], writer_features=["deletionVectors"]
    ).commit(operation="UPGRADE PROTOCOL")
    upgraded = table.snapshot().protocol
    assert "deletionVectors" in supported_features(upgraded)
    assert {"appendOnly", "invariants"} <= supported_features(upgraded)  # nothing dropped
    table.transaction().set_metadata(properties={"delta.enableDeletionVectors": "true"}).commit()
    assert table.snapshot().table_configuration.enable_deletion_vectors


def test_upgrade_protocol_with_an_unknown_feature_is_refused_before_sending(
    new_table: NewTable,
) -> None:
    _, table = new_table()
    with pytest.raises(UnsupportedTableFeatureException):
        table.transaction().upgrade_protocol(writer_features=["noSuchFeature"])


def test_remove_by_add_file_keeps_the_file_description(
    new_table: NewTable, make_add: MakeAdd, log_commits: LogCommits
) -> None:
    uri, table = new_table()
    keep, drop = make_add(f"date={P1}/keep.parquet"), make_add(f"date={P2}/drop.parquet", P2)
    commit_adds(table, keep, drop)
    txn = table.transaction()
    txn.read({"date": P2}).read_files([drop]).remove(drop)
    assert txn.commit(operation="DELETE") == 2
    snap = table.snapshot()
    assert [f.path for f in snap.add_files()] == [keep.path]
    [tombstone] = snap.state.remove_files()
    assert tombstone.path == drop.path
    removes = [a for a in log_commits(uri)[2][1] if isinstance(a, RemoveFile)]
    assert len(removes) == 1
    written = removes[0]
    assert written.partition_values == {"date": P2}
    assert written.size == drop.size
    assert written.extended_file_metadata is True
    assert written.data_change is True and written.deletion_timestamp is not None


# --- bad requests: typed errors, nothing written -------------------------------------------------


def dv() -> DeletionVectorDescriptor:
    return DeletionVectorDescriptor.inline([0, 3])


BAD_REQUESTS: dict[str, tuple[dict[str, Any], Callable[..., None], type[RaydeltaError]]] = {}


def bad(name: str, error: type[RaydeltaError], **table_options: Any) -> Callable[..., Any]:
    def register(fn: Callable[..., None]) -> Callable[..., None]:
        BAD_REQUESTS[name] = (table_options, fn, error)
        return fn

    return register


@bad("duplicate-add-paths", DuplicateActionError)
def _duplicate_adds(table: TableClient, make_add: MakeAdd) -> None:
    table.transaction().add(
        make_add(f"date={P1}/x.parquet"), make_add(f"date={P1}/x.parquet")
    ).commit()


@bad("add-and-remove-same-file", DuplicateActionError)
def _add_and_remove(table: TableClient, make_add: MakeAdd) -> None:
    file = make_add(f"date={P1}/existing.parquet")
    table.transaction().add(file).remove(file).commit()


@bad("missing-partition-values", InvalidFileActionError)
def _missing_partition(table: TableClient, make_add: MakeAdd) -> None:
    table.transaction().add(make_add(f"{P1}/x.parquet", partitioned=False)).commit()


@bad("unexpected-partition-key", InvalidFileActionError)
def _extra_partition(table: TableClient, make_add: MakeAdd) -> None:
    file = make_add(f"date={P1}/x.parquet", partitionValues={"date": P1, "hour": "3"})
    table.transaction().add(file).commit()


@bad(
    "dv-without-num-records",
    InvalidFileActionError,
    properties={"delta.enableDeletionVectors": "true"},
)
def _dv_without_records(table: TableClient, make_add: MakeAdd) -> None:
    file = make_add(f"date={P1}/existing.parquet", records=None, deletionVector=dv())
    table.transaction().add(file).commit()


@bad("dv-on-table-without-dv-support", InvalidFileActionError)
def _dv_unsupported(table: TableClient, make_add: MakeAdd) -> None:
    file = make_add(f"date={P1}/existing.parquet", deletionVector=dv())
    table.transaction().add(file).commit()


@bad(
    "remove-on-append-only-table", AppendOnlyViolationError, properties={"delta.appendOnly": "true"}
)
def _remove_append_only(table: TableClient, make_add: MakeAdd) -> None:
    table.transaction().remove(make_add(f"date={P1}/existing.parquet")).commit(operation="DELETE")


@bad("unknown-writer-feature", UnsupportedTableFeatureException)
def _unknown_feature(table: TableClient, make_add: MakeAdd) -> None:
    unknown = Protocol(
        minReaderVersion=1,
        minWriterVersion=7,
        writerFeatures=["appendOnly", "invariants", "noSuchFeature"],
    )
    commit_raw(table, [unknown])


@bad("protocol-downgrade", ProtocolDowngradeError, protocol=DOMAIN_PROTOCOL)
def _downgrade(table: TableClient, make_add: MakeAdd) -> None:
    commit_raw(table, [Protocol(minReaderVersion=1, minWriterVersion=2)])


@bad("two-metadata-actions", DuplicateActionError)
def _two_metadata(table: TableClient, make_add: MakeAdd) -> None:
    current = table.head().metadata
    assert current is not None
    commit_raw(
        table,
        [current.model_copy(update={"name": "a"}), current.model_copy(update={"name": "b"})],
    )


@bad("partition-column-not-in-schema", InvalidMetadataChangeError)
def _bad_partitioning(table: TableClient, make_add: MakeAdd) -> None:
    table.transaction().set_metadata(partition_by=["no_such_column"]).commit()


@bad("domain-without-the-feature", IllegalActionError)
def _domain_unsupported(table: TableClient, make_add: MakeAdd) -> None:
    table.transaction().set_domain("com.example.x", "{}").commit()


@bad("reserved-system-domain", IllegalActionError, protocol=DOMAIN_PROTOCOL)
def _system_domain(table: TableClient, make_add: MakeAdd) -> None:
    table.transaction().set_domain("delta.somethingNew", "{}").commit()


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_bad_requests_raise_typed_errors_and_change_nothing(
    case: str, module_table: NewTable, make_add: MakeAdd, log_files: LogFiles
) -> None:
    options, send, error = BAD_REQUESTS[case]
    uri, table = module_table(**options)  # shared by the cases: a refusal changes nothing
    version = commit_adds(table, make_add(f"date={P1}/existing.parquet"))
    before = log_files(uri)
    with pytest.raises(error):
        send(table, make_add)
    assert log_files(uri) == before
    # the actor is fine and the version did not move
    assert table.version() == version
    assert commit_adds(table, make_add(f"date={P2}/after.parquet", P2)) == version + 1


# --- in-commit timestamps -----------------------------------------------------------------------


def test_in_commit_timestamps_come_first_and_increase(
    new_table: NewTable, make_add: MakeAdd, log_commits: LogCommits
) -> None:
    uri, table = new_table(properties={"delta.enableInCommitTimestamps": "true"})
    replies: dict[int, int | None] = {}
    # sequential commits, then concurrent ones opened at one read version (rebased)
    for i in range(3):
        txn = table.transaction().add(make_add(f"date={P1}/seq-{i}.parquet"))
        txn.commit()
        assert txn.committed is not None
        replies[txn.committed.version] = txn.committed.in_commit_timestamp
    concurrent = [
        table.transaction().add(make_add(f"date={P2}/conc-{i}.parquet", P2)) for i in range(4)
    ]
    threads = [threading.Thread(target=txn.commit) for txn in concurrent]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for txn in concurrent:
        assert txn.committed is not None
        replies[txn.committed.version] = txn.committed.in_commit_timestamp

    commits = log_commits(uri)
    assert [v for v, _ in commits] == list(range(8))
    stamps = []
    for version, actions in commits:
        info = actions[0]
        assert isinstance(info, CommitInfo), f"v{version}: commitInfo is not first"
        assert info.in_commit_timestamp is not None
        stamps.append(info.in_commit_timestamp)
        if version in replies:
            assert replies[version] == info.in_commit_timestamp
    assert all(a < b for a, b in itertools.pairwise(stamps)), stamps
    assert table.snapshot().timestamp == stamps[-1]
    assert table.snapshot(timestamp=stamps[4]).version == 4


def test_enabling_in_commit_timestamps_later_records_where_they_start(
    new_table: NewTable, make_add: MakeAdd, log_commits: LogCommits
) -> None:
    """PROTOCOL.md, In-Commit Timestamps, writer rule 4: a table with earlier
    commits gets the enablement version and timestamp in the enabling metaData."""
    uri, table = new_table()
    commit_adds(table, make_add(f"date={P1}/before.parquet"))
    time.sleep(0.01)
    enabling = (
        table.transaction()
        .upgrade_protocol(writer_features=["inCommitTimestamp"])
        .set_metadata(properties={"delta.enableInCommitTimestamps": "true"})
        .commit(operation="SET TBLPROPERTIES")
    )
    assert enabling == 2
    commit_adds(table, make_add(f"date={P1}/after.parquet"))
    commits = log_commits(uri)
    first = commits[enabling][1][0]
    assert isinstance(first, CommitInfo) and first.in_commit_timestamp is not None
    configuration = table.snapshot().metadata.configuration
    assert configuration["delta.inCommitTimestampEnablementVersion"] == str(enabling)
    assert configuration["delta.inCommitTimestampEnablementTimestamp"] == str(
        first.in_commit_timestamp
    )
    before = commits[1][1][0]
    assert isinstance(before, CommitInfo) and before.in_commit_timestamp is None
    history = {entry.version: entry.timestamp for entry in load_history(table.uri)}
    assert history[enabling] == first.in_commit_timestamp
    assert table.snapshot(timestamp=history[1]).version == 1
    assert table.snapshot(timestamp=history[enabling]).version == enabling


# --- row tracking -------------------------------------------------------------------------------


def test_row_ids_never_overlap_across_concurrent_commits(
    new_table: NewTable, make_add: MakeAdd, log_commits: LogCommits
) -> None:
    uri, table = new_table(properties={"delta.enableRowTracking": "true"})
    commit_adds(table, make_add(f"date={P1}/first.parquet", records=7))
    # eight transactions read the same version, then commit at once from threads
    txns = [
        table.transaction().add(
            make_add(f"date={P1}/t{i}-a.parquet", records=3 + i),
            make_add(f"date={P2}/t{i}-b.parquet", P2, records=11),
        )
        for i in range(8)
    ]
    threads = [threading.Thread(target=txn.commit) for txn in txns]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(t.committed_version or -1 for t in txns) == list(range(2, 10))

    ranges: list[tuple[int, int, str]] = []
    marks: list[int] = []
    for version, actions in log_commits(uri)[1:]:
        adds = [a for a in actions if isinstance(a, AddFile)]
        domains = [
            a for a in actions if isinstance(a, DomainMetadata) and a.domain == "delta.rowTracking"
        ]
        assert len(domains) == 1, f"v{version} has no delta.rowTracking domain"
        mark = high_water_mark_of(domains[0])
        for add in adds:
            assert add.base_row_id is not None and add.num_records is not None
            assert add.default_row_commit_version == version
            last = add.base_row_id + add.num_records - 1
            assert last <= mark
            ranges.append((add.base_row_id, last, add.path))
        assert mark == max(
            add.base_row_id + (add.num_records or 0) - 1
            for add in adds
            if add.base_row_id is not None
        )
        marks.append(mark)
    ranges.sort()
    for (_, end, a), (start, _, b) in itertools.pairwise(ranges):
        assert end < start, f"row ids of {a} and {b} overlap"
    assert ranges[0][0] == 0
    total = 7 + sum(3 + i + 11 for i in range(8))
    assert sum(end - start + 1 for start, end, _ in ranges) == total
    assert marks == sorted(marks)
    final = table.snapshot()
    assert high_water_mark_of(final.domains["delta.rowTracking"]) == total - 1
    assert sorted(
        (f.base_row_id, f.path) for f in final.add_files() if f.base_row_id is not None
    ) == [(start, path) for start, _, path in ranges]


def test_release_table_stops_its_actors_and_a_held_handle_carries_on(
    new_table: NewTable, make_add: MakeAdd, ray_cluster: Any
) -> None:
    """Tables are hosted: releasing one deactivates it on its host (its state
    dropped) and stops its maintenance actors; a handle still held reactivates
    it from the log, under a new claim."""
    from raydelta.actors.checkpoint.actor import ensure_checkpointer
    from raydelta.actors.table.client import release_table

    uri, table = new_table()
    commit_adds(table, make_add(f"date={P1}/a.parquet"))
    ensure_checkpointer(table)
    before = ray_cluster.get(table.actor.status.remote())
    host = before["host"]
    names = {a["name"] for a in ray_cluster.util.list_named_actors(all_namespaces=True)}
    assert {host, f"checkpoint:{uri}"} <= names

    stopped = release_table(uri)
    assert set(stopped) == {host, f"checkpoint:{uri}"}
    names = {a["name"] for a in ray_cluster.util.list_named_actors(all_namespaces=True)}
    assert f"checkpoint:{uri}" not in names
    assert host in names  # the host stays: it holds other tables
    assert ray_cluster.get(table.host.table_status.remote(uri)) is None  # not active
    assert uri in ray_cluster.get(table.host.status.remote())["inactive"]

    # the handle still held reactivates the table, rebuilt from the log
    txn = table.transaction().add(make_add(f"date={P1}/b.parquet"))
    assert txn.commit() == 2
    after = ray_cluster.get(table.actor.status.remote())
    assert after["claim"] > before["claim"] and after["commits"] == 1
    assert table.snapshot().num_files == 2
    assert release_table(uri) == [host]  # no checkpointer was started again
    assert TableClient.open(uri).version() == 2


def test_commits_on_a_row_tracking_table_say_whether_row_ids_were_preserved(
    new_table: NewTable, make_add: MakeAdd, log_commits: LogCommits
) -> None:
    """The spec's ``delta.rowTracking.preserved`` commit tag: ``true`` when no row
    was copied or updated, ``false`` for a rewrite (raydelta does not
    materialize row ids, so rewritten rows get fresh ones)."""
    uri, table = new_table(properties={"delta.enableRowTracking": "true"})
    first = make_add(f"date={P1}/first.parquet", records=7)
    commit_adds(table, first)  # an append
    table.transaction().remove(first).add(make_add(f"date={P1}/rewritten.parquet")).commit()
    second = make_add(f"date={P1}/second.parquet", records=3)
    commit_adds(table, second)
    table.transaction().remove(second).commit()  # a whole-file delete: nothing copied

    def preserved(actions: list[Any]) -> str | None:
        info = next(a for a in actions if isinstance(a, CommitInfo))
        tags = info.to_json_dict().get("tags") or {}
        return tags.get("delta.rowTracking.preserved")  # type: ignore[no-any-return]

    tags = [preserved(actions) for _, actions in log_commits(uri)[1:]]
    assert tags == ["true", "false", "true", "true"]


def _set_fold_threshold(self: Any, commits: int) -> None:
    from raydelta.actors.table import history

    history.PENDING_FOLD_COMMITS = commits


def test_pending_commits_are_folded_by_the_actor_in_the_background(
    new_table: NewTable, make_add: MakeAdd
) -> None:
    """White box: with a fold threshold of 4 in the actor's process, the actor
    folds pending commits without anyone asking for a snapshot, and the state
    it then serves is the log's."""
    import ray

    uri, table = new_table()
    ray.get(table.actor.__ray_call__.remote(_set_fold_threshold, 4))
    for i in range(13):
        commit_adds(table, make_add(f"date={P1}/{i}.parquet"))

    def pending(self: Any) -> int:
        return len(self._coordinator.history.pending)

    deadline = time.monotonic() + 30
    while ray.get(table.actor.__ray_call__.remote(pending)) >= 4:
        assert time.monotonic() < deadline, "the actor never folded its pending commits"
        time.sleep(0.05)
    served = ray.get(table.actor.state.remote())
    assert sorted(f.path for f in served.add_files()) == sorted(
        f.path for f in load_snapshot(uri).add_files()
    )
