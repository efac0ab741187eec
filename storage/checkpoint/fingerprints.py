"""Key fingerprints: the index in a shard sidecar's parquet footer of the
logical-file keys it holds.

A fingerprint is the high 32 bits of a key's 64-bit shard hash
(:func:`raydelta.protocol.shard_hash.shard_hash`; the shard is the hash
modulo the shard count, which depends mostly on the low bits). A shard
sidecar's footer records the fingerprints of its rows' keys (adds, then
removes, in file order) as base64 of little-endian ``uint32`` values, with
the name of the hash that made them. Between tasks rows carry their
fingerprint in :data:`FINGERPRINT_COLUMN`, so keys are hashed once.

Invariants:
- The index is conservative: a key the sidecar holds always has its
  fingerprint in the index, so a lookup can cause an unneeded rewrite but
  never a missed one. A sidecar without an index (or with another hash's)
  reads as None: "may hold every key".
- :data:`FINGERPRINT_COLUMN` is never written into a sidecar's rows.
- A key is fingerprinted in the spelling it is sharded by: canonical and
  relative to the table root (``table_root``), under the hash name
  :data:`~raydelta.protocol.shard_hash.SHARD_HASH`; footers written by
  root-free keying carry another hash name and read as None.
"""

from __future__ import annotations

import base64
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raydelta.protocol.actions import Sidecar
from raydelta.protocol.checkpoint_plan import SHARD_HASH, key_strings, shard_hash
from raydelta.storage.log.reader import sidecar_path
from raydelta.storage.log.store import LogStore

FOOTER_KEY_FINGERPRINTS = "raydelta.keyFingerprints"
"""Parquet footer key of a shard sidecar: base64 of the little-endian ``uint32``
fingerprints (:func:`key_fingerprints`) of every row's key."""
FOOTER_FINGERPRINT_HASH = "raydelta.keyFingerprintHash"
FINGERPRINT_COLUMN = "_fingerprint"
"""Extra column carried with rows between tasks (never written to a sidecar)."""

_HIGH_WORD = pa.scalar(32, pa.uint64())


def fingerprints_of_hashes(hashes: pa.Array) -> pa.Array:
    """The fingerprints of 64-bit shard hashes."""
    # the high half: the shard (hash mod n) depends mostly on the low bits
    return pc.shift_right(hashes, _HIGH_WORD).cast(pa.uint32())


def key_fingerprints(
    table: pa.Table, *, hash_name: str = SHARD_HASH, table_root: str | None = None
) -> pa.Array:
    """The ``uint32`` fingerprint of each row's key (relative to ``table_root``):
    the high half of its shard hash."""
    if table.num_rows == 0:
        return pa.array([], type=pa.uint32())
    return fingerprints_of_hashes(shard_hash(key_strings(table, table_root), hash_name))


def with_fingerprints(
    table: pa.Table, *, hash_name: str = SHARD_HASH, table_root: str | None = None
) -> pa.Table:
    """``table`` with its :data:`FINGERPRINT_COLUMN` (computed unless present)."""
    if FINGERPRINT_COLUMN in table.column_names:
        return table
    fingerprints = key_fingerprints(table, hash_name=hash_name, table_root=table_root)
    return table.append_column(FINGERPRINT_COLUMN, fingerprints)


def encode_fingerprints(fingerprints: pa.Array) -> str:
    """Fingerprints as footer text: base64 of their little-endian ``uint32`` bytes."""
    array = (
        fingerprints.combine_chunks() if isinstance(fingerprints, pa.ChunkedArray) else fingerprints
    )
    array = array.cast(pa.uint32())
    if len(array) == 0:
        return ""
    data = array.buffers()[1]
    raw = data.to_pybytes()[array.offset * 4 : (array.offset + len(array)) * 4]
    if sys.byteorder != "little":  # pragma: no cover (Arrow stores native order)
        raw = b"".join(raw[k : k + 4][::-1] for k in range(0, len(raw), 4))
    return base64.b64encode(raw).decode("ascii")


def decode_fingerprints(text: str) -> pa.Array:
    raw = base64.b64decode(text)
    if len(raw) % 4:
        raise ValueError("fingerprint bytes are not whole uint32 values")
    if sys.byteorder != "little":  # pragma: no cover
        raw = b"".join(raw[k : k + 4][::-1] for k in range(0, len(raw), 4))
    return pa.Array.from_buffers(pa.uint32(), len(raw) // 4, [None, pa.py_buffer(raw)])


def fingerprint_footer(adds: pa.Table, removes: pa.Table) -> dict[str, str]:
    """The footer key-value pairs indexing a shard sidecar's keys."""
    parts = [t.column(FINGERPRINT_COLUMN).combine_chunks() for t in (adds, removes) if t.num_rows]
    fingerprints = pa.concat_arrays(parts) if parts else pa.array([], type=pa.uint32())
    return {
        FOOTER_KEY_FINGERPRINTS: encode_fingerprints(fingerprints),
        FOOTER_FINGERPRINT_HASH: SHARD_HASH,
    }


def read_fingerprints(
    store: LogStore, sidecar: Sidecar, *, hash_name: str = SHARD_HASH
) -> pa.Array | None:
    """The key fingerprints a shard sidecar's footer records (None: no index)."""
    try:
        with store.open_input(sidecar_path(store, sidecar)) as handle:
            metadata = pq.read_metadata(handle).metadata or {}
    except FileNotFoundError:
        return None
    if metadata.get(FOOTER_FINGERPRINT_HASH.encode()) != hash_name.encode():
        return None
    text = metadata.get(FOOTER_KEY_FINGERPRINTS.encode())
    if text is None:
        return None
    try:
        return decode_fingerprints(text.decode("ascii"))
    except ValueError:
        return None
