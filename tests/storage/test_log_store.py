"""The log store contract (storage/log_store.py docstring), on every backend we run here."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from raydelta.protocol.errors import FileAlreadyExistsError
from raydelta.protocol.file_names import LogFileKind, commit_name
from raydelta.storage.log_store import LocalLogStore, LogStore, MemoryLogStore, log_store_for


@pytest.fixture(params=["local", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LogStore]:
    if request.param == "local":
        uri = f"file://{tmp_path}/table"
    else:
        uri = f"memory://raydelta-test-{uuid.uuid4().hex}/table"
    built = log_store_for(uri)
    expected = LocalLogStore if request.param == "local" else MemoryLogStore
    assert isinstance(built, expected)
    yield built


def test_put_if_absent_creates_exactly_the_bytes(store: LogStore) -> None:
    store.put_if_absent(commit_name(0), b'{"commitInfo":{}}\n')
    assert store.read(commit_name(0)) == b'{"commitInfo":{}}\n'


def test_put_if_absent_refuses_an_existing_file_and_leaves_it(store: LogStore) -> None:
    store.put_if_absent(commit_name(0), b"first\n")
    with pytest.raises(FileAlreadyExistsError):
        store.put_if_absent(commit_name(0), b"second\n")
    assert store.read(commit_name(0)) == b"first\n"


def test_read_of_a_missing_file_raises_file_not_found(store: LogStore) -> None:
    with pytest.raises(FileNotFoundError):
        store.read(commit_name(7))


def test_list_from_is_sorted_and_filtered_by_version(store: LogStore) -> None:
    for version in (3, 0, 11, 2, 1):
        store.put_if_absent(commit_name(version), b"{}\n")
    store.write("00000000000000000002.checkpoint.parquet", b"x")
    store.write("_last_checkpoint", b'{"version":2,"size":1}')
    listed = store.list_from(2)
    assert [f.name for f in listed] == sorted(f.name for f in listed)
    assert [(f.version, f.kind) for f in listed] == [
        (2, LogFileKind.CHECKPOINT_CLASSIC),
        (2, LogFileKind.COMMIT),
        (3, LogFileKind.COMMIT),
        (11, LogFileKind.COMMIT),
    ]
    assert all(f.size >= 0 for f in listed)


def test_list_of_a_missing_log_is_empty(store: LogStore) -> None:
    assert store.list_from(0) == []
    assert not store.log_exists()


def test_write_overwrites_and_delete_removes(store: LogStore) -> None:
    store.write("_last_checkpoint", b"a")
    store.write("_last_checkpoint", b"b")
    assert store.read("_last_checkpoint") == b"b"
    store.delete("_last_checkpoint")
    store.delete("_last_checkpoint")  # deleting twice is fine
    with pytest.raises(FileNotFoundError):
        store.read("_last_checkpoint")


def test_racing_threads_have_exactly_one_winner(store: LogStore) -> None:
    winners: list[int] = []
    losers: list[int] = []
    barrier = threading.Barrier(8)

    def race(i: int) -> None:
        barrier.wait()
        try:
            store.put_if_absent(commit_name(5), f"writer {i}\n".encode())
            winners.append(i)
        except FileAlreadyExistsError:
            losers.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1 and len(losers) == 7
    assert store.read(commit_name(5)) == f"writer {winners[0]}\n".encode()


def _race_process(uri: str, i: int, start: multiprocessing.synchronize.Event) -> None:
    store = log_store_for(uri)
    start.wait()
    for version in range(20):
        with contextlib.suppress(FileAlreadyExistsError):
            store.put_if_absent(commit_name(version), f"{i}\n".encode())


def test_racing_processes_never_overwrite(tmp_path: Path) -> None:
    """Separate processes (the real case: several engines) race on 20 versions."""
    uri = f"file://{tmp_path}/table"
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    processes = [context.Process(target=_race_process, args=(uri, i, start)) for i in range(4)]
    for p in processes:
        p.start()
    start.set()
    for p in processes:
        p.join(timeout=60)
        assert p.exitcode == 0
    store = log_store_for(uri)
    names = [f.name for f in store.list_from(0)]
    assert names == [commit_name(v) for v in range(20)]
    for version in range(20):
        body = store.read(commit_name(version))
        assert body in {f"{i}\n".encode() for i in range(4)}  # whole, from one writer
    leftovers = [n for n in os.listdir(tmp_path / "table" / "_delta_log") if n.endswith(".tmp")]
    assert leftovers == []


def test_local_put_if_absent_leaves_no_temp_file_on_loss(tmp_path: Path) -> None:
    store = log_store_for(str(tmp_path))
    store.put_if_absent(commit_name(0), b"a")
    with pytest.raises(FileAlreadyExistsError):
        store.put_if_absent(commit_name(0), b"b")
    assert os.listdir(tmp_path / "_delta_log") == [commit_name(0)]
