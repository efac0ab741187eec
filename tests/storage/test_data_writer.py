"""The one data writer over real files: schema enforcement, statistics, every
constraint kind, identity and column mapping; peers (delta-rs, duckdb) read
what it writes once the adds are committed."""

from __future__ import annotations

import datetime as dt
import json
import os
import pickle
import uuid
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from raydelta.protocol.actions import (
    Action,
    AddFile,
    CommitInfo,
    Metadata,
    Protocol,
    parse_actions,
    serialize_actions,
)
from raydelta.protocol.errors import (
    DeltaInvariantViolationException,
    IdentityColumnError,
    SchemaMismatchError,
    UnsupportedExpressionError,
    UnsupportedTableFeatureException,
)
from raydelta.protocol.file_names import commit_name
from raydelta.protocol.schema import parse_schema, serialize_schema
from raydelta.protocol.schema_arrow import from_arrow
from raydelta.protocol.stats_collection import truncate_max
from raydelta.storage.data.writer import WriteResult, check_writable, write_data
from raydelta.storage.log.store import log_store_for

UTC = dt.UTC


# --- helpers ------------------------------------------------------------------------


def field(name: str, dtype: str, nullable: bool = True, **metadata: Any) -> dict[str, Any]:
    return {"name": name, "type": dtype, "nullable": nullable, "metadata": metadata}


def make_table(
    path: Path,
    fields: list[dict[str, Any]],
    *,
    partition_by: list[str] | None = None,
    configuration: dict[str, str] | None = None,
    protocol: Protocol | None = None,
) -> tuple[str, Protocol, Metadata]:
    """Version 0 of a table written by hand: its protocol and metadata."""
    protocol = protocol or Protocol(minReaderVersion=1, minWriterVersion=4)
    metadata = Metadata(
        id=str(uuid.uuid4()),
        schemaString=json.dumps({"type": "struct", "fields": fields}),
        partitionColumns=partition_by or [],
        configuration=configuration or {},
        createdTime=0,
    )
    uri = str(path)
    commit(uri, 0, [protocol, metadata])
    return uri, protocol, metadata


def commit(uri: str, version: int, actions: list[Action]) -> None:
    info = CommitInfo(timestamp=1_700_000_000_000 + version, operation="WRITE")
    log_store_for(uri).put_if_absent(commit_name(version), serialize_actions([info, *actions]))


def commit_result(uri: str, version: int, result: WriteResult) -> None:
    actions: list[Action] = []
    if result.protocol is not None:
        actions.append(result.protocol)
    if result.metadata is not None:
        actions.append(result.metadata)
    commit(uri, version, [*actions, *result.adds])


def files_under(path: Path) -> set[str]:
    return {
        str(Path(root, name).relative_to(path))
        for root, dirs, names in os.walk(path)
        for name in [*names, *(d + "/" for d in dirs)]
    }


def stats_of(add: AddFile) -> dict[str, Any]:
    assert add.stats is not None
    parsed: dict[str, Any] = json.loads(add.stats)
    return parsed


def delta_rs_rows(uri: str) -> pa.Table:
    table = deltalake.DeltaTable(uri)
    return pa.table(
        deltalake.QueryBuilder().register("t", table).execute("select * from t").read_all()
    )


def sorted_rows(table: pa.Table, key: str) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: (r[key] is None, r[key]))


def assert_violation_leaves_table_unchanged(
    path: Path, call: Any, error: type[Exception], **expected: Any
) -> Exception:
    before = files_under(path)
    log_before = {p.name: p.read_bytes() for p in (path / "_delta_log").iterdir()}
    with pytest.raises(error) as info:
        call()
    for key, value in expected.items():
        assert getattr(info.value, key) == value, key
    assert files_under(path) == before
    assert {p.name: p.read_bytes() for p in (path / "_delta_log").iterdir()} == log_before
    again = pickle.loads(pickle.dumps(info.value))
    assert str(again) == str(info.value)
    return info.value


# --- append, partitions, peers ----------------------------------------------------------


