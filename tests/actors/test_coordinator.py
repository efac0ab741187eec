"""``CommitCoordinator`` on its own (no Ray): the commit path on a local table.

What the actor adds (naming, restarts, retries) is tested elsewhere; here
the coordinator is driven directly, a "restart" is a new coordinator on the
same directory, and a foreign engine is a commit file written by hand.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from raydelta.actors.table.coordinator import CommitCoordinator
from raydelta.protocol.actions import (
    Action,
    AddFile,
    CommitInfo,
    Format,
    Metadata,
    Protocol,
    RemoveFile,
    Txn,
    parse_actions,
    serialize_actions,
)
from raydelta.protocol.errors import (
    ConcurrentDeleteReadException,
    DuplicateActionError,
    MetadataChangedException,
    TableAlreadyExistsError,
    TableNotFoundError,
    VersionNotFoundError,
)
from raydelta.protocol.events import (
    CommitCommitted,
    CommitConflict,
    CommitRejected,
    CommitRequest,
    FileRef,
    IsolationLevel,
    ReadSet,
)
from raydelta.protocol.file_names import commit_name
from raydelta.protocol.schema import serialize_schema
from raydelta.protocol.schema_arrow import from_arrow
from raydelta.protocol.table_features import upgrade_protocol
from raydelta.storage.snapshot import load_snapshot

P1, P2 = "2024-01-01", "2024-01-02"


def schema_string() -> str:
    import pyarrow as pa

    return serialize_schema(from_arrow(pa.schema([("date", pa.string()), ("value", pa.int64())])))


def metadata(**configuration: str) -> Metadata:
    return Metadata(
        id="table-id",
        format=Format(provider="parquet", options={}),
        schemaString=schema_string(),
        partitionColumns=["date"],
        createdTime=1,
        configuration=configuration,
    )


def add(path: str, date: str = P1, records: int = 5) -> AddFile:
    return AddFile(
        path=path,
        partitionValues={"date": date},
        size=10,
        modificationTime=1,
        stats=json.dumps({"numRecords": records}),
    )


def remove(path: str, date: str = P1) -> RemoveFile:
    return RemoveFile(
        path=path, partitionValues={"date": date}, deletionTimestamp=1, extendedFileMetadata=True
    )


def request(
    read_version: int,
    *actions: Action,
    read_set: ReadSet | None = None,
    txn_id: str | None = None,
) -> CommitRequest:
    return CommitRequest(
        txn_id=txn_id or str(uuid.uuid4()),
        read_set=read_set or ReadSet(read_version=read_version),
        actions=actions,
        commit_time_ms=int(time.time() * 1000),
    )


def committed(reply: object) -> CommitCommitted:
    assert isinstance(reply, CommitCommitted), reply
    return reply


LEGACY = Protocol(minReaderVersion=1, minWriterVersion=2)


def new_table(path: Path, protocol: Protocol = LEGACY, **configuration: str) -> CommitCoordinator:
    coordinator = CommitCoordinator(f"file://{path}")
    create = request(-1, protocol, metadata(**configuration))
    assert committed(coordinator.create(create)).version == 0
    return coordinator


def log_names(path: Path) -> list[str]:
    return sorted(p.name for p in (path / "_delta_log").iterdir())


def write_foreign(path: Path, version: int, *actions: Action) -> None:
    """Another engine commits straight to the files (no txnId)."""
    info = CommitInfo(timestamp=int(time.time() * 1000), operation="WRITE")
    target = path / "_delta_log" / commit_name(version)
    target.write_bytes(serialize_actions([info, *actions]))


# --- exactly once -------------------------------------------------------------------------------


def test_a_retried_request_gets_the_version_it_won_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    coordinator = new_table(tmp_path)
    sent = request(0, add(f"date={P1}/a.parquet"))
    first = committed(coordinator.commit(sent))
    assert (first.version, first.attempts) == (1, 1)
    names = log_names(tmp_path)
    again = committed(coordinator.commit(sent))
    assert (again.version, again.attempts) == (1, 0)
    assert log_names(tmp_path) == names

    restarted = CommitCoordinator(f"file://{tmp_path}")
    after_restart = committed(restarted.commit(sent))
    assert (after_restart.version, after_restart.attempts) == (1, 0)
    assert log_names(tmp_path) == names
    info = parse_actions((tmp_path / "_delta_log" / commit_name(1)).read_bytes())[0]
    assert isinstance(info, CommitInfo) and info.txn_id == sent.txn_id


def test_a_retry_older_than_the_window_is_still_exactly_once(tmp_path: Path) -> None:
    coordinator = CommitCoordinator(f"file://{tmp_path}", window=3)
    committed(coordinator.create(request(-1, LEGACY, metadata())))
    sent = request(0, add(f"date={P1}/a.parquet"))
    assert committed(coordinator.commit(sent)).version == 1
    for i in range(5):  # v2..v6 push v1 out of the window
        committed(coordinator.commit(request(1 + i, add(f"date={P2}/f{i}.parquet", P2))))
    names = log_names(tmp_path)
    for instance in (coordinator, CommitCoordinator(f"file://{tmp_path}", window=3)):
        again = committed(instance.commit(sent))
        assert (again.version, again.attempts) == (1, 0)
    assert log_names(tmp_path) == names


def test_a_retried_create_is_exactly_once_and_a_second_create_fails(tmp_path: Path) -> None:
    coordinator = CommitCoordinator(f"file://{tmp_path}")
    create = request(-1, Protocol(minReaderVersion=1, minWriterVersion=2), metadata())
    assert committed(coordinator.create(create)).version == 0
    assert committed(CommitCoordinator(f"file://{tmp_path}").create(create)).attempts == 0
    other = request(-1, Protocol(minReaderVersion=1, minWriterVersion=2), metadata())
    with pytest.raises(TableAlreadyExistsError):
        coordinator.create(other)
    assert log_names(tmp_path) == [commit_name(0)]


# --- other engines writing the same table -----------------------------------------------


def test_a_lost_put_race_is_rebased_over_the_foreign_winner(tmp_path: Path) -> None:
    coordinator = new_table(tmp_path)
    write_foreign(tmp_path, 1, add(f"date={P2}/foreign.parquet", P2))  # the actor has not seen it
    reply = committed(coordinator.commit(request(0, add(f"date={P1}/mine.parquet"))))
    assert reply.version == 2
    assert reply.attempts == 2
    assert reply.rebased_over == (1,)
    snap = load_snapshot(f"file://{tmp_path}")
    assert {f.path for f in snap.add_files()} == {
        f"date={P2}/foreign.parquet",
        f"date={P1}/mine.parquet",
    }


def test_a_foreign_winner_that_conflicts_is_reported(tmp_path: Path) -> None:
    coordinator = new_table(tmp_path)
    seeded = committed(coordinator.commit(request(0, add(f"date={P1}/a.parquet"))))
    write_foreign(tmp_path, 2, remove(f"date={P1}/a.parquet"))
    read = ReadSet(
        read_version=seeded.version,
        predicates=(),
        files_read=(FileRef(path=f"date={P1}/a.parquet"),),
    )
    reply = coordinator.commit(
        request(1, remove(f"date={P1}/a.parquet"), add(f"date={P1}/b.parquet"), read_set=read)
    )
    assert isinstance(reply, CommitConflict)
    assert reply.exception == "ConcurrentDeleteReadException"
    assert reply.winning_version == 2
    assert isinstance(reply.error(), ConcurrentDeleteReadException)
    assert log_names(tmp_path) == [commit_name(v) for v in range(3)]


def test_catch_up_folds_foreign_commits_into_the_state(tmp_path: Path) -> None:
    coordinator = new_table(tmp_path)
    write_foreign(tmp_path, 1, add(f"date={P1}/x.parquet"), Txn(appId="ext", version=4))
    write_foreign(tmp_path, 2, remove(f"date={P1}/x.parquet"), add(f"date={P1}/y.parquet"))
    assert coordinator.catch_up() == 2
    assert coordinator.version == 2
    assert coordinator.head().txns["ext"].version == 4
    state = coordinator.state()
    assert [f.path for f in state.add_files()] == [f"date={P1}/y.parquet"]
    assert coordinator.tail(0) == [
        (v, parse_actions((tmp_path / "_delta_log" / commit_name(v)).read_bytes())) for v in (1, 2)
    ]


# --- conflicts beyond the window, validation order ---------------------------------------


def test_winners_older_than_the_window_are_read_from_the_log(tmp_path: Path) -> None:
    coordinator = CommitCoordinator(f"file://{tmp_path}", window=3)
    create = request(-1, Protocol(minReaderVersion=1, minWriterVersion=2), metadata())
    committed(coordinator.create(create))
    committed(coordinator.commit(request(0, add(f"date={P1}/a.parquet"))))
    committed(coordinator.commit(request(1, remove(f"date={P1}/a.parquet"))))  # v2
    for i in range(4):  # v3..v6: the window no longer holds v2
        committed(coordinator.commit(request(2 + i, add(f"date={P2}/f{i}.parquet", P2))))
    assert coordinator.tail(0) is None
    assert [v for v, _ in coordinator.tail(4) or []] == [5, 6]
    read = ReadSet(read_version=1, files_read=(FileRef(path=f"date={P1}/a.parquet"),))
    reply = coordinator.commit(request(1, add(f"date={P1}/b.parquet"), read_set=read))
    assert isinstance(reply, CommitConflict)
    assert (reply.exception, reply.winning_version) == ("ConcurrentDeleteReadException", 2)


def test_a_request_made_invalid_by_a_winner_is_a_conflict_not_a_rejection(tmp_path: Path) -> None:
    """delta-spark checks conflicts against the winners first: a delete prepared
    before the table became append-only fails with MetadataChangedException."""
    coordinator = new_table(tmp_path)
    committed(coordinator.commit(request(0, add(f"date={P1}/a.parquet"))))
    committed(coordinator.commit(request(1, metadata(**{"delta.appendOnly": "true"}))))
    reply = coordinator.commit(request(1, remove(f"date={P1}/a.parquet")))
    assert isinstance(reply, CommitConflict)
    assert isinstance(reply.error(), MetadataChangedException)
    # prepared after the change, the same delete is a bad request
    rejected = coordinator.commit(request(2, remove(f"date={P1}/a.parquet")))
    assert isinstance(rejected, CommitRejected)
    assert rejected.exception == "AppendOnlyViolationError"


def test_bad_requests_are_rejected_without_writing(tmp_path: Path) -> None:
    coordinator = new_table(tmp_path)
    names = log_names(tmp_path)
    reply = coordinator.commit(request(0, add(f"date={P1}/a.parquet"), add(f"date={P1}/a.parquet")))
    assert isinstance(reply, CommitRejected)
    assert isinstance(reply.error(), DuplicateActionError)
    assert log_names(tmp_path) == names
    with pytest.raises(VersionNotFoundError):
        coordinator.commit(request(5, add(f"date={P1}/b.parquet")))
    with pytest.raises(TableNotFoundError):
        CommitCoordinator(f"file://{tmp_path / 'nothing'}").commit(request(0))


# --- state, restart, timestamps, events -------------------------------------------------


def test_the_state_is_a_fold_of_the_log(tmp_path: Path) -> None:
    coordinator = new_table(tmp_path)
    committed(
        coordinator.commit(request(0, add(f"date={P1}/a.parquet"), add(f"date={P2}/b.parquet", P2)))
    )
    committed(
        coordinator.commit(request(1, remove(f"date={P1}/a.parquet"), Txn(appId="s", version=1)))
    )
    committed(coordinator.commit(request(2, add(f"date={P1}/c.parquet"))))
    committed(coordinator.commit(request(3, metadata(**{"custom.k": "v"}))))
    from_files = load_snapshot(f"file://{tmp_path}")
    restarted = CommitCoordinator(f"file://{tmp_path}")
    for state in (coordinator.state(), restarted.state()):
        assert state.version == from_files.version == 4
        assert sorted(f.path for f in state.add_files()) == sorted(
            f.path for f in from_files.add_files()
        )
        assert [r.path for r in state.remove_files()] == [f"date={P1}/a.parquet"]
        assert state.metadata == from_files.metadata
        assert state.protocol == from_files.protocol
        assert {k: t.version for k, t in state.txns.items()} == {"s": 1}
    assert restarted.head() == coordinator.head()


def test_in_commit_timestamps_increase_even_when_the_clock_goes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ict = upgrade_protocol(LEGACY, writer_features=["inCommitTimestamp"])
    coordinator = new_table(tmp_path, ict, **{"delta.enableInCommitTimestamps": "true"})
    first = committed(coordinator.commit(request(0, add(f"date={P1}/a.parquet"))))
    assert first.in_commit_timestamp is not None
    frozen = (first.in_commit_timestamp - 60_000) / 1000  # a minute before the last commit
    monkeypatch.setattr(time, "time", lambda: frozen)
    stamps = [first.in_commit_timestamp]
    for i in range(3):
        reply = committed(coordinator.commit(request(1 + i, add(f"date={P1}/b{i}.parquet"))))
        stamps.append(reply.in_commit_timestamp or -1)
    restarted = CommitCoordinator(f"file://{tmp_path}")
    reply = committed(restarted.commit(request(4, add(f"date={P1}/after-restart.parquet"))))
    stamps.append(reply.in_commit_timestamp or -1)
    assert stamps == [stamps[0] + i for i in range(5)]
    for version, stamp in enumerate(stamps, start=1):
        info = parse_actions((tmp_path / "_delta_log" / commit_name(version)).read_bytes())[0]
        assert isinstance(info, CommitInfo) and info.in_commit_timestamp == stamp


def test_published_events_describe_the_commit(tmp_path: Path) -> None:
    coordinator = new_table(tmp_path)
    sent = request(
        0,
        add(f"date={P1}/a.parquet"),
        add(f"date={P1}/b.parquet"),
        read_set=ReadSet(read_version=0, isolation_level=IsolationLevel.SERIALIZABLE),
    )
    reply = committed(coordinator.commit(sent))
    event = coordinator.published_event(reply.version)
    assert event.version == 1 and event.num_adds == 2 and event.num_removes == 0
    assert event.txn_id == sent.txn_id and event.table_uri == f"file://{tmp_path}"
    assert not event.has_metadata_change and not event.has_protocol_change
    with pytest.raises(VersionNotFoundError):
        coordinator.published_event(9)


# --- folding pending commits -------------------------------------------------------------------


def _same_files_as_the_log(coordinator: CommitCoordinator, path: Path) -> None:
    from_files = load_snapshot(f"file://{path}")
    state = coordinator.state()
    assert state.version == from_files.version
    assert sorted(f.path for f in state.add_files()) == sorted(
        f.path for f in from_files.add_files()
    )
    assert sorted(r.path for r in state.remove_files()) == sorted(
        from_files.all_tombstones.column("path").to_pylist()
    )


def test_commits_nobody_reads_are_folded_once_past_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append-only table whose state is never asked for keeps at most
    ``PENDING_MAX_COMMITS`` commits' actions unfolded (white box: ``history.pending``)."""
    from raydelta.actors.table import history as module

    monkeypatch.setattr(module, "PENDING_MAX_COMMITS", 8)
    coordinator = new_table(tmp_path)
    most = 0
    for i in range(30):
        committed(coordinator.commit(request(i, add(f"date={P1}/{i}.parquet"))))
        most = max(most, len(coordinator.history.pending))
    assert most == 7
    committed(coordinator.commit(request(30, remove(f"date={P1}/3.parquet"))))
    _same_files_as_the_log(coordinator, tmp_path)


