"""raydelta's Spark SQL functions against the real Spark session: the same
expressions over the same generated rows give the same values and types.

Each example evaluates a batch of expressions in one Spark query (a failing
batch is split to find which expressions Spark refuses; raydelta must raise
for those too). Doubles from transcendental functions are compared to
within a few ulps (Java's StrictMath and the C library may differ in the
last bit); everything else is compared exactly, types included.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from raydelta.protocol.errors import InvalidExpressionError, SparkRuntimeException
from raydelta.protocol.expressions import ANSI_DEFAULT, evaluate

pytestmark = pytest.mark.spark

UTC = dt.UTC
NOW = dt.datetime(2024, 2, 29, 12, 30, 45, 123456, tzinfo=UTC)

# One expression per function or form; hypothesis varies the rows.
CATALOG: list[str] = [
    "s || '!'",
    "i div 3",
    "i % 7",
    "pmod(i, 7)",
    "i & 12",
    "i | 3",
    "i ^ 5",
    "~i",
    "shiftleft(i, 3)",
    "shiftright(i, 2)",
    "shiftrightunsigned(i, 28)",
    "shiftleft(l, 65)",
    "bit_count(i)",
    "if(i > 0, s, 'neg')",
    "nvl(s, 'none')",
    "nvl2(s, 1, 0)",
    "nullif(i, 0)",
    "ifnull(f, 0.0)",
    "greatest(i, l, 3)",
    "least(i, -3)",
    "greatest(s, 'm')",
    "isnull(s)",
    "isnotnull(d)",
    "nanvl(f, 0.0)",
    "coalesce(i, l)",
    "negative(i)",
    "positive(f)",
    "CASE WHEN i > 10 THEN 'big' WHEN i IS NULL THEN 'none' ELSE 'small' END",
    "round(f)",
    "round(f, 2)",
    "round(f, -1)",
    "round(i, -1)",
    "bround(f, 1)",
    "bround(f)",
    "round(l, -2)",
    "floor(f)",
    "ceil(f)",
    "floor(i)",
    "ceiling(l)",
    "sqrt(abs(f))",
    "abs(i)",
    "sign(f)",
    "signum(i)",
    "cbrt(f)",
    "pi()",
    "e()",
    "replace(s, 'a', 'XY')",
    "replace(s, 'é')",
    "regexp_replace(s, '[aeiou]', '#')",
    "regexp_replace(s, '(a)(b)?', '$2$1')",
    "regexp_extract(s, '([a-z]+)', 1)",
    "regexp_extract(s, '(x)|(a)', 2)",
    "s rlike '^a'",
    "regexp_like(s, 'b$')",
    "lpad(s, 5, 'xy')",
    "rpad(s, 4)",
    "lpad(s, 2)",
    "split(s, 'a')",
    "split(s, '')",
    "split(s, 'b', 2)",
    "instr(s, 'b')",
    "locate('a', s)",
    "locate('a', s, 2)",
    "locate('', s, 3)",
    "initcap(s)",
    "concat_ws('-', s, 'x', NULL)",
    "concat_ws(',', s, s)",
    "format_string('%d|%s', i, s)",
    "format_string('%5.2f', f)",
    "format_string('%-6.1f|%+4.0f', f, f)",
    "printf('%x', i)",
    "reverse(s)",
    "repeat(s, 2)",
    "left(s, 2)",
    "right(s, 2)",
    "ascii(s)",
    "chr(i)",
    "octet_length(s)",
    "char_length(s)",
    "startswith(s, 'a')",
    "endswith(s, 'b')",
    "contains(s, 'ab')",
    "translate(s, 'ab', 'x')",
    "btrim(s)",
    "trim(s)",
    "ltrim(s)",
    "substring_index(s, 'a', 1)",
    "substring_index(s, 'a', -1)",
    "upper(s)",
    "lower(s)",
    "length(s)",
    "substr(s, 2, 3)",
    "concat(s, i)",
    "md5(s)",
    "sha1(s)",
    "sha2(s, 256)",
    "sha2(s, 512)",
    "sha2(s, 224)",
    "sha2(s, 3)",
    "crc32(s)",
    "hash(i)",
    "hash(l)",
    "hash(s)",
    "hash(f)",
    "hash(d)",
    "hash(ts)",
    "hash(i, s, f)",
    "hash(NULL)",
    "xxhash64(i)",
    "xxhash64(l)",
    "xxhash64(s)",
    "xxhash64(f)",
    "xxhash64(d)",
    "xxhash64(i, s)",
    "hash(b)",
    "xxhash64(b)",
    "date_add(d, 1)",
    "date_sub(d, 30)",
    "date_add(d, i % 1000)",
    "datediff(d, DATE '2000-02-29')",
    "add_months(d, 1)",
    "add_months(d, -13)",
    "months_between(ts, d)",
    "months_between(d, DATE '2024-02-29', false)",
    "date_trunc('MONTH', ts)",
    "date_trunc('WEEK', ts)",
    "date_trunc('HOUR', ts)",
    "date_trunc('QUARTER', d)",
    "date_trunc('bogus', ts)",
    "trunc(d, 'YEAR')",
    "trunc(d, 'MM')",
    "trunc(d, 'WEEK')",
    "to_date(ts)",
    "to_date(date_format(d, 'dd.MM.yyyy'), 'dd.MM.yyyy')",
    "to_timestamp(date_format(ts, 'yyyy-MM-dd HH:mm'), 'yyyy-MM-dd HH:mm')",
    "date_format(ts, 'yyyy-MM-dd HH:mm:ss.SSS')",
    "date_format(d, 'yyyy/M/d EEE MMM')",
    "date_format(ts, 'hh:mm a')",
    "unix_timestamp(ts)",
    "unix_timestamp(d)",
    "from_unixtime(l % 10000000000)",
    "from_unixtime(i, 'yyyy-MM-dd')",
    "current_date()",
    "current_timestamp()",
    "unix_timestamp()",
    "last_day(d)",
    "next_day(d, 'Mon')",
    "dayofweek(d)",
    "weekday(d)",
    "dayofyear(d)",
    "weekofyear(d)",
    "quarter(d)",
    "year(ts)",
    "month(d)",
    "day(d)",
    "hour(ts)",
    "minute(ts)",
    "second(ts)",
    "make_date(2024, 2, 29)",
    "timestamp_seconds(i)",
    "unix_date(d)",
    "unix_seconds(ts)",
    "unix_millis(ts)",
    "struct(i, s)",
    "named_struct('x', i, 'y', d)",
    "array(i, l)",
    "array(s, 'z')",
    "map('k', i)",
    "element_at(arr, 1)",
    "element_at(arr, -1)",
    "size(arr)",
    "cardinality(arr)",
    "array_contains(arr, 3)",
    "element_at(map('a', i), 'a')",
    "map_keys(map('a', i, 'b', 2))",
    "map_values(map('a', f))",
    "named_struct('x', i).x",
    "CAST(i AS STRING)",
    "CAST(f AS STRING)",
    "CAST(s AS INT)",
    "TRY_CAST(s AS INT)",
    "TRY_CAST(s AS DOUBLE)",
    "TRY_CAST(s AS DATE)",
    "TRY_CAST(s AS BOOLEAN)",
    "CAST(i AS DOUBLE)",
    "CAST(i AS BOOLEAN)",
    "CAST(b AS INT)",
    "CAST(d AS STRING)",
    "CAST(ts AS STRING)",
    "CAST(ts AS DATE)",
    "CAST(d AS TIMESTAMP)",
    "CAST(l AS INT)",
    "CAST(f AS BIGINT)",
    "CAST(i AS DECIMAL(12, 2))",
    "CAST(b AS STRING)",
]
# Functions whose doubles may differ in the last bits between the JVM and C.
APPROXIMATE = ("cbrt", "months_between")

# Row values: NULLs, empty strings, unicode, extreme numbers, leap days.
texts = st.one_of(
    st.none(),
    st.text(alphabet="ab AéZ中1-.", max_size=6),
    st.sampled_from(["", " a ", "abab", "12", " 7 ", "true", "2024-02-29", "x\u00e9\u4e2d"]),
)
ints = st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1), st.integers(-300, 300))
longs = st.one_of(st.none(), st.integers(-(2**62), 2**62), st.integers(-(10**6), 10**6))
doubles = st.one_of(
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15),
    st.sampled_from([0.0, -0.0, 2.5, -2.5, 0.125, 2.675, 1e300, -1e-300, 1.005]),
    st.sampled_from([math.nan, math.inf, -math.inf]),
)
dates = st.one_of(
    st.none(),
    st.dates(min_value=dt.date(1900, 1, 1), max_value=dt.date(2200, 12, 31)),
    st.sampled_from([dt.date(2024, 2, 29), dt.date(2000, 2, 29), dt.date(1970, 1, 1)]),
)
moments = st.one_of(
    st.none(),
    st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1)).map(
        lambda m: m.replace(tzinfo=UTC)
    ),
)
arrays = st.one_of(st.none(), st.lists(st.one_of(st.none(), st.integers(-5, 5)), max_size=4))
rows = st.lists(
    st.tuples(
        texts, ints, longs, doubles, dates, moments, arrays, st.one_of(st.none(), st.booleans())
    ),
    min_size=1,
    max_size=8,
)


def _table(values: list[tuple[Any, ...]]) -> pa.Table:
    columns = list(zip(*values, strict=True))
    return pa.table(
        {
            "s": pa.array(columns[0], pa.string()),
            "i": pa.array(columns[1], pa.int32()),
            "l": pa.array(columns[2], pa.int64()),
            "f": pa.array(columns[3], pa.float64()),
            "d": pa.array(columns[4], pa.date32()),
            "ts": pa.array(columns[5], pa.timestamp("us", tz="UTC")),
            "arr": pa.array(columns[6], pa.list_(pa.int32())),
            "b": pa.array(columns[7], pa.bool_()),
        }
    )


@pytest.fixture(scope="module")
def utc_spark(spark: Any) -> Iterator[Any]:
    """The session in UTC with the operation's clock fixed (as raydelta's ``now``)."""
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    yield spark
    spark.conf.set("spark.sql.session.timeZone", before)


def _spark_sql(sql: str) -> str:
    """``current_*`` pinned to NOW, which Spark cannot be told directly."""
    stamp = f"TIMESTAMP '{NOW.strftime('%Y-%m-%d %H:%M:%S.%f')}'"
    return (
        sql.replace("current_timestamp()", stamp)
        .replace("current_date()", f"DATE '{NOW.date()}'")
        .replace("unix_timestamp()", f"unix_timestamp({stamp})")
    )


def _normal(t: pa.DataType) -> pa.DataType:
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(_normal(t.value_type))
    if pa.types.is_map(t):
        return pa.map_(_normal(t.key_type), _normal(t.item_type))
    if pa.types.is_struct(t):
        return pa.struct([(t.field(i).name, _normal(t.field(i).type)) for i in range(t.num_fields)])
    return t


def _same(ours: Any, theirs: Any, approximate: bool) -> bool:
    if isinstance(ours, float) and isinstance(theirs, float):
        if math.isnan(ours) or math.isnan(theirs):
            return math.isnan(ours) and math.isnan(theirs)
        if approximate:
            return math.isclose(ours, theirs, rel_tol=1e-14, abs_tol=1e-300)
        return (ours == theirs and math.copysign(1, ours) == math.copysign(1, theirs)) or (
            ours == theirs == 0.0
        )
    if isinstance(ours, list) and isinstance(theirs, list):
        return len(ours) == len(theirs) and all(
            _same(a, b, approximate) for a, b in zip(ours, theirs, strict=True)
        )
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return ours.keys() == theirs.keys() and all(
            _same(ours[k], theirs[k], approximate) for k in ours
        )
    return bool(ours == theirs)


def _spark_columns(spark: Any, data: pa.Table, exprs: list[str]) -> dict[str, Any]:
    """Each expression's Spark result (an Arrow column) or the error Spark raised."""
    frame = spark.createDataFrame(data)
    try:
        result = frame.selectExpr(*(f"{_spark_sql(e)} AS c{i}" for i, e in enumerate(exprs)))
        table = result.toArrow()
        return {e: table.column(i) for i, e in enumerate(exprs)}
    except Exception as error:
        if len(exprs) == 1:
            return {exprs[0]: error}
    half = len(exprs) // 2
    return {
        **_spark_columns(spark, data, exprs[:half]),
        **_spark_columns(spark, data, exprs[half:]),
    }