def test_partitioned_append_is_read_back_by_delta_rs_and_duckdb(tmp_path: Path, duck: Any) -> None:
    uri, protocol, metadata = make_table(
        tmp_path,
        [field("id", "long"), field("name", "string"), field("day", "date")],
        partition_by=["day"],
    )
    days = [dt.date(2026, 1, 1), dt.date(2026, 1, 2), None]
    data = pa.table(
        {
            "id": pa.array(range(30), pa.int32()),  # int32 widens losslessly to long
            "name": [f"n{i}" for i in range(30)],
            "day": [days[i % 3] for i in range(30)],
        }
    )
    seen: list[int] = []
    result = write_data(
        uri, data, protocol=protocol, metadata=metadata, on_rows_written=seen.append
    )
    assert result.num_rows == 30 and sum(seen) == 30
    assert result.metadata is None and result.protocol is None
    assert {a.partition_values["day"] for a in result.adds} == {"2026-01-01", "2026-01-02", None}
    assert all(a.data_change for a in result.adds)
    assert any("__HIVE_DEFAULT_PARTITION__" in a.path for a in result.adds)
    commit_result(uri, 1, result)

    expected = sorted_rows(
        data.cast(pa.schema([("id", pa.int64()), ("name", pa.string()), ("day", pa.date32())])),
        "id",
    )
    assert sorted_rows(deltalake.DeltaTable(uri).to_pyarrow_table(), "id") == expected
    theirs = duck.execute(f"SELECT * FROM delta_scan('{uri}')").to_arrow_table()
    assert sorted_rows(theirs.select(["id", "name", "day"]), "id") == expected


def test_files_are_split_at_the_target_size(tmp_path: Path) -> None:
    uri, protocol, metadata = make_table(tmp_path, [field("id", "long"), field("pad", "string")])
    data = pa.table({"id": pa.array(range(2000), pa.int64()), "pad": ["x" * 100] * 2000})
    result = write_data(uri, data, protocol=protocol, metadata=metadata, target_file_size=50_000)
    per_row = data.nbytes / data.num_rows
    assert len(result.adds) == pytest.approx(data.nbytes / 50_000, abs=1)
    assert sum(stats_of(a)["numRecords"] for a in result.adds) == 2000
    assert all(stats_of(a)["numRecords"] * per_row <= 50_000 + per_row for a in result.adds)


