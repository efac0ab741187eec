"""load_snapshot: the public read entry point (tables written by deltalake and by hand)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest

from raydelta.protocol.errors import (
    CorruptLogError,
    InvalidProtocolVersionException,
    TableNotFoundError,
    UnsupportedTableFeatureException,
    VersionNotFoundError,
)
from raydelta.protocol.file_names import commit_name
from raydelta.storage.snapshot import load_snapshot


def _write(path: Path, rows: int, mode: str = "append") -> None:
    deltalake.write_deltalake(
        str(path), pa.table({"id": list(range(rows)), "p": ["a"] * rows}), mode=mode
    )


def _theirs(path: Path, version: int | None = None) -> set[str]:
    table = deltalake.DeltaTable(str(path), version=version)
    actions = pa.table(table.get_add_actions(flatten=True))
    return set(actions.column("path").to_pylist())


def test_a_table_written_by_deltalake_loads_identically(tmp_path: Path) -> None:
    for _ in range(3):
        _write(tmp_path, 5)
    _write(tmp_path, 2, mode="overwrite")
    deltalake.DeltaTable(str(tmp_path)).delete("id = 1")
    latest = deltalake.DeltaTable(str(tmp_path)).version()
    for version in range(latest + 1):
        snap = load_snapshot(str(tmp_path), version=version)
        assert {a.path for a in snap.add_files()} == _theirs(tmp_path, version)
    assert load_snapshot(str(tmp_path)).version == latest


def test_missing_last_checkpoint_or_corrupt_one_falls_back_to_listing(tmp_path: Path) -> None:
    for _ in range(3):
        _write(tmp_path, 3)
    deltalake.DeltaTable(str(tmp_path)).create_checkpoint()
    _write(tmp_path, 3)
    expected = load_snapshot(str(tmp_path))
    last = tmp_path / "_delta_log" / "_last_checkpoint"
    for content in (b"", b"{not json", b'{"version": 99, "size": 1}'):
        last.write_bytes(content)
        snap = load_snapshot(str(tmp_path))
        assert snap.version == expected.version
        assert snap.files.num_rows == expected.files.num_rows
    last.unlink()
    assert load_snapshot(str(tmp_path)).num_files == expected.num_files


def test_a_checkpoint_beats_replaying_commits_and_agrees_with_them(tmp_path: Path) -> None:
    for _ in range(4):
        _write(tmp_path, 3)
    before = load_snapshot(str(tmp_path))
    deltalake.DeltaTable(str(tmp_path)).create_checkpoint()
    after = load_snapshot(str(tmp_path))
    assert after.log_segment is not None and after.log_segment.checkpoint is not None
    assert {a.path for a in after.add_files()} == {a.path for a in before.add_files()}


def test_timestamp_time_travel_picks_the_commit_at_or_before(tmp_path: Path) -> None:
    for _ in range(3):
        _write(tmp_path, 1)
    log = tmp_path / "_delta_log"
    base = 1_700_000_000
    for version in range(3):
        os.utime(log / commit_name(version), (base + 60 * version, base + 60 * version))
    assert load_snapshot(str(tmp_path), timestamp=(base + 90) * 1000).version == 1
    assert load_snapshot(str(tmp_path), timestamp="2023-11-14T22:15:20Z").version == 2
    with pytest.raises(VersionNotFoundError):
        load_snapshot(str(tmp_path), timestamp=(base - 1) * 1000)


def test_missing_table_and_missing_version(tmp_path: Path) -> None:
    with pytest.raises(TableNotFoundError):
        load_snapshot(str(tmp_path / "nothing"))
    (tmp_path / "empty" / "_delta_log").mkdir(parents=True)
    with pytest.raises(TableNotFoundError):
        load_snapshot(str(tmp_path / "empty"))
    _write(tmp_path / "t", 1)
    with pytest.raises(VersionNotFoundError):
        load_snapshot(str(tmp_path / "t"), version=5)


def _hand_table(path: Path, protocol: dict[str, object]) -> None:
    log = path / "_delta_log"
    log.mkdir(parents=True)
    lines = [
        {"protocol": protocol},
        {
            "metaData": {
                "id": str(uuid.uuid4()),
                "format": {"provider": "parquet", "options": {}},
                "schemaString": '{"type":"struct","fields":[]}',
                "partitionColumns": [],
                "configuration": {},
            }
        },
    ]
    (log / commit_name(0)).write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def test_unsupported_protocols_are_refused_naming_what(tmp_path: Path) -> None:
    _hand_table(tmp_path / "v4", {"minReaderVersion": 4, "minWriterVersion": 7})
    with pytest.raises(InvalidProtocolVersionException, match="4"):
        load_snapshot(str(tmp_path / "v4"))
    _hand_table(
        tmp_path / "feat",
        {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": ["teleportation"],
            "writerFeatures": ["teleportation"],
        },
    )
    with pytest.raises(UnsupportedTableFeatureException, match="teleportation"):
        load_snapshot(str(tmp_path / "feat"))


def test_a_corrupt_commit_is_a_typed_error(tmp_path: Path) -> None:
    _write(tmp_path, 1)
    (tmp_path / "_delta_log" / commit_name(1)).write_text('{"add": {"path": 3}\n')
    with pytest.raises(CorruptLogError, match=commit_name(1)):
        load_snapshot(str(tmp_path))


def test_memory_filesystem_tables_load(tmp_path: Path) -> None:
    import fsspec

    _write(tmp_path, 2)
    fs = fsspec.filesystem("memory")
    root = f"/mem-{uuid.uuid4().hex}"
    for name in os.listdir(tmp_path / "_delta_log"):
        source = tmp_path / "_delta_log" / name
        if source.is_file():
            fs.pipe_file(f"{root}/_delta_log/{name}", source.read_bytes())
    snap = load_snapshot(f"memory://{root}")
    assert snap.version == 0
    assert {a.path for a in snap.add_files()} == _theirs(tmp_path)
