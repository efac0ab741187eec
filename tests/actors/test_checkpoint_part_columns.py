"""Checkpoints built from a previous classic multi-part checkpoint whose parts
hold only some action columns (:mod:`tests.storage.partial_checkpoints`).

The checkpoint runner reads the previous checkpoint's parts in Ray tasks
(the classic writer's one task, the V2 map tasks fanned out or in one
task); a part without an ``add`` column has no ``add`` rows there as
everywhere. Each new checkpoint, read alone (the previous parts and the
commits deleted), must hold what deltalake reads from the table before.
A part whose column has the wrong type is refused before anything is written.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import deltalake
import pyarrow as pa
import pytest

from raydelta.actors.checkpoint.runner import CheckpointRunner
from raydelta.protocol.errors import CorruptLogError
from raydelta.storage.snapshot import load_snapshot
from tests.storage.partial_checkpoints import build_partial_multipart, read_part, rewrite_part

pytestmark = pytest.mark.usefixtures("ray_cluster")

RUNS: dict[str, dict[str, Any]] = {
    "classic": {"kind": "classic"},
    "v2-one-task": {"kind": "v2", "fan_out_min_actions": 10**9},
    "v2-fan-out": {"kind": "v2", "fan_out_min_actions": 0},
}


def _peer(root: Path) -> tuple[int, dict[str, int], dict[str, int]]:
    table = deltalake.DeltaTable(str(root))
    adds = pa.table(table.get_add_actions(flatten=True)).select(["path", "size_bytes"])
    files = {unquote(r["path"]): r["size_bytes"] for r in adds.to_pylist()}
    txns = {f"app{i}": table.transaction_version(f"app{i}") for i in range(4)}
    return table.version(), files, txns


def _alone(root: Path, version: int) -> None:
    """Leave the table's newest checkpoint (of ``version``) as its only source."""
    log = root / "_delta_log"
    for path in log.iterdir():
        if path.name.endswith(".json") or ".checkpoint." in path.name:
            stem = path.name.split(".")[0]
            if (
                stem.isdigit()
                and int(stem) <= version
                and not path.name.startswith(f"{version:020d}.checkpoint")
            ):
                path.unlink()
    (log / "_last_checkpoint").unlink(missing_ok=True)


@pytest.fixture(scope="module")
def partial_v2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The partial multi-part table, then a commit adding ``v2Checkpoint``."""
    root = build_partial_multipart(tmp_path_factory.mktemp("partial") / "table")
    deltalake.DeltaTable(str(root)).alter.add_feature(
        [deltalake.TableFeatures.V2Checkpoint], allow_protocol_versions_increase=True
    )
    return root


@pytest.mark.parametrize("run", sorted(RUNS))
def test_a_checkpoint_from_partial_parts_holds_what_deltalake_reads(
    partial_v2: Path, tmp_path: Path, run: str
) -> None:
    root = tmp_path / "table"
    shutil.copytree(partial_v2, root)
    version, files, txns = _peer(root)
    options = dict(RUNS[run])
    kind = options.pop("kind")
    summary = CheckpointRunner(str(root), target_actions_per_sidecar=2, **options).run(kind=kind)
    assert summary.version == version and summary.previous_version == 4
    _alone(root, version)
    snapshot = load_snapshot(str(root))
    assert snapshot.log_segment is not None and not snapshot.log_segment.commits
    assert {unquote(r["path"]): r["size"] for r in snapshot.files.to_pylist()} == files
    assert snapshot.txns == txns
    assert _peer(root) == (version, files, txns)


@pytest.mark.parametrize("run", sorted(RUNS))
def test_a_mistyped_column_in_a_part_is_refused_before_writing(
    partial_v2: Path, tmp_path: Path, run: str
) -> None:
    root = tmp_path / "table"
    shutil.copytree(partial_v2, root)
    part = read_part(root, 3)
    rewrite_part(
        root,
        3,
        part.set_column(
            part.schema.get_field_index("add"), "add", pa.nulls(part.num_rows, pa.int64())
        ),
    )
    before = sorted(p.name for p in (root / "_delta_log").rglob("*"))
    options = dict(RUNS[run])
    kind = options.pop("kind")
    with pytest.raises(CorruptLogError):
        CheckpointRunner(str(root), **options).run(kind=kind)
    assert sorted(p.name for p in (root / "_delta_log").rglob("*")) == before
