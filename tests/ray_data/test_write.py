"""raydelta.ray_data.write_delta: one commit through the TableActor for the
files every task wrote; peers (deltalake, duckdb) read the result; concurrent
jobs land every row exactly once; a failed write commits nothing."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import raydelta
from raydelta.ray_data import read_delta, write_delta


def _source(n: int, offset: int = 0) -> pa.Table:
    ids = list(range(offset, offset + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "region": pa.array([("eu", "us", "ap")[i % 3] for i in ids], pa.string()),
            "value": pa.array([i / 4 for i in ids], pa.float64()),
        }
    )


def _blocks(table: pa.Table, count: int) -> list[pa.Table]:
    step = -(-table.num_rows // count)
    return [table.slice(start, step) for start in range(0, table.num_rows, step)]


def _arrow(ds: Any) -> pa.Table:
    import ray

    return pa.concat_tables(ray.get(ds.to_arrow_refs()))


def _log_actions(uri: str, version: int) -> list[dict[str, Any]]:
    path = Path(uri) / "_delta_log" / f"{version:020d}.json"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _ids_read_by_deltalake(uri: str) -> list[int]:
    import deltalake

    return sorted(pa.table(deltalake.DeltaTable(uri).to_pyarrow_table()).column("id").to_pylist())


def test_one_commit_for_every_task_and_peers_read(workdir: Path, duck: Any) -> None:
    import ray.data

    source = _source(400)
    uri = str(workdir / "w")
    version = write_delta(ray.data.from_arrow(_blocks(source, 4)), uri)
    actions = _log_actions(uri, version)
    adds = [a["add"] for a in actions if "add" in a]
    assert sum(json.loads(a["stats"])["numRecords"] for a in adds) == source.num_rows
    assert [a["commitInfo"]["operation"] for a in actions if "commitInfo" in a] == ["WRITE"]
    assert raydelta.load_snapshot(uri).version == version
    expected = source.column("id").to_pylist()
    assert _ids_read_by_deltalake(uri) == expected
    rows = duck.execute(f"SELECT id, region, value FROM delta_scan('{uri}') ORDER BY id").fetchall()
    assert rows == [tuple(r.values()) for r in source.to_pylist()]


def test_partitioned_write(workdir: Path, duck: Any) -> None:
    import deltalake
    import ray.data

    source = _source(90)
    uri = str(workdir / "p")
    version = write_delta(ray.data.from_arrow(_blocks(source, 3)), uri, partition_by=["region"])
    snapshot = raydelta.load_snapshot(uri)
    assert list(snapshot.metadata.partition_columns) == ["region"]
    for add in (a["add"] for a in _log_actions(uri, version) if "add" in a):
        region = add["partitionValues"]["region"]
        assert add["path"].startswith(f"region={region}/")
        assert "region" not in pq.read_schema(Path(uri) / add["path"]).names
    theirs = pa.table(deltalake.DeltaTable(uri).to_pyarrow_table()).sort_by("id")
    assert (
        theirs.select(["id", "region"]).to_pylist() == source.select(["id", "region"]).to_pylist()
    )
    count = duck.execute(f"SELECT count(*) FROM delta_scan('{uri}') WHERE region = 'us'").fetchone()
    assert count == (pc.sum(pc.equal(source.column("region"), "us")).as_py(),)
    with pytest.raises(raydelta.InvalidArgumentError, match="partition"):
        write_delta(ray.data.from_arrow(source), uri, partition_by=["id"])
    assert raydelta.load_snapshot(uri).version == version


def test_column_mapping_physical_names_in_files(workdir: Path, duck: Any) -> None:
    import ray.data

    source = _source(30)
    uri = str(workdir / "cm")
    version = write_delta(
        ray.data.from_arrow(source), uri, properties={"delta.columnMapping.mode": "name"}
    )
    schema = raydelta.load_snapshot(uri).schema
    physical = {f.metadata["delta.columnMapping.physicalName"] for f in schema.fields}
    for add in (a["add"] for a in _log_actions(uri, version) if "add" in a):
        assert set(pq.read_schema(Path(uri) / add["path"]).names) == physical
    got = _arrow(read_delta(uri)).sort_by("id")
    assert got.schema.names == source.schema.names
    assert got.to_pylist() == source.to_pylist()
    # duckdb as the peer: deltalake 1.6.6's pyarrow reader returns nulls for
    # column-mapped tables (delta-spark's golden ones too)
    rows = duck.execute(f"SELECT id, region, value FROM delta_scan('{uri}') ORDER BY id").fetchall()
    assert rows == [tuple(r.values()) for r in source.to_pylist()]


def test_overwrite_replaces_every_row(workdir: Path) -> None:
    import ray.data

    uri = str(workdir / "o")
    first = write_delta(ray.data.from_arrow(_source(50)), uri)
    replacement = _source(7, 500)
    version = write_delta(ray.data.from_arrow(replacement), uri, mode="overwrite")
    actions = _log_actions(uri, version)
    removed = {a["remove"]["path"] for a in actions if "remove" in a}
    assert removed == {a["add"]["path"] for a in _log_actions(uri, first) if "add" in a}
    assert _ids_read_by_deltalake(uri) == replacement.column("id").to_pylist()
    assert read_delta(uri).count() == replacement.num_rows
    with pytest.raises(raydelta.InvalidArgumentError):
        write_delta(ray.data.from_arrow(replacement), uri, mode="replace")  # type: ignore[arg-type]


def test_concurrent_jobs_land_every_row_exactly_once(workdir: Path) -> None:
    import ray.data

    uri = str(workdir / "c")  # no table yet: the jobs race to create it too
    jobs = 4
    sources = [_source(200, 1000 * job) for job in range(jobs)]

    def run(source: pa.Table) -> int:
        return write_delta(ray.data.from_arrow(_blocks(source, 2)), uri)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        versions = list(pool.map(run, sources))
    assert len(set(versions)) == jobs
    expected = sorted(i for s in sources for i in s.column("id").to_pylist())
    assert sorted(_arrow(read_delta(uri)).column("id").to_pylist()) == expected
    assert _ids_read_by_deltalake(uri) == expected
    snapshot = raydelta.load_snapshot(uri)
    assert snapshot.version == max(versions)
    creates = [
        v for v in range(snapshot.version + 1) if any("metaData" in a for a in _log_actions(uri, v))
    ]
    assert creates == [0]


def _fail_on_marked_rows(batch: pa.Table) -> pa.Table:
    if pc.any(pc.equal(batch.column("id"), -1)).as_py():
        raise RuntimeError("a task fails after others wrote their files")
    return batch


def test_failed_task_commits_nothing(workdir: Path) -> None:
    import ray.data

    uri = str(workdir / "f")
    before = write_delta(ray.data.from_arrow(_source(20)), uri)
    poisoned = _source(60, 100)
    poisoned = pa.concat_tables(
        [poisoned, pa.table({"id": [-1], "region": ["eu"], "value": [0.0]})]
    )
    ds = ray.data.from_arrow(_blocks(poisoned, 4)).map_batches(
        _fail_on_marked_rows, batch_format="pyarrow", batch_size=None
    )
    with pytest.raises(Exception, match="a task fails"):
        write_delta(ds, uri)
    assert raydelta.load_snapshot(uri).version == before
    assert read_delta(uri).count() == 20


def test_failed_first_write_leaves_no_table(workdir: Path) -> None:
    import ray.data

    uri = str(workdir / "never")
    poisoned = pa.concat_tables(
        [_source(30), pa.table({"id": [-1], "region": ["eu"], "value": [0.0]})]
    )
    ds = ray.data.from_arrow(_blocks(poisoned, 3)).map_batches(
        _fail_on_marked_rows, batch_format="pyarrow", batch_size=None
    )
    with pytest.raises(Exception, match="a task fails"):
        write_delta(ds, uri)
    with pytest.raises(raydelta.TableNotFoundError):
        raydelta.load_snapshot(uri)


def test_schema_is_enforced_and_nothing_committed(workdir: Path) -> None:
    import ray.data

    uri = str(workdir / "s")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("region", pa.string())])
    raydelta.create_table(uri, schema)
    with pytest.raises(raydelta.RaydeltaError, match="value"):  # a column the table lacks
        write_delta(ray.data.from_arrow(_source(10)), uri)
    nulls = pa.table({"id": pa.array([1, None], pa.int64()), "region": ["eu", "us"]})
    with pytest.raises(raydelta.RaydeltaError):  # NOT NULL
        write_delta(ray.data.from_arrow(nulls), uri)
    assert raydelta.load_snapshot(uri).version == 0
    assert list(Path(uri).glob("*.parquet")) == []  # the data writer removed its own files
    ok = write_delta(ray.data.from_arrow(_source(10).select(["id", "region"])), uri)
    assert ok == 1 and read_delta(uri).count() == 10


def _added_files(uri: str, version: int) -> list[dict[str, Any]]:
    return [a["add"] for a in _log_actions(uri, version) if "add" in a]


def test_small_blocks_are_gathered_into_one_file_per_target_size(workdir: Path) -> None:
    """Fifty blocks of a few rows, far below the default target file size
    together: one write task, one file (not one file per block)."""
    import ray.data

    source = _source(500)
    assert source.nbytes < 128 * 1024 * 1024
    uri = str(workdir / "gathered")
    version = write_delta(ray.data.from_arrow(_blocks(source, 50)), uri)
    adds = _added_files(uri, version)
    assert len(adds) == 1
    assert json.loads(adds[0]["stats"])["numRecords"] == source.num_rows
    assert _ids_read_by_deltalake(uri) == source.column("id").to_pylist()


def test_a_small_target_file_size_splits_the_rows_into_several_files(workdir: Path) -> None:
    """With a target of a quarter of the rows' bytes, the write makes more than
    one file and fewer than one per block, and every row lands once."""
    import ray.data

    source = _source(2000)
    blocks = _blocks(source, 40)
    uri = str(workdir / "split")
    version = write_delta(ray.data.from_arrow(blocks), uri, target_file_size=source.nbytes // 4)
    adds = _added_files(uri, version)
    assert 1 < len(adds) < len(blocks)
    assert sum(json.loads(a["stats"])["numRecords"] for a in adds) == source.num_rows
    assert _ids_read_by_deltalake(uri) == source.column("id").to_pylist()
