"""Names of the files in ``_delta_log``: build them and parse them.

Every name here is relative to the ``_delta_log`` directory
(``00000000000000000010.json``, ``_sidecars/<id>.parquet``,
``_staged_commits/00000000000000000005.<uuid>.json``).

Invariants:
- Builders and the parser agree: ``parse_log_file_name(commit_name(v)).version == v``
  and likewise for every builder.
- Versions are zero-padded to exactly 20 digits, multi-part indices to exactly
  10 digits, UUIDs are the canonical 8-4-4-4-12 hexadecimal form. Parsing is
  strict about all three: ``1.json`` or ``0001.json`` is *not* a commit.
  delta-spark's regexes accept any number of digits, but every writer pads
  (the spec says "must be zero padded"), and delta-kernel-rs is strict too;
  a short name is far more likely a stray file than a commit, and treating
  it as one could splice a foreign file into the table's history.
- ``parse_log_file_name`` returns ``None`` for names that are not log files at
  all (no 20-digit version prefix: ``abc.json``, Hadoop ``.crc`` side files,
  temporary files); a name with a valid version prefix but an unrecognised
  suffix is a :attr:`LogFileKind.UNKNOWN` file (so listings can skip it
  knowingly, as delta-kernel-rs does).
- Multi-part indices satisfy ``1 <= part <= num_parts``; compaction ranges
  satisfy ``start <= end``. Names breaking either are UNKNOWN.
- Hadoop checksum files (``.<name>.crc``, which Hadoop's local file system
  writes beside every file it writes, delta-spark's log and data files
  included) are never log files: :func:`parse_log_file_name` returns
  ``None`` for them. :func:`hadoop_crc_name` and :func:`hadoop_crc_target`
  map a file to its checksum file and back. They are not Delta's version
  checksum files ``<v>.crc`` (:func:`checksum_name`), which get a Hadoop
  checksum file of their own when delta-spark writes them (``.<v>.crc.crc``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Literal

DELTA_LOG_DIR = "_delta_log"
SIDECAR_DIR = "_sidecars"
STAGED_COMMITS_DIR = "_staged_commits"
LAST_CHECKPOINT_NAME = "_last_checkpoint"
HADOOP_CRC_SUFFIX = ".crc"

VERSION_DIGITS = 20
PART_DIGITS = 10
MAX_VERSION = 10**VERSION_DIGITS - 1
MAX_PART = 10**PART_DIGITS - 1

FileFormat = Literal["json", "parquet"]


class LogFileKind(Enum):
    """What a file in ``_delta_log`` is, judged by its name alone."""

    COMMIT = "commit"
    CHECKPOINT_CLASSIC = "checkpoint_classic"
    CHECKPOINT_MULTIPART = "checkpoint_multipart"
    CHECKPOINT_UUID = "checkpoint_uuid"
    COMPACTION = "compaction"
    CHECKSUM = "checksum"
    STAGED_COMMIT = "staged_commit"
    SIDECAR = "sidecar"
    LAST_CHECKPOINT = "last_checkpoint"
    UNKNOWN = "unknown"

    @property
    def is_checkpoint(self) -> bool:
        return self in _CHECKPOINT_KINDS


_CHECKPOINT_KINDS = frozenset(
    {
        LogFileKind.CHECKPOINT_CLASSIC,
        LogFileKind.CHECKPOINT_MULTIPART,
        LogFileKind.CHECKPOINT_UUID,
    }
)


@dataclass(frozen=True, slots=True)
class LogFile:
    """One file of a ``_delta_log`` listing, with what its name says.

    ``version`` is the (start) version; ``None`` only for sidecars and
    ``_last_checkpoint``. ``end_version`` is set for compactions only,
    ``part``/``num_parts`` for multi-part checkpoints only, ``uuid`` for
    UUID-named checkpoints and staged commits. ``size`` is ``-1`` when
    unknown; ``modification_time`` is in milliseconds since the epoch.
    """

    name: str
    kind: LogFileKind
    version: int | None = None
    size: int = -1
    modification_time: int = 0
    part: int | None = None
    num_parts: int | None = None
    uuid: str | None = None
    end_version: int | None = None
    format: FileFormat | None = None

    @property
    def is_checkpoint(self) -> bool:
        return self.kind.is_checkpoint

    @property
    def is_commit(self) -> bool:
        """A published commit (``<v>.json``) or a staged one."""
        return self.kind in (LogFileKind.COMMIT, LogFileKind.STAGED_COMMIT)

    @property
    def is_empty(self) -> bool:
        """Known to be zero bytes long (``size == -1`` means unknown, not empty)."""
        return self.size == 0

    def require_version(self) -> int:
        """The version, for kinds that always have one."""
        if self.version is None:
            raise ValueError(f"log file {self.name!r} ({self.kind.value}) has no version")
        return self.version


# --- builders ------------------------------------------------------------------


def _pad_version(version: int) -> str:
    if not 0 <= version <= MAX_VERSION:
        raise ValueError(f"version must be in [0, {MAX_VERSION}], got {version}")
    return f"{version:0{VERSION_DIGITS}d}"


def _check_uuid(uuid: str) -> str:
    if not _UUID_RE.fullmatch(uuid):
        raise ValueError(f"not a canonical UUID: {uuid!r}")
    return uuid


def commit_name(version: int) -> str:
    """``00000000000000000007.json``"""
    return f"{_pad_version(version)}.json"


def classic_checkpoint_name(version: int) -> str:
    """``00000000000000000010.checkpoint.parquet``"""
    return f"{_pad_version(version)}.checkpoint.parquet"


def multipart_checkpoint_name(version: int, part: int, parts: int) -> str:
    """``<v>.checkpoint.<part>.<parts>.parquet`` with 1-based ``part``."""
    if not 1 <= part <= parts <= MAX_PART:
        raise ValueError(f"need 1 <= part <= parts <= {MAX_PART}, got part={part} parts={parts}")
    indices = f"{part:0{PART_DIGITS}d}.{parts:0{PART_DIGITS}d}"
    return f"{_pad_version(version)}.checkpoint.{indices}.parquet"


def uuid_checkpoint_name(version: int, uuid: str, fmt: FileFormat) -> str:
    """``<v>.checkpoint.<uuid>.json`` or ``.parquet`` (a V2 checkpoint)."""
    if fmt not in ("json", "parquet"):
        raise ValueError(f"checkpoint format must be 'json' or 'parquet', got {fmt!r}")
    return f"{_pad_version(version)}.checkpoint.{_check_uuid(uuid)}.{fmt}"


def compaction_name(start: int, end: int) -> str:
    """``<start>.<end>.compacted.json`` covering commits ``[start, end]``."""
    if start > end:
        raise ValueError(f"compaction start {start} is after its end {end}")
    return f"{_pad_version(start)}.{_pad_version(end)}.compacted.json"


def checksum_name(version: int) -> str:
    """``<v>.crc`` (the version checksum file)."""
    return f"{_pad_version(version)}.crc"


def staged_commit_name(version: int, uuid: str) -> str:
    """``_staged_commits/<v>.<uuid>.json`` (relative to ``_delta_log``)."""
    return f"{STAGED_COMMITS_DIR}/{_pad_version(version)}.{_check_uuid(uuid)}.json"


def sidecar_name(uuid: str) -> str:
    """``_sidecars/<uuid>.parquet`` (relative to ``_delta_log``).

    The ``sidecar`` action's ``path`` is relative to ``_sidecars``; that is
    the part after the slash.
    """
    return f"{SIDECAR_DIR}/{_check_uuid(uuid)}.parquet"


def hadoop_crc_name(name: str) -> str:
    """The checksum file Hadoop's local file system keeps beside ``name``:
    ``.<base>.crc`` in the same directory (``_sidecars/a.parquet`` ->
    ``_sidecars/.a.parquet.crc``; ``00000000000000000003.crc`` ->
    ``.00000000000000000003.crc.crc``).

    It is Hadoop's ``ChecksumFileSystem`` layout: the magic ``crc\\0``, the
    bytes per checksum (big-endian int32, 512 by default), then one
    big-endian CRC32 per chunk of the file. Hadoop verifies it on every read
    and reads a file without one unverified.
    """
    directory, slash, base = name.rpartition("/")
    if not base:
        raise ValueError(f"not a file name: {name!r}")
    return f"{directory}{slash}.{base}{HADOOP_CRC_SUFFIX}"


def hadoop_crc_target(name: str) -> str | None:
    """The file whose Hadoop checksum file ``name`` is (``None`` when ``name``
    is not one: Hadoop's rule is a name starting with ``.`` and ending in ``.crc``)."""
    directory, slash, base = name.rpartition("/")
    if not (base.startswith(".") and base.endswith(HADOOP_CRC_SUFFIX)):
        return None
    target = base[1 : -len(HADOOP_CRC_SUFFIX)]
    if target in ("", ".", ".."):
        return None
    return f"{directory}{slash}{target}"


# --- parser --------------------------------------------------------------------

_V = rf"(?P<version>[0-9]{{{VERSION_DIGITS}}})"
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_UUID_RE = re.compile(_UUID)

_COMMIT_RE = re.compile(rf"{_V}\.json")
_CLASSIC_RE = re.compile(rf"{_V}\.checkpoint\.parquet")
_MULTIPART_RE = re.compile(
    rf"{_V}\.checkpoint\.(?P<part>[0-9]{{{PART_DIGITS}}})\.(?P<parts>[0-9]{{{PART_DIGITS}}})\.parquet"
)
_UUID_CHECKPOINT_RE = re.compile(rf"{_V}\.checkpoint\.(?P<uuid>{_UUID})\.(?P<fmt>json|parquet)")
_COMPACTION_RE = re.compile(rf"{_V}\.(?P<end>[0-9]{{{VERSION_DIGITS}}})\.compacted\.json")
_CHECKSUM_RE = re.compile(rf"{_V}\.crc")
_STAGED_RE = re.compile(rf"{_V}\.(?P<uuid>{_UUID})\.json")
_VERSION_PREFIX_RE = re.compile(rf"{_V}\..+")
# Sidecar names are any unique string; only a flat, visible ``*.parquet`` qualifies.
_SIDECAR_RE = re.compile(r"(?P<stem>[^/.][^/]*)\.parquet")


def parse_log_file_name(name: str, *, size: int = -1, modification_time: int = 0) -> LogFile | None:
    """Classify ``name`` (relative to ``_delta_log``) or return ``None``.

    ``size`` and ``modification_time`` are carried into the result unchanged.
    """
    if name == LAST_CHECKPOINT_NAME:
        return LogFile(
            name,
            LogFileKind.LAST_CHECKPOINT,
            size=size,
            modification_time=modification_time,
            format="json",
        )

    directory, _, base = name.rpartition("/")
    if directory == SIDECAR_DIR:
        m = _SIDECAR_RE.fullmatch(base)
        if m is None:
            return None
        return LogFile(
            name,
            LogFileKind.SIDECAR,
            size=size,
            modification_time=modification_time,
            format="parquet",
        )
    if directory == STAGED_COMMITS_DIR:
        m = _STAGED_RE.fullmatch(base)
        if m is None:
            return None
        return LogFile(
            name,
            LogFileKind.STAGED_COMMIT,
            version=int(m["version"]),
            uuid=m["uuid"],
            format="json",
            size=size,
            modification_time=modification_time,
        )
    if directory:
        return None
    return _parse_top_level(name, size=size, modification_time=modification_time)


def _parse_top_level(name: str, *, size: int, modification_time: int) -> LogFile | None:
    if m := _COMMIT_RE.fullmatch(name):
        return LogFile(
            name, LogFileKind.COMMIT, int(m["version"]), size, modification_time, format="json"
        )
    if m := _CLASSIC_RE.fullmatch(name):
        return LogFile(
            name,
            LogFileKind.CHECKPOINT_CLASSIC,
            int(m["version"]),
            size,
            modification_time,
            format="parquet",
        )
    if m := _MULTIPART_RE.fullmatch(name):
        part, parts = int(m["part"]), int(m["parts"])
        if 1 <= part <= parts:
            return LogFile(
                name,
                LogFileKind.CHECKPOINT_MULTIPART,
                int(m["version"]),
                size,
                modification_time,
                part=part,
                num_parts=parts,
                format="parquet",
            )
    elif m := _UUID_CHECKPOINT_RE.fullmatch(name):
        fmt: FileFormat = "json" if m["fmt"] == "json" else "parquet"
        return LogFile(
            name,
            LogFileKind.CHECKPOINT_UUID,
            int(m["version"]),
            size,
            modification_time,
            uuid=m["uuid"],
            format=fmt,
        )
    elif m := _COMPACTION_RE.fullmatch(name):
        start, end = int(m["version"]), int(m["end"])
        if start <= end:
            return LogFile(
                name,
                LogFileKind.COMPACTION,
                start,
                size,
                modification_time,
                end_version=end,
                format="json",
            )
    elif m := _CHECKSUM_RE.fullmatch(name):
        return LogFile(
            name, LogFileKind.CHECKSUM, int(m["version"]), size, modification_time, format="json"
        )
    if m := _VERSION_PREFIX_RE.fullmatch(name):
        return LogFile(name, LogFileKind.UNKNOWN, int(m["version"]), size, modification_time)
    return None
