"""MERGE honours the table's column rules as append and UPDATE do: generated
columns computed on updated and inserted rows (and a wrong given value
refused, as delta-spark refuses it), identity values generated for inserted
rows (kept on updated ones; an explicit or updated identity refused), CHECK
constraints on updated and inserted rows. A refused MERGE leaves the table
(log and files) exactly as it was. Expected rows are derived in Python."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raydelta
from raydelta.protocol.actions import CommitInfo, Metadata, Protocol
from raydelta.protocol.errors import DeltaInvariantViolationException, IdentityColumnError
from raydelta.protocol.file_names import commit_name
from raydelta.storage.log.store import log_store_for

DV = {"delta.enableDeletionVectors": "true"}


def _field(name: str, dtype: str, nullable: bool = True, **metadata: Any) -> dict[str, Any]:
    return {"name": name, "type": dtype, "nullable": nullable, "metadata": metadata}


def _create(path: Path, fields: list[dict[str, Any]], properties: dict[str, str]) -> raydelta.Table:
    """Version 0 written by hand (raydelta's create_table takes Arrow schemas,
    which carry no generation expressions or identity options)."""
    from raydelta.protocol.actions import serialize_actions

    features = ["generatedColumns", "identityColumns", "checkConstraints"]
    readers: list[str] = []
    if properties.get("delta.enableDeletionVectors") == "true":
        features.append("deletionVectors")
        readers.append("deletionVectors")
    protocol = Protocol(
        minReaderVersion=3,
        minWriterVersion=7,
        readerFeatures=readers,
        writerFeatures=features,
    )
    metadata = Metadata(
        id=str(uuid.uuid4()),
        schemaString=json.dumps({"type": "struct", "fields": fields}),
        partitionColumns=[],
        configuration=properties,
        createdTime=0,
    )
    info = CommitInfo(timestamp=1_700_000_000_000, operation="CREATE TABLE")
    uri = str(path)
    log_store_for(uri).put_if_absent(commit_name(0), serialize_actions([info, protocol, metadata]))
    return raydelta.open_table(uri)


def _files(uri: str) -> set[str]:
    out = set()
    for root, _, names in os.walk(uri):
        out.update(os.path.join(root, n) for n in names if not n.startswith("."))
    return out


def _rows(table: raydelta.Table, *columns: str) -> list[dict[str, Any]]:
    return sorted(table.to_arrow().select(list(columns)).to_pylist(), key=lambda r: r["id"])


def _refused(table: raydelta.Table, run: Any, error: type[BaseException], text: str) -> None:
    version, files, rows = table.version(), _files(table.uri), table.to_arrow()
    with pytest.raises(error, match=text):
        run()
    assert table.version() == version
    assert _files(table.uri) == files
    assert table.to_arrow().sort_by("id").equals(rows.sort_by("id"))


# --- generated columns ------------------------------------------------------------


@pytest.fixture(params=[{}, DV], ids=["copy_on_write", "dv"])
def generated(request: Any, ray_cluster: Any, tmp_path: Path) -> raydelta.Table:
    table = _create(
        tmp_path / "g",
        [
            _field("id", "long"),
            _field("x", "long"),
            _field("g", "long", **{"delta.generationExpression": "x * 2 + 1"}),
        ],
        request.param,
    )
    table.append(
        pa.table({"id": pa.array(range(6), pa.int64()), "x": pa.array(range(6), pa.int64())})
    )
    return table


def _source(ids: list[int], xs: list[int], g: list[int] | None = None) -> pa.Table:
    columns: dict[str, Any] = {"id": pa.array(ids, pa.int64()), "x": pa.array(xs, pa.int64())}
    if g is not None:
        columns["g"] = pa.array(g, pa.int64())
    return pa.table(columns)


def test_merge_computes_generated_columns_on_update_and_insert(generated: raydelta.Table) -> None:
    source = _source([1, 4, 10, 11], [100, 400, 1000, 1100])
    metrics = (
        generated.merge(source, "target.id = source.id")
        .when_matched_update({"x": "source.x"})
        .when_not_matched_insert({"id": "source.id", "x": "source.x"})
        .execute()
    )
    assert (metrics.num_target_rows_updated, metrics.num_target_rows_inserted) == (2, 2)
    new_x = {1: 100, 4: 400, 10: 1000, 11: 1100}
    expected = [
        {"id": i, "x": new_x.get(i, i), "g": new_x.get(i, i) * 2 + 1} for i in [*range(6), 10, 11]
    ]
    assert _rows(generated, "id", "x", "g") == expected


def test_update_recomputes_generated_columns_it_does_not_set(generated: raydelta.Table) -> None:
    generated.update({"x": "x + 10"}, predicate="id >= 4")
    expected = [
        {"id": i, "x": i + 10 if i >= 4 else i, "g": (i + 10 if i >= 4 else i) * 2 + 1}
        for i in range(6)
    ]
    assert _rows(generated, "id", "x", "g") == expected


def test_merge_all_clauses_compute_or_check_a_source_generated_column(
    generated: raydelta.Table,
) -> None:
    """update_all/insert_all with the generated column in the source: a right
    value is taken; a source without it gets it computed."""
    right = _source([2, 20], [7, 8], g=[15, 17])
    generated.merge(
        right, "target.id = source.id"
    ).when_matched_update_all().when_not_matched_insert_all().execute()
    without = _source([3, 30], [9, 10])
    generated.merge(
        without, "target.id = source.id"
    ).when_matched_update_all().when_not_matched_insert_all().execute()
    new_x = {2: 7, 20: 8, 3: 9, 30: 10}
    ids = [*range(6), 20, 30]
    expected = [{"id": i, "x": new_x.get(i, i), "g": new_x.get(i, i) * 2 + 1} for i in ids]
    assert _rows(generated, "id", "x", "g") == expected


@pytest.mark.parametrize("clause", ["update", "insert", "update_all", "insert_all"])
def test_merge_refuses_a_wrong_generated_value(generated: raydelta.Table, clause: str) -> None:
    """delta-spark refuses a MERGE writing a generated column a value other
    than its expression's (DELTA_VIOLATE_CONSTRAINT_WITH_VALUES)."""
    source = _source([1, 50], [5, 6], g=[0, 0])
    merger = generated.merge(source, "target.id = source.id")
    if clause == "update":
        merger = merger.when_matched_update({"x": "source.x", "g": "source.g"})
    elif clause == "insert":
        merger = merger.when_not_matched_insert(
            {"id": "source.id", "x": "source.x", "g": "source.g"}
        )
    elif clause == "update_all":
        merger = merger.when_matched_update_all()
    else:
        merger = merger.when_not_matched_insert_all()
    _refused(generated, merger.execute, DeltaInvariantViolationException, "g")


