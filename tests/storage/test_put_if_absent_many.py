"""``LogStore.put_if_absent_many`` (the catalog publisher's batch write): in
order, stops at the first existing name, every created file whole, on a local
disk (parallel temp files, links in order) and on ``memory://`` (the loop)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from raydelta.protocol.file_names import commit_name
from raydelta.storage.log.store import LogStore, log_store_for


@pytest.fixture(params=["local", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> LogStore:
    if request.param == "local":
        return log_store_for((tmp_path / "t").as_uri())
    return log_store_for(f"memory://many-{uuid.uuid4().hex}/t")


def body(version: int) -> bytes:
    return f'{{"commitInfo":{{"v":{version}}}}}\n'.encode() * (version + 1)


def test_creates_all_in_order(store: LogStore) -> None:
    items = [(commit_name(v), body(v)) for v in range(12)]
    assert store.put_if_absent_many(items) == 12
    assert [f.version for f in store.list_from(0)] == list(range(12))
    assert store.read_many([n for n, _ in items]) == [d for _, d in items]
    assert store.put_if_absent_many([]) == 0


def test_stops_at_the_first_existing_name(store: LogStore) -> None:
    store.put_if_absent(commit_name(3), b"someone else's\n")
    items = [(commit_name(v), body(v)) for v in range(6)]
    assert store.put_if_absent_many(items) == 3
    assert [f.version for f in store.list_from(0)] == [0, 1, 2, 3]
    assert store.read(commit_name(3)) == b"someone else's\n"  # left as it was
    assert store.put_if_absent_many(items[4:]) == 2
    assert [f.version for f in store.list_from(0)] == list(range(6))


def test_no_temp_files_left(tmp_path: Path) -> None:
    store = log_store_for((tmp_path / "t").as_uri())
    store.put_if_absent(commit_name(1), b"x\n")
    assert store.put_if_absent_many([(commit_name(v), body(v)) for v in range(4)]) == 1
    log = tmp_path / "t" / "_delta_log"
    assert sorted(p.name for p in log.iterdir()) == [commit_name(0), commit_name(1)]


def test_sync_names_after_a_batch(store: LogStore) -> None:
    names = [commit_name(v) for v in range(3)]
    assert store.put_if_absent_many([(n, body(i)) for i, n in enumerate(names)]) == 3
    store.sync_names(names)  # local: one directory fsync; memory: nothing to do
    assert [f.name for f in store.list_from(0)] == names
