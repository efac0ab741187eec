"""PathIndex: the rows it finds equal a scan, through any drops and appends."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raydelta.protocol import path_index
from raydelta.protocol.file_actions import drop_rows
from raydelta.protocol.path_index import PathIndex

NAMES = ["a", "b", "c", "d", "é", "z/1", "z/10", "z/2", ""]


def table_of(paths: list[str]) -> pa.Table:
    return pa.table(
        {"path": pa.array(paths, pa.string()), "n": pa.array(range(len(paths)), pa.int64())}
    )


def scan(table: pa.Table, wanted: set[str]) -> list[int]:
    return [i for i, p in enumerate(table.column("path").to_pylist()) if p in wanted]


@st.composite
def steps(draw: Any) -> list[tuple[list[int], list[str]]]:
    """Each step: fractions of the current rows to drop, then paths to append."""
    return draw(
        st.lists(
            st.tuples(
                st.lists(st.integers(0, 10_000), max_size=4),
                st.lists(st.sampled_from(NAMES), max_size=4),
            ),
            max_size=8,
        )
    )


@pytest.mark.parametrize("search_max_paths", [path_index.SEARCH_MAX_PATHS, 0])
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.sampled_from(NAMES), max_size=30), steps(), st.sets(st.sampled_from(NAMES)))
def test_rows_with_paths_equals_a_scan(
    monkeypatch: pytest.MonkeyPatch,
    search_max_paths: int,
    base: list[str],
    history: list[tuple[list[int], list[str]]],
    wanted: set[str],
) -> None:
    """Both ways of finding base rows: a binary search per path, and (with
    ``SEARCH_MAX_PATHS`` 0) one hash probe of the indexed paths."""
    monkeypatch.setattr(path_index, "SEARCH_MAX_PATHS", search_max_paths)
    table = table_of(base)
    index = PathIndex.build(table)
    assert index.rows_with_paths(wanted) == scan(table, wanted)
    for picks, appended in history:
        drop = sorted({p % table.num_rows for p in picks}) if table.num_rows else []
        kept = drop_rows(table, drop)
        result = pa.concat_tables([kept, table_of(appended)]) if appended else kept
        index = index.after(drop, result)
        table = result
        assert index.describes(table)
        assert index.rows_with_paths(wanted) == scan(table, wanted)
        # the rows found are the rows, not just their count
        found = index.rows_with_paths(wanted)
        got = table.take(pa.array(found, pa.int64())).column("path").to_pylist()
        assert set(got) <= wanted


def test_an_index_describes_only_its_own_table() -> None:
    table = table_of(["a", "b"])
    index = PathIndex.build(table)
    assert index.describes(table)
    assert not index.describes(table_of(["a", "b"]))


def test_an_index_is_rebuilt_once_the_overlay_outgrows_it() -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(path_index, "OVERLAY_MIN_ROWS", 2)
        table = table_of([f"p{i}" for i in range(16)])
        index = PathIndex.build(table)
        grown = pa.concat_tables([table, table_of(["x", "y"])])
        assert index.after([], grown).is_worth_keeping()
        bigger = pa.concat_tables([grown, table_of(["w"])])
        assert not index.after([], bigger).is_worth_keeping()


def test_sorted_order_agrees_with_python_string_order() -> None:
    paths = ["b", "a", "é", "z", "ä/1", "A", "日本", "a b", "a%20b"]
    index = PathIndex.build(table_of(paths))
    assert index.sorted_paths.to_pylist() == sorted(paths)
    assert pc.all(pc.equal(index.sorted_paths, pa.array(sorted(paths)))).as_py()
