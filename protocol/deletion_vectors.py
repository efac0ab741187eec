"""Deletion vectors: descriptors, the Roaring bitmap format and the DV file format.

A deletion vector (DV) is the set of row indexes (0-based positions in a data
file) that are logically deleted. The log carries a
:class:`DeletionVectorDescriptor`; the rows live either inline in the
descriptor (Z85 text) or in a DV file next to the data files.

Invariants:
- A serialized bitmap is the magic number ``1681511377`` (4 bytes, little
  endian) followed by a portable 64-bit Roaring bitmap: 8-byte little-endian
  bucket count, then per bucket, in ascending key order, a 4-byte key (the high
  32 bits of its rows) and a portable 32-bit Roaring bitmap (the low 32 bits).
  Every row index is below ``2**63`` (keys have their top bit clear).
  :func:`encode_bitmap` produces exactly that; :func:`decode_bitmap` reads it.
- :func:`decode_bitmap` also reads delta-spark's older "native" layout (magic
  ``1681511376``: a 4-byte bucket count, then per bucket key ``0, 1, ...`` a
  4-byte size and a 32-bit Roaring bitmap), framed little endian as
  delta-spark reads it, or big endian as in the spec's inline "JSON Example 3"
  (whose bytes start ``64 39 d3 d0``; delta-spark's reader refuses that one,
  but the spec states its rows, so we read it). The magic bytes tell the three
  apart unambiguously. Nothing here writes the native layout.
- A DV file is the version byte ``1`` followed by entries; an entry at
  ``offset`` is a big-endian 4-byte ``dataSize``, ``dataSize`` bytes of
  serialized bitmap and the big-endian CRC-32 of those bytes. A reader checks
  ``dataSize == sizeInBytes`` and the CRC-32.
- ``sizeInBytes`` counts the serialized bitmap (magic included), before Z85
  for inline DVs; the bitmap's cardinality must equal ``cardinality``.
- The descriptor model keeps unknown fields and dumps
  (``model_dump(by_alias=True, exclude_none=True)``) to the log's JSON.
- Everything here is pure: file bytes are passed in, never read.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pyroaring import BitMap, BitMap64

from raydelta.protocol import z85
from raydelta.protocol.errors import ChecksumMismatchError, DeletionVectorError
from raydelta.protocol.json_numbers import NonNegativeInt, NonNegativeLong

StorageType = Literal["u", "i", "p"]
"""``u``: file relative to the table root named by a UUID; ``i``: inline;
``p``: file at an absolute path."""

MAGIC_NUMBER = 1681511377
"""Prefix (little endian) of a serialized Delta bitmap in the portable format."""

NATIVE_MAGIC_NUMBER = 1681511376
"""Prefix of delta-spark's legacy "native" bitmap layout (read, never written)."""

DV_FILE_FORMAT_VERSION = 1
"""The first byte of every DV file."""

FIRST_ENTRY_OFFSET = 1
"""Offset of the first entry of a DV file (right after the version byte)."""

MAX_ROW_INDEX_EXCLUSIVE = 2**63
"""Row indexes must be below this: bucket keys keep their top bit clear."""

_MAGIC = struct.pack("<I", MAGIC_NUMBER)
_ENTRY_HEADER = struct.Struct(">I")
_CHECKSUM = struct.Struct(">I")


def unique_id_of(storage_type: str, path_or_inline_dv: str, offset: int | None) -> str:
    """The spec's ``uniqueId`` of a DV given its stored fields.

    ``<storageType><pathOrInlineDv>``, followed by ``@<offset>`` when an offset
    is present.
    """
    if offset is None:
        return f"{storage_type}{path_or_inline_dv}"
    return f"{storage_type}{path_or_inline_dv}@{offset}"


def dv_file_name(file_uuid: uuid.UUID) -> str:
    """The file name of a DV file: ``deletion_vector_<uuid>.bin``."""
    return f"deletion_vector_{file_uuid}.bin"