def _error_class(error: Exception) -> str | None:
    """The ``[ERROR_CLASS]`` a Spark error message starts its reason with."""
    found = re.search(r"\[([A-Z_]+)(\.[A-Z_]+)?\]", str(error))
    return found.group(1) if found else None


def _check(spark: Any, data: pa.Table, exprs: list[str], *, ansi: bool = ANSI_DEFAULT) -> None:
    theirs = _spark_columns(spark, data, exprs)
    failures: list[str] = []
    for sql in exprs:
        expected = theirs[sql]
        try:
            ours = evaluate(sql, data, now=NOW, ansi=ansi)
        except InvalidExpressionError as error:
            if not isinstance(expected, Exception):
                failures.append(
                    f"{sql}: raydelta raised {error}; Spark gave {expected.to_pylist()}"
                )
            elif isinstance(error, SparkRuntimeException) and (
                error.error_class != _error_class(expected)
            ):
                failures.append(
                    f"{sql}: raydelta raised {error.error_class}; Spark {str(expected)[:200]}"
                )
            continue
        if isinstance(expected, Exception):
            failures.append(
                f"{sql}: Spark raised {str(expected)[:200]}; raydelta gave {ours.to_pylist()}"
            )
            continue
        if _normal(ours.type) != _normal(expected.type):
            failures.append(f"{sql}: type {ours.type} != Spark's {expected.type}")
            continue
        approximate = any(name in sql for name in APPROXIMATE)
        mine, spark_values = ours.to_pylist(), expected.to_pylist()
        if not _same(mine, spark_values, approximate):
            failures.append(f"{sql}: {mine} != Spark's {spark_values}")
    assert not failures, "\n".join(failures) + f"\nrows: {data.to_pylist()}"


