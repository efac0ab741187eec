"""``odd_path_rows``: its byte-level screen never hides a row the regex finds.

The screen (:func:`raydelta.protocol.file_actions.may_have_odd_paths`) reads
value bytes and first bytes through the offsets, so the cases that matter
are the ones where buffers and values differ: slices, nulls (whose slots may
hold bytes), large strings and chunked arrays.
"""

from __future__ import annotations

import re

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from raydelta.protocol.file_actions import may_have_odd_paths, odd_path_rows

ODD = re.compile(r"%|^/|^[A-Za-z][A-Za-z0-9+.-]+:")  # the definition in the docstring

values = st.lists(st.one_of(st.none(), st.text(alphabet="ab/%:1.=_ é", max_size=6)), max_size=12)


def _expected(raw: list[str | None]) -> list[int]:
    return [row for row, value in enumerate(raw) if value is not None and ODD.search(value)]


@settings(max_examples=400, deadline=None)
@given(raw=values, large=st.booleans(), start=st.integers(0, 3), chunks=st.integers(1, 3))
def test_odd_rows_are_the_rows_the_definition_matches(
    raw: list[str | None], large: bool, start: int, chunks: int
) -> None:
    kind = pa.large_string() if large else pa.string()
    full = pa.array(raw, kind)
    sliced = full.slice(min(start, len(raw)))  # a non-zero array offset
    expected_slice = _expected(raw[min(start, len(raw)) :])
    assert odd_path_rows(sliced) == expected_slice
    assert may_have_odd_paths(sliced) or not expected_slice

    chunked = pa.chunked_array([sliced] * chunks, kind)
    per_chunk = len(sliced)
    expected_chunked = [c * per_chunk + row for c in range(chunks) for row in expected_slice]
    assert odd_path_rows(chunked) == expected_chunked


def test_a_null_slot_holding_odd_bytes_is_not_odd() -> None:
    # Arrow lets a null slot keep bytes; only valid values count.
    built = pa.array(["/abs", "plain"], pa.string())
    validity = pa.array([False, True]).buffers()[1]
    with_null = pa.Array.from_buffers(pa.string(), 2, [validity, *built.buffers()[1:]], 1)
    assert odd_path_rows(with_null) == []


def test_plain_relative_paths_are_screened_out_without_the_regex() -> None:
    paths = pa.array([f"year=2026/part-{i:05d}.parquet" for i in range(1000)])
    assert not may_have_odd_paths(paths)
    assert odd_path_rows(paths) == []