class DeletionVectorDescriptor(BaseModel):
    """The ``deletionVector`` struct of an ``add`` or ``remove`` action."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="allow")

    storage_type: StorageType = Field(alias="storageType")
    path_or_inline_dv: str = Field(alias="pathOrInlineDv")
    offset: NonNegativeInt | None = None
    size_in_bytes: NonNegativeInt = Field(alias="sizeInBytes")
    cardinality: NonNegativeLong

    @classmethod
    def parse(cls, value: dict[str, Any]) -> DeletionVectorDescriptor:
        """Validate a descriptor dict from the log, raising :class:`DeletionVectorError`."""
        try:
            return cls.model_validate(value)
        except ValidationError as exc:
            raise DeletionVectorError(f"invalid deletion vector descriptor: {exc}") from None

    @classmethod
    def inline(cls, rows: Iterable[int] | BitMap64) -> DeletionVectorDescriptor:
        """A descriptor holding ``rows`` inline (storage type ``i``)."""
        bitmap = to_row_bitmap(rows)
        data = encode_bitmap(bitmap)
        return cls(
            storageType="i",
            pathOrInlineDv=z85.encode_padded(data),
            sizeInBytes=len(data),
            cardinality=len(bitmap),
        )

    @classmethod
    def relative(
        cls,
        file_uuid: uuid.UUID,
        *,
        offset: int,
        size_in_bytes: int,
        cardinality: int,
        random_prefix: str = "",
    ) -> DeletionVectorDescriptor:
        """A descriptor of an entry in the DV file named by ``file_uuid`` (type ``u``)."""
        if "/" in random_prefix:
            raise DeletionVectorError(f"a random prefix cannot hold '/': {random_prefix!r}")
        return cls(
            storageType="u",
            pathOrInlineDv=random_prefix + z85.encode_uuid(file_uuid),
            offset=offset,
            sizeInBytes=size_in_bytes,
            cardinality=cardinality,
        )

    @property
    def unique_id(self) -> str:
        """The spec's derived ``uniqueId``."""
        return unique_id_of(self.storage_type, self.path_or_inline_dv, self.offset)

    @property
    def is_inline(self) -> bool:
        return self.storage_type == "i"

    @property
    def file_offset(self) -> int:
        """Where this DV's entry starts in its file (the first entry when absent)."""
        if self.is_inline:
            raise DeletionVectorError("an inline deletion vector has no file offset")
        return FIRST_ENTRY_OFFSET if self.offset is None else self.offset

    @property
    def random_prefix(self) -> str:
        """For type ``u``: the characters before the 20-character encoded UUID."""
        return self._split_relative()[0]

    @property
    def file_uuid(self) -> uuid.UUID:
        """For type ``u``: the UUID naming the DV file."""
        return z85.decode_uuid(self._split_relative()[1])

    def relative_path(self) -> str:
        """For type ``u``: the DV file's path relative to the table root."""
        name = dv_file_name(self.file_uuid)
        prefix = self.random_prefix
        return f"{prefix}/{name}" if prefix else name

    def absolute_path(self, table_root: str) -> str:
        """The DV file's path: under ``table_root`` for ``u``, as stored for ``p``.

        Inline DVs have no file: :class:`DeletionVectorError`.
        """
        if self.storage_type == "p":
            return self.path_or_inline_dv
        if self.storage_type == "u":
            return f"{table_root.rstrip('/')}/{self.relative_path()}"
        raise DeletionVectorError("an inline deletion vector has no path")

    def inline_bytes(self) -> bytes:
        """For type ``i``: the serialized bitmap held in ``pathOrInlineDv``."""
        if not self.is_inline:
            raise DeletionVectorError(f"storage type {self.storage_type!r} is not inline")
        return z85.decode_padded(self.path_or_inline_dv, self.size_in_bytes)

    def _split_relative(self) -> tuple[str, str]:
        if self.storage_type != "u":
            raise DeletionVectorError(
                f"storage type {self.storage_type!r} has no UUID-named relative file"
            )
        text = self.path_or_inline_dv
        cut = len(text) - z85.UUID_ENCODED_LENGTH
        if cut < 0:
            raise DeletionVectorError(
                f"pathOrInlineDv {text!r} is shorter than the {z85.UUID_ENCODED_LENGTH}"
                " characters of an encoded UUID"
            )
        return text[:cut], text[cut:]


# --- the bitmap format -------------------------------------------------------


