"""Small tables whose classic checkpoint another writer laid out differently.

:func:`table_with_checkpoint` builds a partitioned table with deltalake
(files, tombstones, commits after the checkpoint), checkpoints it with
deltalake, then rewrites that checkpoint's rows (the same rows, the same
schema) in a given layout: rows per row group, and one file or a
multi-part checkpoint. That is what a writer with another row-group size
or part count produces; every reader must get the same table from each.
"""

from __future__ import annotations

from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

LAYOUTS = {
    # rows per row group, parts
    "tiny_groups": (7, 1),
    "one_big_group": (1 << 30, 1),
    "multi_part": (5, 3),
}
"""Checkpoint layouts of the tests: many 7-row groups, one row group for the
whole file, and three parts of 5-row groups."""


def _batch(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "part": pa.array([i % 4 for i in ids], pa.int32())}
    )


def relayout_checkpoint(root: Path, version: int, *, rows_per_group: int, parts: int) -> None:
    """Rewrite the classic checkpoint of ``version`` at ``root`` with the same
    rows in ``parts`` files of ``rows_per_group``-row groups (``parts`` > 1:
    a multi-part checkpoint replaces the single file)."""
    log = root / "_delta_log"
    single = log / f"{version:020d}.checkpoint.parquet"
    table = pq.read_table(single)
    single.unlink()
    for crc in log.glob(f".{single.name}.crc"):
        crc.unlink()
    (log / "_last_checkpoint").unlink(missing_ok=True)  # found by listing instead
    if parts == 1:
        pq.write_table(table, single, row_group_size=rows_per_group)
        return
    if "checkpointMetadata" in table.column_names:
        # a multi-part checkpoint follows the V1 spec (no checkpointMetadata)
        table = table.filter(pc.is_null(table.column("checkpointMetadata")))
        table = table.drop_columns(["checkpointMetadata"])
    for index in range(parts):
        start = index * table.num_rows // parts
        end = (index + 1) * table.num_rows // parts
        name = f"{version:020d}.checkpoint.{index + 1:010d}.{parts:010d}.parquet"
        pq.write_table(table.slice(start, end - start), log / name, row_group_size=rows_per_group)


def table_with_checkpoint(root: Path, layout: str, *, v2: bool = False) -> int:
    """A table at ``root`` (~60 live files, tombstones, 3 commits after its
    checkpoint) whose checkpoint has ``layout``
    (:data:`LAYOUTS`); ``v2`` adds the ``v2Checkpoint`` feature first.
    Returns the checkpoint's number of rows."""
    config = {"delta.checkpointPolicy": "v2"} if v2 else None
    for i in range(30):
        deltalake.write_deltalake(
            str(root),
            _batch(i * 3, 3),
            partition_by=["part"],
            mode="append",
            configuration=config if i == 0 else None,
        )
        if i == 0 and v2:
            deltalake.DeltaTable(str(root)).alter.add_feature(
                [deltalake.TableFeatures.V2Checkpoint], allow_protocol_versions_increase=True
            )
    table = deltalake.DeltaTable(str(root))
    table.delete("id < 10")  # tombstones in the checkpoint
    table = deltalake.DeltaTable(str(root))
    table.create_checkpoint()
    version = table.version()
    for i in range(3):
        deltalake.write_deltalake(str(root), _batch(1000 + i * 3, 3), mode="append")
    rows_per_group, parts = LAYOUTS[layout]
    relayout_checkpoint(root, version, rows_per_group=rows_per_group, parts=parts)
    log = root / "_delta_log"
    return sum(pq.ParquetFile(p).metadata.num_rows for p in log.glob("*.checkpoint*.parquet"))