def test_a_record_batch_reader_and_a_pandas_frame_are_written(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    uri, protocol, metadata = make_table(tmp_path, [field("id", "long"), field("v", "double")])
    batches = [pa.record_batch({"id": pa.array([i], pa.int64()), "v": [i / 2]}) for i in range(3)]
    reader = pa.RecordBatchReader.from_batches(batches[0].schema, batches)
    first = write_data(uri, reader, protocol=protocol, metadata=metadata)
    frame = pd.DataFrame({"id": [10, 11], "v": [1.5, 2.5]})
    second = write_data(uri, frame, protocol=protocol, metadata=metadata)
    commit_result(uri, 1, first)
    commit_result(uri, 2, second)
    rows = sorted_rows(deltalake.DeltaTable(uri).to_pyarrow_table(), "id")
    assert [r["id"] for r in rows] == [0, 1, 2, 10, 11]


# --- statistics -------------------------------------------------------------------------


def test_statistics_match_the_rows(tmp_path: Path) -> None:
    uri, protocol, metadata = make_table(
        tmp_path,
        [
            field("i", "integer"),
            field("f", "float"),
            field("d", "decimal(10,2)"),
            field("s", "string"),
            field("b", "boolean"),
            field("dt", "date"),
            field("ts", "timestamp"),
            {
                "name": "st",
                "type": {
                    "type": "struct",
                    "fields": [field("x", "long"), field("y", "string")],
                },
                "nullable": True,
                "metadata": {},
            },
            {
                "name": "arr",
                "type": {"type": "array", "elementType": "long", "containsNull": True},
                "nullable": True,
                "metadata": {},
            },
        ],
    )
    from decimal import Decimal

    long_text = "b" * 40
    data = pa.table(
        {
            "i": pa.array([3, None, -2], pa.int32()),
            "f": pa.array([0.1, 2.5, None], pa.float32()),
            "d": pa.array([Decimal("1.25"), Decimal("-3.50"), None], pa.decimal128(10, 2)),
            "s": ["a", long_text, None],
            "b": [True, None, False],
            "dt": [dt.date(2020, 1, 1), None, dt.date(1999, 12, 31)],
            "ts": pa.array(
                [dt.datetime(2020, 1, 1, 0, 0, 0, 123456, tzinfo=UTC), None, None],
                pa.timestamp("us", tz="UTC"),
            ),
            "st": pa.array(
                [{"x": 1, "y": "p"}, None, {"x": 7, "y": None}],
                pa.struct([("x", pa.int64()), ("y", pa.string())]),
            ),
            "arr": pa.array([[1], None, []], pa.list_(pa.int64())),
        }
    )
    result = write_data(uri, data, protocol=protocol, metadata=metadata)
    (add,) = result.adds
    assert stats_of(add) == {
        "numRecords": 3,
        "minValues": {
            "i": -2,
            "f": 0.1,
            "d": -3.5,
            "s": "a",
            "dt": "1999-12-31",
            "ts": "2020-01-01T00:00:00.123Z",
            "st": {"x": 1, "y": "p"},
        },
        "maxValues": {
            "i": 3,
            "f": 2.5,
            "d": 1.25,
            "s": "b" * 32 + "\ufffd",
            "dt": "2020-01-01",
            "ts": "2020-01-01T00:00:00.123Z",
            "st": {"x": 7, "y": "p"},
        },
        "nullCount": {
            "i": 1,
            "f": 1,
            "d": 1,
            "s": 1,
            "b": 1,
            "dt": 1,
            "ts": 2,
            "st": {"x": 1, "y": 2},
            "arr": 1,
        },
    }
    assert add.stats is not None and '"d":-3.50' in add.stats  # a plain JSON number
    assert add.size == os.path.getsize(tmp_path / add.path)


def test_string_bounds_follow_delta_spark() -> None:
    assert truncate_max("a" * 32, 32) == "a" * 32
    assert truncate_max("a" * 33, 32) == "a" * 32 + "\ufffd"
    # characters >= the tie-breaker are kept, so the bound stays above the value
    assert truncate_max("a" * 32 + "\uffff" + "z", 32) == "a" * 32 + "\uffff\ufffd"
    assert truncate_max("a" * 32 + "\U0001f600z", 32) == "a" * 32 + "\U0001f600\ufffd"
    for value in ["a" * 32 + "\uffff" + "z", "a" * 40, "a" * 32 + "\U0001f600z"]:
        assert truncate_max(value, 32).encode() >= value.encode()


def test_indexed_columns_follow_the_table_properties(tmp_path: Path) -> None:
    fields = [field(name, "long") for name in "abcd"]
    data = pa.table({name: pa.array([1, 2], pa.int64()) for name in "abcd"})
    uri, protocol, metadata = make_table(
        tmp_path / "n", fields, configuration={"delta.dataSkippingNumIndexedCols": "2"}
    )
    (add,) = write_data(uri, data, protocol=protocol, metadata=metadata).adds
    assert set(stats_of(add)["nullCount"]) == {"a", "b"}
    uri, protocol, metadata = make_table(
        tmp_path / "s", fields, configuration={"delta.dataSkippingStatsColumns": "d, `B`"}
    )
    (add,) = write_data(uri, data, protocol=protocol, metadata=metadata).adds
    assert set(stats_of(add)["minValues"]) == {"b", "d"}


# --- schema enforcement and evolution --------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "column", "message"),
    [
        (pa.table({"id": pa.array([1], pa.int64())}), "name", "missing"),
        (pa.table({"id": [1], "name": ["a"], "extra": [1]}), "extra", "not in the table"),
        (pa.table({"id": pa.array([1.5]), "name": ["a"]}), "id", "without loss"),
        (pa.table({"id": pa.array([1], pa.int64()), "name": [1]}), "name", "without loss"),
        (
            pa.table(
                {
                    "id": pa.array([1], pa.int64()),
                    "name": ["a"],
                    "ts": pa.array([0], pa.timestamp("us")),
                }
            ),
            "ts",
            "without loss",
        ),
    ],
)
def test_schema_mismatches_are_refused_naming_the_column(
    tmp_path: Path, data: pa.Table, column: str, message: str
) -> None:
    uri, protocol, metadata = make_table(
        tmp_path, [field("id", "long"), field("name", "string"), field("ts", "timestamp")]
    )
    if "ts" not in data.column_names and column != "ts":
        data = data.append_column(
            "ts", pa.array([None] * data.num_rows, pa.timestamp("us", tz="UTC"))
        )
    error = assert_violation_leaves_table_unchanged(
        tmp_path,
        lambda: write_data(uri, data, protocol=protocol, metadata=metadata),
        SchemaMismatchError,
        column=column,
    )
    assert message in str(error)


