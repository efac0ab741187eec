"""Variant at the log level: variantType, variantType-preview and
variantShredding(-preview) tables load, their schemas round-trip, their stats
read, and Arrow reads return variant columns in their physical parquet form.

Tables: delta-spark's golden ``spark-variant-checkpoint`` (variantType-preview,
variants nested in arrays, structs and maps, a classic checkpoint), and a
shredded table whose data files Spark 4 writes (``writeShredding``) and whose
log is written here the way delta-spark writes a variantShredding-preview
table (schema JSON from Spark itself, variant min/max stats as z85 strings of
Spark-encoded variants, as the variant-shredding RFC specifies). Every
expected value comes from the parquet files themselves (pyarrow) or from
Spark.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from raydelta.protocol.actions import Protocol
from raydelta.protocol.schema import VARIANT, data_type_from_json, parse_schema, serialize_schema
from raydelta.protocol.statistics import parse_stats
from raydelta.protocol.table_features import ensure_readable
from raydelta.protocol.z85 import encode_padded
from raydelta.storage.checkpoint.writer import write_checkpoint
from raydelta.storage.data.files import read_logical_file
from raydelta.storage.log.store import log_store_for
from raydelta.storage.scan import scan
from raydelta.storage.snapshot import Snapshot, load_snapshot

GOLDEN = "spark-variant-checkpoint"


def _adds(snap: Snapshot) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = snap.files.to_pylist()
    for row in rows:
        row["partitionValues"] = dict(row["partitionValues"] or [])
    return rows


@pytest.mark.parametrize(
    "features",
    [
        ["variantType"],
        ["variantType-preview"],
        ["variantType", "variantShredding"],
        ["variantType-preview", "variantShredding-preview"],
    ],
)
def test_variant_features_are_readable(features: list[str]) -> None:
    ensure_readable(
        Protocol.model_validate(
            {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": features,
                "writerFeatures": features,
            }
        )
    )


def test_the_variant_type_round_trips(golden_root: Path) -> None:
    first = (golden_root / GOLDEN / "_delta_log" / "00000000000000000000.json").read_text()
    metadata = next(
        json.loads(line)["metaData"] for line in first.splitlines() if '"metaData"' in line
    )
    raw = metadata["schemaString"]
    assert json.loads(serialize_schema(parse_schema(raw))) == json.loads(raw)
    # the variant RFC's example spells a nested variant as an object
    assert data_type_from_json({"type": "variant"}) == VARIANT
    nested = {"type": "array", "elementType": {"type": "variant"}, "containsNull": False}
    assert (
        json.loads(
            serialize_schema(
                parse_schema(
                    json.dumps(
                        {
                            "type": "struct",
                            "fields": [
                                {"name": "a", "type": nested, "nullable": True, "metadata": {}}
                            ],
                        }
                    )
                )
            )
        )["fields"][0]["type"]["elementType"]
        == "variant"
    )


def test_golden_variant_table_reads_in_physical_form(golden_root: Path) -> None:
    root = golden_root / GOLDEN
    snap = load_snapshot(str(root))
    assert snap.log_segment is not None and snap.log_segment.checkpoint is not None
    assert "variantType-preview" in (snap.protocol.reader_features or [])
    for add in _adds(snap):
        stats = parse_stats(add["stats"])
        assert stats is not None and stats.num_records is not None
        stored = pq.read_table(root / add["path"])
        assert stats.num_records == stored.num_rows
        # nullCount of each variant column (no min/max: variant is not comparable)
        assert stats.null_count_of(["v"]) == stored.column("v").null_count
        assert stats.min_value(["v"]) is None
        read = read_logical_file(str(root), add, snap.schema, snap.metadata.partition_columns)
        assert read.to_pylist() == stored.to_pylist()
    table = scan(str(root), snap.files, snap.schema, snap.metadata.partition_columns)
    assert table.num_rows == sum(json.loads(a["stats"])["numRecords"] for a in _adds(snap))


# --- a shredded table: Spark writes the data, the log is delta-spark's shape ----------------

SHREDDING = ["variantType-preview", "variantShredding-preview"]
ROWS = [
    '{"a": 1, "b": "x"}',
    '{"a": "str", "c": [1, 2]}',
    "7",
    '{"a": 5, "b": "y"}',
]


@pytest.fixture(scope="module")
def shredded_table(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Iterator[Path]:
    # The run's one Spark session (tests/conftest.py), never stopped here: later
    # modules (the Unity Catalog clients' tests) drive the same JVM.
    root = tmp_path_factory.mktemp("shredded") / "t"
    shredding = (
        "spark.sql.variant.writeShredding.enabled",
        "spark.sql.variant.forceShreddingSchemaForTest",
    )
    try:
        values = ", ".join(f"({i}, '{text}')" for i, text in enumerate(ROWS))
        df = spark.sql(f"SELECT id, parse_json(j) AS v FROM VALUES {values} AS t(id, j)")
        schema_string = df.schema.json()
        spark.conf.set("spark.sql.variant.writeShredding.enabled", "true")
        spark.conf.set("spark.sql.variant.forceShreddingSchemaForTest", "a int, b string")
        df.where("id < 2").coalesce(1).write.parquet(str(root / "shredded"))
        spark.conf.set("spark.sql.variant.writeShredding.enabled", "false")
        df.where("id >= 2").coalesce(1).write.parquet(str(root / "plain"))
        low, high = (
            spark.sql(f"SELECT parse_json('{{\"$[\\'a\\']\": {n}}}') AS s").collect()[0].s
            for n in (1, 5)
        )
    finally:
        for key in shredding:
            spark.conf.unset(key)
    _write_log(root, schema_string, low, high)
    yield root


def _z85_variant(variant: Any) -> str:
    return encode_padded(bytes(variant.metadata) + bytes(variant.value))


def _write_log(root: Path, schema_string: str, low: Any, high: Any) -> None:
    now = int(time.time() * 1000)
    lines: list[dict[str, Any]] = [
        {"commitInfo": {"timestamp": now, "operation": "WRITE"}},
        {
            "protocol": {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": SHREDDING,
                "writerFeatures": SHREDDING,
            }
        },
        {
            "metaData": {
                "id": "shredded",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": schema_string,
                "partitionColumns": [],
                "configuration": {"delta.enableVariantShredding": "true"},
                "createdTime": now,
            }
        },
    ]
    for directory in ("shredded", "plain"):
        (file,) = (root / directory).glob("*.parquet")
        table = pq.read_table(file)
        stats: dict[str, Any] = {
            "numRecords": table.num_rows,
            "minValues": {"id": min(table.column("id").to_pylist())},
            "maxValues": {"id": max(table.column("id").to_pylist())},
            "nullCount": {"id": 0, "v": table.column("v").null_count},
        }
        if directory == "shredded":  # shredded paths may carry variant min/max (RFC)
            stats["minValues"]["v"] = _z85_variant(low)
            stats["maxValues"]["v"] = _z85_variant(high)
        lines.append(
            {
                "add": {
                    "path": f"{directory}/{file.name}",
                    "partitionValues": {},
                    "size": file.stat().st_size,
                    "modificationTime": now,
                    "dataChange": True,
                    "stats": json.dumps(stats),
                }
            }
        )
    log = root / "_delta_log"
    log.mkdir()
    (log / "00000000000000000000.json").write_text("\n".join(map(json.dumps, lines)) + "\n")


@pytest.mark.spark
def test_shredded_variants_are_read_as_stored(shredded_table: Path) -> None:
    snap = load_snapshot(str(shredded_table))
    assert snap.schema.field("v").type == VARIANT
    adds = {a["path"].split("/")[0]: a for a in _adds(snap)}
    for directory, add in adds.items():
        stored = pq.read_table(shredded_table / add["path"])
        stats = parse_stats(add["stats"])
        assert stats is not None and stats.num_records == stored.num_rows
        read = read_logical_file(
            str(shredded_table), add, snap.schema, snap.metadata.partition_columns
        )
        assert read.schema.field("v").type == stored.schema.field("v").type
        assert read.to_pylist() == stored.to_pylist()
        names = read.schema.field("v").type
        assert {names.field(i).name for i in range(names.num_fields)} == (
            {"metadata", "value", "typed_value"}
            if directory == "shredded"
            else {"value", "metadata"}
        )
    table = scan(str(shredded_table), snap.files, snap.schema, snap.metadata.partition_columns)
    assert sorted(table.column("id").to_pylist()) == list(range(len(ROWS)))
    files_read: list[int] = []
    # data skipping by id still works next to variant stats (z85 strings)
    pruned = scan(
        str(shredded_table),
        snap.files,
        snap.schema,
        snap.metadata.partition_columns,
        filter="id >= 2",
        on_file_read=lambda n: files_read.append(n),
    )
    assert sorted(pruned.column("id").to_pylist()) == [2, 3]
    assert files_read == [1]
    # each row's variant as its file stores it (the union of both layouts)
    by_id = {row["id"]: row["v"] for row in table.to_pylist()}
    for add in adds.values():
        for row in pq.read_table(shredded_table / add["path"]).to_pylist():
            got = by_id[row["id"]]
            assert {k: got[k] for k in row["v"]} == row["v"]
            assert all(got[k] is None for k in got if k not in row["v"])


@pytest.mark.spark
def test_a_shredded_table_checkpoints_and_reloads(shredded_table: Path, tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "t"
    shutil.copytree(shredded_table, root)
    before = load_snapshot(str(root))
    write_checkpoint(log_store_for(str(root)), before.state, now_ms=int(time.time() * 1000))
    after = load_snapshot(str(root))
    assert after.log_segment is not None and after.log_segment.checkpoint is not None
    assert sorted(map(str, after.files.to_pylist())) == sorted(map(str, before.files.to_pylist()))
    assert after.protocol == before.protocol
