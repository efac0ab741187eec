"""The public API: create, write, read, change and maintain a table by its
public names only, with real files, a real Ray cluster, and peers
(deltalake, duckdb) reading what we wrote."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raydelta
from raydelta.storage.scan import as_predicate, prune_files

SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.float64()), ("date", pa.string())])


def rows(ids: list[int], date: str) -> pa.Table:
    return pa.table(
        {"id": ids, "value": [float(i) / 2 for i in ids], "date": [date] * len(ids)}, schema=SCHEMA
    )


def data_files(path: Path) -> set[str]:
    return {
        str(p.relative_to(path)) for p in path.rglob("*.parquet") if "_delta_log" not in p.parts
    }


def log_files(path: Path) -> set[str]:
    return {p.name for p in (path / "_delta_log").iterdir()}


def sorted_ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def test_every_public_name_resolves() -> None:
    for name in raydelta.__all__:
        assert getattr(raydelta, name) is not None, name
    assert issubclass(raydelta.ConcurrentAppendException, raydelta.RaydeltaError)
    assert issubclass(raydelta.InvalidArgumentError, raydelta.RaydeltaError)


def test_create_modes_and_open(workdir: Path) -> None:
    path = workdir / "t"
    table = raydelta.create_table(str(path), SCHEMA, partition_by=["date"])
    assert table.version() == 0
    with pytest.raises(raydelta.TableAlreadyExistsError):
        raydelta.create_table(str(path), SCHEMA)
    again = raydelta.create_table(str(path), SCHEMA, mode="ignore")
    assert again.version() == 0 and again.uri == table.uri
    assert raydelta.open_table(str(path)).snapshot().metadata.partition_columns == ["date"]
    with pytest.raises(raydelta.TableNotFoundError):
        raydelta.open_table(str(workdir / "missing"))


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"mode": "replace"}, "mode must be one of"),
        ({"partition_by": ["nope"]}, "not in the schema"),
        ({"schema": {"id": "long"}}, "pyarrow.Schema"),
    ],
)
def test_create_refuses_bad_arguments(workdir: Path, kwargs: dict[str, Any], fragment: str) -> None:
    options: dict[str, Any] = {"schema": SCHEMA, **kwargs}
    schema = options.pop("schema")
    with pytest.raises(raydelta.InvalidArgumentError, match=fragment):
        raydelta.create_table(str(workdir / "t"), schema, **options)
    assert not (workdir / "t" / "_delta_log").exists() or not any(
        (workdir / "t" / "_delta_log").iterdir()
    )


def test_append_writes_files_with_stats_that_peers_read(workdir: Path, duck: Any) -> None:
    deltalake = pytest.importorskip("deltalake")
    pandas = pytest.importorskip("pandas")
    path = workdir / "t"
    table = raydelta.create_table(str(path), SCHEMA, partition_by=["date"])
    assert table.append(rows([1, 2, 3], "2026-11-24")) == 1
    assert table.append(pandas.DataFrame(rows([4, 5], "2026-11-25").to_pydict())) == 2
    reader = pa.RecordBatchReader.from_batches(SCHEMA, rows([6], "2026-11-25").to_batches())
    assert table.append(reader) == 3

    ours = table.to_arrow()
    assert sorted_ids(ours) == [1, 2, 3, 4, 5, 6]
    assert sorted_ids(pa.table(deltalake.DeltaTable(str(path)).to_pyarrow_table())) == list(
        range(1, 7)
    )
    theirs = duck.execute(f"SELECT id FROM delta_scan('{path}') ORDER BY id").fetchall()
    assert [r[0] for r in theirs] == list(range(1, 7))

    for add in table.snapshot().add_files():
        stats = json.loads(add.stats or "{}")
        file_rows = pq.read_table(path / unquote(add.path))
        assert stats["numRecords"] == file_rows.num_rows
        assert stats["minValues"]["id"] == min(file_rows.column("id").to_pylist())
        assert stats["maxValues"]["id"] == max(file_rows.column("id").to_pylist())
        assert stats["nullCount"]["value"] == file_rows.column("value").null_count


@pytest.mark.parametrize(
    ("data", "column"),
    [
        (pa.table({"id": [1], "date": ["d"]}), "value"),  # missing
        (pa.table({"id": [1], "value": [1.0], "date": ["d"], "extra": [1]}), "extra"),
        (pa.table({"id": ["one"], "value": [1.0], "date": ["d"]}), "id"),  # mistyped
    ],
)
def test_schema_is_enforced_and_nothing_is_written(
    workdir: Path, data: pa.Table, column: str
) -> None:
    from raydelta.protocol.errors import SchemaMismatchError

    path = workdir / "t"
    table = raydelta.create_table(str(path), SCHEMA, partition_by=["date"])
    table.append(rows([1], "2026-11-24"))
    before_data, before_log = data_files(path), log_files(path)
    with pytest.raises(SchemaMismatchError, match=column) as caught:
        table.append(data)
    assert isinstance(caught.value, raydelta.RaydeltaError)
    assert data_files(path) == before_data and log_files(path) == before_log
    assert table.version() == 1


def test_schema_merge_adds_a_column(workdir: Path) -> None:
    path = workdir / "t"
    table = raydelta.create_table(str(path), SCHEMA)
    table.append(rows([1], "2026-11-24"))
    wider = rows([2], "2026-11-25").append_column("note", pa.array(["hi"]))
    table.append(wider, schema_mode="merge")
    result = table.to_arrow().sort_by("id")
    assert result.column_names == ["id", "value", "date", "note"]
    assert result.column("note").to_pylist() == [None, "hi"]


def test_overwrite_where_replaces_one_partition(workdir: Path) -> None:
    path = workdir / "t"
    table = raydelta.create_table(str(path), SCHEMA, partition_by=["date"])
    table.append(rows([1, 2], "2026-11-24"))
    table.append(rows([3, 4], "2026-11-25"))
    table.overwrite(rows([9], "2026-11-25"), where="date = '2026-11-25'")
    assert sorted_ids(table.to_arrow()) == [1, 2, 9]
    last = table.history(limit=1)[0]
    assert last.commit_info is not None
    assert last.commit_info["operationParameters"]["mode"] == "Overwrite"
    assert last.commit_info["operationParameters"]["predicate"] == "date = '2026-11-25'"

    table.overwrite(rows([7], "2026-11-23"))
    assert sorted_ids(table.to_arrow()) == [7]
    assert sorted_ids(table.to_arrow(version=2)) == [1, 2, 3, 4]


def test_overwrite_where_refuses_rows_outside_it(workdir: Path) -> None:
    path = workdir / "t"
    table = raydelta.create_table(str(path), SCHEMA, partition_by=["date"])
    table.append(rows([1], "2026-11-24"))
    before_data, before_log = data_files(path), log_files(path)
    with pytest.raises(raydelta.InvalidArgumentError, match="does not match"):
        table.overwrite(rows([5], "2026-11-24"), where="date = '2026-11-25'")
    with pytest.raises(raydelta.InvalidArgumentError, match="partition columns only"):
        table.overwrite(rows([5], "2026-11-24"), where="id = 5")
    assert data_files(path) == before_data and log_files(path) == before_log


def test_filters_prune_files_by_partition_and_stats(workdir: Path) -> None:
    path = workdir / "t"
    table = raydelta.create_table(str(path), SCHEMA, partition_by=["date"])
    for start, date in ((0, "a"), (10, "a"), (20, "b"), (30, "c")):
        table.append(rows(list(range(start, start + 10)), date))
    snap = table.snapshot()
    everything = table.to_arrow()
    for text, check in [
        ("date = 'a'", lambda r: r["date"] == "a"),
        ("id >= 25", lambda r: r["id"] >= 25),
        ("date = 'a' AND id < 5", lambda r: r["date"] == "a" and r["id"] < 5),
        ("id IN (3, 33)", lambda r: r["id"] in (3, 33)),
        ("id = 100", lambda r: False),
    ]:
        expected = sorted(r["id"] for r in everything.to_pylist() if check(r))
        assert sorted_ids(table.to_arrow(filter=text)) == expected, text
        kept = prune_files(snap.files, as_predicate(text), snap.schema, ["date"], "none")
        # every kept file may hold a match, every skipped one holds none
        for add in snap.add_files():
            file_ids = pq.read_table(path / unquote(add.path)).column("id").to_pylist()
            date = add.partition_values["date"]
            holds = any(check({"id": i, "date": date}) for i in file_ids)
            if holds:
                assert add.path in kept.column("path").to_pylist(), (text, add.path)
        if text == "id = 100":
            assert kept.num_rows == 0
    assert table.to_arrow(columns=["id"], filter="date = 'c'").column_names == ["id"]
    with pytest.raises(raydelta.InvalidArgumentError, match="unknown columns"):
        table.to_arrow(columns=["nope"])


def test_reads_apply_deletion_vectors_and_column_mapping(
    golden_copy: Any, workdir: Path, duck: Any
) -> None:
    # delta-spark's expectation: 35 live rows (deltalake refuses this table's
    # reader features, so duckdb's delta extension is the peer)
    path = golden_copy("dv-with-columnmapping")
    ours = raydelta.open_table(str(path)).to_arrow()
    theirs = duck.execute(f"SELECT * FROM delta_scan('{path}')").to_arrow_table()
    assert ours.num_rows == theirs.num_rows == 35
    assert sorted(ours.column_names) == sorted(theirs.column_names)
    key = ours.column_names[0]
    assert sorted(ours.column(key).to_pylist()) == sorted(theirs.column(key).to_pylist())


def test_history_is_an_arrow_table_with_short_reprs(workdir: Path) -> None:
    table = raydelta.create_table(str(workdir / "t"), SCHEMA)
    table.append(rows([1], "d"))
    history = table.history()
    arrow = pa.table(history)
    assert arrow.column("version").to_pylist() == [1, 0]
    assert arrow.column("operation").to_pylist() == ["WRITE", "CREATE TABLE"]
    assert len(history) == 2 and repr(history).startswith("History(2 commits")
    assert "<table>" in history._repr_html_()
    assert repr(table) == f"raydelta.Table({table.uri!r})"
    assert "version" in table._repr_html_()
    snap = table.snapshot()
    assert repr(snap).startswith(f"Snapshot({table.uri!r}, version=1, files=1")
    assert "<table>" in snap._repr_html_()
    with pytest.raises(raydelta.InvalidArgumentError):
        table.history(limit=0)


def test_maintenance_returns_typed_reports_and_vacuum_is_a_dry_run(workdir: Path) -> None:
    path = workdir / "t"
    table = raydelta.create_table(str(path), SCHEMA)
    table.append(rows([1], "d"))
    table.overwrite(rows([2], "d"))
    summary = table.checkpoint(kind="classic")
    assert isinstance(summary, raydelta.CheckpointSummary) and summary.version == 2
    files_before = data_files(path)
    report = table.vacuum(retention="0 days", enforce_retention_duration=False)
    assert isinstance(report, raydelta.VacuumReport) and report.dry_run
    assert report.num_files == 1 and data_files(path) == files_before
    deleted = table.vacuum(retention="0 days", enforce_retention_duration=False, dry_run=False)
    assert deleted.num_files == 1 and len(data_files(path)) == 1
    cleanup = table.cleanup_metadata(dry_run=True)
    assert isinstance(cleanup, raydelta.MetadataCleanupReport)
    with pytest.raises(raydelta.RetentionTooShortError):
        table.vacuum(retention="1 hour")


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda t: t.vacuum(retention="-1 days"), "duration"),
        (lambda t: t.vacuum(retention=7), "timedelta"),
        (lambda t: t.vacuum(dry_run="no"), "dry_run"),
        (lambda t: t.cleanup_metadata(retention="3 months"), "duration"),
        (lambda t: t.checkpoint(kind="v3"), "kind"),
        (lambda t: t.append(rows([1], "d"), schema_mode="replace"), "schema_mode"),
        (lambda t: t.to_arrow(version=-1), "version"),
    ],
)
def test_bad_arguments_raise_invalid_argument_error(
    workdir: Path, call: Any, fragment: str
) -> None:
    table = raydelta.create_table(str(workdir / "t"), SCHEMA)
    with pytest.raises(raydelta.InvalidArgumentError, match=fragment):
        call(table)
    assert table.version() == 0


def test_concurrent_appends_from_ray_tasks_all_land(workdir: Path, ray_cluster: Any) -> None:
    path = workdir / "t"
    raydelta.create_table(str(path), SCHEMA, partition_by=["date"])

    @ray_cluster.remote(num_cpus=0)
    def writer(index: int) -> list[int]:
        table = raydelta.open_table(str(path))
        return [table.append(rows([index * 10 + j], "d")) for j in range(3)]

    versions = sorted(
        v for batch in ray_cluster.get([writer.remote(i) for i in range(4)]) for v in batch
    )
    assert versions == list(range(1, 13))
    assert sorted_ids(raydelta.open_table(str(path)).to_arrow()) == sorted(
        i * 10 + j for i in range(4) for j in range(3)
    )


def test_load_snapshot_needs_no_ray_and_validates(workdir: Path) -> None:
    table = raydelta.create_table(str(workdir / "t"), SCHEMA)
    table.append(rows([1], "d"))
    assert raydelta.load_snapshot(str(workdir / "t")).version == 1
    assert raydelta.load_snapshot(str(workdir / "t"), version=0).num_files == 0
    with pytest.raises(raydelta.InvalidArgumentError):
        raydelta.load_snapshot(str(workdir / "t"), version=0, timestamp=0)
    with pytest.raises(raydelta.VersionNotFoundError):
        raydelta.load_snapshot(str(workdir / "t"), version=5)


def test_stats_pruning_keeps_a_file_whose_nan_rows_may_match(workdir: Path) -> None:
    """NaN is in no min/max statistic: a file of 2.0 and NaN has min = max =
    2.0, yet its NaN row satisfies ``x != 2.0`` (and, in Spark's order, where
    NaN is above every number, ``x > 100``): those comparisons never skip it."""
    path = workdir / "nan"
    schema = pa.schema([("x", pa.float64())])
    table = raydelta.create_table(str(path), schema)
    table.append(pa.table({"x": [2.0, float("nan")]}, schema=schema))
    snap = table.snapshot()
    (add,) = snap.add_files()
    assert json.loads(add.stats or "{}")["maxValues"]["x"] == 2.0  # NaN left out of the stats
    not_two = table.to_arrow(filter="x != 2.0").column("x").to_pylist()
    assert len(not_two) == 1 and math.isnan(not_two[0])
    for text in ("x != 2.0", "x > 100", "x >= 100"):
        kept = prune_files(snap.files, as_predicate(text), snap.schema, [], "none")
        assert kept.num_rows == 1, text
    # min-side and equality pruning still skip it: NaN is neither below 1 nor equal to 5
    for text in ("x < 1", "x = 5"):
        assert prune_files(snap.files, as_predicate(text), snap.schema, [], "none").num_rows == 0
