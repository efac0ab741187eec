"""Partition values: spec formats, round trips per type, Hive paths, the vectorized parse."""

from __future__ import annotations

import datetime as dt
import json
import math
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raydelta.protocol.errors import CorruptLogError, SchemaError
from raydelta.protocol.partition_values import (
    HIVE_DEFAULT_PARTITION,
    escape_path_name,
    parse_partition_value,
    partition_path,
    partition_values_from_arrow,
    partition_values_to_arrow,
    serialize_partition_value,
    unescape_path_name,
)
from raydelta.protocol.schema import (
    BINARY,
    BOOLEAN,
    BYTE,
    DATE,
    DOUBLE,
    FLOAT,
    INTEGER,
    LONG,
    SHORT,
    STRING,
    TIMESTAMP,
    TIMESTAMP_NTZ,
    VARIANT,
    ArrayType,
    DataType,
    DecimalType,
    StructField,
    StructType,
    parse_schema,
)

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "delta-spark-golden"
UTC = dt.UTC


# --- the spec's formats ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "dtype", "expected"),
    [
        ("abc", STRING, "abc"),
        ("-128", BYTE, -128),
        ("32767", SHORT, 32767),
        ("-2147483648", INTEGER, -(2**31)),
        ("9223372036854775807", LONG, 2**63 - 1),
        ("1.5", DOUBLE, 1.5),
        ("1.0E10", DOUBLE, 1e10),
        ("true", BOOLEAN, True),
        ("false", BOOLEAN, False),
        ("1970-01-01", DATE, dt.date(1970, 1, 1)),
        ("2021-9-8", DATE, dt.date(2021, 9, 8)),
        ("1970-01-01 00:00:00", TIMESTAMP, dt.datetime(1970, 1, 1, tzinfo=UTC)),
        (
            "1970-01-01 00:00:00.123456",
            TIMESTAMP,
            dt.datetime(1970, 1, 1, 0, 0, 0, 123456, tzinfo=UTC),
        ),
        (
            "1970-01-01T00:00:00.123456Z",
            TIMESTAMP,
            dt.datetime(1970, 1, 1, 0, 0, 0, 123456, tzinfo=UTC),
        ),
        (
            "2000-01-01T00:00:00.000-08:00",
            TIMESTAMP,
            dt.datetime(2000, 1, 1, 8, tzinfo=UTC),
        ),
        ("2020-01-01 08:09:10.001", TIMESTAMP_NTZ, dt.datetime(2020, 1, 1, 8, 9, 10, 1000)),
        ("2013-07-05 17:01:00.123456", TIMESTAMP_NTZ, dt.datetime(2013, 7, 5, 17, 1, 0, 123456)),
        ("\u0001\u0002\u0003", BINARY, b"\x01\x02\x03"),
        ("234.00000", DecimalType(10, 5), Decimal("234.00000")),
        ("-2342342.23423", DecimalType(12, 5), Decimal("-2342342.23423")),
        ("0.00004", DecimalType(6, 5), Decimal("0.00004")),
    ],
)
def test_spec_formats_parse(text: str, dtype: DataType, expected: Any) -> None:
    assert parse_partition_value(text, dtype) == expected


@pytest.mark.parametrize("dtype", [STRING, LONG, DOUBLE, BOOLEAN, DATE, TIMESTAMP, BINARY])
def test_empty_string_and_none_are_null(dtype: DataType) -> None:
    assert parse_partition_value("", dtype) is None
    assert parse_partition_value(None, dtype) is None
    assert serialize_partition_value(None, dtype) is None


def test_empty_string_value_serializes_as_null() -> None:
    assert serialize_partition_value("", STRING) is None
    assert serialize_partition_value(b"", BINARY) is None


def test_java_float_spellings() -> None:
    assert math.isnan(parse_partition_value("NaN", DOUBLE))
    assert parse_partition_value("Infinity", DOUBLE) == math.inf
    assert parse_partition_value("-Infinity", FLOAT) == -math.inf
    assert serialize_partition_value(math.nan, DOUBLE) == "NaN"
    assert serialize_partition_value(-math.inf, FLOAT) == "-Infinity"
    assert serialize_partition_value(0.1, FLOAT) == "0.1"


