"""Partition predicates: parsing, printing, typed three-valued evaluation."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from raydelta.protocol.errors import InvalidPredicateError
from raydelta.protocol.predicate_evaluation import evaluate, matches
from raydelta.protocol.predicates import (
    AlwaysTrue,
    And,
    Comparison,
    In,
    IsNull,
    Not,
    Or,
    Predicate,
    col,
    from_partition_values,
    parse_predicate,
    quote_identifier,
    references,
    to_sql,
)
from raydelta.protocol.schema import (
    BOOLEAN,
    DATE,
    DOUBLE,
    INTEGER,
    LONG,
    STRING,
    TIMESTAMP,
    DataType,
    DecimalType,
)

ADAPTER: TypeAdapter[Predicate] = TypeAdapter(Predicate)


def cmp(column: str, op: str, value: Any) -> Comparison:
    return Comparison(column=column, op=op, value=value)  # type: ignore[arg-type]


# --- parsing ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("date = '2024-01-01'", cmp("date", "=", "2024-01-01")),
        ("date == '2024-01-01'", cmp("date", "=", "2024-01-01")),
        ("a != 1", cmp("a", "!=", 1)),
        ("a <> 1", cmp("a", "!=", 1)),
        ("a < -2", cmp("a", "<", -2)),
        ("a <= 2.5", cmp("a", "<=", 2.5)),
        ("a > 1e3", cmp("a", ">", 1000.0)),
        ("a >= .5", cmp("a", ">=", 0.5)),
        ("flag = true", cmp("flag", "=", True)),
        ("flag = FALSE", cmp("flag", "=", False)),
        ("s = 'it''s'", cmp("s", "=", "it's")),
        ("`weird col` = 'x'", cmp("weird col", "=", "x")),
        ("`a``b` = 'x'", cmp("a`b", "=", "x")),
        ("`and` = 1", cmp("and", "=", 1)),
        ("region IN ('eu', 'us')", In(column="region", values=("eu", "us"))),
        ("region not in ('eu')", Not(child=In(column="region", values=("eu",)))),
        ("x IS NULL", IsNull(column="x")),
        ("x is not null", Not(child=IsNull(column="x"))),
        ("TRUE", AlwaysTrue()),
        ("FALSE", Not(child=AlwaysTrue())),
        ("NOT a = 1", Not(child=cmp("a", "=", 1))),
    ],
)
def test_parse_single_conditions(text: str, expected: Predicate) -> None:
    assert parse_predicate(text) == expected


def test_and_binds_tighter_than_or_and_not_tighter_than_and() -> None:
    parsed = parse_predicate("a = 1 OR b = 2 AND NOT c = 3")
    assert parsed == Or(
        children=(
            cmp("a", "=", 1),
            And(children=(cmp("b", "=", 2), Not(child=cmp("c", "=", 3)))),
        )
    )


def test_parentheses_group_and_are_kept_as_nodes() -> None:
    parsed = parse_predicate("(a = 1 OR b = 2) AND c = 3")
    assert parsed == And(
        children=(Or(children=(cmp("a", "=", 1), cmp("b", "=", 2))), cmp("c", "=", 3))
    )
    nested = parse_predicate("(a = 1 AND b = 2) AND c = 3")
    assert isinstance(nested, And) and isinstance(nested.children[0], And)


def test_brief_example() -> None:
    parsed = parse_predicate("date = '2024-01-01' AND region IN ('eu','us')")
    assert parsed == And(
        children=(cmp("date", "=", "2024-01-01"), In(column="region", values=("eu", "us")))
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "a =",
        "a = 1 AND",
        "(a = 1",
        "a = 1)",
        "a = NULL",
        "a NOT = 1",
        "a IS 1",
        "a IN ()",
        "a IN 1",
        "AND = 1",
        "a = 1 b = 2",
        "a = 'unterminated",
        "a ~ 1",
        "`` = 1",
        "a = 1e999",
    ],
)
def test_parse_errors_are_typed(text: str) -> None:
    with pytest.raises(InvalidPredicateError):
        parse_predicate(text)


def test_models_refuse_bad_values() -> None:
    with pytest.raises(ValidationError):
        Comparison(column="a", op="=", value=None)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        Comparison(column="a", op="~", value=1)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        Comparison(column="a", op="=", value=float("nan"))
    with pytest.raises(ValidationError):
        In(column="a", values=())
    with pytest.raises(ValidationError):
        Comparison(column="", op="=", value=1)
    node = cmp("a", "=", 1)
    with pytest.raises(ValidationError):
        node.column = "b"


def test_builder_and_operators() -> None:
    built = (col("date") == "2024-01-01") & col("region").isin("eu", "us") | ~col("x").is_null()
    assert built == parse_predicate(
        "(date = '2024-01-01' AND region IN ('eu', 'us')) OR NOT x IS NULL"
    )
    assert col("a").is_not_null() == parse_predicate("a IS NOT NULL")
    assert (col("a") >= 3) == cmp("a", ">=", 3)
    assert (col("a") != 3) == cmp("a", "!=", 3)
    assert (col("a") < 3) == cmp("a", "<", 3)
    assert (col("a") <= 3) == cmp("a", "<=", 3)
    assert (col("a") > 3) == cmp("a", ">", 3)


def test_references() -> None:
    p = parse_predicate("(a = 1 OR b IS NULL) AND NOT c IN (1) AND TRUE")
    assert references(p) == {"a", "b", "c"}
    assert references(AlwaysTrue()) == set()


def test_quote_identifier() -> None:
    assert quote_identifier("date") == "date"
    assert quote_identifier("in") == "`in`"
    assert quote_identifier("a b") == "`a b`"
    assert quote_identifier("a`b") == "`a``b`"


# --- round trips (hypothesis) -------------------------------------------------------------

identifiers = st.one_of(
    st.sampled_from(["a", "b", "date", "region", "Null", "in", "x1", "_y"]),
    st.text(min_size=1, max_size=8),
)
literals = st.one_of(
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
leaves = st.one_of(
    st.builds(
        Comparison,
        column=identifiers,
        op=st.sampled_from(["=", "!=", "<", "<=", ">", ">="]),
        value=literals,
    ),
    st.builds(In, column=identifiers, values=st.lists(literals, min_size=1, max_size=3).map(tuple)),
    st.builds(IsNull, column=identifiers),
    st.just(AlwaysTrue()),
)
predicates = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.builds(And, children=st.lists(children, min_size=2, max_size=3).map(tuple)),
        st.builds(Or, children=st.lists(children, min_size=2, max_size=3).map(tuple)),
        st.builds(Not, child=children),
    ),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(predicates)
def test_print_parse_round_trip(predicate: Predicate) -> None:
    assert parse_predicate(to_sql(predicate)) == predicate


@settings(max_examples=100, deadline=None)
@given(predicates)
def test_pickle_and_json_round_trip(predicate: Predicate) -> None:
    assert pickle.loads(pickle.dumps(predicate)) == predicate
    assert ADAPTER.validate_json(ADAPTER.dump_json(predicate)) == predicate
    assert ADAPTER.validate_python(json.loads(ADAPTER.dump_json(predicate))) == predicate


# --- typed evaluation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("predicate", "value", "dtype", "expected"),
    [
        # integers compare as integers, not as strings ("10" < "9" as text)
        ("p > 9", "10", LONG, True),
        ("p < 9", "10", INTEGER, False),
        ("p = '10'", "10", LONG, True),
        ("p IN (1, 10)", "10", LONG, True),
        ("p IN (1, 2)", "10", LONG, False),
        # strings compare as strings
        ("p > '9'", "10", STRING, False),
        # dates as dates
        ("p < '2024-02-01'", "2024-01-15", DATE, True),
        ("p >= '2024-02-01'", "2024-1-5", DATE, False),
        # timestamps: ISO-8601 with Z equals the space form read as UTC
        ("p = '2024-01-01 00:00:00'", "2024-01-01T00:00:00.000000Z", TIMESTAMP, True),
        ("p > '2024-01-01 00:00:00'", "2024-01-01 00:00:01", TIMESTAMP, True),
        # booleans, doubles, decimals
        ("p = TRUE", "true", BOOLEAN, True),
        ("p = 'false'", "true", BOOLEAN, False),
        ("p > 1.5", "2", DOUBLE, True),
        ("p = 1.10", "1.1", DecimalType(5, 2), True),
        ("p < '1.05'", "1.1", DecimalType(5, 2), False),
    ],
)
def test_typed_comparisons(predicate: str, value: str, dtype: DataType, expected: bool) -> None:
    assert evaluate(parse_predicate(predicate), {"p": value}, {"p": dtype}) is expected


def test_three_valued_logic_with_null_partition_values() -> None:
    types = {"p": LONG, "q": LONG}
    null_p = {"p": None, "q": "1"}
    assert evaluate(parse_predicate("p = 1"), null_p, types) is None
    assert evaluate(parse_predicate("p != 1"), null_p, types) is None
    assert evaluate(parse_predicate("NOT p = 1"), null_p, types) is None
    assert evaluate(parse_predicate("p IS NULL"), null_p, types) is True
    assert evaluate(parse_predicate("p IS NOT NULL"), null_p, types) is False
    assert evaluate(parse_predicate("p = 1 AND q = 2"), null_p, types) is False
    assert evaluate(parse_predicate("p = 1 AND q = 1"), null_p, types) is None
    assert evaluate(parse_predicate("p = 1 OR q = 1"), null_p, types) is True
    assert evaluate(parse_predicate("p = 1 OR q = 2"), null_p, types) is None
    # the empty string is null for every type (spec)
    assert evaluate(parse_predicate("p IS NULL"), {"p": ""}, types) is True
    # a NULL result selects nothing
    assert matches(parse_predicate("p = 1"), null_p, types) is False
    assert matches(parse_predicate("p IS NULL"), null_p, types) is True


def test_non_partition_columns_are_unknown_and_match_conservatively() -> None:
    types = {"date": DATE}
    p = parse_predicate("date = '2024-01-01' AND amount > 5")
    same = {"date": "2024-01-01"}
    other = {"date": "2024-01-02"}
    assert evaluate(p, same, types) is None
    assert matches(p, same, types) is True
    assert evaluate(p, other, types) is False
    assert matches(p, other, types) is False
    # NOT over an unknown stays unknown: could still select rows
    assert matches(parse_predicate("NOT amount > 5"), same, types) is True
    # IS NULL on a data column may be true
    assert matches(parse_predicate("amount IS NULL"), same, types) is True
    # an OR with a data column may match any partition
    assert matches(parse_predicate("date = '1999-01-01' OR amount > 5"), other, types) is True


def test_unreadable_literal_or_value_matches_conservatively() -> None:
    types = {"p": LONG}
    assert evaluate(parse_predicate("p = 'abc'"), {"p": "1"}, types) is None
    assert matches(parse_predicate("p = 'abc'"), {"p": "1"}, types) is True
    assert matches(parse_predicate("p = 1"), {"p": "not-a-number"}, types) is True
    assert matches(parse_predicate("p IS NULL"), {"p": "not-a-number"}, types) is True


def test_missing_values_and_unknown_partition_values() -> None:
    types = {"p": LONG}
    # a partition column the file carries no value for: may match
    assert matches(parse_predicate("p = 1"), {}, types) is True
    # no partition values at all (a remove without extended metadata)
    assert matches(parse_predicate("p = 1"), None, types) is True
    # a partition value without a declared type is a string
    assert evaluate(parse_predicate("r = 'eu'"), {"r": "eu"}, {}) is True


def test_case_insensitive_column_resolution() -> None:
    assert evaluate(parse_predicate("DATE = '2024-01-01'"), {"date": "2024-01-01"}, {}) is True
    assert evaluate(parse_predicate("Id > 9"), {"id": "10"}, {"ID": LONG}) is True


def test_from_partition_values() -> None:
    assert from_partition_values({}) == AlwaysTrue()
    assert from_partition_values({"a": "1"}) == cmp("a", "=", "1")
    both = from_partition_values({"a": "1", "b": None})
    assert both == And(children=(cmp("a", "=", "1"), IsNull(column="b")))
    assert from_partition_values({"b": ""}) == IsNull(column="b")


partition_dicts = st.dictionaries(
    st.sampled_from(["a", "b", "c"]),
    st.one_of(st.none(), st.integers(-5, 5).map(str)),
    max_size=3,
)


@settings(max_examples=200, deadline=None)
@given(partition_dicts, partition_dicts)
def test_from_partition_values_selects_exactly_its_partition(
    chosen: dict[str, str | None], other: dict[str, str | None]
) -> None:
    types = {"a": LONG, "b": LONG, "c": LONG}
    predicate = from_partition_values(chosen)
    assert evaluate(predicate, chosen, types) is True
    full_other = {k: other.get(k) for k in chosen}
    expected = all(full_other[k] == v for k, v in chosen.items())
    assert (evaluate(predicate, full_other, types) is True) == expected


small_predicates = st.recursive(
    st.one_of(
        st.builds(
            Comparison,
            column=st.sampled_from(["p", "q", "d"]),
            op=st.sampled_from(["=", "!=", "<", "<=", ">", ">="]),
            value=st.integers(-2, 2),
        ),
        st.builds(
            In,
            column=st.sampled_from(["p", "q", "d"]),
            values=st.lists(st.integers(-2, 2), min_size=1, max_size=2).map(tuple),
        ),
        st.builds(IsNull, column=st.sampled_from(["p", "q", "d"])),
    ),
    lambda children: st.one_of(
        st.builds(And, children=st.lists(children, min_size=2, max_size=3).map(tuple)),
        st.builds(Or, children=st.lists(children, min_size=2, max_size=3).map(tuple)),
        st.builds(Not, child=children),
    ),
    max_leaves=6,
)
cell = st.one_of(st.none(), st.integers(-2, 2).map(str))


@settings(max_examples=200, deadline=None)
@given(small_predicates, cell, cell, cell)
def test_matches_never_misses_a_row(
    predicate: Predicate, p: str | None, q: str | None, d: str | None
) -> None:
    """Soundness: when ``matches`` says no on partition columns p and q, no value of
    the data column d makes the predicate true."""
    partition = {"p": p, "q": q}
    partition_types = {"p": LONG, "q": LONG}
    row = {**partition, "d": d}
    row_types = {**partition_types, "d": LONG}
    if not matches(predicate, partition, partition_types):
        assert evaluate(predicate, row, row_types) is not True
    # with every column known, matches is exactly "evaluates to TRUE"
    assert matches(predicate, row, row_types) == (evaluate(predicate, row, row_types) is True)
