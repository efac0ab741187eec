"""Z-order keys: rows of several columns mapped to one integer whose order
keeps rows that are close in every column close together.

Each column is turned into its dense rank (NULLs last, so any orderable
type works: numbers, strings, dates), scaled to ``bits`` bits so every
column weighs the same, and the bits of the columns are interleaved, most
significant first (column 0's top bit, column 1's top bit, ...). Sorting
rows by the key and cutting them into files gives files with tight min/max
ranges on every z-order column.

Invariants:
- Pure: Arrow arrays in, a ``uint64`` array out, one key per row.
- At most 63 bits in all: ``bits = min(31, 63 // len(columns))``.
- Monotone per column: with the other columns fixed, a larger value never
  gets a smaller key (dense ranks and the scaling keep order).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from raydelta.protocol.errors import InvalidArgumentError


def bits_per_column(columns: int) -> int:
    if columns < 1:
        raise InvalidArgumentError("z-order needs at least one column")
    return min(31, 63 // columns)


def scaled_ranks(values: pa.Array | pa.ChunkedArray, bits: int) -> pa.Array:
    """Dense ranks of ``values`` (NULLs last) scaled to ``[0, 2**bits)``."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if len(values) == 0:
        return pa.array([], pa.uint64())
    ranks = pc.rank(values, sort_keys="ascending", tiebreaker="dense")
    top = pc.max(ranks).as_py()
    if top <= 1:
        return pa.array([0] * len(values), pa.uint64())
    span = float(2**bits - 1)
    zero_based = pc.cast(pc.subtract(ranks, 1), pa.float64())
    scaled = pc.floor(pc.multiply(pc.divide(zero_based, float(top - 1)), span))
    return pc.cast(scaled, pa.uint64())


def z_keys(columns: Sequence[pa.Array | pa.ChunkedArray]) -> pa.Array:
    """The interleaved key of every row (see the module)."""
    bits = bits_per_column(len(columns))
    ranks = [scaled_ranks(c, bits) for c in columns]
    rows = len(ranks[0])
    key = pa.array([0] * rows, pa.uint64())
    one = pa.scalar(1, pa.uint64())
    for bit in range(bits - 1, -1, -1):
        for rank in ranks:
            picked = pc.bit_wise_and(pc.shift_right(rank, bit), one)
            key = pc.bit_wise_or(pc.shift_left(key, one), picked)
    return key


def z_order_indices(table: pa.Table, columns: Sequence[str]) -> pa.Array:
    """Row indices of ``table`` sorted by the z-order key of ``columns``."""
    if table.num_rows == 0:
        return pa.array([], pa.uint64())
    key = z_keys([table.column(c) for c in columns])
    return pc.sort_indices(key)


__all__ = ["bits_per_column", "scaled_ranks", "z_keys", "z_order_indices"]
