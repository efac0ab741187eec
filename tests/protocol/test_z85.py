from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raydelta.protocol import z85
from raydelta.protocol.errors import DeletionVectorError

# RFC 32's own test vector.
RFC_BYTES = bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
RFC_TEXT = "HelloWorld"


def test_rfc_test_vector() -> None:
    assert z85.encode(RFC_BYTES) == RFC_TEXT
    assert z85.decode(RFC_TEXT) == RFC_BYTES


def test_alphabet_is_85_distinct_json_friendly_characters() -> None:
    assert len(z85.ALPHABET) == 85
    assert len(set(z85.ALPHABET)) == 85
    assert not set(z85.ALPHABET) & set("\"'\\ ,;`")


def test_extreme_blocks() -> None:
    assert z85.encode(bytes(4)) == "00000"
    assert z85.decode("00000") == bytes(4)
    top = z85.encode(b"\xff\xff\xff\xff")
    assert z85.decode(top) == b"\xff\xff\xff\xff"


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64).map(lambda b: b[: len(b) - len(b) % 4]))
def test_round_trip_multiple_of_4(data: bytes) -> None:
    text = z85.encode(data)
    assert len(text) == len(data) // 4 * 5
    assert set(text) <= set(z85.ALPHABET)
    assert z85.decode(text) == data


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_padded_round_trip_any_length(data: bytes) -> None:
    text = z85.encode_padded(data)
    assert len(text) == 5 * -(-len(data) // 4)
    assert z85.decode_padded(text, len(data)) == data
    # The padding is zero bytes at the end, as delta-spark writes it.
    padded = z85.decode(text)
    assert padded[: len(data)] == data
    assert set(padded[len(data) :]) <= {0}


def test_padded_aligned_input_is_plain_z85() -> None:
    assert z85.encode_padded(RFC_BYTES) == RFC_TEXT


@pytest.mark.parametrize("data", [b"\x01", b"\x01\x02", b"\x01\x02\x03"])
def test_padded_short_payloads(data: bytes) -> None:
    text = z85.encode_padded(data)
    assert len(text) == 5
    assert z85.decode_padded(text, len(data)) == data


@pytest.mark.parametrize("size", [3, 9, 12, -1])
def test_decode_padded_rejects_sizes_that_do_not_fit(size: int) -> None:
    # RFC_TEXT holds 8 bytes: only sizes 5..8 fit 10 characters.
    with pytest.raises(DeletionVectorError):
        z85.decode_padded(RFC_TEXT, size)


@pytest.mark.parametrize("size", [5, 6, 7, 8])
def test_decode_padded_accepts_sizes_that_fit(size: int) -> None:
    assert z85.decode_padded(RFC_TEXT, size) == RFC_BYTES[:size]


def test_encode_rejects_unaligned_input() -> None:
    with pytest.raises(DeletionVectorError):
        z85.encode(b"abc")


@pytest.mark.parametrize("text", ["Hell", "HelloWorld!", "Hello World", 'Hel"o', "Hellö"])
def test_decode_rejects_bad_length_or_characters(text: str) -> None:
    with pytest.raises(DeletionVectorError):
        z85.decode(text)


def test_decode_rejects_block_above_32_bits() -> None:
    # "#" is digit 84: "#####" is 85**5 - 1 > 2**32 - 1.
    with pytest.raises(DeletionVectorError):
        z85.decode("#####")


@settings(max_examples=200, deadline=None)
@given(st.uuids())
def test_uuid_round_trip(value: uuid.UUID) -> None:
    text = z85.encode_uuid(value)
    assert len(text) == z85.UUID_ENCODED_LENGTH
    assert z85.decode_uuid(text) == value
    assert z85.decode(text) == value.bytes  # big-endian (RFC 4122) byte order


def test_uuid_of_spec_example_1() -> None:
    # PROTOCOL.md "JSON Example 1": "ab" prefix + 20 chars -> d2c639aa-....
    assert z85.decode_uuid("^-aqEH.-t@S}K{vb[*k^") == uuid.UUID(
        "d2c639aa-8816-431a-aaf6-d3fe2512ff61"
    )


@pytest.mark.parametrize("text", ["", "^-aqEH.-t@S}K{vb[*k", "ab^-aqEH.-t@S}K{vb[*k^"])
def test_decode_uuid_needs_exactly_20_characters(text: str) -> None:
    with pytest.raises(DeletionVectorError):
        z85.decode_uuid(text)
