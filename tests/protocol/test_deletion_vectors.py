from __future__ import annotations

import json
import struct
import uuid
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyroaring import BitMap, BitMap64

from raydelta.protocol import z85
from raydelta.protocol.deletion_vectors import (
    MAGIC_NUMBER,
    NATIVE_MAGIC_NUMBER,
    DeletionVectorDescriptor,
    bitmap_to_arrow,
    decode_bitmap,
    deleted_rows,
    encode_bitmap,
    entry_length,
    parse_dv_file_entry,
    row_indexes,
    serialize_dv_file,
    unique_id_of,
)
from raydelta.protocol.errors import ChecksumMismatchError, DeletionVectorError

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "delta-spark-golden"
DV_TABLES = ["log-replay-dv-key-cases", "dv-partitioned-with-checkpoint", "dv-with-columnmapping"]

# PROTOCOL.md, "Deletion Vector Descriptor Schema" JSON examples 1-3.
SPEC_EXAMPLE_1: dict[str, Any] = {
    "storageType": "u",
    "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
    "offset": 4,
    "sizeInBytes": 40,
    "cardinality": 6,
}
SPEC_EXAMPLE_2: dict[str, Any] = {
    "storageType": "p",
    "pathOrInlineDv": "s3://mytable/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin",
    "offset": 4,
    "sizeInBytes": 40,
    "cardinality": 6,
}
SPEC_EXAMPLE_3: dict[str, Any] = {
    "storageType": "i",
    "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
    "sizeInBytes": 40,
    "cardinality": 6,
}
# An inline DV in the portable layout as delta-spark writes it: 38 bytes, so
# its Z85 text carries 2 bytes of padding.
UNALIGNED_INLINE: dict[str, Any] = {
    "storageType": "i",
    "pathOrInlineDv": "^Bg9^0rr910000000000iXQKl0rr91000625c8Xg0rri41POJ5",
    "sizeInBytes": 38,
    "cardinality": 3,
}

row_index = st.one_of(
    st.integers(0, 2**17),
    st.integers(0, 2**63 - 1),
    st.builds(lambda hi, lo: hi << 32 | lo, st.integers(0, 5), st.integers(0, 2**32 - 1)),
)
row_sets = st.lists(row_index, max_size=60)


def _portable_array_rows(data: bytes) -> list[int]:
    """Hand parser, independent of pyroaring, for a one-bucket, one-array-container bitmap."""
    assert struct.unpack_from("<I", data, 0)[0] == MAGIC_NUMBER
    assert struct.unpack_from("<Q", data, 4)[0] == 1
    key = struct.unpack_from("<I", data, 12)[0]
    cookie, containers = struct.unpack_from("<II", data, 16)
    assert (cookie, containers) == (12346, 1)
    high16, card_minus_one = struct.unpack_from("<HH", data, 24)
    values_at = 24 + 4 + 4  # header, then one 4-byte offset
    lows = struct.unpack_from(f"<{card_minus_one + 1}H", data, values_at)
    return [key << 32 | high16 << 16 | low for low in lows]


# --- descriptor -------------------------------------------------------------------


@pytest.mark.parametrize("raw", [SPEC_EXAMPLE_1, SPEC_EXAMPLE_2, SPEC_EXAMPLE_3, UNALIGNED_INLINE])
def test_descriptor_json_round_trip(raw: dict[str, Any]) -> None:
    descriptor = DeletionVectorDescriptor.model_validate(raw)
    assert descriptor.model_dump(by_alias=True, exclude_none=True) == raw
    assert json.loads(descriptor.model_dump_json(by_alias=True, exclude_none=True)) == raw


def test_descriptor_keeps_unknown_fields() -> None:
    raw = {**SPEC_EXAMPLE_1, "maxRowIndex": 99, "futureField": {"a": [1]}}
    descriptor = DeletionVectorDescriptor.model_validate(raw)
    assert descriptor.model_dump(by_alias=True, exclude_none=True) == raw


