"""Group commit: ``CommitCoordinator.commit_many`` gives every request the reply
``commit`` would give it in the same order, writes each committed request as
its own version, and falls back to one-by-one commits when the batch cannot
be written whole. Driven without Ray, as in ``test_coordinator``; the last
test drives the ``TableActor`` with concurrent Ray and channel writers.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

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
    parse_actions,
    serialize_actions,
)
from raydelta.protocol.errors import TableNotFoundError
from raydelta.protocol.events import (
    CommitCommitted,
    CommitConflict,
    CommitRejected,
    CommitRequest,
    FileRef,
    ReadSet,
)
from raydelta.protocol.file_names import commit_name
from raydelta.protocol.schema import serialize_schema
from raydelta.protocol.schema_arrow import from_arrow
from raydelta.storage.backends.local import LocalLogStore
from raydelta.storage.snapshot import load_snapshot

P1, P2 = "2024-01-01", "2024-01-02"


def metadata() -> Metadata:
    import pyarrow as pa

    schema = pa.schema([("date", pa.string()), ("value", pa.int64())])
    return Metadata(
        id="table-id",
        format=Format(provider="parquet", options={}),
        schemaString=serialize_schema(from_arrow(schema)),
        partitionColumns=["date"],
        createdTime=1,
        configuration={},
    )


def add(path: str, date: str = P1) -> AddFile:
    return AddFile(
        path=path,
        partitionValues={"date": date},
        size=10,
        modificationTime=1,
        stats=json.dumps({"numRecords": 5}),
    )


def remove(path: str, date: str = P1) -> RemoveFile:
    return RemoveFile(
        path=path, partitionValues={"date": date}, deletionTimestamp=1, extendedFileMetadata=True
    )


def request(
    read_version: int, *actions: Action, read_set: ReadSet | None = None, txn_id: str | None = None
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


def coordinator_table(path: Path) -> CommitCoordinator:
    coordinator = CommitCoordinator(f"file://{path}")
    create = request(-1, Protocol(minReaderVersion=1, minWriterVersion=2), metadata())
    assert committed(coordinator.create(create)).version == 0
    return coordinator


def log_names(path: Path) -> list[str]:
    return sorted(p.name for p in (path / "_delta_log").iterdir())


def write_foreign(path: Path, version: int, *actions: Action) -> None:
    """Another engine commits straight to the files (no txnId)."""
    info = CommitInfo(timestamp=int(time.time() * 1000), operation="WRITE")
    (path / "_delta_log" / commit_name(version)).write_bytes(serialize_actions([info, *actions]))


def _txn_ids(path: Path) -> list[str | None]:
    out = []
    for name in log_names(path):
        if not name.endswith(".json"):
            continue
        actions = parse_actions((path / "_delta_log" / name).read_bytes())
        info = next(a for a in actions if isinstance(a, CommitInfo))
        out.append(info.txn_id)
    return out


def test_a_group_is_consecutive_versions_in_arrival_order(tmp_path: Path) -> None:
    coordinator = coordinator_table(tmp_path)
    requests = [request(0, add(f"date={P1}/f{i}.parquet")) for i in range(6)]
    replies = coordinator.commit_many(requests)
    assert [committed(r).version for r in replies] == [1, 2, 3, 4, 5, 6]
    assert _txn_ids(tmp_path)[1:] == [r.txn_id for r in requests]
    assert [committed(r).rebased_over for r in replies] == [
        (),
        (1,),
        (1, 2),
        (1, 2, 3),
        (1, 2, 3, 4),
        (1, 2, 3, 4, 5),
    ]
    snapshot = load_snapshot(f"file://{tmp_path}")
    assert snapshot.version == coordinator.version == 6
    assert snapshot.num_files == 6


def test_replies_equal_one_by_one_commits(tmp_path: Path) -> None:
    """Conflicts, rejections and duplicates inside a group: the same outcome as
    committing the requests one by one on a twin table."""
    grouped, serial = tmp_path / "grouped", tmp_path / "serial"
    results = {}
    for path in (grouped, serial):
        coordinator = coordinator_table(path)
        seeded = committed(coordinator.commit(request(0, add(f"date={P1}/a.parquet"))))
        read_a = ReadSet(
            read_version=seeded.version,
            predicates=(),
            files_read=(FileRef(path=f"date={P1}/a.parquet"),),
        )
        first = request(1, remove(f"date={P1}/a.parquet"), read_set=read_a, txn_id="delete-a")
        requests = [
            request(1, add(f"date={P2}/b.parquet"), txn_id="append-b"),
            first,
            # reads a, which the group's earlier request deleted: a conflict
            request(
                1,
                remove(f"date={P1}/a.parquet"),
                add(f"date={P1}/c.parquet"),
                read_set=read_a,
                txn_id="rewrite-a",
            ),
            request(1, add(f"date={P1}/d.parquet"), add(f"date={P1}/d.parquet"), txn_id="dup"),
            request(1, add(f"date={P1}/e.parquet"), txn_id="delete-a"),  # a retry of `first`
            request(1, add(f"date={P2}/f.parquet"), txn_id="append-f"),
        ]
        if path == grouped:
            replies: list[Any] = coordinator.commit_many(requests)
        else:
            replies = [coordinator.commit(r) for r in requests]
        results[path] = replies
        assert isinstance(replies[2], CommitConflict)
        assert isinstance(replies[3], CommitRejected)
        assert committed(replies[4]).version == committed(replies[1]).version
    for ours, theirs in zip(results[grouped], results[serial], strict=True):
        assert type(ours) is type(theirs)
        if isinstance(ours, CommitCommitted):
            assert (ours.version, ours.rebased_over) == (theirs.version, theirs.rebased_over)
    assert log_names(grouped) == log_names(serial)
    grouped_files = {f.path for f in load_snapshot(f"file://{grouped}").add_files()}
    assert grouped_files == {f.path for f in load_snapshot(f"file://{serial}").add_files()}


def test_a_version_taken_by_another_engine_falls_back_to_one_by_one(tmp_path: Path) -> None:
    coordinator = coordinator_table(tmp_path)
    write_foreign(tmp_path, 3, add(f"date={P2}/foreign.parquet", P2))  # after the group's 2nd
    requests = [request(0, add(f"date={P1}/g{i}.parquet")) for i in range(4)]
    # versions 1 and 2 are free: the batch links them, then stops at 3
    replies = coordinator.commit_many(requests)
    versions = [committed(r).version for r in replies]
    assert versions == [1, 2, 4, 5]
    assert committed(replies[0]).attempts == 0  # found by txnId after the fallback
    ids = _txn_ids(tmp_path)
    assert ids[1:3] == [r.txn_id for r in requests[:2]]
    assert ids[3] is None  # the foreign commit
    assert ids[4:] == [r.txn_id for r in requests[2:]]
    snapshot = load_snapshot(f"file://{tmp_path}")
    assert snapshot.num_files == 5 and coordinator.version == 5


def test_an_io_error_leaves_the_state_as_the_log_says(tmp_path: Path, monkeypatch: Any) -> None:
    coordinator = coordinator_table(tmp_path)
    calls = {"many": 0}

    def broken(self: LocalLogStore, items: Any) -> int:
        calls["many"] += 1
        raise OSError("disk full")

    monkeypatch.setattr(LocalLogStore, "put_if_absent_many", broken)
    requests = [request(0, add(f"date={P1}/h{i}.parquet")) for i in range(3)]
    replies = coordinator.commit_many(requests)
    # the one-by-one fallback wrote them with put_if_absent
    assert calls["many"] == 1
    assert [committed(r).version for r in replies] == [1, 2, 3]
    assert coordinator.version == 3 == load_snapshot(f"file://{tmp_path}").version


def test_a_missing_table_is_each_callers_error(tmp_path: Path) -> None:
    coordinator = CommitCoordinator(f"file://{tmp_path}")
    replies = coordinator.commit_many([request(0, add("x.parquet")), request(0, add("y.parquet"))])
    assert all(isinstance(r, TableNotFoundError) for r in replies)
    assert not (tmp_path / "_delta_log").exists()


@pytest.mark.parametrize("use_channel", [False, True], ids=["ray", "channel"])
def test_concurrent_writers_through_the_actor(
    new_table: Any, make_add: Any, use_channel: bool
) -> None:
    from raydelta.actors.table.client import TableClient

    uri, _ = new_table()
    writers, commits = 6, 15
    won: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def write(index: int) -> None:
        table = TableClient.open(uri, use_channel=use_channel)
        try:
            for n in range(commits):
                version = table.append_files(make_add(f"date={P1}/w{index}-{n}.parquet"))
                with lock:
                    won.append(version)
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    total = writers * commits
    assert sorted(won) == list(range(1, total + 1))  # each acknowledged once, no gap
    snapshot = load_snapshot(uri)
    assert snapshot.version == total
    assert snapshot.num_files == total
