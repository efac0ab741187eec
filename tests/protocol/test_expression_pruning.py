"""The statistics rules of expression pruning, one file's bounds at a time."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

from raydelta.protocol.expression_pruning import (
    column_stats,
    conjuncts,
    partition_keep,
    partition_terms,
    statistics_may_match,
)
from raydelta.protocol.expressions import parse_expression

UTC = pa.timestamp("us", tz="UTC")


def _may(
    condition: str, name: str, arrow_type: pa.DataType, low: Any, high: Any, nulls: int = 0
) -> bool:
    stats = column_stats(name, arrow_type, low, high, nulls, 10)
    return all(
        statistics_may_match(term, lambda c: stats if c.lower() == name else None)
        for term in conjuncts(parse_expression(condition))
    )


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ("year(d) = 2021", False),
        ("year(d) = 2022", True),
        ("date_add(d, 400) < DATE '2023-01-01'", False),
        ("month(d) = 13", True),  # not monotone: never pruned
        ("d IN (DATE '2021-01-01', DATE '2024-01-01')", False),
        ("d BETWEEN DATE '2022-03-01' AND DATE '2022-04-01'", True),
        ("d IS NULL", False),
        ("d IS NOT NULL", True),
        ("DATE '2023-01-01' < d", False),
    ],
)
def test_dates(condition: str, expected: bool) -> None:
    assert _may(condition, "d", pa.date32(), dt.date(2022, 1, 1), dt.date(2022, 12, 31)) is expected


def test_truncated_string_maximum_is_unbounded() -> None:
    long_max = "b" * 32 + "\ufffd"
    assert _may("s > 'bbbbc'", "s", pa.string(), "a", long_max)
    assert _may("s LIKE 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbz%'", "s", pa.string(), "a", long_max)
    assert not _may("s > 'c'", "s", pa.string(), "a", "bz")
    assert not _may("s LIKE 'c%'", "s", pa.string(), "a", "bz")
    assert not _may("s LIKE 'a%'", "s", pa.string(), "b", "bz")
    assert _may("s LIKE 'b_'", "s", pa.string(), "b", "bz")
    assert _may("upper(s) = 'ZZZ'", "s", pa.string(), "a", "b")  # upper is not monotone


def test_timestamp_maximum_is_widened_by_the_millisecond_truncation() -> None:
    stamp = dt.datetime(2022, 1, 1, tzinfo=dt.UTC)
    assert _may("ts > TIMESTAMP '2022-01-01 00:00:00.000500'", "ts", UTC, stamp, stamp)
    assert not _may("ts > TIMESTAMP '2022-01-01 00:00:00.001'", "ts", UTC, stamp, stamp)


def test_floats_use_only_the_minimum_of_the_bare_column() -> None:
    assert not _may("x < 1.0", "x", pa.float64(), 2.0, 3.0)
    assert _may("x > 10.0", "x", pa.float64(), 2.0, 3.0)  # a NaN may hide above
    assert _may("floor(x) = 0", "x", pa.float64(), 2.0, 3.0)  # floor(NaN) is 0
    assert _may("x != 2.0", "x", pa.float64(), 2.0, 2.0)


def test_nulls_and_non_monotone_coercions_keep_the_file() -> None:
    assert not _may("n = 5", "n", pa.int64(), None, None, nulls=10)
    assert _may("coalesce(n, 5) = 5", "n", pa.int64(), 1, 2, nulls=1)
    assert _may("n <=> NULL", "n", pa.int64(), 1, 2, nulls=1)
    assert not _may("n <=> NULL", "n", pa.int64(), 1, 2, nulls=0)
    assert _may("s = 5", "s", pa.string(), "10", "20")  # the string is cast per row
    assert not _may("round(n, -1) = 30", "n", pa.int64(), 1, 14)
    assert not _may("cast(n AS double) > 14.5", "n", pa.int64(), 1, 14)


def test_partition_terms_are_evaluated_and_errors_keep_the_file() -> None:
    expression = parse_expression("day(p) = 2 AND x > 1 AND cast(q AS int) > 0")
    terms = partition_terms(expression, ["p", "q"])
    assert terms == ["DAY(p) = 2", "CAST(q AS INT) > 0"]
    partitions = pa.table(
        {
            "p": [dt.date(2022, 1, 2), dt.date(2022, 1, 3), None, dt.date(2022, 1, 2)],
            "q": ["1", "1", "1", "oops"],
        }
    )
    assert partition_keep(terms, partitions) == [True, False, False, True]
