"""Spark SQL expressions over Arrow: hand-picked cases with Spark's answers,
and property tests against duckdb evaluating the same SQL on the same table."""

from __future__ import annotations

import datetime as dt
import pickle
from typing import Any

import pyarrow as pa
import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raydelta.protocol.errors import (
    InvalidExpressionError,
    SparkArithmeticException,
    UnsupportedExpressionError,
)
from raydelta.protocol.expressions import evaluate, parse_expression, referenced_columns

UTC = dt.UTC


@pytest.fixture
def table() -> pa.Table:
    return pa.table(
        {
            "x": pa.array([1, 5, None, -7], pa.int64()),
            "s": pa.array(["abc", " hi ", None, "Zed"]),
            "ts": pa.array(
                [dt.datetime(2020, 5, 1, 10, 30, tzinfo=UTC)] * 3 + [None],
                pa.timestamp("us", tz="UTC"),
            ),
            "ntz": pa.array([dt.datetime(2021, 12, 31, 23, 59, 59)] * 4, pa.timestamp("us")),
            "d": pa.array([dt.date(1899, 1, 1), dt.date(2000, 2, 29), None, dt.date(2024, 1, 1)]),
            "st": pa.array(
                [
                    {"a": 1, "b": {"c": "u"}},
                    {"a": None, "b": None},
                    None,
                    {"a": 4, "b": {"c": "v"}},
                ],
                pa.struct([("a", pa.int32()), ("b", pa.struct([("c", pa.string())]))]),
            ),
        }
    )


CASES: list[tuple[str, list[Any]]] = [
    ("x > 3", [False, True, None, False]),
    ("x >= 5 AND x IS NOT NULL", [False, True, False, False]),
    ("x > 3 OR x IS NULL", [False, True, True, False]),
    ("NOT x > 3", [True, False, None, True]),
    ("x IN (1, 5)", [True, True, None, False]),
    ("x IN (1, NULL)", [True, None, None, None]),
    ("x NOT IN (1, 2)", [False, True, None, True]),
    ("x BETWEEN -7 AND 1", [True, False, None, True]),
    ("x NOT BETWEEN -7 AND 1", [False, True, None, False]),
    ("s LIKE 'a%'", [True, False, None, False]),
    ("s NOT LIKE '_e_'", [True, True, None, False]),
    ("s ILIKE 'z%'", [False, False, None, True]),
    ("x % 3", [1, 2, None, -1]),
    ("x DIV 2", [0, 2, None, -3]),
    ("x / 2", [0.5, 2.5, None, -3.5]),
    ("-x + 1", [0, -4, None, 8]),
    ("abs(x)", [1, 5, None, 7]),
    ("x <=> NULL", [False, False, True, False]),
    ("x <=> 5", [False, True, False, False]),
    ("coalesce(x, 0)", [1, 5, 0, -7]),
    ("nvl(x, 0) * 2", [2, 10, 0, -14]),
    (
        "CASE WHEN x > 1 THEN 'big' WHEN x IS NULL THEN 'none' ELSE 'small' END",
        ["small", "big", "none", "small"],
    ),
    ("CASE x WHEN 5 THEN 50 END", [None, 50, None, None]),
    ("if(x > 1, 1, 0)", [0, 1, 0, 0]),
    ("length(s)", [3, 4, None, 3]),
    ("trim(s)", ["abc", "hi", None, "Zed"]),
    ("lower(s) = 'zed'", [False, False, None, True]),
    ("upper(s)", ["ABC", " HI ", None, "ZED"]),
    ("substring(s, 2, 2)", ["bc", "hi", None, "ed"]),
    ("substr(s, -2)", ["bc", "i ", None, "ed"]),
    ("concat(s, '-', x)", ["abc-1", " hi -5", None, "Zed--7"]),
    ("year(ts)", [2020, 2020, 2020, None]),
    ("month(ts) * 100 + day(ts)", [501, 501, 501, None]),
    ("hour(ts)", [10, 10, 10, None]),
    ("CAST(ts AS DATE)", [dt.date(2020, 5, 1)] * 3 + [None]),
    ("to_date(ts) = DATE '2020-05-01'", [True, True, True, None]),
    ("date_format(ts, 'yyyy-MM-dd HH:mm')", ["2020-05-01 10:30"] * 3 + [None]),
    ("ts > '2020-05-01'", [True, True, True, None]),
    ("ts < TIMESTAMP '2020-05-01 10:30:00'", [False, False, False, None]),
    ("ntz = TIMESTAMP_NTZ '2021-12-31 23:59:59'", [True] * 4),
    ("year(ntz)", [2021] * 4),
    ("d > '1900-01-01'", [False, True, None, True]),
    ("st.a > 1", [False, None, None, True]),
    ("st.b.c", ["u", None, None, "v"]),
    ("ST.A IS NULL", [False, True, True, False]),
    ("CAST(x AS STRING)", ["1", "5", None, "-7"]),
    ("CAST('12' AS INT) + x", [13, 17, None, 5]),
    ("(x > 1) IS TRUE", [False, True, False, False]),
    ("(x > 1) IS NOT FALSE", [False, True, True, False]),
]


