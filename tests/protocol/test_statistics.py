"""Per-file statistics: tolerant parsing, the stats_parsed schema, JSON <-> Arrow."""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raydelta.protocol.actions import AddFile
from raydelta.protocol.schema import (
    BINARY,
    BOOLEAN,
    DATE,
    DOUBLE,
    FLOAT,
    INTEGER,
    LONG,
    STRING,
    TIMESTAMP,
    TIMESTAMP_NTZ,
    VARIANT,
    ArrayType,
    DecimalType,
    MapType,
    StructField,
    StructType,
    parse_schema,
)
from raydelta.protocol.statistics import (
    FileStatistics,
    num_records_of,
    parse_stats,
    stats_from_arrow,
    stats_schema,
    stats_to_arrow,
)

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "delta-spark-golden"
UTC = dt.UTC


# --- FileStatistics ------------------------------------------------------------------------


def test_parse_stats_keeps_everything() -> None:
    text = json.dumps(
        {
            "numRecords": 3,
            "minValues": {"a": 1, "s": {"x": "p"}},
            "maxValues": {"a": 9, "s": {"x": "q"}},
            "nullCount": {"a": 0, "s": {"x": 2}},
            "tightBounds": False,
            "futureStat": {"k": [1]},
        }
    )
    stats = parse_stats(text)
    assert stats is not None
    assert stats.num_records == 3
    assert not stats.bounds_are_tight
    assert stats.min_value(["a"]) == 1
    assert stats.max_value(["s", "x"]) == "q"
    assert stats.null_count_of(["s", "x"]) == 2
    assert stats.min_value(["s"]) is None  # a struct is not a value
    assert stats.min_value(["missing", "x"]) is None
    assert json.loads(stats.to_json()) == json.loads(text)


def test_tight_bounds_default_to_true() -> None:
    stats = parse_stats('{"numRecords": 1}')
    assert stats is not None and stats.bounds_are_tight
    assert stats.min_values is None


@pytest.mark.parametrize(
    "text", [None, "", "not json", "[1, 2]", "42", '{"numRecords": "many"}', '{"minValues": 3}']
)
def test_unreadable_stats_are_none(text: str | None) -> None:
    assert parse_stats(text) is None


def test_file_statistics_is_frozen() -> None:
    stats = FileStatistics(numRecords=1)
    with pytest.raises(ValueError):
        stats.num_records = 2


# --- stats schema ---------------------------------------------------------------------------


TABLE = StructType(
    (
        StructField("id", LONG),
        StructField("name", STRING),
        StructField("flag", BOOLEAN),
        StructField("blob", BINARY),
        StructField("amount", DecimalType(10, 2)),
        StructField("when", TIMESTAMP),
        StructField("local", TIMESTAMP_NTZ),
        StructField("day", DATE),
        StructField("ratio", FLOAT),
        StructField("tags", ArrayType(STRING)),
        StructField("attrs", MapType(STRING, STRING)),
        StructField("v", VARIANT),
        StructField(
            "nested",
            StructType((StructField("x", INTEGER), StructField("ok", BOOLEAN))),
        ),
        StructField("only_bools", StructType((StructField("b", BOOLEAN),))),
        StructField("part", STRING),
    )
)


def _names(struct_type: pa.DataType) -> list[str]:
    return [struct_type.field(i).name for i in range(struct_type.num_fields)]


def test_stats_schema_follows_delta_collection_rules() -> None:
    schema = stats_schema(TABLE, partition_columns=["part"])
    assert _names(schema) == ["numRecords", "minValues", "maxValues", "nullCount", "tightBounds"]
    min_values = schema.field("minValues").type
    assert schema.field("maxValues").type == min_values
    assert _names(min_values) == [
        "id",
        "name",
        "amount",
        "when",
        "local",
        "day",
        "ratio",
        "nested",
    ]
    assert min_values.field("amount").type == pa.decimal128(10, 2)
    assert min_values.field("when").type == pa.timestamp("us", tz="UTC")
    assert min_values.field("local").type == pa.timestamp("us")
    assert _names(min_values.field("nested").type) == ["x"]
    null_count = schema.field("nullCount").type
    assert _names(null_count) == [f.name for f in TABLE.fields if f.name != "part"]
    assert null_count.field("tags").type == pa.int64()
    assert null_count.field("nested").type == pa.struct(
        [pa.field("x", pa.int64()), pa.field("ok", pa.int64())]
    )
    assert schema.field("numRecords").type == pa.int64()
    assert schema.field("tightBounds").type == pa.bool_()