def test_lossless_widenings_are_accepted(tmp_path: Path) -> None:
    uri, protocol, metadata = make_table(
        tmp_path, [field("i", "long"), field("f", "double"), field("s", "string")]
    )
    data = pa.table(
        {
            "i": pa.array([1], pa.int8()),
            "f": pa.array([1.5], pa.float32()),
            "s": pa.array(["x"], pa.large_string()),
        }
    )
    (add,) = write_data(uri, data, protocol=protocol, metadata=metadata).adds
    assert stats_of(add)["minValues"] == {"i": 1, "f": 1.5, "s": "x"}


def test_schema_merge_adds_columns_and_timestamp_ntz_upgrades_the_protocol(tmp_path: Path) -> None:
    uri, protocol, metadata = make_table(tmp_path, [field("id", "long")])
    data = pa.table(
        {
            "id": pa.array([1], pa.int64()),
            "at": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5)], pa.timestamp("us")),
        }
    )
    with pytest.raises(SchemaMismatchError):
        write_data(uri, data, protocol=protocol, metadata=metadata)
    result = write_data(uri, data, protocol=protocol, metadata=metadata, schema_mode="merge")
    assert result.metadata is not None and result.protocol is not None
    schema = parse_schema(result.metadata.schema_string or "")
    assert schema.field_names == ["id", "at"]
    assert str(schema.field("at").type) == "timestamp_ntz" and schema.field("at").nullable
    assert "timestampNtz" in (result.protocol.reader_features or [])
    assert "timestampNtz" in (result.protocol.writer_features or [])
    (add,) = result.adds
    assert stats_of(add)["minValues"]["at"] == "2024-01-02T03:04:05.000"
    commit_result(uri, 1, result)
    rows = deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()
    assert rows == [{"id": 1, "at": dt.datetime(2024, 1, 2, 3, 4, 5)}]


def test_schema_overwrite_replaces_the_schema(tmp_path: Path) -> None:
    uri, protocol, metadata = make_table(tmp_path, [field("id", "long"), field("old", "string")])
    data = pa.table({"id": pa.array([1], pa.int64()), "new": [2.5]})
    result = write_data(uri, data, protocol=protocol, metadata=metadata, schema_mode="overwrite")
    assert result.metadata is not None
    assert parse_schema(result.metadata.schema_string or "").field_names == ["id", "new"]


# --- NOT NULL, invariants, CHECK, generated ---------------------------------------------------


def test_not_null_top_level_and_nested(tmp_path: Path) -> None:
    inner = {"type": "struct", "fields": [field("x", "long", nullable=False)]}
    uri, protocol, metadata = make_table(
        tmp_path,
        [
            field("id", "long", nullable=False),
            {"name": "st", "type": inner, "nullable": True, "metadata": {}},
        ],
    )
    st_type = pa.struct([("x", pa.int64())])
    ok = pa.table({"id": [1, 2], "st": pa.array([{"x": 1}, None], st_type)})
    # a null struct hides its non-nullable child (delta-spark's rule)
    assert write_data(uri, ok, protocol=protocol, metadata=metadata).num_rows == 2
    bad_top = pa.table({"id": [1, None], "st": pa.array([None, None], st_type)})
    assert_violation_leaves_table_unchanged(
        tmp_path,
        lambda: write_data(uri, bad_top, protocol=protocol, metadata=metadata),
        DeltaInvariantViolationException,
        constraint="id NOT NULL",
        column="id",
    )
    bad_nested = pa.table({"id": [1], "st": pa.array([{"x": None}], st_type)})
    assert_violation_leaves_table_unchanged(
        tmp_path,
        lambda: write_data(uri, bad_nested, protocol=protocol, metadata=metadata),
        DeltaInvariantViolationException,
        column="st.x",
    )