@pytest.mark.parametrize(("sql", "expected"), CASES)
def test_spark_semantics(table: pa.Table, sql: str, expected: list[Any]) -> None:
    result = evaluate(sql, table)
    assert isinstance(result, pa.Array)
    assert result.to_pylist() == expected


def test_division_by_zero_raises_under_ansi_and_is_null_in_legacy_mode(table: pa.Table) -> None:
    """``x / 0`` was a case of the table above when raydelta had only legacy
    mode's NULL; Spark 4's default (ANSI) raises DIVIDE_BY_ZERO for a row whose
    dividend is not NULL. Both modes, one assertion each."""
    assert evaluate("x / 0", table, ansi=False).to_pylist() == [None, None, None, None]
    with pytest.raises(SparkArithmeticException) as info:
        evaluate("x / 0", table)
    assert info.value.error_class == "DIVIDE_BY_ZERO"
    again = pickle.loads(pickle.dumps(info.value))
    assert again.error_class == "DIVIDE_BY_ZERO" and str(again) == str(info.value)
    # CASE is lazy: a branch no row takes never divides (Spark's too)
    assert evaluate("CASE WHEN x > 100 THEN x / 0 ELSE 0 END", table).to_pylist() == [0.0] * 4


def test_columns_and_clock(table: pa.Table) -> None:
    parsed = parse_expression("st.b.c = 'u' AND x > `x` AND current_date() > d")
    assert sorted(referenced_columns(parsed)) == ["d", "st.b.c", "x"]
    assert parsed.uses_clock
    with pytest.raises(InvalidExpressionError, match="time"):
        evaluate(parsed, table)
    now = dt.datetime(2024, 6, 1, tzinfo=UTC)
    assert evaluate("current_date()", table, now=now).to_pylist() == [dt.date(2024, 6, 1)] * 4
    assert evaluate("current_timestamp() > ts", table, now=now).to_pylist() == [True] * 3 + [None]


@pytest.mark.parametrize(
    "sql", ["rand() > 0.5", "x = (SELECT 1)", "my_udf(x)", "transform(a, x -> x + 1)"]
)
def test_unsupported_constructs_are_refused_at_parse(sql: str) -> None:
    with pytest.raises(UnsupportedExpressionError) as info:
        parse_expression(sql)
    assert info.value.expression == sql
    again = pickle.loads(pickle.dumps(info.value))
    assert str(again) == str(info.value) and again.expression == sql


@pytest.mark.parametrize("sql", ["", "x >", "no_such_column > 1"])
def test_bad_expressions_raise_typed_errors(table: pa.Table, sql: str) -> None:
    with pytest.raises(InvalidExpressionError):
        evaluate(sql, table)


def test_overflow_and_bad_cast_raise(table: pa.Table) -> None:
    with pytest.raises(InvalidExpressionError):
        evaluate("x * 9223372036854775807", table)
    with pytest.raises(InvalidExpressionError):
        evaluate("CAST(s AS INT) > 1", table)


def test_empty_table_gives_empty_array(table: pa.Table) -> None:
    assert evaluate("x > 1 AND s LIKE 'a%'", table.slice(0, 0)).to_pylist() == []
    assert evaluate("1 + 1", table).to_pylist() == [2] * 4


# --- property tests: duckdb as the oracle ---------------------------------------------

ints = st.one_of(st.none(), st.integers(-50, 50))
words = st.one_of(st.none(), st.text(alphabet="abAB _%", max_size=5))
rows = st.lists(st.tuples(ints, ints, words, st.one_of(st.none(), st.booleans())), max_size=12)


