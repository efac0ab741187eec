"""A sorted index of the ``path`` column of a file-action table.

Folding a small commit into a large state needs the rows whose path the
commit touches. Without an index that is a hash probe of every row (about
20 ms per million rows); with one it is a binary search per touched path
(past ``SEARCH_MAX_PATHS`` paths, one hash probe of the indexed paths again).

An index describes one exact table object (``index.table is table``) and is
carried forward through row drops and appends instead of being rebuilt:

- ``order`` sorts the build-time ``paths`` column (the table's own column,
  chunked as it was: no sorted copy is made, so an index of a million paths
  costs its 8-byte row numbers); ``paths[order[i]]`` is the ``i``-th smallest
  path; the first ``base_rows`` rows of the table at build time are indexed;
- since the build, only those base rows listed in ``dropped`` (build-time row
  numbers, ascending) were removed, and new rows were only appended, so a
  surviving base row ``r`` now sits at ``r - (number of dropped rows < r)``
  and every row from :attr:`PathIndex.live_base_rows` on is the *overlay*,
  which is probed by hashing (it is kept small: past ``max(OVERLAY_MIN_ROWS,
  base_rows / 8)`` overlay rows, or as many drops, the index is rebuilt).

Paths are compared in their canonical spelling
(:func:`raydelta.protocol.file_actions.canonical_path`): the sorted index is
of raw paths, which for plain relative paths is the canonical spelling; the
few rows whose raw path is encoded, absolute or a URI are decoded once at
build time into ``odd_keys``, so a lookup by canonical path finds them too.

Everything here is pure: pyarrow arrays and Python lists, no I/O.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from raydelta.protocol.file_actions import (
    canonical_path,
    contiguous,
    odd_path_rows,
    rows_with_canonical_paths,
)

INDEX_MIN_ROWS = 65_536
"""Tables smaller than this are probed by hashing: an index would not pay."""

OVERLAY_MIN_ROWS = 65_536

SEARCH_MAX_PATHS = 256
"""Up to this many paths are binary-searched one by one (~0.1 ms each on a
million rows); more are found by one hash probe of the indexed paths (~20 ms
per million rows, whatever their number)."""


@dataclass(frozen=True)
class PathIndex:
    """Sorted paths of a table's base rows (see the module docstring)."""

    table: pa.Table
    paths: pa.ChunkedArray
    """The build-time ``path`` column (shares the table's buffers)."""
    order: pa.Array
    base_rows: int
    dropped: tuple[int, ...] = ()
    table_root: str | None = None
    odd_keys: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Canonical path -> build-time rows, for rows whose raw path is odd."""

    @classmethod
    def build(cls, table: pa.Table, table_root: str | None = None) -> PathIndex:
        paths = table.column("path")
        if paths.num_chunks == 0:
            paths = pa.chunked_array([pa.array([], pa.string())])
        order = pc.sort_indices(paths)
        odd = odd_path_rows(paths)
        odd_keys: dict[str, list[int]] = {}
        if odd:
            raw = paths.take(pa.array(odd, pa.int64())).to_pylist()
            for row, path in zip(odd, raw, strict=True):
                odd_keys.setdefault(canonical_path(path, table_root), []).append(row)
        keys = {k: tuple(v) for k, v in odd_keys.items()}
        return cls(table, paths, order, table.num_rows, (), table_root, keys)

    @property
    def sorted_paths(self) -> pa.Array:
        """The indexed paths in ascending order (a copy: for inspection only)."""
        return (
            pa.concat_arrays(self.paths.take(self.order).chunks)
            if len(self.order)
            else (pa.array([], pa.string()))
        )

    def _sorted_path(self, position: int) -> str:
        return self.paths[self.order[position].as_py()].as_py()  # type: ignore[no-any-return]

    @property
    def live_base_rows(self) -> int:
        return self.base_rows - len(self.dropped)

    def describes(self, table: pa.Table) -> bool:
        return self.table is table

    def is_worth_keeping(self) -> bool:
        """False once the overlay or the drops outgrow what a probe handles cheaply."""
        limit = max(OVERLAY_MIN_ROWS, self.base_rows // 8)
        overlay = self.table.num_rows - self.live_base_rows
        return overlay <= limit and len(self.dropped) <= limit

    def rows_with_paths(self, paths: Iterable[str], canonical: Iterable[str] = ()) -> list[int]:
        """Current row numbers (ascending) of every row whose raw path is in
        ``paths`` or whose canonical path is in ``canonical``."""
        wanted = sorted(set(paths))
        keys = set(canonical)
        rows: list[int] = []
        dropped = self.dropped
        built_hits = [row for key in keys for row in self.odd_keys.get(key, ())]
        for built_row in built_hits:
            at = bisect_left(dropped, built_row)
            if not (at < len(dropped) and dropped[at] == built_row):
                rows.append(built_row - at)
        for built_row in self._built_rows_of(wanted):
            at = bisect_left(dropped, built_row)
            if not (at < len(dropped) and dropped[at] == built_row):
                rows.append(built_row - at)
        overlay_start = self.live_base_rows
        if self.table.num_rows > overlay_start and (wanted or keys):
            overlay = contiguous(self.table.column("path").slice(overlay_start))
            if wanted:
                rows.extend(overlay_start + i for i in _positions_in(overlay, wanted))
            if keys:
                found = rows_with_canonical_paths(overlay, keys, self.table_root)
                rows.extend(overlay_start + i for i in found)
        return sorted(set(rows))

    def _built_rows_of(self, wanted: list[str]) -> list[int]:
        """Build-time rows whose raw path is in ``wanted`` (sorted, distinct)."""
        if len(wanted) > SEARCH_MAX_PATHS:
            return _positions_in(self.paths, wanted)
        found: list[int] = []
        for path in wanted:
            lo = self._first_at_least(path)
            hi = lo
            while hi < len(self.order) and self._sorted_path(hi) == path:
                hi += 1
            found.extend(self.order.slice(lo, hi - lo).to_pylist())
        return found

    def after(self, dropped_rows: Iterable[int], result: pa.Table) -> PathIndex:
        """The index of ``result``: this table without ``dropped_rows`` (current
        row numbers), then any appended rows."""
        built_rows = list(self.dropped)
        live_base = self.live_base_rows
        for row in dropped_rows:
            if row < live_base:  # overlay rows need no bookkeeping
                insort(built_rows, self._built_row(row))
        return PathIndex(
            result,
            self.paths,
            self.order,
            self.base_rows,
            tuple(built_rows),
            self.table_root,
            self.odd_keys,
        )

    def _built_row(self, row: int) -> int:
        """The build-time row number of current base row ``row``."""
        dropped = self.dropped
        lo, hi = row, row + len(dropped)
        while lo < hi:  # smallest r with r - (drops <= r) >= row
            mid = (lo + hi) // 2
            if mid - bisect_right(dropped, mid) < row:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _first_at_least(self, path: str) -> int:
        lo, hi = 0, len(self.order)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._sorted_path(mid) < path:
                lo = mid + 1
            else:
                hi = mid
        return lo


def _positions_in(paths: pa.Array | pa.ChunkedArray, wanted: list[str]) -> list[int]:
    """Positions of the values of ``paths`` that are in ``wanted`` (one hash probe)."""
    hits = pc.is_in(paths, value_set=pa.array(wanted, pa.string()))
    return pc.indices_nonzero(hits).to_pylist()  # type: ignore[no-any-return]
