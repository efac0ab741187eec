"""Schema parse/serialize (lossless on every golden table), column mapping, Arrow mapping."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raydelta.protocol.errors import SchemaError
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
    VOID,
    ArrayType,
    ColumnMappingMode,
    DataType,
    DecimalType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
    UnknownType,
    assign_column_mapping,
    column_id,
    contains_type,
    max_column_id,
    parse_schema,
    physical_name,
    serialize_schema,
    to_physical,
    walk_fields,
)
from raydelta.protocol.schema_arrow import data_type_from_arrow, from_arrow, to_arrow

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "delta-spark-golden"


def _golden_schema_strings() -> list[tuple[str, str, dict[str, str]]]:
    """(source, schemaString, configuration) of every metaData action in every golden log."""
    found: list[tuple[str, str, dict[str, str]]] = []
    if not GOLDEN.is_dir():
        return found
    for log in sorted(GOLDEN.rglob("_delta_log")):
        for path in sorted(log.glob("*.json")):
            for line in path.read_text().splitlines():
                if '"metaData"' not in line:
                    continue
                body = json.loads(line).get("metaData") or {}
                if body.get("schemaString"):
                    source = str(path.relative_to(GOLDEN))
                    found.append((source, body["schemaString"], body.get("configuration") or {}))
        for path in sorted(log.rglob("*.parquet")):
            table = pq.read_table(path)
            if "metaData" not in table.schema.names:
                continue
            for body in table.column("metaData").to_pylist():
                if body and body.get("schemaString"):
                    config = dict(body.get("configuration") or [])
                    source = str(path.relative_to(GOLDEN))
                    found.append((source, body["schemaString"], config))
    return found


GOLDEN_SCHEMAS = _golden_schema_strings()


def test_golden_tables_were_found() -> None:
    if not GOLDEN.is_dir():
        pytest.skip("golden tables not present")
    assert len(GOLDEN_SCHEMAS) > 90
    assert any(source.endswith(".parquet") for source, _, _ in GOLDEN_SCHEMAS)


@pytest.mark.parametrize(
    ("source", "schema_string"),
    [(source, text) for source, text, _ in GOLDEN_SCHEMAS],
    ids=[source for source, _, _ in GOLDEN_SCHEMAS],
)
def test_golden_schema_round_trip_is_lossless(source: str, schema_string: str) -> None:
    schema = parse_schema(schema_string)
    assert json.loads(serialize_schema(schema)) == json.loads(schema_string)
    # Every golden type maps to Arrow, logically and physically.
    assert len(to_arrow(schema)) == len(schema)
    assert len(to_arrow(schema, physical=True)) == len(schema)


def test_golden_max_column_id_matches_the_table_property() -> None:
    checked = 0
    for _source, text, config in GOLDEN_SCHEMAS:
        recorded = config.get("delta.columnMapping.maxColumnId")
        if recorded is None:
            continue
        # Dropped columns may leave the property above the schema's maximum.
        assert max_column_id(parse_schema(text)) <= int(recorded)
        checked += 1
    if GOLDEN.is_dir():
        assert checked > 0
        iceberg = [t for s, t, _ in GOLDEN_SCHEMAS if "icebegCompatV2" in s]
        # Nested (element/key/value) ids count: the largest is 53 in this table.
        assert max_column_id(parse_schema(iceberg[0])) == 53


SPEC_EXAMPLE = """
{
  "type" : "struct",
  "fields" : [ {"name" : "a", "type" : "integer", "nullable" : false, "metadata" : { }},
  {"name" : "b", "type" : {"type" : "struct", "fields" : [
      {"name" : "d", "type" : "integer", "nullable" : false, "metadata" : { }} ]},
    "nullable" : true, "metadata" : { }},
  {"name" : "c", "type" : {"type" : "array", "elementType" : "integer", "containsNull" : false},
    "nullable" : true, "metadata" : { }},
  {"name" : "e", "type" : {"type" : "array", "elementType" : {"type" : "struct", "fields" : [
      {"name" : "d", "type" : "integer", "nullable" : false, "metadata" : { }} ]},
      "containsNull" : true},
    "nullable" : true, "metadata" : { }},
  {"name" : "f", "type" : {"type" : "map", "keyType" : "string", "valueType" : "string",
      "valueContainsNull" : true},
    "nullable" : true, "metadata" : { }} ]
}
"""


def test_spec_example_parses_into_the_types_it_describes() -> None:
    schema = parse_schema(SPEC_EXAMPLE)
    assert schema.field_names == ["a", "b", "c", "e", "f"]
    assert schema.field("a") == StructField("a", INTEGER, False, {})
    assert schema.field("b").type == StructType((StructField("d", INTEGER, False),))
    assert schema.field("c").type == ArrayType(INTEGER, contains_null=False)
    element = schema.field("e").type
    assert isinstance(element, ArrayType) and isinstance(element.element_type, StructType)
    assert schema.field("f").type == MapType(STRING, STRING, value_contains_null=True)
    assert schema.field_at(["b", "d"]).type == INTEGER
    assert json.loads(serialize_schema(schema)) == json.loads(SPEC_EXAMPLE)


def test_unknown_types_and_extra_keys_survive() -> None:
    raw = {
        "type": "struct",
        "fields": [
            {
                "name": "u",
                "type": {"type": "udt", "class": "x.Point", "sqlType": {"type": "array"}},
                "nullable": True,
                "metadata": {"__COLLATIONS": {"u": "spark.UTF8_LCASE"}},
            },
            {"name": "i", "type": "interval day to second", "nullable": True, "metadata": {}},
            {
                "name": "m",
                "type": {
                    "type": "map",
                    "keyType": "string",
                    "valueType": "long",
                    "valueContainsNull": False,
                    "futureKey": [1, 2],
                },
                "nullable": True,
                "metadata": {
                    "delta.typeChanges": [{"toType": "long", "fromType": "integer"}],
                },
                "fieldExtra": {"a": None},
            },
        ],
        "structExtra": True,
    }
    schema = parse_schema(json.dumps(raw))
    assert isinstance(schema.field("u").type, UnknownType)
    assert schema.field("i").type == UnknownType("interval day to second")
    assert schema.field("m").extra == {"fieldExtra": {"a": None}}
    assert json.loads(serialize_schema(schema)) == raw
    with pytest.raises(SchemaError):
        to_arrow(schema)


def test_missing_nullable_and_metadata_take_spark_defaults() -> None:
    schema = parse_schema('{"type":"struct","fields":[{"name":"a","type":"long"}]}')
    assert schema.field("a") == StructField("a", LONG, True, {})
    assert json.loads(serialize_schema(schema))["fields"][0] == {
        "name": "a",
        "type": "long",
        "nullable": True,
        "metadata": {},
    }


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        '"long"',
        '{"type":"struct"}',
        '{"type":"struct","fields":[{"type":"long"}]}',
        '{"type":"struct","fields":[{"name":"a"}]}',
        '{"type":"struct","fields":[{"name":"a","type":"long","nullable":"yes"}]}',
        '{"type":"struct","fields":[{"name":"a","type":{"type":"array"}}]}',
        '{"type":"struct","fields":[{"name":"a","type":"decimal(39,0)"}]}',
        '{"type":"struct","fields":[{"name":"a","type":"decimal(5,6)"}]}',
    ],
)
def test_invalid_schemas_raise_schema_error(text: str) -> None:
    with pytest.raises(SchemaError):
        parse_schema(text)


def test_decimal_bounds_and_spelling() -> None:
    assert DecimalType(1, 0).name == "decimal(1,0)"
    assert DecimalType(38, 38).name == "decimal(38,38)"
    for precision, scale in [(0, 0), (39, 0), (10, -1), (10, 11)]:
        with pytest.raises(SchemaError):
            DecimalType(precision, scale)
    spaced = parse_schema('{"type":"struct","fields":[{"name":"d","type":"decimal(10, 2)"}]}')
    assert spaced.field("d").type == DecimalType(10, 2)
    with pytest.raises(SchemaError):
        PrimitiveType("int")


def test_field_lookup() -> None:
    schema = StructType((StructField("Id", LONG), StructField("name", STRING)))
    assert schema.get("id") is None
    assert schema.get("id", case_sensitive=False) == StructField("Id", LONG)
    with pytest.raises(SchemaError, match="missing"):
        schema.field("missing")
    with pytest.raises(SchemaError):
        schema.field_at(["name", "x"])


def _cm_field(
    name: str, cid: int, dtype: DataType, nested: dict[str, int] | None = None
) -> StructField:
    metadata: dict[str, Any] = {
        "delta.columnMapping.id": cid,
        "delta.columnMapping.physicalName": f"col-{cid}",
    }
    if nested:
        metadata["delta.columnMapping.nested.ids"] = nested
    return StructField(name, dtype, True, metadata)


def test_column_mapping_names_ids_and_walk() -> None:
    inner = StructType((_cm_field("x", 3, LONG),))
    schema = StructType(
        (
            _cm_field("a", 1, ArrayType(inner), nested={"col-1.element": 7}),
            _cm_field("b", 2, MapType(STRING, LONG)),
        )
    )
    a = schema.field("a")
    assert physical_name(a, "none") == "a"
    assert physical_name(a, ColumnMappingMode.NAME) == "col-1"
    assert physical_name(a, "id") == "col-1"
    assert column_id(a) == 1
    assert max_column_id(schema) == 7
    paths = [path for path, _ in walk_fields(schema)]
    assert paths == [("a",), ("a", "element", "x"), ("b",)]
    physical = to_physical(schema, "name")
    assert physical.field_names == ["col-1", "col-2"]
    nested = physical.field("col-1").type
    assert isinstance(nested, ArrayType) and isinstance(nested.element_type, StructType)
    assert nested.element_type.field_names == ["col-3"]
    with pytest.raises(SchemaError):
        physical_name(StructField("plain", LONG), "name")
    with pytest.raises(SchemaError):
        physical_name(a, "sideways")


def test_physical_arrow_schema_carries_names_and_field_ids() -> None:
    schema = StructType(
        (_cm_field("a", 1, ArrayType(LONG), nested={"col-1.element": 9}), _cm_field("b", 2, DATE))
    )
    arrow = to_arrow(schema, physical=True)
    assert arrow.names == ["col-1", "col-2"]
    assert arrow.field("col-1").metadata == {b"PARQUET:field_id": b"1"}
    element = arrow.field("col-1").type.value_field
    assert element.metadata == {b"PARQUET:field_id": b"9"}
    assert to_arrow(schema).names == ["a", "b"]


def test_arrow_mapping_of_every_primitive() -> None:
    expected: dict[DataType, pa.DataType] = {
        STRING: pa.string(),
        LONG: pa.int64(),
        INTEGER: pa.int32(),
        SHORT: pa.int16(),
        BYTE: pa.int8(),
        FLOAT: pa.float32(),
        DOUBLE: pa.float64(),
        BOOLEAN: pa.bool_(),
        BINARY: pa.binary(),
        DATE: pa.date32(),
        TIMESTAMP: pa.timestamp("us", tz="UTC"),
        TIMESTAMP_NTZ: pa.timestamp("us"),
        VOID: pa.null(),
        DecimalType(12, 3): pa.decimal128(12, 3),
    }
    schema = StructType(tuple(StructField(f"c{i}", t) for i, t in enumerate(expected)))
    arrow = to_arrow(schema)
    assert [f.type for f in arrow] == list(expected.values())
    variant = to_arrow(StructType((StructField("v", VARIANT),))).field("v").type
    assert [variant.field(i).name for i in range(variant.num_fields)] == ["value", "metadata"]
    assert contains_type(
        StructType((StructField("m", MapType(STRING, TIMESTAMP_NTZ)),)), "timestamp_ntz"
    )


def test_from_arrow_accepts_the_wider_arrow_family() -> None:
    assert data_type_from_arrow(pa.large_string()) == STRING
    assert data_type_from_arrow(pa.dictionary(pa.int32(), pa.string())) == STRING
    assert data_type_from_arrow(pa.uint8()) == SHORT
    assert data_type_from_arrow(pa.uint32()) == LONG
    assert data_type_from_arrow(pa.timestamp("ns", tz="America/New_York")) == TIMESTAMP
    assert data_type_from_arrow(pa.timestamp("ms")) == TIMESTAMP_NTZ
    assert data_type_from_arrow(pa.date64()) == DATE
    assert data_type_from_arrow(pa.large_list(pa.int8())) == ArrayType(BYTE)
    assert data_type_from_arrow(pa.decimal256(20, 2)) == DecimalType(20, 2)
    for refused in (pa.uint64(), pa.decimal256(40, 2), pa.duration("s"), pa.time64("us")):
        with pytest.raises(SchemaError):
            data_type_from_arrow(refused)


# --- property tests ---------------------------------------------------------------------

_names = st.text(min_size=1, max_size=8)
_json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.text(max_size=5)
)
_metadata = st.dictionaries(
    st.text(max_size=10), st.one_of(_json_scalars, st.lists(_json_scalars, max_size=3)), max_size=3
)
_primitives = st.sampled_from(
    [
        STRING,
        LONG,
        INTEGER,
        SHORT,
        BYTE,
        FLOAT,
        DOUBLE,
        BOOLEAN,
        BINARY,
        DATE,
        TIMESTAMP,
        TIMESTAMP_NTZ,
        VOID,
    ]
)
_decimals = st.integers(1, 38).flatmap(lambda p: st.integers(0, p).map(lambda s: DecimalType(p, s)))


def _types(metadata: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[DataType]:
    def extend(children: st.SearchStrategy[DataType]) -> st.SearchStrategy[DataType]:
        return st.one_of(
            st.builds(ArrayType, children, st.booleans()),
            st.builds(MapType, children, children, st.booleans()),
            _structs(children, metadata),
        )

    return st.recursive(st.one_of(_primitives, _decimals), extend, max_leaves=12)


def _structs(
    children: st.SearchStrategy[DataType], metadata: st.SearchStrategy[dict[str, Any]]
) -> st.SearchStrategy[StructType]:
    fields = st.lists(
        st.tuples(_names, children, st.booleans(), metadata),
        max_size=4,
        unique_by=lambda t: t[0],
    )
    return fields.map(lambda fs: StructType(tuple(StructField(*f) for f in fs)))


@settings(max_examples=150, deadline=None)
@given(_structs(_types(_metadata), _metadata))
def test_random_schemas_round_trip_through_json(schema: StructType) -> None:
    text = serialize_schema(schema)
    assert parse_schema(text) == schema
    assert serialize_schema(parse_schema(text)) == text


@settings(max_examples=150, deadline=None)
@given(_structs(_types(st.just({})), st.just({})))
def test_random_schemas_round_trip_through_arrow(schema: StructType) -> None:
    if contains_type(schema, "void"):
        # Arrow's null type is always nullable and cannot be a map key.
        return
    assert from_arrow(to_arrow(schema)) == schema


def test_void_columns_become_nullable_arrow_nulls() -> None:
    arrow = to_arrow(StructType((StructField("v", VOID, nullable=False),)))
    assert arrow.field("v").type == pa.null() and arrow.field("v").nullable
    with pytest.raises(SchemaError):
        to_arrow(StructType((StructField("m", MapType(VOID, LONG)),)))


def test_assign_column_mapping_numbers_every_field_and_keeps_existing_ids() -> None:
    names = iter(f"col-{i}" for i in range(100))
    kept = StructField("kept", LONG, metadata={"delta.columnMapping.id": 7})
    schema = StructType(
        (
            kept,
            StructField("s", StructType((StructField("a", INTEGER),))),
            StructField("arr", ArrayType(StructType((StructField("b", STRING),)))),
            StructField("m", MapType(STRING, StructType((StructField("c", DATE),)))),
        )
    )
    mapped, max_id = assign_column_mapping(schema, new_physical_name=lambda: next(names))
    fields = [f for _, f in walk_fields(mapped)]
    ids = [column_id(f) for f in fields]
    # kept, s, s.a, arr, arr.element.b, m, m.value.c: 7 fields; new ids follow 7
    assert sorted(i for i in ids if i is not None) == [7, 8, 9, 10, 11, 12, 13]
    assert max_id == 13 == max_column_id(mapped)
    assert column_id(mapped.field("kept")) == 7
    assert all(physical_name(f, ColumnMappingMode.NAME).startswith("col-") for f in fields)
    assert len({physical_name(f, ColumnMappingMode.NAME) for f in fields}) == len(fields)
    assert parse_schema(serialize_schema(mapped)) == mapped
    # a second pass changes nothing
    again, again_max = assign_column_mapping(mapped, new_physical_name=lambda: next(names))
    assert (again, again_max) == (mapped, 13)
