"""A V2 checkpoint built by one task equals the same checkpoint fanned out
to map and shard tasks: the same shards, the same rows in each sidecar, the
same overflow, at the first V2 checkpoint (read through map steps) and at
incremental ones (rebuilt from sidecars). Real Ray tasks, real files,
tables written by deltalake."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from raydelta.actors.checkpoint.runner import CheckpointRunner
from raydelta.protocol.checkpoint_plan import TAG_SHARD, TAG_SHARD_HASH
from raydelta.protocol.file_names import parse_log_file_name
from raydelta.storage.checkpoint.incremental import TAG_OVERFLOW
from raydelta.storage.checkpoint.writer import read_checkpoint_sidecars
from raydelta.storage.log.reader import sidecar_path
from raydelta.storage.log.store import log_store_for
from raydelta.storage.snapshot import load_snapshot

MODES = {"one_task": 10**9, "fan_out": 0}


def _batch(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "part": pa.array([i % 4 for i in ids], pa.int32()),
        }
    )


def _build(path: Path) -> None:
    config = {"delta.checkpointPolicy": "v2"}
    for i in range(8):  # many small files, so every shard has rows
        deltalake.write_deltalake(
            str(path),
            _batch(i * 10, 10),
            partition_by=["part"],
            mode="append",
            configuration=config if i == 0 else None,
        )
        if i == 0:
            deltalake.DeltaTable(str(path)).alter.add_feature(
                [deltalake.TableFeatures.V2Checkpoint], allow_protocol_versions_increase=True
            )
    deltalake.DeltaTable(str(path)).delete("id < 15")  # tombstones


def _sidecars_by_role(path: Path, top_level: str) -> dict[str, list[tuple[Any, ...]]]:
    """Each sidecar's rows (sorted), keyed by its shard or ``overflow``."""
    store = log_store_for(str(path))
    parsed = parse_log_file_name(top_level)
    assert parsed is not None
    out: dict[str, list[tuple[Any, ...]]] = {}
    for sidecar in read_checkpoint_sidecars(store, parsed):
        tags = sidecar.tags or {}
        role = "overflow" if tags.get(TAG_OVERFLOW) == "true" else f"shard {tags[TAG_SHARD]}"
        assert role not in out
        assert tags.get(TAG_SHARD_HASH)
        rows = pq.read_table(sidecar_path(store, sidecar)).to_pylist()
        out[role] = sorted((repr(r["add"]), repr(r["remove"])) for r in rows)
    return out


def _run(path: Path, mode: str, **options: Any) -> Any:
    runner = CheckpointRunner(
        str(path), target_actions_per_sidecar=8, fan_out_min_actions=MODES[mode], **options
    )
    return runner.run(kind="v2")


def _copies(source: Path, root: Path) -> dict[str, Path]:
    copies = {mode: root / mode for mode in MODES}
    for target in copies.values():
        shutil.copytree(source, target)
    return copies


@pytest.mark.usefixtures("ray_cluster")
def test_one_task_and_fan_out_write_the_same_sidecars(tmp_path: Path) -> None:
    source = tmp_path / "source"
    _build(source)
    CheckpointRunner(str(source)).run(kind="classic")  # the first V2 one maps it
    copies = _copies(source, tmp_path / "first")
    first = {mode: _run(path, mode) for mode, path in copies.items()}
    assert {s.execution for s in first.values()} == set(MODES)
    assert {s.source for s in first.values()} == {"shuffle"}
    assert first["one_task"].num_shards == first["fan_out"].num_shards >= 4
    assert any(t.kind == "map" for t in first["one_task"].tasks)
    contents = {mode: _sidecars_by_role(copies[mode], s.top_level) for mode, s in first.items()}
    assert contents["one_task"] == contents["fan_out"]
    # from one V2 checkpoint, the same commits: new files (overflow) and a
    # delete that touches files shard sidecars hold (rebuilt from their sidecars)
    _run(source, "fan_out")
    deltalake.write_deltalake(str(source), _batch(500, 3), partition_by=["part"], mode="append")
    deltalake.DeltaTable(str(source)).delete("id >= 70 and id < 75")
    copies = _copies(source, tmp_path / "second")
    second = {mode: _run(path, mode, max_overflow_actions=50) for mode, path in copies.items()}
    assert {s.source for s in second.values()} == {"sidecars"}
    assert second["one_task"].sidecars_reused == second["fan_out"].sidecars_reused >= 1
    assert second["one_task"].sidecars_written == second["fan_out"].sidecars_written >= 1
    contents = {mode: _sidecars_by_role(copies[mode], s.top_level) for mode, s in second.items()}
    assert contents["one_task"] == contents["fan_out"]
    assert "overflow" in contents["one_task"]
    # and the checkpoint is the table
    for path in copies.values():
        expected = load_snapshot(str(path))
        for v in range(expected.version + 1):
            (path / "_delta_log" / f"{v:020d}.json").unlink(missing_ok=True)
        alone = load_snapshot(str(path))
        assert alone.num_files == expected.num_files
        assert sorted(alone.files.column("path").to_pylist()) == sorted(
            expected.files.column("path").to_pylist()
        )