def test_descriptor_snake_case_names_and_frozen() -> None:
    descriptor = DeletionVectorDescriptor.model_validate(
        {"storage_type": "i", "path_or_inline_dv": "00000", "size_in_bytes": 4, "cardinality": 0}
    )
    assert descriptor.offset is None
    assert descriptor.model_dump(by_alias=True, exclude_none=True) == {
        "storageType": "i",
        "pathOrInlineDv": "00000",
        "sizeInBytes": 4,
        "cardinality": 0,
    }
    with pytest.raises(ValueError):
        setattr(descriptor, "cardinality", 3)  # noqa: B010


@pytest.mark.parametrize(
    "bad",
    [
        {**SPEC_EXAMPLE_1, "storageType": "x"},
        {**SPEC_EXAMPLE_1, "sizeInBytes": -1},
        {k: v for k, v in SPEC_EXAMPLE_1.items() if k != "cardinality"},
    ],
)
def test_parse_rejects_invalid_descriptors(bad: dict[str, Any]) -> None:
    with pytest.raises(DeletionVectorError):
        DeletionVectorDescriptor.parse(bad)


def test_unique_id() -> None:
    on_disk = DeletionVectorDescriptor.model_validate(SPEC_EXAMPLE_1)
    assert on_disk.unique_id == "uab^-aqEH.-t@S}K{vb[*k^@4"
    inline = DeletionVectorDescriptor.model_validate(SPEC_EXAMPLE_3)
    assert inline.unique_id == "i" + SPEC_EXAMPLE_3["pathOrInlineDv"]
    assert unique_id_of("u", "abc", 0) == "uabc@0"
    assert unique_id_of("p", "s3://x", None) == "ps3://x"


@settings(max_examples=100, deadline=None)
@given(st.sampled_from("uip"), st.text(max_size=30), st.none() | st.integers(0, 2**31 - 1))
def test_unique_id_of_matches_property(storage: str, path: str, offset: int | None) -> None:
    descriptor = DeletionVectorDescriptor.model_validate(
        {"storageType": storage, "pathOrInlineDv": path, "offset": offset}
        | {"sizeInBytes": 0, "cardinality": 0}
    )
    assert descriptor.unique_id == unique_id_of(storage, path, offset)


def test_absolute_path_of_spec_example_1() -> None:
    descriptor = DeletionVectorDescriptor.model_validate(SPEC_EXAMPLE_1)
    expected = "s3://mytable/ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    assert descriptor.absolute_path("s3://mytable/") == expected
    assert descriptor.absolute_path("s3://mytable") == expected
    assert descriptor.random_prefix == "ab"
    assert descriptor.file_uuid == uuid.UUID("d2c639aa-8816-431a-aaf6-d3fe2512ff61")