def test_invariants_reject_false_and_null(tmp_path: Path) -> None:
    rule = json.dumps({"expression": {"expression": "x > 3"}})
    uri, protocol, metadata = make_table(
        tmp_path,
        [field("x", "integer", **{"delta.invariants": rule})],
        protocol=Protocol(minReaderVersion=1, minWriterVersion=2),
    )
    good = pa.table({"x": pa.array([4, 5], pa.int32())})
    assert write_data(uri, good, protocol=protocol, metadata=metadata).num_rows == 2
    for values in ([4, 3], [4, None]):
        bad = pa.table({"x": pa.array(values, pa.int32())})
        error = assert_violation_leaves_table_unchanged(
            tmp_path,
            lambda bad=bad: write_data(uri, bad, protocol=protocol, metadata=metadata),
            DeltaInvariantViolationException,
            constraint="EXPRESSION(x > 3)",
            column="x",
        )
        assert isinstance(error, DeltaInvariantViolationException)
        assert error.values == {"x": values[1]}


def test_check_constraints_reject_false_and_null(tmp_path: Path) -> None:
    uri, protocol, metadata = make_table(
        tmp_path,
        [field("birth", "date"), field("name", "string")],
        configuration={"delta.constraints.birthDateCheck": "birth > '1900-01-01'"},
    )
    good = pa.table({"birth": [dt.date(1950, 1, 1)], "name": ["a"]})
    result = write_data(uri, good, protocol=protocol, metadata=metadata)
    commit_result(uri, 1, result)
    for value in (dt.date(1850, 1, 1), None):
        bad = pa.table({"birth": [dt.date(1990, 1, 1), value], "name": ["b", "c"]})
        error = assert_violation_leaves_table_unchanged(
            tmp_path,
            lambda bad=bad: write_data(uri, bad, protocol=protocol, metadata=metadata),
            DeltaInvariantViolationException,
            constraint="birthDateCheck",
        )
        assert "birth" in str(error) and "row 1" in str(error)
    assert deltalake.DeltaTable(uri).to_pyarrow_table().num_rows == 1


def test_a_streamed_write_deletes_its_files_when_a_later_batch_fails(tmp_path: Path) -> None:
    uri, protocol, metadata = make_table(
        tmp_path,
        [field("k", "string"), field("x", "long")],
        partition_by=["k"],
        configuration={"delta.constraints.positive": "x > 0"},
    )
    schema = pa.schema([("k", pa.string()), ("x", pa.int64())])
    batches = [
        pa.record_batch({"k": ["a"] * 50, "x": list(range(1, 51))}, schema=schema),
        pa.record_batch({"k": ["b"], "x": [-1]}, schema=schema),
    ]
    reader = pa.RecordBatchReader.from_batches(schema, batches)
    assert_violation_leaves_table_unchanged(
        tmp_path,
        lambda: write_data(uri, reader, protocol=protocol, metadata=metadata, target_file_size=100),
        DeltaInvariantViolationException,
        constraint="positive",
    )


def test_generated_columns_are_computed_when_absent_and_checked_when_given(tmp_path: Path) -> None:
    uri, protocol, metadata = make_table(
        tmp_path,
        [
            field("ts", "timestamp"),
            field("day", "date", **{"delta.generationExpression": "CAST(ts AS DATE)"}),
            field("yr", "integer", **{"delta.generationExpression": "year(ts)"}),
        ],
        partition_by=["day"],
    )
    ts = pa.array([dt.datetime(2024, 3, 1, 23, 0, tzinfo=UTC), None], pa.timestamp("us", tz="UTC"))
    result = write_data(uri, pa.table({"ts": ts}), protocol=protocol, metadata=metadata)
    assert {a.partition_values["day"] for a in result.adds} == {"2024-03-01", None}
    commit_result(uri, 1, result)
    rows = sorted_rows(deltalake.DeltaTable(uri).to_pyarrow_table(), "yr")
    assert [(r["day"], r["yr"]) for r in rows] == [(dt.date(2024, 3, 1), 2024), (None, None)]

    given = pa.table(
        {"ts": ts, "day": [dt.date(2024, 3, 1), None], "yr": pa.array([2024, None], pa.int32())}
    )
    assert write_data(uri, given, protocol=protocol, metadata=metadata).num_rows == 2
    wrong = pa.table(
        {"ts": ts, "day": [dt.date(2024, 3, 2), None], "yr": pa.array([2024, None], pa.int32())}
    )
    assert_violation_leaves_table_unchanged(
        tmp_path,
        lambda: write_data(uri, wrong, protocol=protocol, metadata=metadata),
        DeltaInvariantViolationException,
        constraint="Generated Column",
        column="day",
    )


