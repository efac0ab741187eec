"""VACUUM's own log read (``storage/cleanup/log_references.py``) decides exactly as a full snapshot.

Tables are written by hand: a checkpoint (classic, or V2 with parquet sidecars)
followed by commits that remove checkpoint files (spelled another way too),
re-add removed ones, replace deletion vectors and add new files; every file
exists on disk, aged past the retention. For each, the report of ``vacuum(uri)``
(the column read) must equal the report made from ``load_snapshot(uri)``, in
both modes, and the live files and tombstones must be the snapshot's.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from raydelta.protocol import z85
from raydelta.protocol.checkpoint_plan import canonical_paths
from raydelta.protocol.file_names import commit_name
from raydelta.storage.checkpoint.writer import (
    write_v1_checkpoint,
    write_v2_checkpoint_single_process,
)
from raydelta.storage.cleanup.log_references import VacuumLogView, _split_rows, load_vacuum_view
from raydelta.storage.cleanup.vacuum import vacuum
from raydelta.storage.log.store import log_store_for
from raydelta.storage.snapshot import Snapshot, load_snapshot

DAY_MS = 86_400_000
NOW = int(time.time() * 1000)
OLD = NOW - 30 * DAY_MS
EXPIRED = NOW - 10 * DAY_MS
FRESH = NOW - 1 * DAY_MS
PROTOCOL = {
    "minReaderVersion": 3,
    "minWriterVersion": 7,
    "readerFeatures": ["deletionVectors", "v2Checkpoint"],
    "writerFeatures": ["deletionVectors", "v2Checkpoint"],
}
SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "p", "type": "string", "nullable": True, "metadata": {}},
    ],
}


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    os.utime(path, ns=(OLD * 1_000_000, OLD * 1_000_000))


def _dv(tag: uuid.UUID) -> dict[str, Any]:
    return {
        "storageType": "u",
        "pathOrInlineDv": z85.encode_uuid(tag),
        "offset": 1,
        "sizeInBytes": 10,
        "cardinality": 1,
    }


def _add(path: str, **extra: Any) -> dict[str, Any]:
    part = path.split("/", 1)[0].split("=", 1)[1] if "=" in path else None
    body = {
        "path": path,
        "partitionValues": {"p": part},
        "size": 1,
        "modificationTime": OLD,
        "dataChange": True,
        **extra,
    }
    return {"add": body}


def _remove(path: str, when: int, **extra: Any) -> dict[str, Any]:
    return {"remove": {"path": path, "deletionTimestamp": when, "dataChange": True, **extra}}


def _commit(root: Path, version: int, actions: list[dict[str, Any]]) -> None:
    lines = [{"commitInfo": {"timestamp": OLD, "operation": "WRITE"}}, *actions]
    (root / "_delta_log" / commit_name(version)).write_text(
        "".join(json.dumps(a) + "\n" for a in lines)
    )


def _table(root: Path, checkpoint: str) -> None:
    """The table of the module docstring with a ``checkpoint`` (v1 or v2) at version 3."""
    (root / "_delta_log").mkdir(parents=True)
    metadata = {
        "id": str(uuid.uuid4()),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(SCHEMA),
        "partitionColumns": ["p"],
        "configuration": {},
        "createdTime": OLD,
    }
    _commit(root, 0, [{"protocol": PROTOCOL}, {"metaData": metadata}])
    names = [f"p={i % 3}/f{i:03d}.parquet" for i in range(40)]
    dv_one, dv_two, dv_three = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    for name in names:
        _touch(root / name)
    for tag in (dv_one, dv_two, dv_three):
        _touch(root / f"deletion_vector_{tag}.bin")
    _touch(root / "p=0" / "stray.parquet")  # in no action: full mode's alone
    _commit(root, 1, [_add(n) for n in names[:30]] + [_add(names[30], deletionVector=_dv(dv_one))])
    _commit(
        root,
        2,
        [_remove(n, EXPIRED, size=1) for n in names[:8]]
        + [_remove(n, FRESH, size=1) for n in names[8:10]],
    )
    _commit(
        root,
        3,
        [
            _add(names[0]),  # re-added after their removal
            _add(names[1]),
            _remove(names[30], EXPIRED, size=1, deletionVector=_dv(dv_one)),
            _add(names[30], deletionVector=_dv(dv_two)),
        ],
    )
    uri = root.resolve().as_uri()
    store = log_store_for(uri)
    state = load_snapshot(uri).state
    if checkpoint == "v1":
        write_v1_checkpoint(store, state, now_ms=NOW)
    else:
        write_v2_checkpoint_single_process(
            store, state, now_ms=NOW, fmt="parquet", target_actions_per_sidecar=8
        )
    absolute = f"{root.resolve()}/{names[12]}"
    _commit(
        root,
        4,
        [
            _remove("file://" + absolute, EXPIRED, size=1),  # a checkpoint add, spelled as a URI
            _remove(names[13].replace("=", "%3D"), EXPIRED, size=1),  # percent-encoded
            _add(names[2]),  # a checkpoint tombstone re-added
            _remove(names[30], EXPIRED, size=1, deletionVector=_dv(dv_two)),
            _add(names[30], deletionVector=_dv(dv_three)),
        ]
        + [_add(n) for n in names[31:35]],
    )
    _commit(root, 5, [_remove(names[31], FRESH, size=1), _remove(names[14], EXPIRED, size=1)])


def _paths(table: Any, root: str) -> list[str]:
    return sorted(canonical_paths(table.column("path").combine_chunks(), root).to_pylist())


@pytest.mark.parametrize("checkpoint", ["v1", "v2"])
def test_the_column_read_equals_the_snapshot(tmp_path: Path, checkpoint: str) -> None:
    root = tmp_path / "t"
    _table(root, checkpoint)
    uri = root.resolve().as_uri()
    store = log_store_for(uri)
    view = load_vacuum_view(uri, store)
    assert isinstance(view, VacuumLogView)
    snapshot = load_snapshot(uri)
    key = store.table_root_key
    assert view.version == snapshot.version == 5
    assert _paths(view.files, key) == _paths(snapshot.files, key)
    assert _paths(view.all_tombstones, key) == _paths(snapshot.all_tombstones, key)
    dv_ids = pc.drop_null(pc.struct_field(view.files.column("deletionVector"), "pathOrInlineDv"))
    assert len(dv_ids) == 1  # only the latest DV of the file is live
    for lite in (True, False):
        ours = vacuum(uri, lite=lite, dry_run=True, now_ms=NOW)
        reference = vacuum(uri, lite=lite, dry_run=True, now_ms=NOW, snapshot=snapshot)
        assert ours.files == reference.files
        assert ours.total_bytes == reference.total_bytes
        assert ours.ignored == reference.ignored
        assert ours.version == reference.version
        assert ours.files  # the table has something to vacuum in both modes
    # a real run deletes exactly what the snapshot's dry run listed
    expected = vacuum(uri, lite=False, dry_run=True, now_ms=NOW, snapshot=snapshot).files
    assert vacuum(uri, lite=False, now_ms=NOW).files == expected
    for relative in expected:
        assert not (root / relative).exists()
    for relative in _paths(snapshot.files, key):
        assert (root / relative).exists()


def test_log_compaction_takes_the_snapshot_path(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _table(root, "v1")
    compaction = root / "_delta_log" / "00000000000000000004.00000000000000000005.compacted.json"
    lines = []
    for version in (4, 5):
        lines += (root / "_delta_log" / commit_name(version)).read_text().splitlines()
    compaction.write_text(
        "\n".join(line for line in lines if "commitInfo" not in line and "remove" not in line)
        + "\n"
    )
    uri = root.resolve().as_uri()
    view = load_vacuum_view(uri, log_store_for(uri))
    assert isinstance(view, Snapshot)


@pytest.mark.parametrize(
    ("values", "odd"),
    [
        (["part=1/a.parquet", "b.parquet"], False),
        (["part=1/a.parquet", "a%20b/c.parquet"], True),
        (["c:d/e.parquet"], True),
        (["/abs/e.parquet"], True),
        (["./e.parquet"], True),
        (["part=1/../e.parquet"], True),
        (["part=1//e.parquet"], True),
        (["x\\\\e.parquet"], True),
        ([None, "part=1/a.parquet"], False),
    ],
)
def test_plain_path_scan_finds_every_odd_path(values: list[str | None], odd: bool) -> None:
    """The byte scan that lets plain paths skip the per-row regex never misses a
    path the regex would send to the resolver (sliced and large arrays too)."""
    for array in (
        pa.array(values, pa.string()),
        pa.array(values, pa.large_string()),
        pa.array(["%:/x", *values], pa.string()).slice(1),  # an odd value before the slice
    ):
        plain, hard = _split_rows(pa.table({"path": array}))
        assert (hard.num_rows > 0) is odd, array
        assert plain.num_rows + hard.num_rows == len([v for v in values if v is not None])