def decode_bitmap(data: bytes) -> BitMap64:
    """The row indexes of a serialized Delta bitmap.

    Reads the portable layout (magic ``1681511377``) and the legacy native one
    (magic ``1681511376``, either framing); see the module docstring.
    """
    if len(data) < 4:
        raise DeletionVectorError(f"a serialized bitmap needs at least 4 bytes, got {len(data)}")
    (magic,) = struct.unpack_from("<I", data)
    if magic == MAGIC_NUMBER:
        portable = bytes(memoryview(data)[4:])
    elif magic == NATIVE_MAGIC_NUMBER:
        portable = _native_to_portable(data, "<")
    elif struct.unpack_from(">I", data)[0] == NATIVE_MAGIC_NUMBER:
        portable = _native_to_portable(data, ">")
    else:
        raise DeletionVectorError(
            f"unknown deletion vector format: magic number {magic}, expected {MAGIC_NUMBER}"
        )
    try:
        bitmap = BitMap64.deserialize(portable)
    except (ValueError, OverflowError, IndexError) as exc:
        raise DeletionVectorError(f"invalid portable 64-bit Roaring bitmap: {exc}") from None
    if bitmap and bitmap.max() >= MAX_ROW_INDEX_EXCLUSIVE:
        raise DeletionVectorError(f"row index {bitmap.max()} has a bucket key with its top bit set")
    return bitmap


def _native_to_portable(data: bytes, byte_order: Literal["<", ">"]) -> bytes:
    """Re-frame the legacy native layout as the portable one (per bucket, not per row)."""
    header = struct.Struct(f"{byte_order}i")
    try:
        (bucket_count,) = header.unpack_from(data, 4)
        if bucket_count < 0:
            raise DeletionVectorError(f"negative bucket count {bucket_count}")
        parts = [struct.pack("<Q", bucket_count)]
        position = 8
        for key in range(bucket_count):
            (size,) = header.unpack_from(data, position)
            position += header.size
            chunk = bytes(memoryview(data)[position : position + size])
            if size < 0 or len(chunk) != size:
                raise DeletionVectorError(f"bucket {key} of {size} bytes runs past the data")
            position += size
            parts.append(struct.pack("<I", key))
            parts.append(BitMap.deserialize(chunk).serialize())
    except (struct.error, ValueError, IndexError) as exc:
        raise DeletionVectorError(f"invalid native Roaring bitmap array: {exc}") from None
    return b"".join(parts)


def to_row_bitmap(rows: Iterable[int] | BitMap64) -> BitMap64:
    """A new bitmap of ``rows``, checked to lie in ``[0, 2**63)``; duplicates collapse."""
    try:
        bitmap = rows.copy() if isinstance(rows, BitMap64) else BitMap64(rows)
    except (OverflowError, TypeError, ValueError) as exc:
        raise DeletionVectorError(f"row indexes must be integers in [0, 2**63): {exc}") from None
    if bitmap and bitmap.max() >= MAX_ROW_INDEX_EXCLUSIVE:
        raise DeletionVectorError(
            f"row index {bitmap.max()} is not below 2**63 (bucket keys keep the top bit clear)"
        )
    return bitmap


def encode_bitmap(rows: Iterable[int] | BitMap64) -> bytes:
    """Serialize row indexes as a Delta bitmap (magic + portable 64-bit Roaring).

    Rows must be in ``[0, 2**63)``; duplicates collapse. A given bitmap is not
    modified.
    """
    bitmap = to_row_bitmap(rows)
    bitmap.run_optimize()
    return _MAGIC + bitmap.serialize()


def bitmap_to_arrow(bitmap: BitMap64) -> pa.UInt64Array:
    """The rows of ``bitmap`` as a sorted Arrow ``uint64`` array (no per-row Python)."""
    values = bitmap.to_array()
    return pa.Array.from_buffers(pa.uint64(), len(values), [None, pa.py_buffer(values)])


# --- the DV file format ------------------------------------------------------