def test_column_defaults_fill_absent_columns(tmp_path: Path) -> None:
    protocol = Protocol(
        minReaderVersion=1, minWriterVersion=7, writerFeatures=["allowColumnDefaults"]
    )
    uri, protocol, metadata = make_table(
        tmp_path,
        [field("id", "long"), field("status", "string", CURRENT_DEFAULT="'new'")],
        protocol=protocol,
    )
    result = write_data(
        uri, pa.table({"id": pa.array([1], pa.int64())}), protocol=protocol, metadata=metadata
    )
    explicit = pa.table({"id": pa.array([2], pa.int64()), "status": pa.array([None], pa.string())})
    second = write_data(uri, explicit, protocol=protocol, metadata=metadata)
    commit_result(uri, 1, result)
    commit_result(uri, 2, second)
    rows = sorted_rows(deltalake.DeltaTable(uri).to_pyarrow_table(), "id")
    assert rows == [{"id": 1, "status": "new"}, {"id": 2, "status": None}]


# --- identity -----------------------------------------------------------------------------


def identity_table(
    path: Path, *, start: int, step: int, explicit: bool = False
) -> tuple[str, Protocol, Metadata]:
    return make_table(
        path,
        [
            field(
                "id",
                "long",
                **{
                    "delta.identity.start": start,
                    "delta.identity.step": step,
                    "delta.identity.allowExplicitInsert": explicit,
                },
            ),
            field("v", "string"),
        ],
        protocol=Protocol(minReaderVersion=1, minWriterVersion=6),
    )


@pytest.mark.parametrize(("start", "step"), [(1, 1), (100, 10), (-5, -3)])
def test_identity_values_continue_from_the_high_water_mark(
    tmp_path: Path, start: int, step: int
) -> None:
    uri, protocol, metadata = identity_table(tmp_path, start=start, step=step)
    first = write_data(uri, pa.table({"v": ["a", "b", "c"]}), protocol=protocol, metadata=metadata)
    assert first.metadata is not None
    mark = parse_schema(first.metadata.schema_string or "").field("id").metadata
    assert mark["delta.identity.highWaterMark"] == start + 2 * step
    commit_result(uri, 1, first)
    second = write_data(
        uri, pa.table({"v": ["d", "e"]}), protocol=protocol, metadata=first.metadata
    )
    assert second.metadata is not None
    mark = parse_schema(second.metadata.schema_string or "").field("id").metadata
    assert mark["delta.identity.highWaterMark"] == start + 4 * step
    commit_result(uri, 2, second)
    rows = deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()
    by_value = {r["v"]: r["id"] for r in rows}
    assert [by_value[v] for v in "abcde"] == [start + k * step for k in range(5)]


def test_identity_refuses_explicit_values_unless_allowed(tmp_path: Path) -> None:
    uri, protocol, metadata = identity_table(tmp_path / "no", start=1, step=1)
    data = pa.table({"id": pa.array([7], pa.int64()), "v": ["x"]})
    assert_violation_leaves_table_unchanged(
        tmp_path / "no",
        lambda: write_data(uri, data, protocol=protocol, metadata=metadata),
        IdentityColumnError,
        column="id",
    )
    uri, protocol, metadata = identity_table(tmp_path / "yes", start=1, step=1, explicit=True)
    result = write_data(uri, data, protocol=protocol, metadata=metadata)
    assert result.metadata is None  # explicit values do not move the mark
    assert stats_of(result.adds[0])["minValues"]["id"] == 7


# --- column mapping -------------------------------------------------------------------------


