"""Hadoop's checksum files (``.<name>.crc``) as tests write and check them.

Hadoop's ``ChecksumFileSystem`` (its local file system, which delta-spark
writes local tables through) keeps beside every file it writes a hidden
``.<name>.crc``: the magic ``crc\\0``, the bytes per checksum as a big-endian
int32 (512), then the big-endian CRC32 of each chunk of that many bytes (the
last chunk may be shorter). Hadoop verifies it on every read; a missing one
means an unverified read, a disagreeing one a ``ChecksumException``.

:func:`write_crc` writes one as Hadoop would (so tests can stand in for
delta-spark without a JVM); :func:`disagreeing_crcs` and :func:`orphan_crcs`
find the two ways a table can be left behind: a checksum file that no
longer matches its file, and one whose file is gone.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

MAGIC = b"crc\x00"
BYTES_PER_CHECKSUM = 512


def crc_bytes(data: bytes, bytes_per_checksum: int = BYTES_PER_CHECKSUM) -> bytes:
    """The content of the Hadoop checksum file of a file holding ``data``."""
    sums = b"".join(
        struct.pack(">I", zlib.crc32(data[i : i + bytes_per_checksum]))
        for i in range(0, len(data), bytes_per_checksum)
    )
    return MAGIC + struct.pack(">i", bytes_per_checksum) + sums


def crc_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.crc")


def write_crc(path: Path) -> Path:
    """Write ``path``'s Hadoop checksum file for its current content."""
    target = crc_path(path)
    target.write_bytes(crc_bytes(path.read_bytes()))
    return target


def crc_matches(crc: Path) -> bool:
    """Whether a checksum file agrees with its file (which must exist)."""
    body = crc.read_bytes()
    if body[:4] != MAGIC:
        return False
    (per_chunk,) = struct.unpack(">i", body[4:8])
    data = (crc.parent / crc.name[1 : -len(".crc")]).read_bytes()
    return body == crc_bytes(data, per_chunk)


def _crcs(root: Path) -> list[Path]:
    found = []
    for directory, _, names in os.walk(root):
        found += [Path(directory, n) for n in names if n.startswith(".") and n.endswith(".crc")]
    return sorted(found)


def _target(crc: Path) -> Path:
    return crc.parent / crc.name[1 : -len(".crc")]


def orphan_crcs(root: Path) -> list[str]:
    """Checksum files under ``root`` whose file is gone (root-relative)."""
    return [str(c.relative_to(root)) for c in _crcs(root) if not _target(c).exists()]


def disagreeing_crcs(root: Path) -> list[str]:
    """Checksum files under ``root`` that do not match their (present) file."""
    return [
        str(c.relative_to(root)) for c in _crcs(root) if _target(c).is_file() and not crc_matches(c)
    ]
