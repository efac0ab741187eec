"""DELETE/UPDATE with Spark SQL functions give the table delta-spark's DML gives.

One raydelta table (partitioned by a date, several files) is copied twice;
raydelta's ``table.delete``/``table.update`` runs on one copy and delta-spark's
``DELETE``/``UPDATE`` SQL on the other, then both copies' rows are compared.
The conditions use the new functions and pruning forms (monotone functions,
``IN``, ``LIKE 'prefix%'``, date functions on the date partition).
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raydelta

pytestmark = pytest.mark.spark

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("x", pa.float64()),
        ("s", pa.string()),
        ("d", pa.date32()),
        ("pd", pa.date32()),
    ]
)
WORDS = ["apple", "banana", "band", "cherry", None]


def _batch(start: int) -> pa.Table:
    rows = [
        {
            "id": i,
            "x": None if i % 7 == 3 else (i % 9) * 0.75 - 1.5,
            "s": WORDS[i % len(WORDS)],
            "d": dt.date(2021, 12, 20) + dt.timedelta(days=3 * i),
            "pd": dt.date(2022, 1, 1) + dt.timedelta(days=i // 6),
        }
        for i in range(start, start + 6)
    ]
    return pa.Table.from_pylist(rows, schema=SCHEMA)


@pytest.fixture
def utc_spark(spark: Any) -> Iterator[Any]:
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    yield spark
    spark.conf.set("spark.sql.session.timeZone", before)


def _rows_ours(table: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in table.to_arrow().select(SCHEMA.names).to_pylist())


def _rows_spark(spark: Any, uri: str) -> list[tuple[Any, ...]]:
    frame = spark.read.format("delta").load(uri).select(*SCHEMA.names)
    return sorted(tuple(r) for r in frame.collect())


CASES = [
    ("delete", "round(x, 1) > 2.5 AND date_add(pd, 1) > DATE '2022-01-02'", None),
    ("delete", "pd IN (DATE '2022-01-01', DATE '2022-01-03') OR s LIKE 'ba%'", None),
    ("delete", "year(d) = 2022 AND floor(x) <= 0", None),
    ("update", "year(d) = 2022", {"s": "regexp_replace(s, 'an', 'AN') || '!'"}),
    ("update", "md5(s) LIKE 'a%' OR day(pd) = 2", {"x": "greatest(x, 3.0)", "s": "upper(s)"}),
    (
        "update",
        "to_date(d) BETWEEN DATE '2022-01-01' AND DATE '2022-01-20'",
        {"d": "date_add(d, 10)"},
    ),
]


@pytest.mark.parametrize(("kind", "condition", "assignments"), CASES)
def test_dml_matches_delta_spark(
    ray_cluster: Any,
    utc_spark: Any,
    tmp_path: Path,
    kind: str,
    condition: str,
    assignments: dict[str, str] | None,
) -> None:
    ours_uri, theirs_uri = str(tmp_path / "ours"), str(tmp_path / "theirs")
    table = raydelta.create_table(ours_uri, SCHEMA, partition_by=["pd"])
    for start in range(0, 24, 6):
        table.append(_batch(start))
    shutil.copytree(ours_uri, theirs_uri)
    if kind == "delete":
        table.delete(condition)
        utc_spark.sql(f"DELETE FROM delta.`{theirs_uri}` WHERE {condition}")
    else:
        assert assignments is not None
        table.update(assignments, predicate=condition)
        sets = ", ".join(f"{column} = {value}" for column, value in assignments.items())
        utc_spark.sql(f"UPDATE delta.`{theirs_uri}` SET {sets} WHERE {condition}")
    ours = _rows_ours(table)
    assert ours == _rows_spark(utc_spark, theirs_uri)
    assert ours == _rows_spark(utc_spark, ours_uri)
    assert ours != sorted(
        tuple(r.values()) for start in range(0, 24, 6) for r in _batch(start).to_pylist()
    ), "the DML changed nothing"