# No shrinking: each step would be a Spark query; the failure prints its rows.
@settings(
    max_examples=10,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(values=rows)
def test_catalog_agrees_with_spark(utc_spark: Any, values: list[tuple[Any, ...]]) -> None:
    _check(utc_spark, _table(values), CATALOG)


# Legacy mode (spark.sql.ansi.enabled=false) over the same catalog.
@settings(
    max_examples=6,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(values=rows)
def test_catalog_agrees_with_spark_in_legacy_mode(
    utc_spark: Any, values: list[tuple[Any, ...]]
) -> None:
    before = utc_spark.conf.get("spark.sql.ansi.enabled")
    utc_spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        _check(utc_spark, _table(values), CATALOG, ansi=False)
    finally:
        utc_spark.conf.set("spark.sql.ansi.enabled", before)


# --- NaN, decimals and the ANSI switch -----------------------------------------------

# Spark orders NaN above every number (+Infinity included) and NaN = NaN.
NAN_CATALOG: list[str] = [
    "f = g",
    "f <=> g",
    "f <> g",
    "f < g",
    "f <= g",
    "f > g",
    "f >= g",
    "f IN (g, 1.0D)",
    "f IN (CAST('NaN' AS DOUBLE))",
    "f NOT IN (CAST('NaN' AS DOUBLE), 0.0D)",
    "f BETWEEN g AND CAST('Infinity' AS DOUBLE)",
    "f > CAST('Infinity' AS DOUBLE)",
    "f = CAST('NaN' AS DOUBLE)",
    "greatest(f, g)",
    "least(f, g)",
    "greatest(f, g, NULL)",
    "least(f, CAST('NaN' AS DOUBLE))",
    "nullif(f, g)",
    "CASE f WHEN g THEN 'same' ELSE 'other' END",
    "array_contains(array(f, 1.0D), g)",
    "CAST(f AS FLOAT) < CAST(g AS FLOAT)",
    "CAST(f AS FLOAT) = CAST(g AS FLOAT)",
    "f > i",
    "f = 1.5",
    "f < 1.5",
]
specials = st.one_of(
    st.none(),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 1.5, -1e308, 3.0]),
)
nan_rows = st.lists(
    st.tuples(specials, specials, st.one_of(st.none(), st.integers(-3, 3))), min_size=1, max_size=8
)

