"""The table-storage contract (storage/backends/contract.py docstring), on every backend
we run here, with the same tests for each (S3 through moto's server on loopback: the
``s3_server`` session fixture), and the registry that picks a backend by URI scheme."""

from __future__ import annotations

import contextlib
import inspect
import multiprocessing
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem

from raydelta.protocol.errors import FileAlreadyExistsError
from raydelta.protocol.file_names import (
    LAST_CHECKPOINT_NAME,
    SIDECAR_DIR,
    STAGED_COMMITS_DIR,
    LogFileKind,
    checksum_name,
    commit_name,
    hadoop_crc_name,
    sidecar_name,
    staged_commit_name,
)
from raydelta.storage.backends.exclusive_create import ObjectStoreLogStore
from raydelta.storage.backends.local import LocalLogStore
from raydelta.storage.backends.memory import MemoryLogStore
from raydelta.storage.backends.s3 import S3LogStore
from raydelta.storage.backends.single_writer import SingleWriterLogStore
from raydelta.storage.log.store import LogStore, log_store_for
from tests.hadoop_crc import disagreeing_crcs, orphan_crcs, write_crc


@pytest.fixture(params=["local", "memory", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LogStore]:
    options = None
    if request.param == "local":
        uri = f"file://{tmp_path}/table"
    elif request.param == "memory":
        uri = f"memory://raydelta-test-{uuid.uuid4().hex}/table"
    else:
        server = request.getfixturevalue("s3_server")
        uri, options = server.new_table_uri(), server.storage_options
    built = log_store_for(uri, options)
    expected = {"local": LocalLogStore, "memory": MemoryLogStore, "s3": S3LogStore}
    assert type(built) is expected[request.param]
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


def _race_process(
    uri: str, i: int, start: multiprocessing.synchronize.Event, options: dict[str, Any] | None
) -> None:
    store = log_store_for(uri, options)
    start.wait()
    for version in range(20):
        with contextlib.suppress(FileAlreadyExistsError):
            store.put_if_absent(commit_name(version), f"{i}\n".encode())


@pytest.mark.parametrize("backend", ["local", pytest.param("s3", marks=pytest.mark.slow)])
def test_racing_processes_never_overwrite(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Separate processes (the real case: several engines) race on 20 versions."""
    uri, options = f"file://{tmp_path}/table", None
    if backend == "s3":
        server = request.getfixturevalue("s3_server")
        uri, options = server.new_table_uri(), server.storage_options
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    processes = [
        context.Process(target=_race_process, args=(uri, i, start, options)) for i in range(4)
    ]
    for p in processes:
        p.start()
    start.set()
    for p in processes:
        p.join(timeout=60)
        assert p.exitcode == 0
    store = log_store_for(uri, options)
    names = [f.name for f in store.list_from(0)]
    assert names == [commit_name(v) for v in range(20)]
    for version in range(20):
        body = store.read(commit_name(version))
        assert body in {f"{i}\n".encode() for i in range(4)}  # whole, from one writer
    if backend == "local":
        leftovers = [n for n in os.listdir(tmp_path / "table" / "_delta_log") if n.endswith(".tmp")]
        assert leftovers == []


def test_local_put_if_absent_leaves_no_temp_file_on_loss(tmp_path: Path) -> None:
    store = log_store_for(str(tmp_path))
    store.put_if_absent(commit_name(0), b"a")
    with pytest.raises(FileAlreadyExistsError):
        store.put_if_absent(commit_name(0), b"b")
    assert os.listdir(tmp_path / "_delta_log") == [commit_name(0)]


# --- the LogStore contract, on every concrete store ----------------------------------------
#
# The tests above build stores from URIs; these build every concrete LogStore class
# (ObjectStoreLogStore over a local filesystem, whose exclusive create is O_EXCL;
# SingleWriterLogStore in single-writer mode over a memory filesystem; S3LogStore on
# moto's server), so a new store cannot be added without meeting the contract.

CONTRACT_STORES = ("local", "memory", "exclusive-create", "single-writer", "s3")


def _concrete_subclasses(cls: type) -> set[type]:
    found: set[type] = set()
    for sub in cls.__subclasses__():
        if not inspect.isabstract(sub):
            found.add(sub)
        found |= _concrete_subclasses(sub)
    return found


def _build(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> LogStore:
    if kind == "local":
        return LocalLogStore(LocalFileSystem(), str(tmp_path / "table"))
    if kind == "memory":
        return MemoryLogStore(MemoryFileSystem(), f"/raydelta-test-{uuid.uuid4().hex}/table")
    if kind == "single-writer":
        return SingleWriterLogStore(
            MemoryFileSystem(),
            f"/raydelta-test-{uuid.uuid4().hex}/table",
            single_writer=True,
            why="a test of the contract",
        )
    if kind == "s3":
        server = request.getfixturevalue("s3_server")
        built = log_store_for(server.new_table_uri(), server.storage_options)
        assert isinstance(built, S3LogStore)
        return built
    return ObjectStoreLogStore(LocalFileSystem(auto_mkdir=True), str(tmp_path / "table"))


@pytest.fixture(params=CONTRACT_STORES)
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> LogStore:
    return _build(request.param, tmp_path, request)


def test_the_contract_is_abstract_and_every_concrete_store_is_tested(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with pytest.raises(TypeError):
        LogStore(LocalFileSystem(), str(tmp_path))  # type: ignore[abstract]
    tested = {type(_build(kind, tmp_path, request)) for kind in CONTRACT_STORES}
    assert tested == _concrete_subclasses(LogStore)


def test_contract_list_order_is_version_order_for_zero_padded_names(any_store: LogStore) -> None:
    versions = [100, 9, 10, 0, 1_000_000, 99]
    for version in versions:
        any_store.put_if_absent(commit_name(version), b"{}\n")
    listed = any_store.list_from(0)
    assert [f.name for f in listed] == sorted(f.name for f in listed)
    assert [f.version for f in listed] == sorted(versions)
    assert [f.version for f in any_store.list_from(10)] == [10, 99, 100, 1_000_000]
    assert any_store.list_from(1_000_001) == []


def test_contract_list_from_holds_only_versioned_files(any_store: LogStore) -> None:
    any_store.put_if_absent(commit_name(0), b"{}\n")
    any_store.write(LAST_CHECKPOINT_NAME, b'{"version":0,"size":1}')
    any_store.write("not-a-log-file.txt", b"x")
    any_store.write(sidecar_name(str(uuid.uuid4())), b"x")
    assert [f.name for f in any_store.list_from(0)] == [commit_name(0)]
    top = [f.name for f in any_store.list_dir()]
    assert top == [commit_name(0), LAST_CHECKPOINT_NAME]  # recognised names only, sorted


def test_contract_list_dir_of_a_subdirectory(any_store: LogStore) -> None:
    ids = sorted(str(uuid.uuid4()) for _ in range(3))
    for i, sidecar in enumerate(reversed(ids)):
        any_store.write(sidecar_name(sidecar), b"x" * (i + 1))
    listed = any_store.list_dir(SIDECAR_DIR)
    assert [f.name for f in listed] == [sidecar_name(s) for s in ids]
    assert all(f.kind is LogFileKind.SIDECAR and f.size > 0 for f in listed)
    assert any_store.list_dir(STAGED_COMMITS_DIR) == []


def test_contract_put_if_absent_into_a_subdirectory(any_store: LogStore) -> None:
    name = staged_commit_name(3, str(uuid.uuid4()))
    any_store.put_if_absent(name, b"staged\n")
    assert any_store.read(name) == b"staged\n"
    with pytest.raises(FileAlreadyExistsError):
        any_store.put_if_absent(name, b"again\n")
    assert [f.version for f in any_store.list_dir(STAGED_COMMITS_DIR)] == [3]


def test_contract_put_if_absent_refuses_a_name_write_created(any_store: LogStore) -> None:
    any_store.write(commit_name(4), b"written\n")
    with pytest.raises(FileAlreadyExistsError):
        any_store.put_if_absent(commit_name(4), b"put\n")
    assert any_store.read(commit_name(4)) == b"written\n"


def test_contract_put_if_absent_one_winner_among_threads(any_store: LogStore) -> None:
    outcomes: list[bool] = []
    barrier = threading.Barrier(6)

    def race(i: int) -> None:
        barrier.wait()
        try:
            any_store.put_if_absent(commit_name(1), f"writer {i}\n".encode())
            outcomes.append(True)
        except FileAlreadyExistsError:
            outcomes.append(False)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == [False] * 5 + [True]
    assert any_store.read(commit_name(1)).startswith(b"writer ")


def test_contract_read_many_keeps_the_order_given(any_store: LogStore) -> None:
    for version in range(4):
        any_store.put_if_absent(commit_name(version), f"{version}\n".encode())
    names = [commit_name(v) for v in (3, 0, 2)]
    assert any_store.read_many(names) == [b"3\n", b"0\n", b"2\n"]
    assert any_store.read_many([]) == []
    with pytest.raises(FileNotFoundError):
        any_store.read_many([commit_name(0), commit_name(9)])


def test_contract_missing_files_and_logs(any_store: LogStore) -> None:
    assert not any_store.log_exists()
    assert any_store.list_dir() == [] and any_store.list_dir(SIDECAR_DIR) == []
    with pytest.raises(FileNotFoundError):
        any_store.read(LAST_CHECKPOINT_NAME)
    any_store.delete(commit_name(0))  # a missing file is fine
    any_store.put_if_absent(commit_name(0), b"{}\n")
    assert any_store.log_exists()


def test_contract_write_replaces_and_delete_removes(any_store: LogStore) -> None:
    any_store.write(LAST_CHECKPOINT_NAME, b"first")
    any_store.write(LAST_CHECKPOINT_NAME, b"second")
    assert any_store.read(LAST_CHECKPOINT_NAME) == b"second"
    any_store.delete(LAST_CHECKPOINT_NAME)
    with pytest.raises(FileNotFoundError):
        any_store.read(LAST_CHECKPOINT_NAME)


def test_contract_on_local_disk_means_os_paths(any_store: LogStore) -> None:
    any_store.put_if_absent(commit_name(0), b"{}\n")
    if any_store.on_local_disk:
        with open(any_store.path_of(commit_name(0)), "rb") as handle:
            assert handle.read() == b"{}\n"
    else:
        assert isinstance(
            any_store, MemoryLogStore | ObjectStoreLogStore | SingleWriterLogStore | S3LogStore
        )


# --- Hadoop checksum files (issue 31) --------------------------------------------------


def test_contract_listings_never_show_hadoop_checksum_files(any_store: LogStore) -> None:
    """delta-spark's log holds ``.<name>.crc`` beside each file (Hadoop's checksum
    files): never log files, on any store; only the local store names them."""
    sidecar = sidecar_name(str(uuid.UUID(int=7)))
    names = [commit_name(0), checksum_name(0), LAST_CHECKPOINT_NAME, sidecar]
    for name in names:
        any_store.put_if_absent(name, b"{}\n")
        any_store.put_if_absent(hadoop_crc_name(name), b"crc\x00")
    assert [f.name for f in any_store.list_dir()] == sorted(names[:3])
    assert [f.name for f in any_store.list_dir(SIDECAR_DIR)] == [sidecar]
    assert [f.name for f in any_store.list_from(0)] == sorted(names[:2])
    if any_store.on_local_disk:
        assert any_store.list_hadoop_crcs() == sorted(hadoop_crc_name(n) for n in names[:3])
        assert any_store.list_hadoop_crcs(SIDECAR_DIR) == [hadoop_crc_name(sidecar)]
    else:
        assert any_store.list_hadoop_crcs() == []


def _local_store(tmp_path: Path) -> LocalLogStore:
    store = log_store_for(str(tmp_path / "table"))
    assert isinstance(store, LocalLogStore)
    return store


def _hadoop_wrote(store: LogStore, name: str, data: bytes) -> Path:
    """``name`` as delta-spark leaves it: the file and its matching checksum file."""
    path = Path(store.path_of(name))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return write_crc(path)


def test_local_write_never_leaves_the_old_checksum_on_new_bytes(tmp_path: Path) -> None:
    store = _local_store(tmp_path)
    crc = _hadoop_wrote(store, LAST_CHECKPOINT_NAME, b'{"version":10,"size":3}\n')
    store.write(LAST_CHECKPOINT_NAME, b'{"version":20,"size":4}\n')
    assert store.read(LAST_CHECKPOINT_NAME) == b'{"version":20,"size":4}\n'
    assert not crc.exists()  # removed, not rewritten: Hadoop reads the file unverified
    store.write(LAST_CHECKPOINT_NAME, b'{"version":30,"size":5}\n')  # none to remove: fine
    assert disagreeing_crcs(tmp_path) == [] and orphan_crcs(tmp_path) == []


def test_local_delete_takes_the_checksum_file_with_it(tmp_path: Path) -> None:
    store = _local_store(tmp_path)
    sidecar = sidecar_name(str(uuid.UUID(int=8)))
    crcs = [_hadoop_wrote(store, name, b"{}\n") for name in (commit_name(0), sidecar)]
    store.delete(commit_name(0))
    store.delete(sidecar)
    assert not any(crc.exists() for crc in crcs)
    assert store.list_hadoop_crcs() == [] and store.list_hadoop_crcs(SIDECAR_DIR) == []


def test_local_orphan_checksum_removed_only_when_its_file_is_gone(tmp_path: Path) -> None:
    store = _local_store(tmp_path)
    kept = _hadoop_wrote(store, commit_name(0), b"{}\n")
    orphan = _hadoop_wrote(store, commit_name(1), b"{}\n")
    Path(store.path_of(commit_name(1))).unlink()  # a tool that deleted the file alone
    assert not store.delete_orphan_hadoop_crc(commit_name(0)) and kept.exists()
    assert store.delete_orphan_hadoop_crc(commit_name(1)) and not orphan.exists()
    assert not store.delete_orphan_hadoop_crc(commit_name(1))  # nothing left: fine


# --- files of the table: the same tests on every backend (contract.py, "Files of the table")


def _put_file(store: LogStore, relative: str, data: bytes) -> str:
    path = store.root_path(relative)
    with store.open_output(path) as handle:
        handle.write(data)
    return path


def test_contract_open_output_then_read_status_and_exists(any_store: LogStore) -> None:
    path = _put_file(any_store, "year=2024/part-0.parquet", b"0123456789")
    assert any_store.exists(path)
    with any_store.open_input(path) as handle:
        assert handle.read() == b"0123456789"
        handle.seek(3)
        assert handle.read(2) == b"34"
    assert any_store.read_range(path, 2, 5) == b"234"
    assert any_store.read_range(path, 8, 20) == b"89"  # fewer at the end
    status = any_store.status(path)
    assert status.size == 10 and status.is_file
    assert status.modification_time >= 0
    _put_file(any_store, "year=2024/part-0.parquet", b"abc")  # replaced whole
    assert any_store.status(path).size == 3


def test_contract_missing_paths(any_store: LogStore) -> None:
    missing = any_store.root_path("nope/part-9.parquet")
    assert not any_store.exists(missing)
    with pytest.raises(FileNotFoundError):
        any_store.status(missing)
    with pytest.raises(FileNotFoundError):
        any_store.open_input(missing).read()
    with pytest.raises(FileNotFoundError):
        any_store.read_range(missing, 0, 1)
    assert any_store.scan_directory(any_store.root_path("nope")) is None


def test_contract_remove_file_and_empty_directory(any_store: LogStore) -> None:
    path = _put_file(any_store, "p=1/a.parquet", b"x")
    kept = _put_file(any_store, "p=2/b.parquet", b"y")
    any_store.remove_file(path)
    assert not any_store.exists(path)
    any_store.remove_directory_if_empty(any_store.root_path("p=1"))
    assert not any_store.exists(any_store.root_path("p=1"))
    assert not any_store.remove_directory_if_empty(any_store.root_path("p=2"))  # not empty
    assert any_store.exists(kept)


def test_contract_open_parquet_reads_what_open_output_wrote(any_store: LogStore) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"id": [1, 2, 3], "name": ["a", "b", None]})
    path = any_store.root_path("part-0.parquet")
    with any_store.open_output(path) as handle:
        pq.write_table(table, handle)
    for memory_map in (False, True):
        assert any_store.open_parquet(path, memory_map=memory_map).read().equals(table)


def test_contract_data_paths_and_root_key(any_store: LogStore) -> None:
    expected = any_store.root_path("a=1/x y.parquet")
    assert any_store.data_path("a=1/x%20y.parquet") == expected  # decoded exactly once
    assert any_store.data_path("a%3D1/x y.parquet") == expected
    assert any_store.data_path(f"{any_store.table_root_key}/a=1/x y.parquet") == expected
    assert any_store.data_path("x%2520y.parquet") == any_store.root_path("x%20y.parquet")
    assert any_store.path_of(commit_name(3)) == any_store.root_path(f"_delta_log/{commit_name(3)}")
    assert not any_store.table_root_key.endswith("/")
    if any_store.on_local_disk:
        assert any_store.scheme == "file" and any_store.table_root_key == any_store.table_root


def test_contract_scan_directory(any_store: LogStore) -> None:
    _put_file(any_store, "c.parquet", b"ccc")
    _put_file(any_store, "_hidden.parquet", b"h")
    _put_file(any_store, "p=1/a.parquet", b"a")
    scan = any_store.scan_directory(any_store.table_root)
    assert scan is not None
    assert sorted(scan.entries) == [
        ("_hidden.parquet", "file"),
        ("c.parquet", "file"),
        ("p=1", "directory"),
    ]
    assert scan.status("c.parquet").size == 3
    assert scan.modification_time >= 0
    inner = any_store.scan_directory(any_store.root_path("p=1"))
    assert inner is not None and inner.entries == [("a.parquet", "file")]


def test_contract_scan_directory_sees_what_another_store_wrote(any_store: LogStore) -> None:
    """No listing cache: a file written after a scan shows in the next one."""
    _put_file(any_store, "p=1/a.parquet", b"a")
    first = any_store.scan_directory(any_store.root_path("p=1"))
    assert first is not None and [n for n, _ in first.entries] == ["a.parquet"]
    _put_file(any_store, "p=1/b.parquet", b"b")
    second = any_store.scan_directory(any_store.root_path("p=1"))
    assert second is not None and sorted(n for n, _ in second.entries) == ["a.parquet", "b.parquet"]


def test_contract_vacuum_tree_listing(any_store: LogStore) -> None:
    """VACUUM's walk (storage/cleanup/listing.py) over the contract: the same
    listing on every backend (hidden names kept, partition directories entered,
    protected files kept, ``_delta_log`` never entered)."""
    from raydelta.storage.cleanup.listing import list_parallel, list_sequential, list_tree

    any_store.put_if_absent(commit_name(0), b"{}\n")
    for relative, data in [
        ("a.parquet", b"aa"),
        ("live.parquet", b"l"),
        ("_tmp.parquet", b"t"),
        ("p=1/b.parquet", b"bbb"),
        ("p=1/q=x/c.parquet", b"c"),
        ("_p=2/d.parquet", b"d"),  # a partition directory (partition column _p)
        ("_stray/e.parquet", b"e"),  # hidden directory: never entered
    ]:
        _put_file(any_store, relative, data)
    partitions = frozenset({"p", "q", "_p"})
    protected = {"live.parquet"}
    listing = list_sequential(any_store, partitions, protected)
    files = sorted(
        zip(
            listing.files.column("path").to_pylist(),
            listing.files.column("size").to_pylist(),
            strict=True,
        )
    )
    assert files == [
        ("_p=2/d.parquet", 1),
        ("a.parquet", 2),
        ("p=1/b.parquet", 3),
        ("p=1/q=x/c.parquet", 1),
    ]
    assert all(t >= 0 for t in listing.files.column("modification_time").to_pylist())
    assert listing.num_seen == 5  # the listed files and the protected one
    kept = {path: entries for path, _, entries in listing.dirs}
    assert kept == {"p=1": 0, "p=1/q=x": 0, "_p=2": 0}
    assert listing.symlinks == [] and listing.crcs == []
    parallel = list_parallel(any_store, partitions, protected)
    assert sorted(parallel.files.column("path").to_pylist()) == [f for f, _ in files]
    one = list_tree(any_store, ["p=1"], partitions, protected)
    assert sorted(one.files.column("path").to_pylist()) == ["p=1/b.parquet", "p=1/q=x/c.parquet"]


def test_vacuum_tree_listing_sorts_hadoop_checksums_on_local_disks_only(tmp_path: Path) -> None:
    """Local disks: a listed file's ``.crc`` and an orphan's are VACUUM's to
    decide (``listing.crcs``); a kept file's is kept. Elsewhere a ``.crc`` is a
    hidden file like any other (kept)."""
    from raydelta.storage.cleanup.listing import list_sequential

    local = _build("local", tmp_path / "local", None)  # type: ignore[arg-type]
    other = _build("exclusive-create", tmp_path / "other", None)  # type: ignore[arg-type]
    for store in (local, other):
        for relative in ("a.parquet", ".a.parquet.crc", "live.parquet", ".live.parquet.crc"):
            _put_file(store, relative, b"x")
        _put_file(store, ".gone.parquet.crc", b"x")
    on_disk = list_sequential(local, frozenset(), {"live.parquet"})
    assert sorted((c.path, c.target) for c in on_disk.crcs) == [
        (".a.parquet.crc", "a.parquet"),
        (".gone.parquet.crc", None),
    ]
    elsewhere = list_sequential(other, frozenset(), {"live.parquet"})
    assert elsewhere.crcs == []
    assert on_disk.files.column("path").to_pylist() == ["a.parquet"]
    assert elsewhere.files.column("path").to_pylist() == ["a.parquet"]


# --- the registry -------------------------------------------------------------------------


def test_registry_one_backend_per_scheme_and_a_fallback(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from raydelta.storage.backends.registry import BACKENDS, FALLBACK, storage_for

    assert storage_for is log_store_for
    assert set(BACKENDS) == {"file", "local", "memory", "s3", "s3a"}
    assert type(log_store_for(str(tmp_path / "t"))) is LocalLogStore  # plain path: file
    assert type(log_store_for(f"file://{tmp_path}/t")) is LocalLogStore
    assert type(log_store_for(f"memory://r-{uuid.uuid4().hex}/t")) is MemoryLogStore
    server = request.getfixturevalue("s3_server")
    uri = server.new_table_uri()
    assert type(log_store_for(uri, server.storage_options)) is S3LogStore
    assert type(log_store_for(uri.replace("s3://", "s3a://", 1), server.storage_options)) is (
        S3LogStore
    )
    disabled = {**server.storage_options, "conditional_put": "disabled"}
    assert type(log_store_for(uri, disabled)) is SingleWriterLogStore
    # a scheme with no line of its own gets the fallback (a chained URL stands
    # for any backend raydelta knows no atomic create for)
    assert FALLBACK.__module__ == "raydelta.storage.backends.single_writer"
    fallback = log_store_for(f"simplecache::file://{tmp_path}/t")
    assert type(fallback) is SingleWriterLogStore


def test_the_registry_imports_every_backend_and_nothing_imports_it_back() -> None:
    """No cycle: the contract and each backend import no registry; the registry
    imports every backend at import time (no lazy import picks a backend)."""
    import ast

    backends = Path(__file__).resolve().parents[2] / "storage" / "backends"
    for module in backends.glob("*.py"):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        imported = {
            node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module is not None
        }
        if module.name != "registry.py":
            assert "raydelta.storage.backends.registry" not in imported, module.name
            assert "raydelta.storage.log.store" not in imported, module.name
