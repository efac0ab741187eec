"""raydelta.ray_data.read_delta: rows, pruning, deletion vectors, column
mapping, time travel; checked against deltalake and pyarrow reading the same
files (never against numbers typed in by hand)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import raydelta
from raydelta.ray_data import DeltaDatasource, read_delta, write_delta


def _sorted(table: pa.Table, by: str = "id") -> pa.Table:
    return table.sort_by(by)


def _arrow(ds: Any) -> pa.Table:
    import ray

    refs = ds.to_arrow_refs()
    parts = [t for t in ray.get(refs) if t.num_rows]
    return pa.concat_tables(parts) if parts else ds.schema().base_schema.empty_table()


def _deltalake_files(path: Path) -> pa.Table:
    import deltalake

    return pa.table(deltalake.DeltaTable(str(path)).get_add_actions(flatten=True))


def _source(n: int, offset: int = 0) -> pa.Table:
    ids = list(range(offset, offset + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "small": pa.array([i % 100 for i in ids], pa.int32()),
            "value": pa.array([i * 0.5 for i in ids], pa.float64()),
            "name": pa.array([f"n{i}" if i % 7 else None for i in ids], pa.string()),
            "flag": pa.array([i % 2 == 0 for i in ids], pa.bool_()),
            "day": pa.array([dt.date(2026, 1, 1 + i % 3) for i in ids], pa.date32()),
            "at": pa.array(
                [dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i) for i in ids],
                pa.timestamp("us", tz="UTC"),
            ),
            "price": pa.array([decimal.Decimal(i) / 100 for i in ids], pa.decimal128(10, 2)),
        }
    )


def test_round_trip(workdir: Path) -> None:
    import ray.data

    source = _source(300)
    uri = str(workdir / "t")
    version = write_delta(ray.data.from_arrow(source), uri)
    assert version == raydelta.load_snapshot(uri).version == 0  # created with the data
    back = _sorted(_arrow(read_delta(uri)))
    assert back.schema.names == source.schema.names
    assert back.equals(source.cast(back.schema))
    assert back.schema.field("price").type == pa.decimal128(10, 2)
    assert read_delta(uri).count() == source.num_rows


def test_partition_filter_reads_only_that_partition(workdir: Path) -> None:
    import ray.data

    source = _source(90)
    uri = workdir / "p"
    write_delta(ray.data.from_arrow(source), str(uri), partition_by=["day"])
    ds = read_delta(str(uri), filter="day = '2026-01-02'")
    files = _deltalake_files(uri)
    wanted = {
        unquote(p)
        for p, day in zip(
            files.column("path").to_pylist(), files.column("partition.day").to_pylist(), strict=True
        )
        if day == dt.date(2026, 1, 2)
    }
    assert wanted and len(wanted) < files.num_rows
    assert {unquote(p) for p in ds.input_files()} == wanted
    expected = source.filter(pc.equal(source.column("day"), dt.date(2026, 1, 2)))
    got = _sorted(_arrow(ds))
    assert got.select(source.schema.names).equals(
        _sorted(expected).cast(got.select(source.schema.names).schema)
    )


def test_statistics_skip_files_and_filter_removes_rows(workdir: Path) -> None:
    import ray.data

    uri = workdir / "s"
    for start in (0, 100, 200, 300):  # four commits, four disjoint id ranges
        write_delta(ray.data.from_arrow(_source(100, start)), str(uri))
    files = _deltalake_files(uri)
    threshold = 250
    wanted = {
        unquote(p)
        for p, high in zip(
            files.column("path").to_pylist(), files.column("max.id").to_pylist(), strict=True
        )
        if high >= threshold
    }
    assert 0 < len(wanted) < files.num_rows
    ds = read_delta(str(uri), filter=f"id >= {threshold} AND small % 2 = 0")
    assert {unquote(p) for p in ds.input_files()} == wanted
    ids = sorted(_arrow(ds).column("id").to_pylist())
    every = pa.concat_tables([_source(100, s) for s in (0, 100, 200, 300)])
    assert ids == sorted(
        i
        for i, small in zip(
            every.column("id").to_pylist(), every.column("small").to_pylist(), strict=True
        )
        if i >= threshold and small % 2 == 0
    )
    assert ds.count() == len(ids)


def test_pyarrow_expression_filter_and_columns(workdir: Path) -> None:
    import ray.data

    source = _source(120)
    uri = str(workdir / "e")
    write_delta(ray.data.from_arrow(source), uri)
    ds = read_delta(
        uri, columns=["name", "id"], filter=(pc.field("value") > 20.0) & pc.field("flag")
    )
    got = _sorted(_arrow(ds))
    assert got.schema.names == ["name", "id"]
    mask = pc.and_(pc.greater(source.column("value"), 20.0), source.column("flag"))
    assert got.equals(source.filter(mask).select(["name", "id"]).cast(got.schema))


def _deltalake_live_rows(path: Path) -> pa.Table:
    """An independent oracle for a DV table: deltalake's file list, partition
    values and selection vectors; pyarrow reads the parquet files; names
    mapped from physical to logical by deltalake's schema."""
    import deltalake

    table = deltalake.DeltaTable(str(path))
    fields = json.loads(table.schema().to_json())["fields"]
    logical = {
        f["metadata"].get("delta.columnMapping.physicalName", f["name"]): f["name"] for f in fields
    }
    reader = table.deletion_vectors()
    vectors = pa.table(reader.read_all()) if hasattr(reader, "read_all") else pa.table(reader)
    root = unquote(path.resolve().as_uri()).rstrip("/") + "/"
    deleted = {
        unquote(loc)[len(root) :]: {i for i, keep in enumerate(sel) if not keep}
        for loc, sel in zip(
            vectors.column("filepath").to_pylist(),
            vectors.column("selection_vector").to_pylist(),
            strict=True,
        )
    }
    adds = pa.table(table.get_add_actions(flatten=True))
    partition_names = [n for n in adds.schema.names if n.startswith("partition.")]
    parts = []
    for row in adds.to_pylist():
        relative = unquote(row["path"])
        data = pq.read_table(path / relative)
        data = data.rename_columns([logical.get(n, n) for n in data.schema.names])
        drop = deleted.get(relative, set())
        data = data.filter(pa.array([i not in drop for i in range(data.num_rows)]))
        for name in partition_names:
            column = logical.get(name.removeprefix("partition."), name.removeprefix("partition."))
            data = data.append_column(
                column, pa.array([row[name]] * data.num_rows, adds.schema.field(name).type)
            )
        parts.append(data.select([f["name"] for f in fields]))
    return pa.concat_tables(parts)