def parse_dv_file_entry(
    blob: bytes, offset: int, size_in_bytes: int, *, blob_start: int = 0
) -> bytes:
    """The serialized bitmap of the entry at ``offset`` of a DV file, CRC checked.

    ``blob`` holds the file's bytes from file position ``blob_start`` on (the
    whole file when 0, in which case the version byte is checked too).
    Raises :class:`ChecksumMismatchError` when the CRC-32 differs and
    :class:`DeletionVectorError` for any other malformation.
    """
    if blob_start == 0:
        if not blob:
            raise DeletionVectorError("empty deletion vector file")
        if blob[0] != DV_FILE_FORMAT_VERSION:
            raise DeletionVectorError(
                f"unknown deletion vector file version {blob[0]}, expected {DV_FILE_FORMAT_VERSION}"
            )
    if offset < max(blob_start, FIRST_ENTRY_OFFSET):
        raise DeletionVectorError(
            f"entry offset {offset} is before the given bytes (which start at {blob_start})"
            if offset >= FIRST_ENTRY_OFFSET
            else f"entry offset {offset} points into the file header"
        )
    start = offset - blob_start
    data_start = start + _ENTRY_HEADER.size
    data_end = data_start + size_in_bytes
    if data_end + _CHECKSUM.size > len(blob):
        raise DeletionVectorError(
            f"deletion vector entry at offset {offset} of {size_in_bytes} bytes runs past "
            f"the end of the file ({blob_start + len(blob)} bytes)"
        )
    (data_size,) = _ENTRY_HEADER.unpack_from(blob, start)
    if data_size != size_in_bytes:
        raise DeletionVectorError(
            f"deletion vector entry at offset {offset} holds {data_size} bytes, "
            f"the descriptor says sizeInBytes={size_in_bytes}"
        )
    data = bytes(blob[data_start:data_end])
    (stored_crc,) = _CHECKSUM.unpack_from(blob, data_end)
    computed_crc = zlib.crc32(data)
    if stored_crc != computed_crc:
        raise ChecksumMismatchError(
            f"deletion vector entry at offset {offset}: stored CRC-32 {stored_crc:#010x}, "
            f"computed {computed_crc:#010x}"
        )
    return data


def entry_length(size_in_bytes: int) -> int:
    """Bytes an entry with ``size_in_bytes`` of bitmap takes in a DV file."""
    return _ENTRY_HEADER.size + size_in_bytes + _CHECKSUM.size


def serialize_dv_file(bitmaps: Sequence[bytes]) -> tuple[bytes, list[int]]:
    """A DV file holding the serialized ``bitmaps``, and the offset of each entry."""
    parts = [bytes([DV_FILE_FORMAT_VERSION])]
    offsets: list[int] = []
    position = FIRST_ENTRY_OFFSET
    for data in bitmaps:
        offsets.append(position)
        parts.append(_ENTRY_HEADER.pack(len(data)))
        parts.append(bytes(data))
        parts.append(_CHECKSUM.pack(zlib.crc32(data)))
        position += entry_length(len(data))
    return b"".join(parts), offsets


# --- descriptor → rows ---------------------------------------------------------


def deleted_rows(
    descriptor: DeletionVectorDescriptor,
    *,
    file_bytes: bytes | None = None,
    file_bytes_start: int = 0,
) -> BitMap64:
    """The rows ``descriptor`` deletes, as a bitmap.

    Inline DVs decode from the descriptor. On-disk DVs need ``file_bytes``: the
    DV file's bytes from position ``file_bytes_start`` on, covering the entry.
    The decoded cardinality must equal the descriptor's.
    """
    if descriptor.is_inline:
        data = descriptor.inline_bytes()
    else:
        if file_bytes is None:
            raise DeletionVectorError(
                f"deletion vector {descriptor.unique_id!r} is stored in a file: pass file_bytes"
            )
        data = parse_dv_file_entry(
            file_bytes,
            descriptor.file_offset,
            descriptor.size_in_bytes,
            blob_start=file_bytes_start,
        )
    bitmap = decode_bitmap(data)
    if len(bitmap) != descriptor.cardinality:
        raise DeletionVectorError(
            f"deletion vector {descriptor.unique_id!r} holds {len(bitmap)} rows, "
            f"the descriptor says cardinality={descriptor.cardinality}"
        )
    return bitmap


def row_indexes(
    descriptor: DeletionVectorDescriptor,
    *,
    file_bytes: bytes | None = None,
    file_bytes_start: int = 0,
) -> pa.UInt64Array:
    """The sorted row indexes ``descriptor`` deletes (see :func:`deleted_rows`)."""
    return bitmap_to_arrow(
        deleted_rows(descriptor, file_bytes=file_bytes, file_bytes_start=file_bytes_start)
    )