# Decimal literals are DECIMAL(p,s); + - * / % follow DecimalPrecision (allowPrecisionLoss).
DECIMAL_CATALOG: list[str] = [
    "1.5",
    "0.05",
    "100.",
    "99999999999999999999",
    "1.5 + 2.25",
    "1.5 * 2",
    "1.5 / 3",
    "1 / 3.0",
    "10.5 % 3",
    "7.5 div 2",
    "-1.25",
    "i * 1.5",
    "i / 2.5",
    "i + 0.1",
    "l - 0.5",
    "dc * dc",
    "dc / 7",
    "dc / 0.3",
    "dc + i",
    "dc - l",
    "dc % 4",
    "dc * 1.1",
    "f * 1.1",
    "f + dc",
    "dc > 1.5",
    "dc = i",
    "dc < f",
    "i = 1.0",
    "i > 1.5",
    "dc IN (1.5, 2)",
    "dc * 12345678901234567890.123",
    "dc / 0.000000000000000000001",
    "coalesce(dc, 0)",
    "if(i > 0, 1.5, 0)",
    "-dc",
    "abs(dc)",
    "CAST(i AS DECIMAL(12, 1))",
    "CAST(f AS DECIMAL(20, 2))",
    "CAST(dc AS DECIMAL(12, 1))",
    "CAST(dc AS STRING)",
    "1.5D",
    "1.5BD",
]
decimal_values = st.one_of(
    st.none(),
    st.decimals(min_value=-9999999, max_value=9999999, places=3, allow_nan=False),
    st.sampled_from(
        [decimal.Decimal("0.000"), decimal.Decimal("1.500"), decimal.Decimal("-0.005")]
    ),
)
decimal_rows = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1), st.integers(-100, 100)),
        st.one_of(st.none(), st.integers(-(2**62), 2**62), st.integers(-1000, 1000)),
        st.one_of(st.none(), st.floats(min_value=-1e12, max_value=1e12), st.just(2.675)),
        decimal_values,
    ),
    min_size=1,
    max_size=8,
)