def test_column_mapped_tables_use_physical_names_and_field_ids(tmp_path: Path) -> None:
    def mapped(name: str, dtype: Any, cid: int, **extra: Any) -> dict[str, Any]:
        metadata = {
            "delta.columnMapping.id": cid,
            "delta.columnMapping.physicalName": f"col-{cid}-{name}",
        }
        return {"name": name, "type": dtype, "nullable": True, "metadata": {**metadata, **extra}}

    inner = {"type": "struct", "fields": [mapped("x", "long", 3)]}
    protocol = Protocol(minReaderVersion=2, minWriterVersion=5)
    uri, protocol, metadata = make_table(
        tmp_path,
        [mapped("id", "long", 1), mapped("st", inner, 2), mapped("part", "string", 4)],
        partition_by=["part"],
        configuration={"delta.columnMapping.mode": "id", "delta.columnMapping.maxColumnId": "4"},
        protocol=protocol,
    )
    data = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "st": pa.array([{"x": 5}, {"x": 6}], pa.struct([("x", pa.int64())])),
            "part": ["p", "p"],
        }
    )
    result = write_data(uri, data, protocol=protocol, metadata=metadata)
    (add,) = result.adds
    assert add.partition_values == {"col-4-part": "p"}
    assert add.path.startswith("col-4-part=p/")
    assert stats_of(add)["minValues"] == {"col-1-id": 1, "col-2-st": {"col-3-x": 5}}
    file_schema = pq.read_schema(tmp_path / add.path)
    assert file_schema.names == ["col-1-id", "col-2-st"]
    assert file_schema.field("col-1-id").metadata[b"PARQUET:field_id"] == b"1"
    commit_result(uri, 1, result)
    rows = sorted_rows(delta_rs_rows(uri), "id")
    assert rows == [{"id": 1, "st": {"x": 5}, "part": "p"}, {"id": 2, "st": {"x": 6}, "part": "p"}]

    more = data.append_column("extra", pa.array([1.0, 2.0]))
    merged = write_data(uri, more, protocol=protocol, metadata=metadata, schema_mode="merge")
    assert merged.metadata is not None
    new = parse_schema(merged.metadata.schema_string or "").field("extra")
    assert new.metadata["delta.columnMapping.id"] == 5
    assert str(new.metadata["delta.columnMapping.physicalName"]).startswith("col-")
    assert merged.metadata.configuration["delta.columnMapping.maxColumnId"] == "5"


# --- features we refuse ----------------------------------------------------------------------


@pytest.mark.parametrize("feature", ["icebergCompatV2", "variantType", "someFutureFeature"])
def test_tables_with_features_we_cannot_honour_are_refused(tmp_path: Path, feature: str) -> None:
    protocol = Protocol(
        minReaderVersion=1, minWriterVersion=7, writerFeatures=["columnMapping", feature]
    )
    metadata = Metadata(
        id="t", schemaString=serialize_schema(from_arrow(pa.schema([("a", pa.int64())])))
    )
    with pytest.raises(UnsupportedTableFeatureException) as info:
        check_writable(protocol, metadata)
    assert feature in str(info.value)
    with pytest.raises(UnsupportedTableFeatureException):
        write_data(str(tmp_path), pa.table({"a": [1]}), protocol=protocol, metadata=metadata)
    assert not any(tmp_path.iterdir())


def test_a_constraint_we_cannot_evaluate_refuses_the_table(tmp_path: Path) -> None:
    _, protocol, metadata = make_table(
        tmp_path, [field("a", "long")], configuration={"delta.constraints.r": "a > rand()"}
    )
    with pytest.raises(UnsupportedExpressionError):
        check_writable(protocol, metadata)


def test_log_written_by_us_parses(tmp_path: Path) -> None:
    uri, protocol, metadata = make_table(tmp_path, [field("a", "long")])
    result = write_data(
        uri, pa.table({"a": pa.array([1], pa.int64())}), protocol=protocol, metadata=metadata
    )
    commit_result(uri, 1, result)
    actions = parse_actions((tmp_path / "_delta_log" / commit_name(1)).read_bytes())
    assert [a.path for a in actions if isinstance(a, AddFile)] == [result.adds[0].path]
