"""Reading and writing deletion-vector files through the table's store.

Invariants:
- A read fetches only the byte range of the one entry it needs
  (``dataSize`` + bitmap + CRC-32), plus the version byte when the entry is
  the file's first (offset 1), and always verifies the CRC-32
  (:class:`~raydelta.protocol.errors.ChecksumMismatchError` on mismatch).
- Inline DVs are decoded without any I/O.
- A write creates a new file ``[<prefix>/]deletion_vector_<uuid4>.bin`` under
  the table root holding every given bitmap, and returns one ``u`` descriptor
  per bitmap, in order. A fresh UUID4 names each file, which is what keeps
  writers apart; an existing file at that name is refused
  (:class:`~raydelta.protocol.errors.FileAlreadyExistsError`), but that check is not
  atomic.
- ``table_root`` is the table's URI (``file://``, ``memory://``, ``s3://``...
  or a plain local path); a ``p`` descriptor's absolute path is resolved by
  the same store. ``store`` (the table's
  :class:`~raydelta.storage.log.store.LogStore`) wins over
  ``storage_options`` (read by :mod:`raydelta.storage.storage_options`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyroaring import BitMap64

from raydelta.protocol.deletion_vectors import (
    FIRST_ENTRY_OFFSET,
    DeletionVectorDescriptor,
    bitmap_to_arrow,
    deleted_rows,
    encode_bitmap,
    entry_length,
    serialize_dv_file,
    to_row_bitmap,
)
from raydelta.protocol.errors import DeletionVectorError, FileAlreadyExistsError
from raydelta.storage.log.store import LogStore, log_store_for


def read_deleted_rows(
    descriptor: DeletionVectorDescriptor,
    table_root: str,
    *,
    store: LogStore | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> BitMap64:
    """The rows ``descriptor`` deletes, as a bitmap, reading its file if it has one."""
    if descriptor.is_inline:
        return deleted_rows(descriptor)
    store, path = _resolve(descriptor.absolute_path(table_root), table_root, store, storage_options)
    offset = descriptor.file_offset
    # The first entry directly follows the version byte: fetch it too and check it.
    start = 0 if offset == FIRST_ENTRY_OFFSET else offset
    end = offset + entry_length(descriptor.size_in_bytes)
    try:
        chunk = store.read_range(path, start, end)
    except FileNotFoundError:
        raise DeletionVectorError(
            f"deletion vector file {path!r} of {descriptor.unique_id!r} does not exist"
        ) from None
    return deleted_rows(descriptor, file_bytes=bytes(chunk), file_bytes_start=start)


def read_deletion_vector(
    descriptor: DeletionVectorDescriptor,
    table_root: str,
    *,
    store: LogStore | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> pa.UInt64Array:
    """The sorted row indexes ``descriptor`` deletes, reading its file if it has one."""
    return bitmap_to_arrow(
        read_deleted_rows(descriptor, table_root, store=store, storage_options=storage_options)
    )


def write_deletion_vector_file(
    table_root: str,
    bitmaps: Sequence[Iterable[int] | BitMap64],
    *,
    random_prefix: str = "",
    file_uuid: uuid.UUID | None = None,
    store: LogStore | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> list[DeletionVectorDescriptor]:
    """Write ``bitmaps`` (sets of row indexes) into one new DV file under ``table_root``.

    Returns a storage-type ``u`` descriptor per bitmap, in order. Writes nothing
    and returns ``[]`` when ``bitmaps`` is empty. ``file_uuid`` names the file
    (a random UUID4 when absent).
    """
    if not bitmaps:
        return []
    file_uuid = file_uuid or uuid.uuid4()
    row_sets = [to_row_bitmap(rows) for rows in bitmaps]
    payloads = [encode_bitmap(rows) for rows in row_sets]
    blob, offsets = serialize_dv_file(payloads)
    descriptors = [
        DeletionVectorDescriptor.relative(
            file_uuid,
            offset=offset,
            size_in_bytes=len(payload),
            cardinality=len(rows),
            random_prefix=random_prefix,
        )
        for rows, payload, offset in zip(row_sets, payloads, offsets, strict=True)
    ]
    url = descriptors[0].absolute_path(table_root)
    store, path = _resolve(url, table_root, store, storage_options)
    if store.exists(path):
        raise FileAlreadyExistsError(f"deletion vector file {path!r} already exists")
    with store.open_output(path) as handle:
        handle.write(blob)
    return descriptors


def _resolve(
    url: str, table_root: str, store: LogStore | None, storage_options: Mapping[str, Any] | None
) -> tuple[LogStore, str]:
    if store is None:
        store = log_store_for(table_root, storage_options)
    return store, store.path_of_uri(url)