@pytest.mark.parametrize(
    ("value", "dtype", "expected"),
    [
        (dt.datetime(2024, 1, 1, 10, tzinfo=UTC), TIMESTAMP, "2024-01-01T10:00:00.000000Z"),
        (
            dt.datetime(2024, 1, 1, 11, tzinfo=dt.timezone(dt.timedelta(hours=1))),
            TIMESTAMP,
            "2024-01-01T10:00:00.000000Z",
        ),
        (dt.datetime(2013, 7, 5, 17, 1, 0, 123456), TIMESTAMP_NTZ, "2013-07-05 17:01:00.123456"),
        (dt.datetime(2020, 1, 1, 8, 9, 10, 1000), TIMESTAMP_NTZ, "2020-01-01 08:09:10.001"),
        (dt.datetime(2021, 10, 1, 8, 9, 20), TIMESTAMP_NTZ, "2021-10-01 08:09:20"),
        (dt.date(1, 2, 3), DATE, "0001-02-03"),
        (Decimal("234"), DecimalType(10, 5), "234.00000"),
        (Decimal("1E-7"), DecimalType(10, 8), "0.00000010"),
        (True, BOOLEAN, "true"),
        (-5, BYTE, "-5"),
        (b"\x01\x02", BINARY, "\u0001\u0002"),
    ],
)
def test_canonical_serialization(value: Any, dtype: DataType, expected: str) -> None:
    assert serialize_partition_value(value, dtype) == expected


@pytest.mark.parametrize(
    ("text", "dtype"),
    [
        ("128", BYTE),
        ("1.5", INTEGER),
        ("yes", BOOLEAN),
        ("2021-13-01", DATE),
        ("01/02/2020", DATE),
        ("2020-01-01 25:00:00", TIMESTAMP),
        ("2020-01-01T00:00:00Z", TIMESTAMP_NTZ),
        ("1.234", DecimalType(3, 2)),
        ("abc", DecimalType(3, 2)),
    ],
)
def test_invalid_values_are_corrupt_log_errors(text: str, dtype: DataType) -> None:
    with pytest.raises(CorruptLogError):
        parse_partition_value(text, dtype)


@pytest.mark.parametrize(
    ("value", "dtype"),
    [
        (1, STRING),
        (True, LONG),
        (2**63, LONG),
        (dt.datetime(2020, 1, 1), TIMESTAMP),
        (dt.datetime(2020, 1, 1, tzinfo=UTC), TIMESTAMP_NTZ),
        (dt.datetime(2020, 1, 1), DATE),
        (b"\xff", BINARY),
        (Decimal("1.234"), DecimalType(3, 2)),
        ("x", VARIANT),
        ([1], ArrayType(LONG)),
    ],
)
def test_values_of_the_wrong_type_are_schema_errors(value: Any, dtype: DataType) -> None:
    with pytest.raises(SchemaError):
        serialize_partition_value(value, dtype)


# --- round trips -----------------------------------------------------------------------


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    return bool(a == b) and type(a) is type(b)


def _float32s() -> st.SearchStrategy[float]:
    return st.floats(width=32)


def _decimal_cases() -> st.SearchStrategy[tuple[Decimal, DataType]]:
    def build(precision: int) -> st.SearchStrategy[tuple[Decimal, DataType]]:
        return st.tuples(
            st.integers(-(10**precision) + 1, 10**precision - 1), st.integers(0, precision)
        ).map(lambda t: (Decimal(f"{t[0]}E-{t[1]}"), DecimalType(precision, t[1])))

    return st.integers(1, 38).flatmap(build)


_CASES: st.SearchStrategy[tuple[Any, DataType]] = st.one_of(
    st.tuples(st.text(min_size=1), st.just(STRING)),
    st.tuples(st.integers(-(2**7), 2**7 - 1), st.just(BYTE)),
    st.tuples(st.integers(-(2**15), 2**15 - 1), st.just(SHORT)),
    st.tuples(st.integers(-(2**31), 2**31 - 1), st.just(INTEGER)),
    st.tuples(st.integers(-(2**63), 2**63 - 1), st.just(LONG)),
    st.tuples(_float32s(), st.just(FLOAT)),
    st.tuples(st.floats(), st.just(DOUBLE)),
    st.tuples(st.booleans(), st.just(BOOLEAN)),
    st.tuples(st.dates(), st.just(DATE)),
    st.tuples(st.datetimes(timezones=st.just(UTC)), st.just(TIMESTAMP)),
    st.tuples(st.datetimes(), st.just(TIMESTAMP_NTZ)),
    st.tuples(st.text(min_size=1).map(lambda s: s.encode("utf-8")), st.just(BINARY)),
    _decimal_cases(),
)