def test_stats_schema_without_min_max_columns_omits_them() -> None:
    schema = stats_schema(StructType((StructField("b", BOOLEAN),)))
    assert _names(schema) == ["numRecords", "nullCount", "tightBounds"]
    empty = stats_schema(StructType())
    assert _names(empty) == ["numRecords", "tightBounds"]


def test_stats_schema_uses_physical_names_and_indexed_column_limit() -> None:
    def mapped(name: str, cid: int) -> StructField:
        return StructField(
            name,
            LONG,
            True,
            {"delta.columnMapping.id": cid, "delta.columnMapping.physicalName": f"col-{cid}"},
        )

    schema = StructType((mapped("a", 1), mapped("b", 2), mapped("c", 3)))
    assert _names(stats_schema(schema).field("minValues").type) == ["col-1", "col-2", "col-3"]
    assert _names(stats_schema(schema, physical=False).field("minValues").type) == ["a", "b", "c"]
    limited = stats_schema(schema, num_indexed_cols=2)
    assert _names(limited.field("nullCount").type) == ["col-1", "col-2"]
    assert _names(stats_schema(schema, num_indexed_cols=0)) == ["numRecords", "tightBounds"]
    # Leaves are counted depth first through structs.
    nested = StructType(
        (
            StructField("s", StructType((StructField("x", LONG), StructField("y", LONG)))),
            StructField("z", LONG),
        )
    )
    two = stats_schema(nested, physical=False, num_indexed_cols=2).field("nullCount").type
    assert _names(two) == ["s"] and _names(two.field("s").type) == ["x", "y"]


# --- JSON <-> Arrow --------------------------------------------------------------------------


def test_stats_to_arrow_converts_every_type() -> None:
    schema = stats_schema(TABLE, partition_columns=["part"])
    text = json.dumps(
        {
            "numRecords": 2,
            "minValues": {
                "id": 1,
                "name": "a",
                "amount": 1.5,
                "when": "2000-01-01T00:00:00.000-08:00",
                "local": "2021-11-18T02:30:00.123",
                "day": "2000-01-01",
                "ratio": 0.234,
                "nested": {"x": -3},
                "unknownColumn": 5,
            },
            "maxValues": {"when": "1970-02-23T22:48:01.077Z", "ratio": "NaN"},
            "nullCount": {"tags": 2, "nested": {"x": 0, "ok": 1}},
            "tightBounds": True,
        }
    )
    rows = stats_to_arrow([text, None, "garbage"], schema).to_pylist()
    first = rows[0]
    assert first["numRecords"] == 2
    mins = first["minValues"]
    assert mins["id"] == 1 and mins["name"] == "a"
    assert mins["amount"] == Decimal("1.50")
    assert mins["when"] == dt.datetime(2000, 1, 1, 8, tzinfo=UTC)
    assert mins["local"] == dt.datetime(2021, 11, 18, 2, 30, 0, 123000)
    assert mins["day"] == dt.date(2000, 1, 1)
    assert mins["ratio"] == pytest.approx(0.234)
    assert mins["nested"] == {"x": -3}
    assert first["maxValues"]["when"] == dt.datetime(1970, 2, 23, 22, 48, 1, 77000, tzinfo=UTC)
    assert math.isnan(first["maxValues"]["ratio"])
    assert first["nullCount"]["nested"] == {"x": 0, "ok": 1}
    assert first["tightBounds"] is True
    assert rows[1] is None and rows[2] is None


def test_values_that_do_not_fit_become_null() -> None:
    table = StructType(
        (
            StructField("small", INTEGER),
            StructField("dec", DecimalType(4, 1)),
            StructField("ntz", TIMESTAMP_NTZ),
            StructField("d", DOUBLE),
        )
    )
    schema = stats_schema(table)
    text = json.dumps(
        {
            "minValues": {
                "small": 2**40,
                "dec": 1.25,
                "ntz": "2024-09-09",  # an older date value after widening to timestamp_ntz
                "d": True,
            },
            "maxValues": {"small": "7", "dec": 99999, "ntz": 3, "d": 4},
        }
    )
    row = stats_to_arrow([text], schema).to_pylist()[0]
    assert row["minValues"] == {
        "small": None,
        "dec": None,
        "ntz": dt.datetime(2024, 9, 9),
        "d": None,
    }
    assert row["maxValues"] == {"small": None, "dec": None, "ntz": None, "d": 4.0}