def test_absolute_path_without_prefix() -> None:
    descriptor = DeletionVectorDescriptor.model_validate(
        {**SPEC_EXAMPLE_1, "pathOrInlineDv": "^-aqEH.-t@S}K{vb[*k^"}
    )
    assert (
        descriptor.absolute_path("/data/t")
        == "/data/t/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    )


def test_absolute_path_of_spec_example_2_is_the_path() -> None:
    descriptor = DeletionVectorDescriptor.model_validate(SPEC_EXAMPLE_2)
    assert descriptor.absolute_path("s3://other/") == SPEC_EXAMPLE_2["pathOrInlineDv"]


def test_absolute_path_rejects_inline_and_short_uuid() -> None:
    with pytest.raises(DeletionVectorError):
        DeletionVectorDescriptor.model_validate(SPEC_EXAMPLE_3).absolute_path("s3://t")
    short = DeletionVectorDescriptor.model_validate({**SPEC_EXAMPLE_1, "pathOrInlineDv": "abc"})
    with pytest.raises(DeletionVectorError):
        short.absolute_path("s3://t")


@settings(max_examples=100, deadline=None)
@given(st.uuids(), st.text("abcdefghijklmnopqrstuvwxyz0123456789", max_size=4))
def test_relative_constructor_round_trips_uuid_and_prefix(
    file_uuid: uuid.UUID, prefix: str
) -> None:
    descriptor = DeletionVectorDescriptor.relative(
        file_uuid, offset=1, size_in_bytes=34, cardinality=1, random_prefix=prefix
    )
    assert descriptor.file_uuid == file_uuid
    assert descriptor.random_prefix == prefix
    sub = f"{prefix}/" if prefix else ""
    assert descriptor.absolute_path("memory://t") == (
        f"memory://t/{sub}deletion_vector_{file_uuid}.bin"
    )


# --- inline DVs -----------------------------------------------------------------


def test_spec_inline_example_decodes_to_stated_rows() -> None:
    descriptor = DeletionVectorDescriptor.model_validate(SPEC_EXAMPLE_3)
    rows = row_indexes(descriptor)
    assert rows.type == pa.uint64()
    assert rows.to_pylist() == [3, 4, 7, 11, 18, 29]


def test_spec_inline_example_is_the_big_endian_native_layout() -> None:
    # Why decode_bitmap reads the legacy layout: the spec example is written in it.
    data = DeletionVectorDescriptor.model_validate(SPEC_EXAMPLE_3).inline_bytes()
    assert struct.unpack_from(">I", data)[0] == NATIVE_MAGIC_NUMBER


def test_unaligned_inline_dv_decodes() -> None:
    descriptor = DeletionVectorDescriptor.model_validate(UNALIGNED_INLINE)
    data = descriptor.inline_bytes()
    assert len(data) == 38
    expected = _portable_array_rows(data)
    assert len(expected) == UNALIGNED_INLINE["cardinality"]
    assert row_indexes(descriptor).to_pylist() == expected


@settings(max_examples=200, deadline=None)
@given(row_sets)
def test_inline_constructor_round_trip(rows: list[int]) -> None:
    descriptor = DeletionVectorDescriptor.inline(rows)
    assert descriptor.storage_type == "i"
    assert descriptor.offset is None
    assert descriptor.cardinality == len(set(rows))
    assert len(descriptor.path_or_inline_dv) == 5 * -(-descriptor.size_in_bytes // 4)
    reparsed = DeletionVectorDescriptor.model_validate(
        json.loads(json.dumps(descriptor.model_dump(by_alias=True, exclude_none=True)))
    )
    assert row_indexes(reparsed).to_pylist() == sorted(set(rows))


def test_inline_cardinality_mismatch_is_an_error() -> None:
    descriptor = DeletionVectorDescriptor.model_validate({**SPEC_EXAMPLE_3, "cardinality": 5})
    with pytest.raises(DeletionVectorError):
        row_indexes(descriptor)


def test_inline_size_mismatch_is_an_error() -> None:
    descriptor = DeletionVectorDescriptor.model_validate({**SPEC_EXAMPLE_3, "sizeInBytes": 20})
    with pytest.raises(DeletionVectorError):
        row_indexes(descriptor)


# --- bitmap format --------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(row_sets)
def test_bitmap_round_trip(rows: list[int]) -> None:
    data = encode_bitmap(rows)
    assert struct.unpack_from("<I", data)[0] == MAGIC_NUMBER
    high_keys = sorted({row >> 32 for row in rows})
    assert struct.unpack_from("<Q", data, 4)[0] == len(high_keys)
    if high_keys:
        assert struct.unpack_from("<I", data, 12)[0] == high_keys[0]
    decoded = decode_bitmap(data)
    assert list(decoded) == sorted(set(rows))
    assert bitmap_to_arrow(decoded).to_pylist() == sorted(set(rows))


def test_bitmap_round_trip_large_with_all_container_kinds() -> None:
    rows = BitMap64(range(0, 3_000_000, 3))  # bitmap containers
    rows.update(range(5 * 2**32, 5 * 2**32 + 1_000_000))  # a run
    rows.update([2**62, 2**63 - 1])  # sparse arrays in high buckets
    decoded = decode_bitmap(encode_bitmap(rows))
    assert decoded == rows
    arrow = bitmap_to_arrow(decoded)
    assert len(arrow) == len(rows)
    assert arrow[0].as_py() == 0
    assert arrow[-1].as_py() == 2**63 - 1


def test_encode_accepts_bitmap_without_changing_it() -> None:
    rows = BitMap64(range(100))
    before = rows.serialize()
    assert decode_bitmap(encode_bitmap(rows)) == rows
    assert rows.serialize() == before


@pytest.mark.parametrize("bad", [[2**63], [-1], [2**64]])
def test_encode_rejects_out_of_range_rows(bad: list[int]) -> None:
    with pytest.raises(DeletionVectorError):
        encode_bitmap(bad)


def test_decode_rejects_key_with_top_bit_set() -> None:
    data = struct.pack("<I", MAGIC_NUMBER) + BitMap64([2**63 + 5]).serialize()
    with pytest.raises(DeletionVectorError):
        decode_bitmap(data)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xd1\xd3",
        struct.pack("<I", 12345) + BitMap64([1]).serialize(),
        struct.pack("<I", MAGIC_NUMBER),
        struct.pack("<I", MAGIC_NUMBER) + BitMap64([1, 2**40]).serialize()[:-3],
        struct.pack("<I", MAGIC_NUMBER) + b"garbage-garbage-garbage",
    ],
)
def test_decode_rejects_malformed(data: bytes) -> None:
    with pytest.raises(DeletionVectorError):
        decode_bitmap(data)