# ANSI (raise, with Spark's error class) and legacy mode (NULL or wrap), each row
# set under both settings of spark.sql.ansi.enabled.
ANSI_CATALOG: list[str] = [
    "i + 2147483647",
    "i * i",
    "l * l",
    "l + 9223372036854775807",
    "-i",
    "negative(i)",
    "abs(i)",
    "i - 1",
    "10 / i",
    "f / i",
    "i div j",
    "i % j",
    "pmod(i, j)",
    "10.5 / dc",
    "dc % dc",
    "dc * 1e30BD",
    "CAST(s AS INT)",
    "CAST(s AS BIGINT)",
    "CAST(s AS DOUBLE)",
    "CAST(s AS DECIMAL(5, 2))",
    "CAST(s AS BOOLEAN)",
    "CAST(s AS DATE)",
    "CAST(l AS INT)",
    "CAST(i AS SMALLINT)",
    "CAST(i AS TINYINT)",
    "CAST(f AS INT)",
    "CAST(f AS BIGINT)",
    "CAST(f AS SMALLINT)",
    "CAST(dc AS DECIMAL(3, 1))",
    "CAST(dc AS INT)",
    "CASE WHEN j <> 0 THEN i div j ELSE -1 END",
    "if(j = 0, NULL, i / j)",
    "if(j <> 0, i % j, 0)",
    "j <> 0 AND i div j > 1",
    "j = 0 OR 10 / j > 1",
    "coalesce(CAST(j AS DOUBLE), 10 / j)",
    "TRY_CAST(s AS INT)",
    "element_at(array(i, j), 3)",
    "array(i, j)[2]",
]
ansi_rows = st.lists(
    st.tuples(
        st.one_of(st.none(), st.sampled_from([0, 1, -1, 7, 2**31 - 1, -(2**31), 40000, 200])),
        st.one_of(st.none(), st.sampled_from([0, 0, 2, -3])),
        st.one_of(st.none(), st.sampled_from([0, 5, 2**40, -(2**62), 2**63 - 1])),
        st.one_of(st.none(), st.sampled_from([0.0, -2.5, 1e10, -1e19, 3e9, math.nan, math.inf])),
        st.one_of(
            st.none(),
            st.sampled_from(["12", " 7 ", "x", "", "1e3", "2024-02-29", "true", "99.995", "-0"]),
        ),
        st.one_of(st.none(), st.sampled_from(["0.000", "1.250", "-99.999", "9999999.999"])),
    ),
    min_size=1,
    max_size=6,
)