def test_decimals_keep_every_digit() -> None:
    schema = stats_schema(StructType((StructField("d", DecimalType(38, 18)),)))
    text = '{"minValues":{"d":12345678901234567890.123456789012345678}}'
    row = stats_to_arrow([text], schema).to_pylist()[0]
    assert row["minValues"]["d"] == Decimal("12345678901234567890.123456789012345678")
    assert stats_from_arrow(stats_to_arrow([text], schema)) == [text]


def test_stats_from_arrow_writes_canonical_json() -> None:
    schema = stats_schema(TABLE, partition_columns=["part"])
    source = json.dumps(
        {
            "numRecords": 2,
            "minValues": {
                "when": "2000-01-01T00:00:00.000-08:00",
                "local": "2021-11-18T02:30:00.123456",
                "ratio": 0.234,
                "amount": 12.3,
            },
            "maxValues": {"ratio": "-Infinity"},
            "nullCount": {"nested": {"x": 0}},
        }
    )
    (text,) = stats_from_arrow(stats_to_arrow([source], schema))
    assert text is not None
    assert json.loads(text) == {
        "numRecords": 2,
        "minValues": {
            "amount": 12.30,
            "when": "2000-01-01T08:00:00.000Z",
            "local": "2021-11-18T02:30:00.123456",
            "ratio": 0.234,
        },
        "maxValues": {"ratio": "-Infinity"},
        "nullCount": {"nested": {"x": 0}},
    }
    assert '"amount":12.30' in text  # decimals keep their scale, never float noise
    assert stats_from_arrow(pa.array([None, {}], schema)) == [None, None]


def _stats_documents(schema: pa.StructType) -> st.SearchStrategy[dict[str, Any]]:
    def value(arrow_type: pa.DataType) -> st.SearchStrategy[Any]:
        if pa.types.is_struct(arrow_type):
            return st.fixed_dictionaries(
                {},
                optional={
                    arrow_type.field(i).name: value(arrow_type.field(i).type)
                    for i in range(arrow_type.num_fields)
                },
            )
        if pa.types.is_int64(arrow_type):
            return st.integers(-(2**63), 2**63 - 1)
        if pa.types.is_int32(arrow_type):
            return st.integers(-(2**31), 2**31 - 1)
        if pa.types.is_float32(arrow_type):
            return st.floats(width=32, allow_nan=False, allow_infinity=False)
        if pa.types.is_decimal(arrow_type):
            return st.integers(-(10**10) + 1, 10**10 - 1).map(lambda n: Decimal(f"{n}E-2"))
        if pa.types.is_timestamp(arrow_type):
            dates = st.datetimes(
                min_value=dt.datetime(1000, 1, 1), max_value=dt.datetime(9999, 1, 1)
            )
            if arrow_type.tz is not None:
                return dates.map(lambda d: d.replace(tzinfo=UTC).isoformat())
            return dates.map(lambda d: d.isoformat(timespec="microseconds"))
        if pa.types.is_date32(arrow_type):
            return st.dates().map(lambda d: d.isoformat())
        if pa.types.is_string(arrow_type):
            return st.text(max_size=8)
        if pa.types.is_boolean(arrow_type):
            return st.booleans()
        raise AssertionError(arrow_type)

    return value(schema)


_SCHEMA = stats_schema(TABLE, partition_columns=["part"])


@settings(max_examples=150, deadline=None)
@given(_stats_documents(_SCHEMA))
def test_json_arrow_json_round_trip(document: dict[str, Any]) -> None:
    text = json.dumps(document, default=str)
    typed = stats_to_arrow([text], _SCHEMA)
    back = stats_from_arrow(typed)
    again = stats_to_arrow(back, _SCHEMA)
    # No information is lost (a struct of nulls and a null struct say the same).
    assert _informative(again.to_pylist()) == _informative(typed.to_pylist())
    assert stats_from_arrow(again) == back


