"""Other engines read what the table actor wrote, and see the same table.

Real parquet data files are written with pyarrow and committed through the
actor with their true size and statistics (``numRecords``, min/max, null
counts). Then ``deltalake`` (delta-rs) and DuckDB's ``delta`` extension
(delta-kernel-rs) read the table: same version, same files, same rows as
raydelta's own snapshot and as the data we wrote minus what we deleted.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from raydelta.actors.table.client import TableClient
from raydelta.protocol.actions import AddFile

NewTable = Callable[..., tuple[str, TableClient]]

DATA_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])
PARTITIONED = pa.schema([("date", pa.string()), *DATA_SCHEMA])

Row = tuple[Any, ...]


def _stats(data: pa.Table) -> str:
    mins, maxs, nulls = {}, {}, {}
    for name in data.column_names:
        column = data.column(name)
        nulls[name] = column.null_count
        valid = column.drop_null()
        if len(valid):
            mins[name] = min(valid.to_pylist())
            maxs[name] = max(valid.to_pylist())
    return json.dumps(
        {"numRecords": data.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}
    )


def write_data_file(root: str, data: pa.Table, date: str | None) -> AddFile:
    """Write ``data`` as a parquet file of the table; its ``AddFile``."""
    name = f"part-{uuid.uuid4()}.snappy.parquet"
    relative = name if date is None else f"date={date}/{name}"
    full = os.path.join(root, relative)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    pq.write_table(data, full, compression="snappy")
    return AddFile(
        path=relative,
        partitionValues={} if date is None else {"date": date},
        size=os.path.getsize(full),
        modificationTime=int(os.path.getmtime(full) * 1000),
        dataChange=True,
        stats=_stats(data),
    )


def batch(start: int, count: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + count), pa.int64()),
            "name": pa.array([f"n{i}" if i % 5 else None for i in range(start, start + count)]),
            "score": pa.array([i * 0.5 for i in range(start, start + count)], pa.float64()),
        },
        schema=DATA_SCHEMA,
    )


def rows_of(data: pa.Table, date: str | None) -> list[Row]:
    columns = [data.column(n).to_pylist() for n in DATA_SCHEMA.names]
    return [((date,) if date is not None else ()) + tuple(r) for r in zip(*columns, strict=True)]


def check_peers_agree(
    uri: str, table: TableClient, expected: list[Row], partitioned: bool, connection: Any
) -> None:
    from deltalake import DeltaTable

    path = uri[len("file://") :]
    snap = table.snapshot()
    ours = sorted(f.path for f in snap.add_files())
    columns = (["date"] if partitioned else []) + DATA_SCHEMA.names

    theirs = DeltaTable(path)
    assert theirs.version() == snap.version
    adds = theirs.get_add_actions(flatten=True)
    assert sorted(str(p) for p in adds.column("path").to_pylist()) == ours
    sizes = dict(
        zip(adds.column("path").to_pylist(), adds.column("size_bytes").to_pylist(), strict=True)
    )
    records = dict(
        zip(adds.column("path").to_pylist(), adds.column("num_records").to_pylist(), strict=True)
    )
    for add in snap.add_files():
        assert sizes[add.path] == add.size
        assert records[add.path] == add.num_records
    data = pa.table(theirs.to_pyarrow_table()).select(columns)
    delta_rs_rows = sorted(
        zip(*[data.column(c).to_pylist() for c in columns], strict=True), key=repr
    )
    assert delta_rs_rows == sorted(expected, key=repr)

    select = ", ".join(columns)
    duck_rows = connection.execute(f"SELECT {select} FROM delta_scan('{path}')").fetchall()
    assert sorted(duck_rows, key=repr) == sorted(expected, key=repr)
    [(count,)] = connection.execute(f"SELECT count(*) FROM delta_scan('{path}')").fetchall()
    assert count == len(expected) == sum(f.num_records or 0 for f in snap.add_files())


@pytest.mark.parametrize(
    ("partitioned", "properties"),
    [
        pytest.param(True, None, id="partitioned"),
        pytest.param(False, None, id="unpartitioned"),
        pytest.param(
            True,
            {"delta.enableInCommitTimestamps": "true", "delta.enableRowTracking": "true"},
            id="partitioned-table-features",
        ),
    ],
)
def test_deltalake_and_duckdb_read_what_the_actor_wrote(
    partitioned: bool, properties: dict[str, str] | None, new_table: NewTable, duck: Any
) -> None:
    uri, table = new_table(
        schema=PARTITIONED if partitioned else DATA_SCHEMA,
        partition_by=["date"] if partitioned else [],
        properties=properties,
    )
    root = uri[len("file://") :]
    dates = ["2024-01-01", "2024-01-02", "2024-01-03"] if partitioned else [None]
    written: dict[str, list[Row]] = {}
    start = 0
    for round_ in range(2):
        txn = table.transaction()
        for date in dates:
            data = batch(start, 7 + round_)
            start += data.num_rows
            add = write_data_file(root, data, date)
            written[add.path] = rows_of(data, date)
            txn.add(add)
        txn.commit(operation="WRITE")
        check_peers_agree(
            uri, table, [r for rows in written.values() for r in rows], partitioned, duck
        )

    # delete one file (a DELETE of all its rows), and rewrite another with fewer rows
    snap = table.snapshot()
    files = sorted(snap.add_files(), key=lambda f: f.path)
    gone, rewritten = files[0], files[1]
    txn = table.transaction(snapshot=snap)
    date = rewritten.partition_values.get("date")
    kept = [r for r in written[rewritten.path] if r[-3] % 2 == 0]  # keep even ids
    data = pa.table(
        {
            "id": pa.array([r[-3] for r in kept], pa.int64()),
            "name": pa.array([r[-2] for r in kept], pa.string()),
            "score": pa.array([r[-1] for r in kept], pa.float64()),
        },
        schema=DATA_SCHEMA,
    )
    replacement = write_data_file(root, data, date)
    txn.read_files([gone, rewritten]).remove(gone).remove(rewritten).add(replacement)
    txn.commit(operation="DELETE")
    del written[gone.path], written[rewritten.path]
    written[replacement.path] = rows_of(data, date)
    check_peers_agree(uri, table, [r for rows in written.values() for r in rows], partitioned, duck)