@pytest.fixture(scope="module")
def ansi_spark(utc_spark: Any) -> Iterator[Any]:
    """The session; each test sets spark.sql.ansi.enabled and this puts it back."""
    before = utc_spark.conf.get("spark.sql.ansi.enabled")
    yield utc_spark
    utc_spark.conf.set("spark.sql.ansi.enabled", before)


def test_ansi_default_is_the_pinned_sparks(ansi_spark: Any) -> None:
    """raydelta's default mode is what the pinned Spark's session defaults to."""
    ansi_spark.conf.unset("spark.sql.ansi.enabled")
    assert ansi_spark.conf.get("spark.sql.ansi.enabled") == str(ANSI_DEFAULT).lower()


_EXAMPLES = settings(
    max_examples=10,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_EXAMPLES
@given(values=nan_rows)
def test_nan_semantics_agree_with_spark(ansi_spark: Any, values: list[tuple[Any, ...]]) -> None:
    columns = list(zip(*values, strict=True))
    data = pa.table(
        {
            "f": pa.array(columns[0], pa.float64()),
            "g": pa.array(columns[1], pa.float64()),
            "i": pa.array(columns[2], pa.int32()),
        }
    )
    ansi_spark.conf.unset("spark.sql.ansi.enabled")
    _check(ansi_spark, data, NAN_CATALOG)


@_EXAMPLES
@given(values=decimal_rows)
def test_decimal_semantics_agree_with_spark(ansi_spark: Any, values: list[tuple[Any, ...]]) -> None:
    columns = list(zip(*values, strict=True))
    data = pa.table(
        {
            "i": pa.array(columns[0], pa.int32()),
            "l": pa.array(columns[1], pa.int64()),
            "f": pa.array(columns[2], pa.float64()),
            "dc": pa.array(columns[3], pa.decimal128(10, 3)),
        }
    )
    ansi_spark.conf.unset("spark.sql.ansi.enabled")
    _check(ansi_spark, data, DECIMAL_CATALOG)


@pytest.mark.parametrize("ansi", [True, False])
@_EXAMPLES
@given(values=ansi_rows)
def test_ansi_and_legacy_modes_agree_with_spark(
    ansi_spark: Any, ansi: bool, values: list[tuple[Any, ...]]
) -> None:
    columns = list(zip(*values, strict=True))
    data = pa.table(
        {
            "i": pa.array(columns[0], pa.int32()),
            "j": pa.array(columns[1], pa.int32()),
            "l": pa.array(columns[2], pa.int64()),
            "f": pa.array(columns[3], pa.float64()),
            "s": pa.array(columns[4], pa.string()),
            "dc": pa.array(
                [None if v is None else decimal.Decimal(v) for v in columns[5]],
                pa.decimal128(10, 3),
            ),
        }
    )
    ansi_spark.conf.set("spark.sql.ansi.enabled", str(ansi).lower())
    _check(ansi_spark, data, ANSI_CATALOG, ansi=ansi)