# --- identity columns ------------------------------------------------------------


@pytest.fixture(params=[{}, DV], ids=["copy_on_write", "dv"])
def identity(request: Any, ray_cluster: Any, tmp_path: Path) -> raydelta.Table:
    table = _create(
        tmp_path / "i",
        [
            _field(
                "id",
                "long",
                False,
                **{
                    "delta.identity.start": 100,
                    "delta.identity.step": 10,
                    "delta.identity.allowExplicitInsert": False,
                },
            ),
            _field("k", "string"),
            _field("v", "long"),
        ],
        request.param,
    )
    table.append(pa.table({"k": ["a", "b", "c"], "v": pa.array([1, 2, 3], pa.int64())}))
    return table


def test_merge_inserts_get_identity_values_updates_keep_theirs(identity: raydelta.Table) -> None:
    before = {r["k"]: r["id"] for r in identity.to_arrow().to_pylist()}
    assert sorted(before.values()) == [100, 110, 120]
    source = pa.table({"k": ["b", "d", "e"], "v": pa.array([20, 40, 50], pa.int64())})
    (
        identity.merge(source, "target.k = source.k")
        .when_matched_update({"v": "source.v"})
        .when_not_matched_insert({"k": "source.k", "v": "source.v"})
        .execute()
    )
    after = {r["k"]: (r["id"], r["v"]) for r in identity.to_arrow().to_pylist()}
    assert {k: after[k][0] for k in "abc"} == before  # updated and untouched rows keep ids
    assert after["b"][1] == 20
    new_ids = sorted(after[k][0] for k in "de")
    # fresh values continue above the high-water mark (120) in steps of 10
    assert new_ids == [130, 140]
    # and the mark moved: the next append continues after them
    identity.append(pa.table({"k": ["f"], "v": pa.array([60], pa.int64())}))
    assert {r["k"]: r["id"] for r in identity.to_arrow().to_pylist()}["f"] == 150