@pytest.mark.parametrize("name", ["dv-with-columnmapping", "dv-partitioned-with-checkpoint"])
def test_deletion_vectors_applied(workdir: Path, golden_copy: Any, name: str) -> None:
    path = golden_copy(name)
    expected = _deltalake_live_rows(path)
    snapshot = raydelta.load_snapshot(str(path))
    assert any(dv is not None for dv in snapshot.files.column("deletionVector").to_pylist())
    ds = read_delta(str(path))
    got = _arrow(ds)
    names = expected.schema.names
    key = [(n, "ascending") for n in names]
    assert (
        got.num_rows
        == expected.num_rows
        < sum(json.loads(s)["numRecords"] for s in snapshot.files.column("stats").to_pylist())
    )
    assert got.select(names).sort_by(key).to_pylist() == expected.sort_by(key).to_pylist()
    assert ds.count() == expected.num_rows  # the tasks' row counts subtract DV cardinalities


@pytest.mark.parametrize(
    "name", ["table-with-columnmapping-mode-name", "table-with-columnmapping-mode-id"]
)
def test_column_mapping_logical_names(workdir: Path, golden_copy: Any, name: str) -> None:
    path = golden_copy(name)
    # deltalake 1.6.6 reads these tables' values as nulls: the oracle reads the
    # parquet files by their physical names, as _deltalake_live_rows does.
    expected = _deltalake_live_rows(path)
    got = _arrow(read_delta(str(path)))
    assert got.schema.names == expected.schema.names
    assert got.num_rows == expected.num_rows > 0
    names = [
        n for n in expected.schema.names if not pa.types.is_nested(expected.schema.field(n).type)
    ]
    key = [(n, "ascending") for n in names]
    assert (
        got.select(names).sort_by(key).to_pylist()
        == expected.select(names).sort_by(key).to_pylist()
    )
    assert any(v is not None for v in got.column(names[0]).to_pylist())


def test_time_travel(workdir: Path) -> None:
    import ray.data

    uri = str(workdir / "tt")
    first, second = _source(50), _source(30, 50)
    v1 = write_delta(ray.data.from_arrow(first), uri)
    v2 = write_delta(ray.data.from_arrow(second), uri)
    v3 = write_delta(ray.data.from_arrow(_source(5, 1000)), uri, mode="overwrite")
    assert v1 == 0 and v1 < v2 < v3  # version 0 holds the table and its first rows
    assert (
        sorted(_arrow(read_delta(uri, version=v1)).column("id").to_pylist())
        == first.column("id").to_pylist()
    )
    assert sorted(_arrow(read_delta(uri, version=v2)).column("id").to_pylist()) == (
        first.column("id").to_pylist() + second.column("id").to_pylist()
    )
    assert sorted(_arrow(read_delta(uri)).column("id").to_pylist()) == list(range(1000, 1005))
    with pytest.raises(raydelta.VersionNotFoundError):
        read_delta(uri, version=v3 + 1)


def test_bad_arguments_fail_before_any_task(workdir: Path) -> None:
    import ray.data

    uri = str(workdir / "b")
    with pytest.raises(raydelta.TableNotFoundError):
        read_delta(uri)
    write_delta(ray.data.from_arrow(_source(3)), uri)
    with pytest.raises(raydelta.InvalidArgumentError):
        read_delta(uri, columns=["nope"])
    with pytest.raises(raydelta.InvalidArgumentError):
        read_delta(uri, version=-1)
    with pytest.raises(raydelta.InvalidArgumentError):
        read_delta(uri, filter=42)  # type: ignore[arg-type]


def test_empty_table_and_read_task_groups(workdir: Path) -> None:
    uri = str(workdir / "empty")
    raydelta.create_table(uri, pa.schema([("id", pa.int64()), ("s", pa.string())]))
    ds = read_delta(uri)
    assert ds.count() == 0
    assert _arrow(ds).schema.names == ["id", "s"]
    source = DeltaDatasource(uri)
    tasks = source.get_read_tasks(4)
    assert len(tasks) == 1 and tasks[0].metadata.num_rows == 0


def test_files_split_into_balanced_groups(workdir: Path) -> None:
    import ray.data

    uri = str(workdir / "g")
    for start in range(0, 60, 10):  # six commits, one file each
        write_delta(ray.data.from_arrow(_source(10, start)), uri)
    source = DeltaDatasource(uri)
    tasks = source.get_read_tasks(4)
    files = [f for task in tasks for f in task.metadata.input_files]
    assert len(tasks) == 4
    assert sorted(files) == sorted(source.files.column("path").to_pylist())  # each file once
    assert sum(task.metadata.num_rows for task in tasks) == 60
    rows = pa.concat_tables([block for task in tasks for block in task()])
    assert sorted(rows.column("id").to_pylist()) == list(range(60))
