"""Hash functions: ``md5``, ``sha1``/``sha``, ``sha2``, ``crc32``, ``hash``,
``xxhash64``.

Invariants (Spark's):
- ``md5``/``sha1``/``sha2`` return lower-case hex strings of the UTF-8 bytes
  of a string (or the bytes of a binary); ``sha2`` takes 0 (as 256), 224,
  256, 384 or 512 bits and is NULL for any other length; ``crc32`` is a
  bigint.
- ``hash`` is Spark's Murmur3_x86_32 and ``xxhash64`` Spark's XXH64, both
  with seed 42, folded over the arguments (each argument's hash seeds the
  next; a NULL argument leaves the running hash unchanged), over Spark's
  encoding of each type: booleans, bytes, shorts, ints and dates as a 4-byte
  int; longs and timestamps as an 8-byte long; floats and doubles by their
  bits with ``-0.0`` as ``0.0``; decimals of precision <= 18 by their
  unscaled long; strings and binaries by their bytes (Murmur3 mixes the
  trailing bytes one by one, as Spark's ``hashUnsafeBytes`` does). Other
  types are refused.
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import struct
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlglot import exp

from raydelta.protocol.expression_types import Value
from raydelta.protocol.functions.registry import Registry
from raydelta.protocol.functions.values import arguments, constant, rowwise

if TYPE_CHECKING:
    from raydelta.protocol.expression_evaluation import Evaluator

REGISTRY = Registry("hashing")
SEED = 42
_M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF


def _bytes_of(ev: Evaluator, node: exp.Expr) -> Value:
    value = ev.value(node)
    if pa.types.is_binary(value.type) or pa.types.is_large_binary(value.type):
        return value
    if pa.types.is_null(value.type):
        return value.cast(pa.binary())
    if not (pa.types.is_string(value.type) or pa.types.is_large_string(value.type)):
        raise ev.fail(f"a string or binary is needed, got {value.type}")
    return value.cast(pa.binary())


def _digest(ev: Evaluator, node: exp.Expr, name: str) -> Value:
    return rowwise(lambda b: hashlib.new(name, b).hexdigest(), [_bytes_of(ev, node)], pa.string())


@REGISTRY.function("md5", nodes=(exp.MD5,))
def md5(ev: Evaluator, node: exp.MD5) -> Value:
    """The MD5 digest as 32 hex characters."""
    return _digest(ev, node.this, "md5")


@REGISTRY.function("sha1", "sha", nodes=(exp.SHA,))
def sha1(ev: Evaluator, node: exp.SHA) -> Value:
    """The SHA-1 digest as 40 hex characters."""
    return _digest(ev, node.this, "sha1")


@REGISTRY.function("sha2", nodes=(exp.SHA2,))
def sha2(ev: Evaluator, node: exp.SHA2) -> Value:
    """``sha2(s, bits)``: the SHA-2 digest of 224, 256, 384 or 512 bits."""
    length = node.args.get("length")
    bits = 256 if length is None else constant(ev, length, "the bit length of sha2")
    name = {0: "sha256", 224: "sha224", 256: "sha256", 384: "sha384", 512: "sha512"}.get(
        bits if isinstance(bits, int) else -1
    )
    if name is None:
        return pa.scalar(None, pa.string())
    return _digest(ev, node.this, name)


@REGISTRY.function("crc32", anonymous=("crc32",), arity=(1, 1))
def crc32(ev: Evaluator, node: exp.Anonymous) -> Value:
    """The CRC-32 checksum (bigint)."""
    return rowwise(zlib.crc32, [_bytes_of(ev, arguments(node)[0])], pa.int64())


# --- Spark's Murmur3_x86_32 -----------------------------------------------------------


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _mix_k1(k1: int) -> int:
    k1 = (k1 * 0xCC9E2D51) & _M32
    return (_rotl32(k1, 15) * 0x1B873593) & _M32


def _mix_h1(h1: int, k1: int) -> int:
    h1 = _rotl32(h1 ^ k1, 13)
    return (h1 * 5 + 0xE6546B64) & _M32


def _fmix32(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _M32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _M32
    return h1 ^ (h1 >> 16)


def murmur3_int(value: int, seed: int) -> int:
    return _fmix32(_mix_h1(seed, _mix_k1(value & _M32)), 4)


def murmur3_long(value: int, seed: int) -> int:
    value &= _M64
    h1 = _mix_h1(seed, _mix_k1(value & _M32))
    h1 = _mix_h1(h1, _mix_k1(value >> 32))
    return _fmix32(h1, 8)


def murmur3_bytes(data: bytes, seed: int) -> int:
    aligned = len(data) - len(data) % 4
    h1 = seed
    for (block,) in struct.iter_unpack("<I", data[:aligned]):
        h1 = _mix_h1(h1, _mix_k1(block))
    for byte in data[aligned:]:
        signed = byte - 256 if byte > 127 else byte
        h1 = _mix_h1(h1, _mix_k1(signed & _M32))
    return _fmix32(h1, len(data))


# --- XXH64 ----------------------------------------------------------------------------

_P1, _P2, _P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
_P4, _P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5


def _rotl64(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _round64(acc: int, lane: int) -> int:
    acc = (acc + lane * _P2) & _M64
    return (_rotl64(acc, 31) * _P1) & _M64


def _merge64(acc: int, value: int) -> int:
    acc ^= _round64(0, value)
    return (acc * _P1 + _P4) & _M64


def xxh64(data: bytes, seed: int) -> int:
    """The standard XXH64 of ``data`` (Spark's ``XXH64.hashUnsafeBytes``)."""
    length, i = len(data), 0
    if length >= 32:
        v = [(seed + _P1 + _P2) & _M64, (seed + _P2) & _M64, seed & _M64, (seed - _P1) & _M64]
        while i + 32 <= length:
            for lane in range(4):
                (word,) = struct.unpack_from("<Q", data, i + 8 * lane)
                v[lane] = _round64(v[lane], word)
            i += 32
        h = (_rotl64(v[0], 1) + _rotl64(v[1], 7) + _rotl64(v[2], 12) + _rotl64(v[3], 18)) & _M64
        for lane in v:
            h = _merge64(h, lane)
    else:
        h = (seed + _P5) & _M64
    h = (h + length) & _M64
    while i + 8 <= length:
        (word,) = struct.unpack_from("<Q", data, i)
        h = ((_rotl64(h ^ _round64(0, word), 27) * _P1) + _P4) & _M64
        i += 8
    if i + 4 <= length:
        (word,) = struct.unpack_from("<I", data, i)
        h = ((_rotl64(h ^ ((word * _P1) & _M64), 23) * _P2) + _P3) & _M64
        i += 4
    while i < length:
        h = (_rotl64(h ^ ((data[i] * _P5) & _M64), 11) * _P1) & _M64
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M64
    h ^= h >> 29
    h = (h * _P3) & _M64
    return h ^ (h >> 32)


# --- Spark's encoding of each type ------------------------------------------------------

_EPOCH = dt.date(1970, 1, 1)


def _bits(kind: str, value: float) -> int:
    signed = {"f": "<i", "d": "<q"}[kind]
    return int(struct.unpack(signed, struct.pack("<" + kind, value))[0])


def _encoder(ev: Evaluator, type_: pa.DataType) -> Callable[[Any], tuple[str, Any]]:
    """How a value of ``type_`` enters the hash: ("int", i), ("long", l) or ("bytes", b)."""
    if pa.types.is_boolean(type_):
        return lambda v: ("int", 1 if v else 0)
    if pa.types.is_integer(type_):
        return (lambda v: ("long", v)) if type_.bit_width == 64 else (lambda v: ("int", v))
    if pa.types.is_date32(type_):
        return lambda v: ("int", (v - _EPOCH).days)
    if pa.types.is_float32(type_):
        return lambda v: ("int", 0x7FC00000 if v != v else _bits("f", v + 0.0))
    if pa.types.is_float64(type_):
        return lambda v: ("long", 0x7FF8000000000000 if v != v else _bits("d", v + 0.0))
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return lambda v: ("bytes", v.encode())
    if pa.types.is_binary(type_):
        return lambda v: ("bytes", bytes(v))
    if pa.types.is_decimal(type_) and type_.precision <= 18:
        scale = type_.scale
        return lambda v: ("long", int(decimal.Decimal(v).scaleb(scale)))
    raise ev.refuse(f"hash of a {type_} value")


def _xxh64_int(value: int, seed: int) -> int:
    return xxh64(struct.pack("<i", value), seed)


def _xxh64_long(value: int, seed: int) -> int:
    return xxh64(struct.pack("<q", value), seed)


def _hash_arrays(ev: Evaluator, node: exp.Anonymous, kind: str) -> Value:
    values = [ev.array(ev.value(a)) for a in arguments(node)]
    if not values:
        raise ev.fail(f"{kind} needs at least one argument")
    ints: Callable[[int, int], int]
    longs: Callable[[int, int], int]
    if kind == "murmur3":
        ints, longs, raw = murmur3_int, murmur3_long, murmur3_bytes
        out_type, mask, bits = pa.int32(), _M32, 32
    else:
        ints, longs, raw = _xxh64_int, _xxh64_long, xxh64
        out_type, mask, bits = pa.int64(), _M64, 64
    columns = []
    for value in values:
        if pa.types.is_null(value.type):
            continue
        if pa.types.is_timestamp(value.type):
            value = value.cast(pa.timestamp("us", tz=value.type.tz)).cast(pa.int64())
        encode = _encoder(ev, value.type)
        columns.append([None if v is None else encode(v) for v in value.to_pylist()])
    rows = len(values[0])
    out: list[int] = []
    for row in range(rows):
        h = SEED
        for column in columns:
            item = column[row]
            if item is None:
                continue
            tag, payload = item
            if tag == "int":
                h = ints(payload, h)
            elif tag == "long":
                h = longs(payload, h)
            else:
                h = raw(payload, h)
            h &= mask
        out.append(h - (1 << bits) if h >= 1 << (bits - 1) else h)
    return pa.array(out, type=out_type)


@REGISTRY.function("hash", anonymous=("hash",), arity=(1, None))
def hash_(ev: Evaluator, node: exp.Anonymous) -> Value:
    """Spark's Murmur3 hash (int, seed 42) of the arguments."""
    return _hash_arrays(ev, node, "murmur3")


@REGISTRY.function("xxhash64", anonymous=("xxhash64",), arity=(1, None))
def xxhash64(ev: Evaluator, node: exp.Anonymous) -> Value:
    """Spark's XXH64 hash (bigint, seed 42) of the arguments."""
    return _hash_arrays(ev, node, "xxh64")
