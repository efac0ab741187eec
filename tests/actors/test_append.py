"""Table.append: a blind append in one round trip, checked at commit time."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from raydelta.protocol.errors import AppendOnlyViolationError, InvalidCommitError
from raydelta.protocol.events import ReadSet
from raydelta.protocol.predicates import parse_predicate


def test_append_commits_and_retries_exactly_once(
    new_table: Any, make_add: Any, log_commits: Any
) -> None:
    uri, table = new_table()
    version = table.append_files(make_add("date=2024-01-01/a.parquet"), txn_id="fixed-id")
    assert version == 1
    assert table.append_files(make_add("date=2024-01-01/b.parquet"), txn_id="fixed-id") == 1
    commits = log_commits(uri)
    assert [v for v, _ in commits] == [0, 1]
    info = commits[1][1][0]
    assert info.to_json_dict()["txnId"] == "fixed-id"
    assert info.to_json_dict()["isBlindAppend"] is True
    assert "readVersion" not in info.to_json_dict()


def test_concurrent_appends_all_land_once(new_table: Any, make_add: Any, log_commits: Any) -> None:
    uri, table = new_table()
    won: list[int] = []
    lock = threading.Lock()

    def writer(i: int) -> None:
        for j in range(5):
            v = table.append_files(make_add(f"date=2024-01-01/w{i}-{j}.parquet"))
            with lock:
                won.append(v)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won) == list(range(1, 21))
    assert [v for v, _ in log_commits(uri)] == list(range(21))
    assert table.snapshot().num_files == 20


def test_append_is_checked_against_the_table_at_commit_time(
    new_table: Any, make_add: Any, log_files: Any
) -> None:
    uri, table = new_table()
    before = log_files(uri)
    with pytest.raises(InvalidCommitError):
        table.append_files(make_add("a.parquet", partitioned=False))  # no partition value
    assert log_files(uri) == before
    txn = table.transaction()
    txn.set_metadata(properties={"delta.appendOnly": "true"})
    txn.upgrade_protocol(writer_features=["appendOnly"])
    txn.commit(operation="SET TBLPROPERTIES")
    assert table.append_files(make_add("date=2024-01-01/ok.parquet")) == 2
    remover = table.transaction()
    remover.remove("date=2024-01-01/ok.parquet")
    with pytest.raises(AppendOnlyViolationError):
        remover.commit(operation="DELETE")


def test_only_a_read_nothing_set_may_omit_the_read_version() -> None:
    assert ReadSet(read_version=None).read_nothing
    with pytest.raises(ValueError):
        ReadSet(read_version=None, predicates=(parse_predicate("date = '1'"),))