def test_a_fold_done_outside_the_lock_is_installed_only_on_the_state_it_began_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from raydelta.actors.table import history as module

    monkeypatch.setattr(module, "PENDING_FOLD_COMMITS", 4)
    coordinator = new_table(tmp_path)
    for i in range(3):
        committed(coordinator.commit(request(i, add(f"date={P1}/{i}.parquet"))))
    assert coordinator.fold_work() is None
    committed(coordinator.commit(request(3, add(f"date={P2}/3.parquet", P2))))
    work = coordinator.fold_work()
    assert work is not None and len(work.commits) == 4
    folded = work.run()
    # commits that land while the fold runs stay pending after it is installed
    committed(coordinator.commit(request(4, remove(f"date={P1}/0.parquet"))))
    committed(coordinator.commit(request(5, add(f"date={P1}/5.parquet"))))
    assert coordinator.install_fold(work, folded)
    _same_files_as_the_log(coordinator, tmp_path)

    for i in range(6, 10):
        committed(coordinator.commit(request(i, add(f"date={P1}/{i}.parquet"))))
    stale = coordinator.fold_work()
    assert stale is not None
    folded = stale.run()
    _same_files_as_the_log(coordinator, tmp_path)  # a snapshot folded the same commits
    committed(coordinator.commit(request(10, remove(f"date={P1}/6.parquet"))))
    assert not coordinator.install_fold(stale, folded)
    _same_files_as_the_log(coordinator, tmp_path)