def int_exprs() -> st.SearchStrategy[str]:
    leaves = st.one_of(st.sampled_from(["a", "b"]), st.integers(-20, 20).map(lambda i: f"({i})"))

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(inner, st.sampled_from(["+", "-", "*", "%"]), inner).map(
                lambda t: f"({t[0]} {t[1]} {t[2]})"
            ),
            inner.map(lambda e: f"abs({e})"),
            inner.map(lambda e: f"(-{e})"),
            st.tuples(inner, inner).map(lambda t: f"coalesce({t[0]}, {t[1]})"),
            st.tuples(bool_leaves(), inner, inner).map(
                lambda t: f"CASE WHEN {t[0]} THEN {t[1]} ELSE {t[2]} END"
            ),
            str_leaves().map(lambda e: f"length({e})"),
        )

    return st.recursive(leaves, extend, max_leaves=6)


def str_leaves() -> st.SearchStrategy[str]:
    return st.one_of(
        st.just("s"),
        st.just("lower(s)"),
        st.just("upper(s)"),
        st.just("trim(s)"),
        st.just("concat(s, 'x')"),
        st.sampled_from(["substring(s, 2, 2)", "substring(s, 1)", "substring(s, 2)"]),
    )


def bool_leaves() -> st.SearchStrategy[str]:
    return st.one_of(
        st.just("f"),
        st.sampled_from(["a > b", "a = b", "a <> 3", "b <= -2", "a IS NULL", "s IS NOT NULL"]),
        st.sampled_from(["a IN (1, 2, NULL)", "b IN (0, 5)", "a BETWEEN -3 AND 10"]),
        st.sampled_from(["s LIKE 'a%'", "s LIKE '%b_'", "s NOT LIKE '%A%'", "s = 'ab'"]),
    )


def bool_exprs() -> st.SearchStrategy[str]:
    compare = st.tuples(
        int_exprs(), st.sampled_from(["=", "<", ">=", "<>", "<=>"]), int_exprs()
    ).map(lambda t: f"({t[0]} {t[1]} {t[2]})")
    leaves = st.one_of(bool_leaves(), compare)

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(
                lambda t: f"({t[0]} {t[1]} {t[2]})"
            ),
            inner.map(lambda e: f"(NOT {e})"),
            inner.map(lambda e: f"(({e}) IS NULL)"),
        )

    return st.recursive(leaves, extend, max_leaves=5)


def _oracle(duck: Any, data: pa.Table, sql: str) -> list[Any]:
    translated = sqlglot.transpile(sql, read="spark", write="duckdb")[0]
    duck.register("t", data)
    try:
        result = duck.execute(f"SELECT {translated} AS r FROM t").to_arrow_table()
    finally:
        duck.unregister("t")
    return result.column("r").to_pylist()


def _table(values: list[tuple[Any, Any, Any, Any]]) -> pa.Table:
    return pa.table(
        {
            "a": pa.array([v[0] for v in values], pa.int64()),
            "b": pa.array([v[1] for v in values], pa.int64()),
            "s": pa.array([v[2] for v in values], pa.string()),
            "f": pa.array([v[3] for v in values], pa.bool_()),
        }
    )


@pytest.fixture(scope="module")
def duck_plain() -> Any:
    duckdb = pytest.importorskip("duckdb")
    return duckdb.connect()


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=rows, sql=bool_exprs())
def test_boolean_expressions_agree_with_duckdb(duck_plain: Any, values: Any, sql: str) -> None:
    data = _table(values)
    assert evaluate(sql, data).to_pylist() == _oracle(duck_plain, data, sql), sql


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=rows, sql=int_exprs())
def test_integer_expressions_agree_with_duckdb(duck_plain: Any, values: Any, sql: str) -> None:
    data = _table(values)
    ours = evaluate(sql, data).to_pylist()
    assert ours == [None if v is None else int(v) for v in _oracle(duck_plain, data, sql)], sql


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=rows, sql=str_leaves())
def test_string_functions_agree_with_duckdb(duck_plain: Any, values: Any, sql: str) -> None:
    data = _table(values)
    assert evaluate(sql, data).to_pylist() == _oracle(duck_plain, data, sql), sql
