"""MERGE against rows computed in Python (tests/dml/merge_reference.py): upserts
with and without deletion vectors, partitioned or not, column mapping; every
clause kind with conditions; schema evolution; the multiple-match error and
typed errors leaving the table unchanged; metrics in commitInfo; sources as
Arrow, pandas and Ray Datasets; pruning; Ray tasks; change data; peers."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raydelta
from raydelta.dml.merge import TableMerger
from raydelta.protocol.errors import (
    DeltaUnsupportedOperationException,
    InvalidArgumentError,
    InvalidExpressionError,
    NonDeterministicExpressionError,
)
from tests.dml.merge_reference import Clause, reference_merge

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("x", pa.int64())])
FLAVOURS = {
    "plain": {},
    "dv": {"delta.enableDeletionVectors": "true"},
    "dv_cdf": {"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"},
    "cdf": {"delta.enableChangeDataFeed": "true"},
    "mapped_dv": {"delta.columnMapping.mode": "name", "delta.enableDeletionVectors": "true"},
}


def rows(start: int, count: int, *, x_base: int = 0) -> list[dict[str, Any]]:
    return [
        {"id": i, "part": "a" if i % 3 else "b", "x": x_base + i * 7 % 11}
        for i in range(start, start + count)
    ]


def sort(
    table_rows: list[dict[str, Any]], columns: tuple[str, ...] = ("id", "part", "x")
) -> list[dict[str, Any]]:
    return sorted(({c: r.get(c) for c in columns} for r in table_rows), key=lambda r: r["id"])


def make(
    tmp: Path, flavour: str = "plain", *, partitioned: bool = True, name: str = "t"
) -> tuple[raydelta.Table, list[dict[str, Any]]]:
    table = raydelta.create_table(
        str(tmp / name),
        SCHEMA,
        partition_by=["part"] if partitioned else [],
        properties=FLAVOURS[flavour],
    )
    expected: list[dict[str, Any]] = []
    for start in (0, 10, 20):
        chunk = rows(start, 10)
        table.append(pa.Table.from_pylist(chunk, schema=SCHEMA))
        expected.extend(chunk)
    return table, expected


def last_info(table: raydelta.Table) -> dict[str, Any]:
    info = table.history(limit=1)[0].commit_info
    assert info is not None
    return info


def upsert_reference(
    target: list[dict[str, Any]], source: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    return reference_merge(
        target,
        source,
        lambda t, s: t["id"] == s["id"],
        matched=[Clause("update", make=lambda t, s: dict(s))],
        not_matched=[Clause("insert", make=dict)],
    )


@pytest.mark.parametrize(
    ("flavour", "partitioned"),
    [("plain", True), ("plain", False), ("dv", True), ("dv_cdf", False), ("mapped_dv", True)],
)
def test_upsert_matches_python(
    ray_cluster: Any, tmp_path: Path, flavour: str, partitioned: bool
) -> None:
    table, target = make(tmp_path, flavour, partitioned=partitioned)
    source = rows(25, 10, x_base=1000)  # 5 updates, 5 inserts
    expected, counts = upsert_reference(target, source)
    metrics = (
        table.merge(pa.Table.from_pylist(source, schema=SCHEMA), "target.id = source.id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    assert sort(table.to_arrow().to_pylist()) == sort(expected)
    assert metrics.num_source_rows == len(source)
    assert metrics.num_target_rows_updated == counts["updated"]
    assert metrics.num_target_rows_inserted == counts["inserted"]
    assert metrics.num_target_rows_deleted == 0
    info = last_info(table)
    assert info["operation"] == "MERGE"
    recorded = info["operationMetrics"]
    assert recorded["numTargetRowsUpdated"] == str(counts["updated"])
    assert recorded["numTargetRowsInserted"] == str(counts["inserted"])
    assert recorded["numSourceRows"] == str(len(source))
    assert json.loads(info["operationParameters"]["predicate"]) == ["target.id = source.id"]
    assert json.loads(info["operationParameters"]["matchedPredicates"]) == [
        {"actionType": "update"}
    ]
    if "dv" in flavour:
        assert metrics.num_target_deletion_vectors_added >= 1
        assert metrics.num_target_rows_copied == 0
    else:
        assert metrics.num_target_deletion_vectors_added == 0
        assert metrics.num_output_rows == (
            metrics.num_target_rows_updated
            + metrics.num_target_rows_inserted
            + metrics.num_target_rows_copied
        )


@pytest.mark.parametrize("flavour", ["plain", "dv"])
def test_every_clause_kind_with_conditions(ray_cluster: Any, tmp_path: Path, flavour: str) -> None:
    table, target = make(tmp_path, flavour)
    source = rows(15, 20, x_base=100)
    expected, counts = reference_merge(
        target,
        source,
        lambda t, s: t["id"] == s["id"],
        matched=[
            Clause("delete", when=lambda t, s: t["x"] > 8),
            Clause(
                "update",
                when=lambda t, s: s["id"] % 2 == 0,
                make=lambda t, s: {"x": t["x"] + s["x"]},
            ),
        ],
        not_matched=[
            Clause(
                "insert",
                when=lambda s: s["id"] < 30,
                make=lambda s: {"id": s["id"], "part": s["part"], "x": -1},
            ),
        ],
        by_source=[
            Clause("delete", when=lambda t: t["id"] < 3),
            Clause("update", make=lambda t: {"x": 0}),
        ],
    )
    metrics = (
        table.merge(
            pa.Table.from_pylist(source, schema=SCHEMA),
            "t.id = s.id",
            source_alias="s",
            target_alias="t",
        )
        .when_matched_delete("t.x > 8")
        .when_matched_update({"x": "t.x + s.x"}, "s.id % 2 = 0")
        .when_not_matched_insert({"id": "s.id", "part": "s.part", "x": "-1"}, "s.id < 30")
        .when_not_matched_by_source_delete("t.id < 3")
        .when_not_matched_by_source_update({"t.x": "0"})
        .execute()
    )
    assert sort(table.to_arrow().to_pylist()) == sort(expected)
    assert (
        metrics.num_target_rows_inserted,
        metrics.num_target_rows_updated,
        metrics.num_target_rows_deleted,
    ) == (
        counts["inserted"],
        counts["updated"],
        counts["deleted"],
    )
    assert metrics.num_target_rows_not_matched_by_source_deleted == 3
    params = last_info(table)["operationParameters"]
    assert json.loads(params["notMatchedBySourcePredicates"]) == [
        {"actionType": "delete", "predicate": "t.id < 3"},
        {"actionType": "update"},
    ]


def test_schema_evolution_adds_source_columns(ray_cluster: Any, tmp_path: Path) -> None:
    table, target = make(tmp_path, "dv")
    source = [dict(r, y=f"y{r['id']}") for r in rows(28, 4, x_base=50)]
    expected, _ = upsert_reference([dict(r, y=None) for r in target], source)
    (
        table.merge(pa.Table.from_pylist(source), "target.id = source.id", merge_schema=True)
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    assert [f.name for f in table.snapshot().schema.fields] == ["id", "part", "x", "y"]
    got = table.to_arrow().to_pylist()
    assert sort(got, ("id", "part", "x", "y")) == sort(expected, ("id", "part", "x", "y"))
    with open(_log_file(table, table.snapshot().version)) as log:
        actions = [json.loads(line) for line in log]
    assert any("metaData" in a for a in actions) and any("add" in a for a in actions)


def _log_file(table: raydelta.Table, version: int) -> str:
    return os.path.join(table.uri.removeprefix("file://"), "_delta_log", f"{version:020d}.json")


def test_without_merge_schema_new_columns_are_not_added(ray_cluster: Any, tmp_path: Path) -> None:
    table, target = make(tmp_path)
    source = [dict(r, y="new") for r in rows(28, 4)]
    table.merge(
        pa.Table.from_pylist(source), "target.id = source.id"
    ).when_not_matched_insert_all().execute()
    assert [f.name for f in table.snapshot().schema.fields] == ["id", "part", "x"]
    expected = target + [{k: v for k, v in r.items() if k != "y"} for r in source if r["id"] >= 30]
    assert sort(table.to_arrow().to_pylist()) == sort(expected)


def test_multiple_matches_fail_and_change_nothing(ray_cluster: Any, tmp_path: Path) -> None:
    table, target = make(tmp_path, "dv")
    version = table.snapshot().version
    source = pa.Table.from_pylist(rows(5, 3, x_base=1) + rows(6, 1, x_base=2), schema=SCHEMA)
    before = set(_files(table))
    with pytest.raises(DeltaUnsupportedOperationException) as caught:
        table.merge(source, "target.id = source.id").when_matched_update_all().execute()
    assert "DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE" in str(caught.value)
    assert table.snapshot().version == version and set(_files(table)) == before
    assert sort(table.to_arrow().to_pylist()) == sort(target)
    # an unconditional delete is allowed to match several times (delta-spark)
    table.merge(source, "target.id = source.id").when_matched_delete().execute()
    assert sort(table.to_arrow().to_pylist()) == sort(
        [r for r in target if r["id"] not in (5, 6, 7)]
    )


def _files(table: raydelta.Table) -> list[str]:
    root = table.uri.removeprefix("file://")
    return [
        os.path.join(d, n) for d, _, names in os.walk(root) if "_delta_log" not in d for n in names
    ]


@pytest.mark.parametrize(
    ("build", "error"),
    [
        (lambda m: m.when_matched_update({"nope": "source.x"}), InvalidArgumentError),
        (lambda m: m.when_matched_update({"x": "source.nope"}), InvalidExpressionError),
        (lambda m: m.when_matched_update({"x": "source.part"}), InvalidExpressionError),
        (lambda m: m.when_matched_delete("rand() > 0.5"), NonDeterministicExpressionError),
        (lambda m: m.when_matched_delete("target.x + 1"), InvalidExpressionError),
        (lambda m: m.when_not_matched_insert({"id": "target.id"}), InvalidExpressionError),
        (lambda m: m.when_not_matched_by_source_delete("source.x > 1"), InvalidExpressionError),
        (
            lambda m: m.when_matched_update({"x": "x"}),
            InvalidExpressionError,
        ),  # ambiguous bare name
    ],
)
def test_bad_input_is_refused_and_table_unchanged(
    ray_cluster: Any, tmp_path: Path, build: Any, error: Any
) -> None:
    table, _ = make(tmp_path)
    version = table.snapshot().version
    before = set(_files(table))
    merger = table.merge(pa.Table.from_pylist(rows(0, 5), schema=SCHEMA), "target.id = source.id")
    with pytest.raises(error):
        build(merger).execute()
    assert table.snapshot().version == version and set(_files(table)) == before


def test_bad_arguments(ray_cluster: Any, tmp_path: Path) -> None:
    table, _ = make(tmp_path)
    source = pa.Table.from_pylist(rows(0, 2), schema=SCHEMA)
    with pytest.raises(InvalidArgumentError):
        table.merge(source, "t.id = s.id", source_alias="s", target_alias="s")
    with pytest.raises(InvalidArgumentError):
        table.merge([1, 2], "target.id = source.id")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        table.merge(source, "target.id = source.id").execute()  # no clause
    with pytest.raises(NonDeterministicExpressionError):
        table.merge(source, "target.id = source.id AND rand() < 1").when_matched_delete().execute()


def test_pandas_and_ray_dataset_sources(ray_cluster: Any, tmp_path: Path) -> None:
    import ray

    table, target = make(tmp_path, "dv")
    first = rows(0, 4, x_base=500)
    second = rows(40, 3, x_base=900)
    table.merge(
        pa.Table.from_pylist(first, schema=SCHEMA).to_pandas(), "target.id = source.id"
    ).when_matched_update_all().execute()
    dataset = ray.data.from_arrow(pa.Table.from_pylist(second, schema=SCHEMA))
    table.merge(dataset, "target.id = source.id").when_not_matched_insert_all().execute()
    expected, _ = upsert_reference(target, first)
    expected += second
    assert sort(table.to_arrow().to_pylist()) == sort(expected)


def test_partitions_and_files_the_source_cannot_match_are_not_read(
    ray_cluster: Any, tmp_path: Path
) -> None:
    table, target = make(tmp_path, "dv")
    snapshot = table.snapshot()
    source = pa.Table.from_pylist(
        [r for r in rows(20, 10, x_base=3) if r["part"] == "b"], schema=SCHEMA
    )
    merger = table.merge(
        source, "target.id = source.id AND target.part = source.part"
    ).when_matched_update_all()
    staged = merger.stage()
    files = snapshot.files.to_pylist()
    wanted = [
        f
        for f in files
        if dict(f["partitionValues"]).get("part") == "b"
        and json.loads(f["stats"])["maxValues"]["id"] >= 20
    ]
    assert staged.candidates.num_rows == len(wanted) < len(files)
    staged.commit()
    expected, _ = upsert_reference(target, source.to_pylist())
    assert sort(table.to_arrow().to_pylist()) == sort(expected)


def test_files_are_merged_by_ray_tasks(ray_cluster: Any, tmp_path: Path) -> None:
    table, target = make(tmp_path, "plain", partitioned=False)
    source = rows(5, 20, x_base=70)
    expected, _ = upsert_reference(target, source)
    merger = TableMerger(
        table, pa.Table.from_pylist(source, schema=SCHEMA), "target.id = source.id", tasks=3
    )
    merger.when_matched_update_all().when_not_matched_insert_all().execute()
    assert sort(table.to_arrow().to_pylist()) == sort(expected)


def test_change_data_feed_of_a_merge(ray_cluster: Any, tmp_path: Path) -> None:
    table, target = make(tmp_path, "dv_cdf")
    source = rows(27, 6, x_base=40)
    (
        table.merge(pa.Table.from_pylist(source, schema=SCHEMA), "target.id = source.id")
        .when_matched_update_all("source.id % 2 = 0")
        .when_matched_delete()
        .when_not_matched_insert_all()
        .execute()
    )
    version = table.snapshot().version
    feed = table.changes(version, version).to_pylist()
    by_id = {r["id"]: r for r in target}
    expected = []
    for s in source:
        old = by_id.get(s["id"])
        if old is None:
            expected.append((s["id"], "insert", s["x"]))
        elif s["id"] % 2 == 0:
            expected += [
                (s["id"], "update_preimage", old["x"]),
                (s["id"], "update_postimage", s["x"]),
            ]
        else:
            expected.append((s["id"], "delete", old["x"]))
    assert sorted((r["id"], r["_change_type"], r["x"]) for r in feed) == sorted(expected)


def test_no_change_commits_nothing(ray_cluster: Any, tmp_path: Path) -> None:
    table, _ = make(tmp_path)
    version = table.snapshot().version
    metrics = (
        table.merge(pa.Table.from_pylist(rows(100, 3), schema=SCHEMA), "target.id = source.id")
        .when_matched_delete()
        .execute()
    )
    assert metrics.num_target_rows_deleted == 0 and table.snapshot().version == version


def test_peers_read_copy_on_write_merge(ray_cluster: Any, tmp_path: Path, duck: Any) -> None:
    import deltalake

    table, target = make(tmp_path, "plain")
    source = rows(25, 10, x_base=1000)
    expected, _ = upsert_reference(target, source)
    table.merge(
        pa.Table.from_pylist(source, schema=SCHEMA), "target.id = source.id"
    ).when_matched_update_all().when_not_matched_insert_all().execute()
    path = table.uri.removeprefix("file://")
    assert sort(deltalake.DeltaTable(path).to_pyarrow_table().to_pylist()) == sort(expected)
    got = duck.sql(f"SELECT id, part, x FROM delta_scan('{path}')").arrow()
    got = got.read_all() if hasattr(got, "read_all") else got
    assert sort(got.to_pylist()) == sort(expected)