@settings(max_examples=200, deadline=None)
@given(_CASES)
def test_serialize_then_parse_round_trips(case: tuple[Any, DataType]) -> None:
    value, dtype = case
    text = serialize_partition_value(value, dtype)
    assert text is not None and text != ""
    back = parse_partition_value(text, dtype)
    assert _same(back, value), (value, text, back)
    # The canonical text is a fixed point.
    assert serialize_partition_value(back, dtype) == text


@settings(max_examples=100, deadline=None)
@given(
    st.datetimes(
        timezones=st.sampled_from([dt.timezone(dt.timedelta(hours=h)) for h in (-8, 0, 5)])
    )
)
def test_aware_timestamps_serialize_as_the_same_instant(value: dt.datetime) -> None:
    text = serialize_partition_value(value, TIMESTAMP)
    assert text is not None and text.endswith("Z")
    assert parse_partition_value(text, TIMESTAMP) == value


# --- Hive paths -------------------------------------------------------------------------


def test_partition_path_examples() -> None:
    assert (
        partition_path({"date": "2024-01-01", "region": "x/y"}, ["date", "region"])
        == "date=2024-01-01/region=x%2Fy"
    )
    assert partition_path({"p": None}, ["p"]) == f"p={HIVE_DEFAULT_PARTITION}"
    assert partition_path({"p": ""}, ["p"]) == f"p={HIVE_DEFAULT_PARTITION}"
    assert partition_path({}, ["p"]) == f"p={HIVE_DEFAULT_PARTITION}"
    assert partition_path({"a=b": "c:d"}, ["a=b"]) == "a%3Db=c%3Ad"
    assert escape_path_name("\"#%'*/:=?\\\x7f{[]^\x01 é") == (
        "%22%23%25%27%2A%2F%3A%3D%3F%5C%7F%7B%5B%5D%5E%01 é"
    )
    assert partition_path({}, []) == ""


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_escaping_round_trips_and_leaves_no_separators(text: str) -> None:
    escaped = escape_path_name(text)
    assert unescape_path_name(escaped) == text
    assert "/" not in escaped and "=" not in escaped and ":" not in escaped


def test_partition_paths_match_the_golden_directories() -> None:
    """The directory of each golden add (URI-decoded once) is the Hive path we build."""
    if not GOLDEN.is_dir():
        pytest.skip("golden tables not present")
    checked = 0
    for log in sorted(GOLDEN.rglob("_delta_log")):
        # This table's directories use the other timestamp form than its values.
        if log.parent.name == "kernel-timestamp-partition-col-ISO8601":
            continue
        columns: list[str] | None = None
        for path in sorted(log.glob("*.json")):
            for line in path.read_text().splitlines():
                action = json.loads(line) if line.strip() else {}
                if "metaData" in action:
                    columns = action["metaData"].get("partitionColumns")
                add = action.get("add")
                if not add or not add["partitionValues"] or columns is None:
                    continue
                if any(key.startswith("col-") for key in add["partitionValues"]):
                    continue  # column-mapped tables use random prefixes, not Hive dirs
                directory = unquote(add["path"]).rsplit("/", 1)[0]
                assert directory.endswith(partition_path(add["partitionValues"], columns))
                checked += 1
    assert checked > 50


# --- vectorized ------------------------------------------------------------------------------


ALL_TYPES = StructType(
    (
        StructField("s", STRING),
        StructField("i", INTEGER),
        StructField("d", DATE),
        StructField("ts", TIMESTAMP),
        StructField("ntz", TIMESTAMP_NTZ),
        StructField("dec", DecimalType(10, 2)),
        StructField("b", BOOLEAN),
        StructField("data", LONG),
    )
)
PARTS = ["s", "i", "d", "ts", "ntz", "dec", "b"]