def test_merge_refuses_explicit_and_updated_identity_values(identity: raydelta.Table) -> None:
    source = pa.table(
        {"id": pa.array([5, 110], pa.int64()), "k": ["z", "b"], "v": pa.array([1, 2], pa.int64())}
    )
    inserting = identity.merge(source, "target.k = source.k").when_not_matched_insert(
        {"id": "source.id", "k": "source.k", "v": "source.v"}
    )
    _refused(identity, inserting.execute, IdentityColumnError, "id")
    updating = identity.merge(source, "target.k = source.k").when_matched_update(
        {"id": "source.id + 1"}
    )
    _refused(identity, updating.execute, IdentityColumnError, "id")
    _refused(identity, lambda: identity.update({"id": "id + 1"}), IdentityColumnError, "IDENTITY")


def test_merge_update_all_keeps_identity_values(identity: raydelta.Table) -> None:
    """``update_all`` with the identity column in the source leaves it (the
    source's value would be an identity update)."""
    before = {r["k"]: r["id"] for r in identity.to_arrow().to_pylist()}
    source = pa.table(
        {"id": pa.array([1, 2], pa.int64()), "k": ["a", "c"], "v": pa.array([7, 9], pa.int64())}
    )
    identity.merge(source, "target.k = source.k").when_matched_update_all().execute()
    after = {r["k"]: (r["id"], r["v"]) for r in identity.to_arrow().to_pylist()}
    assert after == {"a": (before["a"], 7), "b": (before["b"], 2), "c": (before["c"], 9)}


# --- CHECK constraints -------------------------------------------------------------


@pytest.mark.parametrize("properties", [{}, DV], ids=["copy_on_write", "dv"])
def test_merge_honours_check_constraints(
    ray_cluster: Any, tmp_path: Path, properties: dict[str, str]
) -> None:
    table = raydelta.create_table(
        str(tmp_path / "c"),
        pa.schema([("id", pa.int64()), ("x", pa.int64())]),
        properties={"delta.constraints.positive": "x >= 0", **properties},
    )
    table.append(
        pa.table({"id": pa.array(range(5), pa.int64()), "x": pa.array(range(5), pa.int64())})
    )
    bad_update = _source([1, 2], [-1, 5])
    _refused(
        table,
        table.merge(bad_update, "target.id = source.id").when_matched_update_all().execute,
        DeltaInvariantViolationException,
        "positive",
    )
    bad_insert = _source([3, 9], [30, -9])
    _refused(
        table,
        table.merge(bad_insert, "target.id = source.id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute,
        DeltaInvariantViolationException,
        "positive",
    )
    by_source = table.merge(
        _source([0], [0]), "target.id = source.id"
    ).when_not_matched_by_source_update({"x": "x - 10"})
    _refused(table, by_source.execute, DeltaInvariantViolationException, "positive")
    ok = _source([1, 9], [10, 90])
    table.merge(
        ok, "target.id = source.id"
    ).when_matched_update_all().when_not_matched_insert_all().execute()
    assert _rows(table, "id", "x") == [
        {"id": 0, "x": 0},
        {"id": 1, "x": 10},
        {"id": 2, "x": 2},
        {"id": 3, "x": 3},
        {"id": 4, "x": 4},
        {"id": 9, "x": 90},
    ]
