"""A table whose classic multi-part checkpoint has parts holding only some
action columns (issue 25): built by the tests that read it, from a table
deltalake writes.

:func:`build_partial_multipart` writes five commits with deltalake (four
appends, each with an app transaction, then a delete: tombstones), has
deltalake checkpoint version 4, appends version 5, and then cuts that
classic checkpoint into a five-part one: parts 1 and 4 hold only a ``txn``
column (two app transactions each), part 2 the ``protocol`` and
``metaData`` rows, part 3 the ``add`` rows and part 5 the ``remove`` rows,
those three with every column deltalake wrote. Commits 0 to 4 are deleted,
so the checkpoint is the only source of version 4; ``_last_checkpoint``
names the five parts.
"""

from __future__ import annotations

import json
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq

CHECKPOINT_VERSION = 4
NUM_PARTS = 5


def part_name(part: int) -> str:
    return f"{CHECKPOINT_VERSION:020d}.checkpoint.{part:010d}.{NUM_PARTS:010d}.parquet"


def build_partial_multipart(root: Path) -> Path:
    """Write the table at ``root`` (module doc) and return ``root``."""
    for i in range(4):
        deltalake.write_deltalake(
            str(root),
            pa.table({"id": pa.array([i], pa.int64()), "p": [f"p{i % 2}"]}),
            mode="append",
            partition_by=["p"],
            commit_properties=deltalake.CommitProperties(
                app_transactions=[deltalake.Transaction(app_id=f"app{i}", version=i)]
            ),
        )
    deltalake.DeltaTable(str(root)).delete("id = 0")
    table = deltalake.DeltaTable(str(root))
    assert table.version() == CHECKPOINT_VERSION
    table.create_checkpoint()
    deltalake.write_deltalake(
        str(root),
        pa.table({"id": pa.array([9], pa.int64()), "p": ["p1"]}),
        mode="append",
        partition_by=["p"],
    )
    log = root / "_delta_log"
    classic = log / f"{CHECKPOINT_VERSION:020d}.checkpoint.parquet"
    whole = pq.read_table(classic)
    rows = whole.to_pylist()

    def rows_of(*kinds: str) -> list[int]:
        return [i for i, row in enumerate(rows) if any(row[k] is not None for k in kinds)]

    txns = rows_of("txn")
    assert len(txns) == 4 and rows_of("remove") and rows_of("add")
    parts = [
        whole.take(txns[:2]).select(["txn"]),
        whole.take(rows_of("protocol", "metaData")),
        whole.take(rows_of("add")),
        whole.take(txns[2:]).select(["txn"]),
        whole.take(rows_of("remove")),
    ]
    classic.unlink()
    for number, part in enumerate(parts, 1):
        pq.write_table(part, log / part_name(number))
    for version in range(CHECKPOINT_VERSION + 1):
        (log / f"{version:020d}.json").unlink()
    hint = {"version": CHECKPOINT_VERSION, "size": whole.num_rows, "parts": NUM_PARTS}
    (log / "_last_checkpoint").write_text(json.dumps(hint))
    return root


def rewrite_part(root: Path, part: int, table: pa.Table) -> None:
    pq.write_table(table, root / "_delta_log" / part_name(part))


def read_part(root: Path, part: int) -> pa.Table:
    return pq.read_table(root / "_delta_log" / part_name(part))