def test_decode_accepts_empty_buckets_between_keys() -> None:
    # delta-spark's RoaringBitmapArray is dense: it may write empty buckets.
    empty = BitMap().serialize()
    data = struct.pack("<IQ", MAGIC_NUMBER, 3)
    data += struct.pack("<I", 0) + BitMap([7]).serialize()
    data += struct.pack("<I", 1) + empty
    data += struct.pack("<I", 2) + BitMap([9]).serialize()
    assert list(decode_bitmap(data)) == [7, 2 * 2**32 + 9]


def _native(rows: list[int], byte_order: str) -> bytes:
    buckets = max((row >> 32 for row in rows), default=-1) + 1
    word = struct.Struct(f"{byte_order}i")
    out = struct.pack(f"{byte_order}I", NATIVE_MAGIC_NUMBER) + word.pack(buckets)
    for key in range(buckets):
        chunk = BitMap([row & 0xFFFFFFFF for row in rows if row >> 32 == key]).serialize()
        out += word.pack(len(chunk)) + chunk
    return out


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.builds(lambda hi, lo: hi << 32 | lo, st.integers(0, 3), st.integers(0, 2**32 - 1)),
        max_size=40,
    ),
    st.sampled_from("<>"),
)
def test_decode_native_layout_either_byte_order(rows: list[int], byte_order: str) -> None:
    assert list(decode_bitmap(_native(rows, byte_order))) == sorted(set(rows))


def test_decode_native_layout_rejects_truncation() -> None:
    data = _native([1, 2, 2**32 + 3], "<")
    with pytest.raises(DeletionVectorError):
        decode_bitmap(data[:-2])


# --- DV file format -------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(st.lists(row_sets, max_size=5))
def test_dv_file_round_trip(bitmaps_rows: list[list[int]]) -> None:
    payloads = [encode_bitmap(rows) for rows in bitmaps_rows]
    blob, offsets = serialize_dv_file(payloads)
    assert blob[0] == 1
    assert len(blob) == 1 + sum(entry_length(len(p)) for p in payloads)
    for rows, payload, offset in zip(bitmaps_rows, payloads, offsets, strict=True):
        assert struct.unpack_from(">I", blob, offset)[0] == len(payload)
        assert parse_dv_file_entry(blob, offset, len(payload)) == payload
        # The same entry from a byte range that starts at the entry.
        chunk = blob[offset : offset + entry_length(len(payload))]
        assert parse_dv_file_entry(chunk, offset, len(payload), blob_start=offset) == payload
        descriptor = DeletionVectorDescriptor.relative(
            uuid.uuid4(), offset=offset, size_in_bytes=len(payload), cardinality=len(set(rows))
        )
        assert row_indexes(descriptor, file_bytes=blob).to_pylist() == sorted(set(rows))


def test_dv_file_offsets_are_consecutive() -> None:
    payloads = [encode_bitmap([1]), encode_bitmap([2, 3])]
    _, offsets = serialize_dv_file(payloads)
    assert offsets == [1, 1 + entry_length(len(payloads[0]))]
    assert serialize_dv_file([]) == (b"\x01", [])


def _one_entry_file() -> tuple[bytearray, int, int]:
    payload = encode_bitmap([0, 7, 2**33])
    blob, (offset,) = serialize_dv_file([payload])
    return bytearray(blob), offset, len(payload)