def _informative(value: Any) -> Any:
    """``value`` with every struct that holds only nulls replaced by None."""
    if isinstance(value, list):
        return [_informative(v) for v in value]
    if isinstance(value, dict):
        kept = {k: _informative(v) for k, v in value.items()}
        return kept if any(v is not None for v in kept.values()) else None
    return value


# --- golden tables ------------------------------------------------------------------------


def _golden_stats() -> Iterator[tuple[str, dict[str, Any], list[str]]]:
    if not GOLDEN.is_dir():
        return
    for log in sorted(GOLDEN.rglob("_delta_log")):
        metadata: dict[str, Any] | None = None
        stats: list[str] = []
        for path in sorted(log.glob("*.json")):
            for line in path.read_text().splitlines():
                action = json.loads(line) if line.strip() else {}
                if action.get("metaData", {}).get("schemaString"):
                    metadata = action["metaData"]
                if (action.get("add") or {}).get("stats"):
                    stats.append(action["add"]["stats"])
        if metadata and stats:
            yield str(log.parent.relative_to(GOLDEN)), metadata, stats


GOLDEN_STATS = list(_golden_stats())


def _leaves(
    tree: dict[str, Any], prefix: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Any]]:
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _leaves(value, (*prefix, key))
        else:
            yield (*prefix, key), value


@pytest.mark.parametrize(
    ("table", "metadata", "stats"), GOLDEN_STATS, ids=[t for t, _, _ in GOLDEN_STATS]
)
def test_golden_stats_fit_the_schema_and_round_trip(
    table: str, metadata: dict[str, Any], stats: list[str]
) -> None:
    schema = stats_schema(
        parse_schema(metadata["schemaString"]), partition_columns=metadata["partitionColumns"]
    )
    typed = stats_to_arrow(stats, schema)
    for text, row in zip(stats, typed.to_pylist(), strict=True):
        document = json.loads(text)
        for key in ("minValues", "maxValues", "nullCount"):
            for path, value in _leaves(document.get(key) or {}):
                node: Any = row.get(key)
                for part in path:
                    assert isinstance(node, dict) and part in node, (key, path)
                    node = node[part]
                # delta-spark collected it, so our schema has it, and it converted.
                assert (node is None) == (value is None), (key, path, value)
        assert row["numRecords"] == document.get("numRecords")
    back = stats_from_arrow(typed)
    assert _informative(stats_to_arrow(back, schema).to_pylist()) == _informative(typed.to_pylist())


def test_float_formatting_keeps_sign_and_floatness() -> None:
    schema = stats_schema(StructType((StructField("d", DOUBLE), StructField("f", FLOAT))))
    source = '{"minValues":{"d":-0.0,"f":3.0},"maxValues":{"d":1e+20,"f":0.1}}'
    (text,) = stats_from_arrow(stats_to_arrow([source], schema))
    assert text == source
    row = stats_to_arrow([text], schema).to_pylist()[0]
    assert math.copysign(1.0, row["minValues"]["d"]) == -1.0


# --- num_records_of: the one numRecords reader (AddFile.num_records, DML, the CLI) ---


def _num_records_as_before(stats: str | None) -> int | None:
    """The copy that AddFile.num_records, raydelta/dml/operations.py and
    raydelta/cli/app.py each held before they shared num_records_of."""
    if not stats:
        return None
    try:
        value = json.loads(stats).get("numRecords")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, int) else None


@pytest.mark.parametrize(
    "stats",
    [
        None,
        "",
        '{"numRecords":7}',
        '{"numRecords":0,"minValues":{}}',
        '{"numRecords":-3}',
        '{"numRecords":7.0}',
        '{"numRecords":"7"}',
        '{"numRecords":null}',
        '{"numRecords":true}',
        '{"numRecords":123456789012345678901234567890}',
        '{"minValues":{"a":1}}',
        "{}",
        "[]",
        "[1]",
        "7",
        '"text"',
        "null",
        "not json",
        '{"numRecords":',
        '{"numRecords":NaN}',
        '{"numRecords":1,"numRecords":2}',
    ],
)
def test_num_records_of_reads_as_the_three_copies_did(stats: str | None) -> None:
    expected = _num_records_as_before(stats)
    assert num_records_of(stats) == expected
    assert type(num_records_of(stats)) is type(expected)
    add = AddFile(path="a", size=1, modificationTime=1, stats=stats)
    assert add.num_records == expected
