"""Z85, the Base85 variant Delta uses for inline deletion vectors and DV UUIDs.

Z85 (ZeroMQ RFC 32) maps every 4-byte big-endian block to 5 characters of an
85-character, JSON-friendly alphabet.

Invariants:
- :func:`encode` / :func:`decode` are strict RFC 32: the binary side is a
  multiple of 4 bytes, the text side a multiple of 5 characters, and a 5-char
  block whose value exceeds ``2**32 - 1`` is rejected (it decodes to no block).
- Payloads of any length use Delta's padding scheme (:func:`encode_padded` /
  :func:`decode_padded`): the bytes are zero-padded at the end up to a multiple
  of 4 and encoded as usual; the decoder is told the real size (the DV
  descriptor's ``sizeInBytes``) and drops the padding. The text carries no
  padding marker, so ``len(text) == 5 * ceil(size / 4)``.
- A DV UUID is its 16 bytes in big-endian (RFC 4122) order, i.e. exactly 20
  characters.
- Every failure raises :class:`~raydelta.protocol.errors.DeletionVectorError`.
"""

from __future__ import annotations

import struct
import uuid

from raydelta.protocol.errors import DeletionVectorError

ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
"""The 85 characters of Z85, in digit order."""

UUID_ENCODED_LENGTH = 20
"""Length of a Z85-encoded 16-byte UUID."""

_DIGIT_OF = {char: value for value, char in enumerate(ALPHABET)}
_MAX_BLOCK = 0xFFFFFFFF


def encode(data: bytes) -> str:
    """Encode ``data`` (length a multiple of 4) as Z85 text."""
    if len(data) % 4:
        raise DeletionVectorError(f"Z85 input length {len(data)} is not a multiple of 4")
    out: list[str] = []
    alphabet = ALPHABET
    for (block,) in struct.iter_unpack(">I", data):
        d4, block = divmod(block, 85**4)
        d3, block = divmod(block, 85**3)
        d2, block = divmod(block, 85**2)
        d1, d0 = divmod(block, 85)
        out.append(alphabet[d4] + alphabet[d3] + alphabet[d2] + alphabet[d1] + alphabet[d0])
    return "".join(out)


def decode(text: str) -> bytes:
    """Decode Z85 ``text`` (length a multiple of 5) to bytes."""
    if len(text) % 5:
        raise DeletionVectorError(f"Z85 input length {len(text)} is not a multiple of 5")
    digit_of = _DIGIT_OF
    blocks: list[int] = []
    try:
        for start in range(0, len(text), 5):
            value = 0
            for char in text[start : start + 5]:
                value = value * 85 + digit_of[char]
            if value > _MAX_BLOCK:
                raise DeletionVectorError(
                    f"Z85 block {text[start : start + 5]!r} at {start} exceeds 32 bits"
                )
            blocks.append(value)
    except KeyError as exc:
        raise DeletionVectorError(f"invalid Z85 character {exc.args[0]!r}") from None
    return struct.pack(f">{len(blocks)}I", *blocks)


def encode_padded(data: bytes) -> str:
    """Encode bytes of any length, zero-padding the last block (Delta's scheme)."""
    remainder = len(data) % 4
    if remainder:
        data = data + bytes(4 - remainder)
    return encode(data)


def decode_padded(text: str, size: int) -> bytes:
    """Decode ``text`` written by :func:`encode_padded` for a ``size``-byte payload.

    ``text`` must be exactly ``5 * ceil(size / 4)`` characters; the trailing
    padding bytes are dropped.
    """
    if size < 0:
        raise DeletionVectorError(f"negative payload size {size}")
    expected_length = 5 * -(-size // 4)
    if len(text) != expected_length:
        raise DeletionVectorError(
            f"Z85 text of {len(text)} characters cannot hold exactly {size} bytes "
            f"(expected {expected_length} characters)"
        )
    return decode(text)[:size]


def encode_uuid(value: uuid.UUID) -> str:
    """The 20-character Z85 form of a UUID (big-endian bytes)."""
    return encode(value.bytes)


def decode_uuid(text: str) -> uuid.UUID:
    """The UUID of a 20-character Z85 string."""
    if len(text) != UUID_ENCODED_LENGTH:
        raise DeletionVectorError(
            f"an encoded UUID has {UUID_ENCODED_LENGTH} characters, got {len(text)}: {text!r}"
        )
    return uuid.UUID(bytes=decode(text))