def test_partition_values_to_arrow_from_dicts_and_maps_agree() -> None:
    rows: list[dict[str, str | None] | None] = [
        {
            "s": "x",
            "i": "1",
            "d": "2024-01-01",
            "ts": "2024-01-01T10:00:00.000000Z",
            "ntz": "2024-01-01 10:00:00",
            "dec": "1.50",
            "b": "true",
        },
        {
            "s": "",
            "i": None,
            "d": "2024-01-02",
            "ts": "2024-01-01 10:00:00",
            "ntz": None,
            "dec": None,
            "b": "false",
        },
        {"s": "x", "i": "1"},
        None,
    ]
    from_dicts = partition_values_to_arrow(rows, ALL_TYPES, PARTS)
    assert [f.name for f in from_dicts.type] == PARTS
    expected_first = {
        "s": "x",
        "i": 1,
        "d": dt.date(2024, 1, 1),
        "ts": dt.datetime(2024, 1, 1, 10, tzinfo=UTC),
        "ntz": dt.datetime(2024, 1, 1, 10),
        "dec": Decimal("1.50"),
        "b": True,
    }
    as_rows = from_dicts.to_pylist()
    assert as_rows[0] == expected_first
    assert as_rows[1]["s"] is None and as_rows[1]["i"] is None
    assert as_rows[1]["ts"] == dt.datetime(2024, 1, 1, 10, tzinfo=UTC)
    assert as_rows[2]["d"] is None
    assert all(v is None for v in as_rows[3].values())
    map_type = pa.map_(pa.string(), pa.string())
    maps = pa.array([None if r is None else list(r.items()) for r in rows], map_type)
    assert partition_values_to_arrow(maps, ALL_TYPES, PARTS).equals(from_dicts)
    assert partition_values_to_arrow(pa.chunked_array([maps]), ALL_TYPES, PARTS).equals(from_dicts)
    back = partition_values_from_arrow(from_dicts, ALL_TYPES, PARTS)
    assert back[0] == {
        "s": "x",
        "i": "1",
        "d": "2024-01-01",
        "ts": "2024-01-01T10:00:00.000000Z",
        "ntz": "2024-01-01 10:00:00",
        "dec": "1.50",
        "b": "true",
    }


def test_partition_values_to_arrow_edge_shapes() -> None:
    empty = partition_values_to_arrow([], ALL_TYPES, PARTS)
    assert len(empty) == 0 and empty.type.num_fields == len(PARTS)
    none = partition_values_to_arrow([{}, {}], ALL_TYPES, [])
    assert len(none) == 2 and none.type.num_fields == 0
    with pytest.raises(SchemaError):
        partition_values_to_arrow([{}], ALL_TYPES, ["missing"])


def test_column_mapped_names() -> None:
    schema = StructType(
        (
            StructField(
                "part",
                INTEGER,
                True,
                {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-p"},
            ),
        )
    )
    rows: list[dict[str, str | None] | None] = [{"col-p": "7"}]
    physical = partition_values_to_arrow(rows, schema, ["part"], column_mapping_mode="name")
    assert physical.to_pylist() == [{"col-p": 7}]
    logical = partition_values_to_arrow(
        rows, schema, ["part"], column_mapping_mode="name", physical_names=False
    )
    assert logical.to_pylist() == [{"part": 7}]


def _golden_checkpoints_with_parsed_partitions() -> list[Path]:
    if not GOLDEN.is_dir():
        return []
    found = []
    for path in sorted(GOLDEN.rglob("*.checkpoint.parquet")):
        add_type = pq.read_schema(path).field("add").type
        if add_type.get_field_index("partitionValues_parsed") >= 0:
            found.append(path)
    return found


@pytest.mark.parametrize(
    "checkpoint",
    _golden_checkpoints_with_parsed_partitions(),
    ids=lambda p: p.parent.parent.name,
)
def test_matches_delta_spark_partition_values_parsed(checkpoint: Path) -> None:
    table = pq.read_table(checkpoint)
    metadata = next(m for m in table.column("metaData").to_pylist() if m)
    mode = dict(metadata["configuration"]).get("delta.columnMapping.mode", "none")
    schema = parse_schema(metadata["schemaString"])
    adds = table.column("add").combine_chunks()
    adds = adds.filter(pc.is_valid(adds))
    ours = partition_values_to_arrow(
        adds.field("partitionValues"),
        schema,
        metadata["partitionColumns"],
        column_mapping_mode=mode,
    )
    assert ours.equals(adds.field("partitionValues_parsed"))
    # And back to the log's strings.
    strings = partition_values_from_arrow(
        adds.field("partitionValues_parsed"),
        schema,
        metadata["partitionColumns"],
        column_mapping_mode=mode,
    )
    assert strings == [dict(m) for m in adds.field("partitionValues").to_pylist()]
