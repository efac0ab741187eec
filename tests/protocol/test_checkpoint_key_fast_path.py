"""The vectorized key strings (with their fast path for plain paths) equal
the one-row definition, whatever mix of spellings and DVs a column holds."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from raydelta.protocol.checkpoint_plan import key_string, key_strings
from raydelta.protocol.file_actions import file_key

_DV_TYPE = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
    ]
)
ROOT = "file:///data/t"

SPELLINGS = [
    "part=1/a.parquet",
    "b.parquet",
    "x/a:b.parquet",  # a colon inside: not a URI
    "a%20b.parquet",
    "%2Fabs.parquet",
    "/data/t/c.parquet",
    "file:///data/t/d.parquet",
    "file:/data/t/e%3Af.parquet",
    "s3://bucket/elsewhere.parquet",
    "/other/g.parquet",
]


def _dv(i: int) -> dict[str, Any] | None:
    if i % 3 == 0:
        return None
    return {
        "storageType": "u",
        "pathOrInlineDv": f"dv{i}",
        "offset": None if i % 2 else i,
        "sizeInBytes": 10,
        "cardinality": 1,
    }


def _expected(paths: list[str], dvs: list[dict[str, Any] | None], root: str | None) -> list[str]:
    return [
        key_string(file_key(p, d, root), table_root=root) for p, d in zip(paths, dvs, strict=True)
    ]


@pytest.mark.parametrize("root", [None, ROOT])
@pytest.mark.parametrize(
    "paths",
    [
        [f"part={i % 4}/f{i}.parquet" for i in range(40)],  # plain only: the fast path
        [SPELLINGS[i % len(SPELLINGS)] for i in range(40)],  # every odd spelling
        ["plain.parquet"] * 39 + ["x/a:b.parquet"],  # one colon sends all to the exact test
        ["plain.parquet"] * 39 + ["/data/t/abs.parquet"],  # only a leading slash
    ],
)
def test_key_strings_equal_the_one_row_definition(paths: list[str], root: str | None) -> None:
    dvs = [_dv(i) for i in range(len(paths))]
    table = pa.table({"path": pa.array(paths), "deletionVector": pa.array(dvs, _DV_TYPE)})
    assert key_strings(table, root).to_pylist() == _expected(paths, dvs, root)
    # a slice and a chunked column hash the same rows the same way
    part = table.slice(7, 20)
    assert key_strings(part, root).to_pylist() == _expected(paths[7:27], dvs[7:27], root)
    chunked = pa.concat_tables([table.slice(0, 5), table.slice(5)])
    assert key_strings(chunked, root).to_pylist() == _expected(paths, dvs, root)
    # large_string paths give the same keys
    large = table.set_column(0, "path", table.column("path").cast(pa.large_string()))
    assert key_strings(large, root).to_pylist() == _expected(paths, dvs, root)


def test_key_strings_without_any_dv_are_the_canonical_paths() -> None:
    paths = [SPELLINGS[i % len(SPELLINGS)] for i in range(25)]
    table = pa.table({"path": pa.array(paths), "deletionVector": pa.nulls(25, _DV_TYPE)})
    assert key_strings(table, ROOT).to_pylist() == _expected(paths, [None] * 25, ROOT)
