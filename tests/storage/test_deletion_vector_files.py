from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyroaring import BitMap64

from raydelta.protocol.deletion_vectors import DeletionVectorDescriptor, entry_length
from raydelta.protocol.errors import (
    ChecksumMismatchError,
    DeletionVectorError,
    FileAlreadyExistsError,
)
from raydelta.storage.data.deletion_vectors import (
    read_deleted_rows,
    read_deletion_vector,
    write_deletion_vector_file,
)
from raydelta.storage.log.store import log_store_for

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "delta-spark-golden"
DV_TABLES = ["log-replay-dv-key-cases", "dv-partitioned-with-checkpoint", "dv-with-columnmapping"]


def _memory_root() -> str:
    return f"memory://dv-tests/{uuid.uuid4()}"


class _RecordingStore:
    """Wraps a table's store and records ``read_range`` ranges."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.ranges: list[tuple[int | None, int | None]] = []

    def read_range(self, path: str, start: int, end: int) -> bytes:
        self.ranges.append((start, end))
        data: bytes = self.store.read_range(path, start, end)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


# --- write then read ----------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["", "q7"])
def test_write_then_read_memory(prefix: str) -> None:
    root = _memory_root()
    sets = [[0, 5, 9], list(range(100, 70_000)), [2**40, 2**40 + 1, 7]]
    descriptors = write_deletion_vector_file(root, sets, random_prefix=prefix)
    assert len(descriptors) == 3
    assert len({d.absolute_path(root) for d in descriptors}) == 1
    for rows, descriptor in zip(sets, descriptors, strict=True):
        assert descriptor.storage_type == "u"
        assert descriptor.random_prefix == prefix
        assert descriptor.cardinality == len(set(rows))
        assert read_deletion_vector(descriptor, root).to_pylist() == sorted(set(rows))
        assert read_deleted_rows(descriptor, root) == BitMap64(rows)


def test_written_file_name_and_layout(tmp_path: Path) -> None:
    file_uuid = uuid.UUID("d2c639aa-8816-431a-aaf6-d3fe2512ff61")
    descriptors = write_deletion_vector_file(
        str(tmp_path), [[1], [2, 3]], random_prefix="ab", file_uuid=file_uuid
    )
    written = tmp_path / "ab" / f"deletion_vector_{file_uuid}.bin"
    assert written.is_file()
    assert [d.offset for d in descriptors] == [1, 1 + entry_length(descriptors[0].size_in_bytes)]
    blob = written.read_bytes()
    assert blob[0] == 1
    assert len(blob) == 1 + sum(entry_length(d.size_in_bytes) for d in descriptors)
    assert descriptors[0].absolute_path(str(tmp_path)) == str(written)
    assert [read_deletion_vector(d, str(tmp_path)).to_pylist() for d in descriptors] == [
        [1],
        [2, 3],
    ]


def test_write_rejects_bad_rows() -> None:
    with pytest.raises(DeletionVectorError):
        write_deletion_vector_file(_memory_root(), [[1], [-1]])
    with pytest.raises(DeletionVectorError):
        write_deletion_vector_file(_memory_root(), [[2**63]])


def test_write_nothing() -> None:
    assert write_deletion_vector_file(_memory_root(), []) == []


def test_write_refuses_existing_file() -> None:
    root = _memory_root()
    file_uuid = uuid.uuid4()
    write_deletion_vector_file(root, [[1]], file_uuid=file_uuid)
    with pytest.raises(FileAlreadyExistsError):
        write_deletion_vector_file(root, [[2]], file_uuid=file_uuid)


def test_write_with_explicit_store_and_storage_options() -> None:
    root = _memory_root()
    store = log_store_for(root)
    (descriptor,) = write_deletion_vector_file(root, [[4, 2]], store=store)
    assert read_deletion_vector(descriptor, root, storage_options={}).to_pylist() == [2, 4]
    assert read_deletion_vector(descriptor, root, store=store).to_pylist() == [2, 4]


# --- ranged reads -----------------------------------------------------------------


def test_read_fetches_only_the_entry_range() -> None:
    root = _memory_root()
    descriptors = write_deletion_vector_file(root, [[1, 2], list(range(1000)), [3]])
    fs = _RecordingStore(log_store_for(root))
    for descriptor in descriptors:
        read_deletion_vector(descriptor, root, store=fs)
    expected = []
    for d in descriptors:
        assert d.offset is not None
        start = 0 if d.offset == 1 else d.offset  # the first entry also fetches the version byte
        expected.append((start, d.offset + entry_length(d.size_in_bytes)))
    assert fs.ranges == expected


def test_inline_descriptor_needs_no_io() -> None:
    descriptor = DeletionVectorDescriptor.inline([3, 1, 2**35])
    assert read_deletion_vector(descriptor, "memory://nowhere", store=object()).to_pylist() == [
        1,
        3,
        2**35,
    ]


# --- failures ---------------------------------------------------------------------


def test_corrupted_crc_on_disk(tmp_path: Path) -> None:
    (descriptor,) = write_deletion_vector_file(str(tmp_path), [[10, 20, 30]])
    path = Path(descriptor.absolute_path(str(tmp_path)))
    blob = bytearray(path.read_bytes())
    blob[-1] ^= 0xFF
    path.write_bytes(bytes(blob))
    with pytest.raises(ChecksumMismatchError):
        read_deletion_vector(descriptor, str(tmp_path))


def test_missing_file() -> None:
    root = _memory_root()
    descriptor = DeletionVectorDescriptor.relative(
        uuid.uuid4(), offset=1, size_in_bytes=34, cardinality=1
    )
    with pytest.raises(DeletionVectorError):
        read_deletion_vector(descriptor, root)


def test_descriptor_size_larger_than_file() -> None:
    root = _memory_root()
    (written,) = write_deletion_vector_file(root, [[1]])
    lying = written.model_copy(update={"size_in_bytes": written.size_in_bytes + 100})
    with pytest.raises(DeletionVectorError):
        read_deletion_vector(lying, root)


def test_absolute_path_descriptor(tmp_path: Path) -> None:
    (relative,) = write_deletion_vector_file(str(tmp_path / "elsewhere"), [[8, 9]])
    absolute = DeletionVectorDescriptor(
        storageType="p",
        pathOrInlineDv=relative.absolute_path(str(tmp_path / "elsewhere")),
        offset=relative.offset,
        sizeInBytes=relative.size_in_bytes,
        cardinality=relative.cardinality,
    )
    assert read_deletion_vector(absolute, "file:///unused").to_pylist() == [8, 9]


# --- real tables written by delta-spark --------------------------------------------


def _commits(table: Path) -> list[list[dict[str, Any]]]:
    return [
        [json.loads(line) for line in commit.read_text().splitlines() if line.strip()]
        for commit in sorted((table / "_delta_log").glob("*.json"))
    ]


def _logged_file_actions(table: Path) -> list[dict[str, Any]]:
    return [
        action[kind]
        for commit in _commits(table)
        for action in commit
        for kind in ("add", "remove")
        if kind in action and action[kind].get("deletionVector")
    ]


@pytest.mark.parametrize("table_name", DV_TABLES)
def test_golden_tables_dvs_match_their_log(table_name: str) -> None:
    table = GOLDEN / table_name
    actions = _logged_file_actions(table)
    assert actions, "the golden table references deletion vectors"
    for action in actions:
        descriptor = DeletionVectorDescriptor.parse(action["deletionVector"])
        rows = read_deletion_vector(descriptor, str(table))
        assert len(rows) == descriptor.cardinality
        if "stats" in action:  # some removes carry none
            num_records = json.loads(action["stats"])["numRecords"]
            assert pc.all(pc.less(rows, num_records)).as_py()


def test_golden_dv_with_corrupted_crc_is_refused(tmp_path: Path) -> None:
    source = GOLDEN / "log-replay-dv-key-cases"
    action = _logged_file_actions(source)[0]
    descriptor = DeletionVectorDescriptor.parse(action["deletionVector"])
    name = Path(descriptor.absolute_path(str(source))).name
    shutil.copy(source / name, tmp_path / name)
    blob = bytearray((tmp_path / name).read_bytes())
    assert descriptor.offset is not None
    blob[descriptor.offset + 4 + descriptor.size_in_bytes] ^= 0x55  # first CRC byte
    (tmp_path / name).write_bytes(bytes(blob))
    with pytest.raises(ChecksumMismatchError):
        read_deletion_vector(descriptor, str(tmp_path))


def _active_files(table: Path) -> list[dict[str, Any]]:
    """Adds not removed, keyed by (path, DV unique id), replaying every JSON commit."""
    active: dict[tuple[str, str | None], dict[str, Any]] = {}
    for commit in _commits(table):
        for action in commit:
            for kind in ("add", "remove"):
                if kind not in action:
                    continue
                body = action[kind]
                dv = body.get("deletionVector")
                key = (body["path"], DeletionVectorDescriptor.parse(dv).unique_id if dv else None)
                if kind == "add":
                    active[key] = body
                else:
                    active.pop(key, None)
    return list(active.values())


def _surviving_rows(table: Path, add: dict[str, Any]) -> pa.Table:
    data = pq.read_table(table / add["path"])
    dv = add.get("deletionVector")
    if not dv:
        return data
    deleted = read_deletion_vector(DeletionVectorDescriptor.parse(dv), str(table))
    positions = pa.array(range(data.num_rows), type=pa.uint64())
    return data.filter(pc.invert(pc.is_in(positions, value_set=deleted)))


@pytest.mark.parametrize("table_name", DV_TABLES)
def test_row_count_matches_deltalake(table_name: str) -> None:
    deltalake = pytest.importorskip("deltalake")
    table = GOLDEN / table_name
    ours = sum(_surviving_rows(table, add).num_rows for add in _active_files(table))
    theirs = (
        deltalake.QueryBuilder()
        .register("t", deltalake.DeltaTable(str(table)))
        .execute("select count(*) as c from t")
        .read_all()
    )
    assert ours == pa.table(theirs).column("c")[0].as_py()


def test_surviving_ids_match_deltalake() -> None:
    deltalake = pytest.importorskip("deltalake")
    table = GOLDEN / "log-replay-dv-key-cases"
    ours = pa.concat_tables(_surviving_rows(table, add) for add in _active_files(table))
    theirs = (
        deltalake.QueryBuilder()
        .register("t", deltalake.DeltaTable(str(table)))
        .execute("select id from t")
        .read_all()
    )
    assert sorted(ours.column("id").to_pylist()) == sorted(
        pa.table(theirs).column("id").to_pylist()
    )
