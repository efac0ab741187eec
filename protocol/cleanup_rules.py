"""What metadata cleanup and VACUUM may delete, decided from values alone (pure).

Callers pass in the listing, the commit timestamps and the clock; nothing
here touches storage. Two families of rules:

**Metadata cleanup** (PROTOCOL.md "Metadata Cleanup", CATALOG_MANAGED.md):

- The cutoff is midnight UTC of ``now - retention`` (:func:`log_cutoff_timestamp`).
- The cutoff commit is the newest commit not newer than the cutoff. We take
  the newest commit ``v`` such that *every* listed commit up to ``v`` is not
  newer than the cutoff (:func:`cutoff_commit_version`): with monotonic
  timestamps that is the same commit, and it never skips over a commit that
  is newer than the cutoff when timestamps are not monotonic (an ICT
  enablement boundary).
- The kept checkpoint is the newest *complete* checkpoint not newer than the
  cutoff commit (chosen by :func:`raydelta.protocol.log_segment.build_log_segment`'s
  rules). Without one nothing is deleted (the delta-rs 3692 bug was deleting
  commits older than the cutoff although no checkpoint at or before them
  existed, leaving retained versions without protocol and metadata).
- It is lowered to the checkpoint ``_last_checkpoint`` names when that one is
  older and complete, so ``_last_checkpoint`` never points at a deleted file.
- With ``checkpointProtection``, history before
  ``delta.requireCheckpointProtectionBeforeVersion`` may only go all at once:
  a kept checkpoint older than that version means nothing is deleted.
- Deleted: commits, checksums and checkpoints (every naming scheme, every
  part, complete or not) *older* than the kept checkpoint; compactions
  starting at or before it; staged commits at or below it. Never the kept
  checkpoint, never anything newer, never ``_last_checkpoint``, never files
  the parser does not recognise. The order is oldest version first, so a run
  killed at any point leaves a log whose readable versions are a suffix that
  still contains every retained version.
- Sidecars are deleted when no remaining checkpoint references them and
  they are older than midnight UTC of ``now - 1 day``; a sidecar whose
  modification time is unknown (``<= 0``) is kept.

**VACUUM**:

- Paths from the log are URIs: they are percent-decoded, then resolved
  against the table root (:func:`resolve_path`). Absolute paths, ``file:``
  and other URIs are accepted only when they point inside the root; any
  ``..`` segment makes a path ineligible for deletion (it may still protect
  the file it names). Anything that cannot be resolved inside the root is
  never deleted.
- Hidden names start with ``_`` or ``.``; a hidden *directory* is still
  vacuumed when it is ``_change_data`` or a partition directory, i.e.
  ``<partition column>=<value>`` for one of the table's partition columns
  (as delta-spark decides). ``_delta_log`` is always hidden.
- A file is protected when a live ``add`` names it, an unexpired tombstone
  names it, or it is the deletion-vector file of a live ``add`` or an
  unexpired tombstone.
- A retention below the table's ``delta.deletedFileRetentionDuration`` is
  refused with :class:`RetentionTooShortError` unless forced.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote

from raydelta.protocol import z85
from raydelta.protocol.commit_timestamps import CommitTimestamp
from raydelta.protocol.deletion_vectors import dv_file_name
from raydelta.protocol.errors import (
    DeletionVectorError,
    InvalidTableError,
    RetentionTooShortError,
    TableNotFoundError,
    VersionNotFoundError,
)
from raydelta.protocol.file_names import (
    DELTA_LOG_DIR,
    LogFile,
    LogFileKind,
    classic_checkpoint_name,
)
from raydelta.protocol.last_checkpoint import LastCheckpointInfo
from raydelta.protocol.log_segment import CheckpointRef, build_log_segment
from raydelta.protocol.table_properties import DELETED_FILE_RETENTION_DURATION

DAY_MS = 24 * 3600 * 1000
HOUR_MS = 3600 * 1000
CHANGE_DATA_DIR = "_change_data"

# --- clocks and cutoffs ------------------------------------------------------------------


def midnight_utc(timestamp_ms: int) -> int:
    """The start (00:00 UTC) of the day holding ``timestamp_ms``."""
    return timestamp_ms - timestamp_ms % DAY_MS


def log_cutoff_timestamp(now_ms: int, log_retention_ms: int) -> int:
    """``cutOffTimestamp``: midnight UTC of ``now - delta.logRetentionDuration``."""
    if log_retention_ms < 0:
        raise ValueError(f"log retention must not be negative, got {log_retention_ms} ms")
    return midnight_utc(now_ms - log_retention_ms)


def sidecar_cutoff_timestamp(now_ms: int) -> int:
    """Sidecars modified at or after this are kept (less than a day old as of midnight UTC)."""
    return midnight_utc(now_ms - DAY_MS)


def cutoff_commit_version(timestamps: Sequence[CommitTimestamp], cutoff_ms: int) -> int | None:
    """The newest commit not newer than ``cutoff_ms`` (see module doc), or None."""
    found: int | None = None
    for commit in sorted(timestamps, key=lambda c: c.version):
        if commit.timestamp_ms > cutoff_ms:
            break
        found = commit.version
    return found


# --- metadata cleanup plan ---------------------------------------------------------------

_DELETE_ORDER = {
    LogFileKind.COMMIT: 0,
    LogFileKind.CHECKSUM: 1,
    LogFileKind.STAGED_COMMIT: 2,
    LogFileKind.COMPACTION: 3,
    LogFileKind.CHECKPOINT_CLASSIC: 4,
    LogFileKind.CHECKPOINT_MULTIPART: 4,
    LogFileKind.CHECKPOINT_UUID: 4,
}


@dataclass(frozen=True)
class LogCleanupPlan:
    """What metadata cleanup deletes from ``_delta_log`` (sidecars apart).

    ``skipped`` says why nothing is deleted; then ``kept_checkpoint`` may be None.
    """

    cutoff_version: int | None
    kept_checkpoint: CheckpointRef | None
    to_delete: tuple[LogFile, ...] = ()
    classic_copy_name: str | None = None
    """Set when the kept checkpoint is UUID-named and no classic or multi-part
    checkpoint of its version exists: write this copy before deleting."""
    skipped: str | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def kept_version(self) -> int | None:
        return None if self.kept_checkpoint is None else self.kept_checkpoint.version


def newest_complete_checkpoint(
    listing: Iterable[LogFile],
    *,
    at_or_before: int,
    hint: LastCheckpointInfo | None = None,
) -> CheckpointRef | None:
    """The newest complete checkpoint with version ``<= at_or_before`` (or None)."""
    checkpoints = [
        f
        for f in listing
        if f.is_checkpoint and f.version is not None and f.version <= at_or_before
    ]
    if not checkpoints:
        return None
    try:
        segment = build_log_segment(checkpoints, last_checkpoint_hint=hint)
    except (TableNotFoundError, VersionNotFoundError, InvalidTableError):
        return None
    return segment.checkpoint


def plan_log_cleanup(
    listing: Sequence[LogFile],
    *,
    cutoff_version: int | None,
    last_checkpoint: LastCheckpointInfo | None = None,
    checkpoint_protection_before: int = 0,
) -> LogCleanupPlan:
    """Which log files metadata cleanup deletes, given the listing (module doc).

    ``listing`` holds the top-level ``_delta_log`` files and the staged
    commits (``_staged_commits/...``); sidecars and unknown files in it are
    ignored. ``checkpoint_protection_before`` is
    ``delta.requireCheckpointProtectionBeforeVersion`` when the table supports
    ``checkpointProtection``, else 0.
    """
    if cutoff_version is None:
        return LogCleanupPlan(None, None, skipped="no commit is older than the cutoff")
    kept = newest_complete_checkpoint(listing, at_or_before=cutoff_version, hint=last_checkpoint)
    if kept is None:
        return LogCleanupPlan(
            cutoff_version,
            None,
            skipped=f"no complete checkpoint at or before the cutoff commit {cutoff_version}",
        )
    notes: list[str] = []
    if last_checkpoint is not None and last_checkpoint.version < kept.version:
        pointed = newest_complete_checkpoint(
            listing, at_or_before=last_checkpoint.version, hint=last_checkpoint
        )
        if pointed is not None and pointed.version == last_checkpoint.version:
            notes.append(
                f"_last_checkpoint names version {pointed.version}, older than the cutoff "
                f"checkpoint {kept.version}: keeping it"
            )
            kept = pointed
    if checkpoint_protection_before > 0 and kept.version < checkpoint_protection_before:
        return LogCleanupPlan(
            cutoff_version,
            kept,
            skipped=(
                "checkpointProtection: history before version "
                f"{checkpoint_protection_before} can only be removed all at once, and the "
                f"cutoff checkpoint is at version {kept.version}"
            ),
            notes=tuple(notes),
        )
    kept_names = {f.name for f in kept.files}
    to_delete = [
        f for f in listing if f.name not in kept_names and _expired_log_file(f, kept.version)
    ]
    to_delete.sort(key=lambda f: (f.require_version(), _DELETE_ORDER[f.kind], f.name))
    return LogCleanupPlan(
        cutoff_version,
        kept,
        tuple(to_delete),
        classic_copy_name=_classic_copy_name(listing, kept),
        notes=tuple(notes),
    )


def _expired_log_file(file: LogFile, kept_version: int) -> bool:
    version = file.version
    if version is None:
        return False
    if file.kind in (LogFileKind.COMMIT, LogFileKind.CHECKSUM) or file.is_checkpoint:
        return version < kept_version
    if file.kind in (LogFileKind.COMPACTION, LogFileKind.STAGED_COMMIT):
        return version <= kept_version
    return False


def _classic_copy_name(listing: Sequence[LogFile], kept: CheckpointRef) -> str | None:
    if kept.kind is not LogFileKind.CHECKPOINT_UUID:
        return None
    same_version = [f for f in listing if f.is_checkpoint and f.version == kept.version]
    other = newest_complete_checkpoint(
        [f for f in same_version if f.kind is not LogFileKind.CHECKPOINT_UUID],
        at_or_before=kept.version,
    )
    return None if other is not None else classic_checkpoint_name(kept.version)


def remaining_checkpoint_files(listing: Sequence[LogFile], plan: LogCleanupPlan) -> list[LogFile]:
    """Checkpoint files of ``listing`` that ``plan`` keeps (their sidecars are protected)."""
    doomed = {f.name for f in plan.to_delete}
    return [f for f in listing if f.is_checkpoint and f.name not in doomed]


def unreferenced_sidecars(
    sidecars: Sequence[LogFile], referenced: Iterable[str], *, cutoff_ms: int
) -> list[LogFile]:
    """Sidecars (``_sidecars/<name>``) that no checkpoint references and that
    were last modified before ``cutoff_ms`` (unknown times are kept)."""
    keep = set(referenced)
    return sorted(
        (
            s
            for s in sidecars
            if s.kind is LogFileKind.SIDECAR
            and s.name not in keep
            and 0 < s.modification_time < cutoff_ms
        ),
        key=lambda s: s.name,
    )


# --- VACUUM: paths -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TableRoot:
    """Where a table lives: its path as the filesystem names it, and the URI scheme.

    ``path`` has no trailing slash: ``/data/events`` (``file``),
    ``bucket/events`` (``s3``), ``/events`` (``memory``).
    """

    path: str
    scheme: str = "file"

    @property
    def is_local(self) -> bool:
        return self.scheme == "file"


@dataclass(frozen=True, slots=True)
class ResolvedPath:
    """A log path resolved against the table root.

    ``relative`` is the decoded path relative to the root (None when it
    points outside). ``issue`` says why the path must not be deleted even if
    ``relative`` is set (a ``..`` segment), or why it is outside.
    """

    raw: str
    relative: str | None
    issue: str | None = None

    @property
    def deletable(self) -> bool:
        return self.relative is not None and self.issue is None


_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "gs": "gcs", "abfss": "abfs", "local": "file"}
OUTSIDE_ROOT = "outside the table root"
DOT_DOT = "has a '..' segment"


def _canonical_scheme(scheme: str) -> str:
    lowered = scheme.lower()
    return _SCHEME_ALIASES.get(lowered, lowered)


def _inside(absolute: str, root: str) -> str | None:
    """``absolute`` relative to ``root`` (both already without a scheme), or None."""
    normalized = posixpath.normpath(absolute)
    root_norm = posixpath.normpath(root) if root else root
    if root_norm in ("/", "") and normalized.startswith("/"):
        relative = normalized.lstrip("/")
    elif normalized.startswith(root_norm + "/"):
        relative = normalized[len(root_norm) + 1 :]
    else:
        return None
    return relative or None


def resolve_path(raw: str, root: TableRoot) -> ResolvedPath:
    """Resolve a log ``path`` (or a DV's absolute path) against ``root`` (module doc)."""
    scheme_match = _SCHEME_RE.match(raw)
    decoded = unquote(raw)
    if scheme_match is not None and len(scheme_match.group(1)) > 1:
        scheme = _canonical_scheme(scheme_match.group(1))
        rest = unquote(raw[scheme_match.end() :])
        if scheme == "file":
            if rest.startswith("//"):
                authority, _, tail = rest[2:].partition("/")
                if authority not in ("", "localhost"):
                    return ResolvedPath(raw, None, f"{OUTSIDE_ROOT} (file URI of host {authority})")
                rest = "/" + tail
            if not root.is_local or not rest.startswith("/"):
                return ResolvedPath(raw, None, OUTSIDE_ROOT)
            return _absolute(raw, rest, root)
        if scheme != _canonical_scheme(root.scheme) or not rest.startswith("//"):
            return ResolvedPath(raw, None, OUTSIDE_ROOT)
        return _absolute(raw, rest[2:], root, rooted=False)
    if decoded.startswith("/"):
        if not (root.is_local or root.scheme == "memory"):
            return ResolvedPath(raw, None, OUTSIDE_ROOT)
        return _absolute(raw, decoded, root)
    segments = decoded.split("/")
    if ".." in segments:
        normalized = posixpath.normpath(decoded)
        if normalized == ".." or normalized.startswith("../") or normalized in (".", ""):
            return ResolvedPath(raw, None, f"{OUTSIDE_ROOT} ({DOT_DOT})")
        return ResolvedPath(raw, normalized, DOT_DOT)
    normalized = posixpath.normpath(decoded)
    if normalized in (".", ""):
        return ResolvedPath(raw, None, "names the table root itself")
    return ResolvedPath(raw, normalized)


def _absolute(raw: str, path: str, root: TableRoot, *, rooted: bool = True) -> ResolvedPath:
    if ".." in path.split("/"):
        # Resolve first: a path that leaves and re-enters the root is still refused.
        relative = _inside(path, root.path if rooted else root.path.lstrip("/"))
        if relative is None:
            return ResolvedPath(raw, None, f"{OUTSIDE_ROOT} ({DOT_DOT})")
        return ResolvedPath(raw, relative, DOT_DOT)
    relative = _inside(path, root.path if rooted else root.path.lstrip("/"))
    if relative is None:
        return ResolvedPath(raw, None, OUTSIDE_ROOT)
    return ResolvedPath(raw, relative)


def is_partition_directory(name: str, partition_columns: frozenset[str]) -> bool:
    """``<column>=<value>`` for one of the table's partition columns."""
    column, equals, _ = name.partition("=")
    return bool(equals) and column in partition_columns


def is_hidden_name(name: str, partition_columns: frozenset[str], *, is_dir: bool) -> bool:
    """Whether VACUUM skips this file or directory name (module doc)."""
    if not name.startswith(("_", ".")):
        return False
    if not is_dir:
        return True
    if name == DELTA_LOG_DIR:
        return True
    return not (name == CHANGE_DATA_DIR or is_partition_directory(name, partition_columns))


def is_hidden_path(relative: str, partition_columns: frozenset[str]) -> bool:
    """Whether any segment of a root-relative file path is hidden."""
    segments = relative.split("/")
    if any(is_hidden_name(s, partition_columns, is_dir=True) for s in segments[:-1]):
        return True
    return is_hidden_name(segments[-1], partition_columns, is_dir=False)


def dv_file_path(storage_type: str, path_or_inline_dv: str) -> str | None:
    """The path a deletion vector's file is named by, to resolve like a log path.

    ``u``: the root-relative ``[<prefix>/]deletion_vector_<uuid>.bin``;
    ``p``: the stored absolute path; ``i`` (inline) or malformed: None.
    """
    if storage_type == "p":
        return path_or_inline_dv
    if storage_type != "u":
        return None
    cut = len(path_or_inline_dv) - z85.UUID_ENCODED_LENGTH
    if cut < 0:
        return None
    try:
        name = dv_file_name(z85.decode_uuid(path_or_inline_dv[cut:]))
    except (DeletionVectorError, ValueError):
        return None
    prefix = path_or_inline_dv[:cut]
    return f"{prefix}/{name}" if prefix else name


# --- VACUUM: retention -------------------------------------------------------------------


def check_vacuum_retention(requested_ms: int | None, table_ms: int, *, force: bool) -> int:
    """The retention to use; a request shorter than the table's needs ``force``."""
    if requested_ms is None:
        return table_ms
    if requested_ms < 0:
        raise ValueError(f"retention must not be negative, got {requested_ms} ms")
    if requested_ms < table_ms and not force:
        raise RetentionTooShortError(
            f"a retention of {requested_ms / HOUR_MS:g} hours is shorter than the table's "
            f"{DELETED_FILE_RETENTION_DURATION} ({table_ms / HOUR_MS:g} hours); files still "
            "needed by readers of older snapshots or by writers that have not committed yet "
            "could be deleted. Pass force=True (--force) to run it anyway."
        )
    return requested_ms


def vacuum_cutoff_timestamp(now_ms: int, retention_ms: int) -> int:
    """Files older than this (and tombstones deleted before it) are expired."""
    return now_ms - retention_ms