def test_crc_is_checked() -> None:
    blob, offset, size = _one_entry_file()
    (crc,) = struct.unpack_from(">I", blob, offset + 4 + size)
    assert crc == zlib.crc32(bytes(blob[offset + 4 : offset + 4 + size]))
    blob[-1] ^= 0xFF
    with pytest.raises(ChecksumMismatchError):
        parse_dv_file_entry(bytes(blob), offset, size)


def test_corrupted_bitmap_byte_fails_the_crc() -> None:
    blob, offset, size = _one_entry_file()
    blob[offset + 4 + size // 2] ^= 0x01
    with pytest.raises(ChecksumMismatchError):
        parse_dv_file_entry(bytes(blob), offset, size)


def test_size_mismatch_with_descriptor() -> None:
    blob, offset, size = _one_entry_file()
    with pytest.raises(DeletionVectorError):
        parse_dv_file_entry(bytes(blob), offset, size - 1)


def test_truncated_file() -> None:
    blob, offset, size = _one_entry_file()
    with pytest.raises(DeletionVectorError):
        parse_dv_file_entry(bytes(blob[:-1]), offset, size)


def test_unknown_version_byte() -> None:
    blob, offset, size = _one_entry_file()
    blob[0] = 2
    with pytest.raises(DeletionVectorError):
        parse_dv_file_entry(bytes(blob), offset, size)


@pytest.mark.parametrize("offset", [0, -1])
def test_offset_inside_header(offset: int) -> None:
    blob, _, size = _one_entry_file()
    with pytest.raises(DeletionVectorError):
        parse_dv_file_entry(bytes(blob), offset, size)


def test_range_that_does_not_cover_the_offset() -> None:
    blob, offset, size = _one_entry_file()
    with pytest.raises(DeletionVectorError):
        parse_dv_file_entry(bytes(blob[5:]), offset, size, blob_start=5)


def test_on_disk_descriptor_needs_file_bytes() -> None:
    descriptor = DeletionVectorDescriptor.model_validate(SPEC_EXAMPLE_1)
    with pytest.raises(DeletionVectorError):
        deleted_rows(descriptor)


def test_on_disk_cardinality_mismatch() -> None:
    blob, offset, size = _one_entry_file()
    descriptor = DeletionVectorDescriptor.relative(
        uuid.uuid4(), offset=offset, size_in_bytes=size, cardinality=2
    )
    with pytest.raises(DeletionVectorError):
        deleted_rows(descriptor, file_bytes=bytes(blob))


def test_absent_offset_means_first_entry() -> None:
    blob, _, size = _one_entry_file()
    descriptor = DeletionVectorDescriptor(
        storageType="u",
        pathOrInlineDv=z85.encode_uuid(uuid.uuid4()),
        sizeInBytes=size,
        cardinality=3,
    )
    assert row_indexes(descriptor, file_bytes=bytes(blob)).to_pylist() == [0, 7, 2**33]


# --- real DV files from delta-spark -----------------------------------------------


def _logged_descriptors(table: Path) -> list[dict[str, Any]]:
    """Every DV descriptor in the JSON commits and checkpoints of ``table``."""
    found: list[dict[str, Any]] = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            for kind in ("add", "remove"):
                dv = action.get(kind, {}).get("deletionVector")
                if dv:
                    found.append(dv)
    for checkpoint in sorted((table / "_delta_log").glob("*.checkpoint.parquet")):
        columns = pq.read_table(checkpoint).to_pydict()
        for kind in ("add", "remove"):
            for action in columns.get(kind, []):
                if action and action.get("deletionVector"):
                    found.append(
                        {k: v for k, v in action["deletionVector"].items() if v is not None}
                    )
    return found


@pytest.mark.parametrize("table_name", DV_TABLES)
def test_golden_dv_files_decode_to_logged_cardinality(table_name: str) -> None:
    table = GOLDEN / table_name
    logged = _logged_descriptors(table)
    assert logged, "the golden table references deletion vectors"
    for raw in logged:
        descriptor = DeletionVectorDescriptor.parse(raw)
        path = Path(descriptor.absolute_path(str(table)))
        rows = row_indexes(descriptor, file_bytes=path.read_bytes())
        assert len(rows) == descriptor.cardinality
        assert rows.to_pylist() == sorted(set(rows.to_pylist()))
