"""Reading and writing deletion-vector files through fsspec.

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
- Paths are fsspec URLs (``file://``, ``memory://``, ``s3://``... or plain
  local paths). ``filesystem`` (an fsspec filesystem) wins over
  ``storage_options`` (read by :mod:`raydelta.storage.storage_options`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import fsspec
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
from raydelta.storage.storage_options import fsspec_options


def read_deleted_rows(
    descriptor: DeletionVectorDescriptor,
    table_root: str,
    *,
    filesystem: Any = None,
    storage_options: Mapping[str, Any] | None = None,
) -> BitMap64:
    """The rows ``descriptor`` deletes, as a bitmap, reading its file if it has one."""
    if descriptor.is_inline:
        return deleted_rows(descriptor)
    fs, path = _resolve(descriptor.absolute_path(table_root), filesystem, storage_options)
    offset = descriptor.file_offset
    # The first entry directly follows the version byte: fetch it too and check it.
    start = 0 if offset == FIRST_ENTRY_OFFSET else offset
    end = offset + entry_length(descriptor.size_in_bytes)
    try:
        chunk = fs.cat_file(path, start=start, end=end)
    except FileNotFoundError:
        raise DeletionVectorError(
            f"deletion vector file {path!r} of {descriptor.unique_id!r} does not exist"
        ) from None
    return deleted_rows(descriptor, file_bytes=bytes(chunk), file_bytes_start=start)


def read_deletion_vector(
    descriptor: DeletionVectorDescriptor,
    table_root: str,
    *,
    filesystem: Any = None,
    storage_options: Mapping[str, Any] | None = None,
) -> pa.UInt64Array:
    """The sorted row indexes ``descriptor`` deletes, reading its file if it has one."""
    return bitmap_to_arrow(
        read_deleted_rows(
            descriptor, table_root, filesystem=filesystem, storage_options=storage_options
        )
    )


def write_deletion_vector_file(
    table_root: str,
    bitmaps: Sequence[Iterable[int] | BitMap64],
    *,
    random_prefix: str = "",
    file_uuid: uuid.UUID | None = None,
    filesystem: Any = None,
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
    fs, path = _resolve(descriptors[0].absolute_path(table_root), filesystem, storage_options)
    if fs.exists(path):
        raise FileAlreadyExistsError(f"deletion vector file {path!r} already exists")
    if _is_local(fs):
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    fs.pipe_file(path, blob)
    return descriptors


def _resolve(
    url: str, filesystem: Any, storage_options: Mapping[str, Any] | None
) -> tuple[Any, str]:
    if filesystem is not None:
        return filesystem, filesystem._strip_protocol(url)
    fs, path = fsspec.core.url_to_fs(url, **fsspec_options(url, storage_options))
    return fs, path


def _is_local(fs: Any) -> bool:
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    return "file" in protocols or "local" in protocols
