"""Metadata cleanup: delete expired commits, checkpoints and friends from ``_delta_log``.

The decisions are :mod:`raydelta.protocol.cleanup_rules`'; this module lists, reads,
writes and deletes.

Invariants (each one is what keeps the table readable if the process is
killed at any instant):
- Nothing is deleted unless a complete checkpoint not newer than the cutoff
  commit exists, and that checkpoint is checked first: every part readable,
  every sidecar it references present. A table whose cutoff checkpoint fails
  the check raises :class:`CorruptLogError` with nothing deleted.
- When the kept checkpoint is UUID-named and its version has no classic or
  multi-part checkpoint, a classic-named copy (same V2 content, same
  sidecars) is written *before* anything is deleted.
- Log files go oldest version first; the kept checkpoint, everything newer
  and ``_last_checkpoint`` are never deleted, so every retained version
  (kept checkpoint version .. latest) stays readable at every instant.
- Sidecars are considered only after the log files: the references are read
  from a fresh listing of the checkpoints that remain (so a checkpoint written
  meanwhile protects its sidecars), and a remaining checkpoint that cannot be
  read stops sidecar deletion (we cannot know what it references).
- ``delta.enableExpiredLogCleanup=false`` turns cleanup off (nothing is read
  beyond the snapshot). The table must pass the writer protocol check.
- ``after_delete(name)`` is called after each deletion (fault injection,
  progress); ``dry_run`` deletes and writes nothing and reports the same plan.
- A catalog-managed table is cleaned only with ``max_published_version``
  from its catalog (else :class:`CatalogManagedTableError`): files past it
  are left out of the plan, and staged commits at or below the kept
  checkpoint (all published, since publishing is in order) are deleted.
- Hadoop checksum files (``.<name>.crc``, written by delta-spark through
  Hadoop's local file system) are never log files: never listed, counted
  or reported as deleted files. Each deleted file's checksum file goes with
  it (:meth:`~raydelta.storage.log.store.LogStore.delete`, as delta-spark's
  own cleanup deletes through Hadoop), and a run also removes the checksum
  files of log files that are gone (left by earlier tools;
  ``orphanCrcsDeleted`` counts them). Only checksum files of recognised log
  file names are touched, never those of hidden temporary files (a Hadoop
  writer between its two renames), of unrecognised names, nor
  ``_last_checkpoint``'s (whose writers replace it by delete-then-rename);
  removing one can at worst leave a file unverified, never unreadable.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from raydelta.protocol.cleanup_rules import (
    LogCleanupPlan,
    cutoff_commit_version,
    log_cutoff_timestamp,
    plan_log_cleanup,
    remaining_checkpoint_files,
    sidecar_cutoff_timestamp,
    unreferenced_sidecars,
)
from raydelta.protocol.errors import CorruptLogError
from raydelta.protocol.file_names import (
    SIDECAR_DIR,
    STAGED_COMMITS_DIR,
    LogFile,
    LogFileKind,
    hadoop_crc_target,
    parse_log_file_name,
)
from raydelta.protocol.log_segment import CheckpointRef
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.protocol.table_features import CHECKPOINT_PROTECTION
from raydelta.protocol.table_properties import ENABLE_EXPIRED_LOG_CLEANUP
from raydelta.storage.checkpoint.writer import read_checkpoint_sidecars, write_v2_checkpoint
from raydelta.storage.log.reader import read_last_checkpoint, read_parquet_actions, sidecar_path
from raydelta.storage.log.store import LogStore, log_store_for
from raydelta.storage.snapshot import (
    commit_timestamps,
    load_head_from_store,
    load_snapshot_from_store,
)

logger = logging.getLogger(__name__)

AfterDelete = Callable[[str], None]
Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``."""


class MetadataCleanupReport(BaseModel):
    """What one metadata cleanup run did (or, for a dry run, would do)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    table_uri: str = Field(alias="tableUri")
    dry_run: bool = Field(alias="dryRun")
    now: int
    retention_ms: int = Field(alias="retentionMs")
    cutoff_timestamp: int | None = Field(default=None, alias="cutoffTimestamp")
    cutoff_version: int | None = Field(default=None, alias="cutoffVersion")
    kept_checkpoint_version: int | None = Field(default=None, alias="keptCheckpointVersion")
    kept_checkpoint: list[str] = Field(default_factory=list, alias="keptCheckpoint")
    classic_copy: str | None = Field(default=None, alias="classicCopy")
    """The classic-named copy of a UUID-named kept checkpoint, written (or to write)."""
    deleted: list[str] = Field(default_factory=list)
    """Names relative to ``_delta_log``, in deletion order (to delete, on a dry run)."""
    deleted_bytes: int = Field(default=0, alias="deletedBytes")
    counts: dict[str, int] = Field(default_factory=dict)
    """Deleted files by kind (``commit``, ``checkpoint_uuid``, ``sidecar``...)."""
    latest_version: int | None = Field(default=None, alias="latestVersion")
    skipped: str | None = None
    """Why nothing was deleted, when nothing was."""
    notes: list[str] = Field(default_factory=list)
    orphan_crcs_deleted: int = Field(default=0, alias="orphanCrcsDeleted")
    """Hadoop checksum files removed because their file was already gone
    (to remove, on a dry run); not in ``deleted``."""

    @property
    def retained_versions(self) -> tuple[int, int] | None:
        """Versions still reachable by time travel after the run."""
        if self.kept_checkpoint_version is None or self.latest_version is None:
            return None
        if self.skipped is not None:
            return None
        return self.kept_checkpoint_version, self.latest_version

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


def _list_log(store: LogStore) -> list[LogFile]:
    """Top-level versioned files plus staged commits."""
    return store.list_from(0) + store.list_dir(STAGED_COMMITS_DIR)


def _sidecar_name(store: LogStore, path: str) -> str | None:
    """``_sidecars/<name>`` for a sidecar path inside this log's ``_sidecars``, else None."""
    prefix = store.path_of(SIDECAR_DIR) + "/"
    if path.startswith(prefix) and "/" not in path[len(prefix) :]:
        return f"{SIDECAR_DIR}/{path[len(prefix) :]}"
    return None


def _checkpoint_sidecars(store: LogStore, file: LogFile) -> list[str]:
    """``_sidecars/...`` names one checkpoint file references (none for V1 layouts)."""
    if file.kind not in (LogFileKind.CHECKPOINT_UUID, LogFileKind.CHECKPOINT_CLASSIC):
        return []
    names = []
    for sidecar in read_checkpoint_sidecars(store, file):
        name = _sidecar_name(store, sidecar_path(store, sidecar))
        if name is not None:
            names.append(name)
    return names


def verify_checkpoint(store: LogStore, checkpoint: CheckpointRef) -> None:
    """Raise :class:`CorruptLogError` unless every part reads and every sidecar exists."""
    for part in checkpoint.files:
        try:
            if part.kind is LogFileKind.CHECKPOINT_MULTIPART:
                read_parquet_actions(store, store.path_of(part.name), ("protocol",))
                continue
            sidecars = read_checkpoint_sidecars(store, part)
        except FileNotFoundError as exc:
            raise CorruptLogError(f"checkpoint part {part.name} disappeared") from exc
        except (CorruptLogError, ValueError) as exc:
            raise CorruptLogError(f"checkpoint {part.name} cannot be read: {exc}") from exc
        for sidecar in sidecars:
            path = sidecar_path(store, sidecar)
            if not store.exists(path):
                raise CorruptLogError(
                    f"checkpoint {part.name} references sidecar {sidecar.path}, which is missing"
                )


def _write_classic_copy(
    uri: str,
    store: LogStore,
    checkpoint: CheckpointRef,
    classic_name: str,
    *,
    max_published_version: int | None = None,
) -> None:
    """Write ``<v>.checkpoint.parquet`` with the content of a UUID-named V2 checkpoint."""
    (uuid_file,) = checkpoint.files
    snapshot = load_snapshot_from_store(
        uri, store, version=checkpoint.version, latest_ratified_version=max_published_version
    )
    sidecars = read_checkpoint_sidecars(store, uuid_file)
    # The UUID checkpoint's own time: the view drops exactly what its writer dropped.
    as_of = uuid_file.modification_time or int(time.time() * 1000)
    write_v2_checkpoint(
        store,
        snapshot.state,
        sidecars or None,
        now_ms=as_of,
        fmt="parquet",
        naming="classic",
        update_last_checkpoint=False,
    )
    logger.info("metadata cleanup: wrote %s, a classic-named copy of %s", classic_name, uuid_file)


def _referenced_sidecars(
    store: LogStore, checkpoints: Sequence[LogFile]
) -> tuple[set[str] | None, str | None]:
    """Every sidecar the checkpoints reference; None and a reason if one cannot be read."""
    referenced: set[str] = set()
    for file in checkpoints:
        try:
            referenced.update(_checkpoint_sidecars(store, file))
        except FileNotFoundError:
            continue  # deleted meanwhile: it protects nothing any more
        except (CorruptLogError, ValueError) as exc:
            return None, f"checkpoint {file.name} cannot be read ({exc}); sidecars left alone"
    return referenced, None


def _delete(
    store: LogStore,
    files: Sequence[LogFile],
    *,
    after_delete: AfterDelete | None,
    progress: Progress | None,
    stage: str,
) -> None:
    for index, file in enumerate(files):
        store.delete(file.name)
        if after_delete is not None:
            after_delete(file.name)
        if progress is not None:
            progress(stage, index + 1, len(files))


# A little over 80 lines, kept whole: it builds one report in the order of the
# spec's steps (plan, verify, copy, delete), each a helper of this module.
def cleanup_metadata(
    uri: str,
    *,
    retention_ms: int | None = None,
    now_ms: int | None = None,
    dry_run: bool = False,
    storage_options: dict[str, Any] | None = None,
    store: LogStore | None = None,
    after_delete: AfterDelete | None = None,
    progress: Progress | None = None,
    max_published_version: int | None = None,
) -> MetadataCleanupReport:
    """Delete the table's expired log files (PROTOCOL.md "Metadata Cleanup").

    ``retention_ms`` overrides ``delta.logRetentionDuration``; ``now_ms``
    overrides the clock. Returns what was deleted, oldest first.
    ``max_published_version`` is required for a catalog-managed table: the
    newest version its catalog has published.

    >>> report = cleanup_metadata("file:///tmp/events", dry_run=True)   # doctest: +SKIP
    >>> report.kept_checkpoint_version, len(report.deleted)             # doctest: +SKIP
    """
    store = store or log_store_for(uri, storage_options)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    head = load_head_from_store(uri, store, latest_ratified_version=max_published_version)
    config = head.table_configuration
    config.ensure_writable()
    retention = config.log_retention_ms if retention_ms is None else retention_ms
    base: dict[str, Any] = {
        "table_uri": uri,
        "dry_run": dry_run,
        "now": now,
        "retention_ms": retention,
        "latest_version": head.version,
    }
    if not config.enable_expired_log_cleanup:
        return MetadataCleanupReport(**base, skipped=f"{ENABLE_EXPIRED_LOG_CLEANUP} is false")
    cutoff = log_cutoff_timestamp(now, retention)
    base["cutoff_timestamp"] = cutoff
    if progress is not None:
        progress("listing", 0, 0)
    listing = _list_log(store)
    if max_published_version is not None:
        listing = [f for f in listing if f.require_version() <= max_published_version]
    plan = _cleanup_plan(store, listing, config, cutoff)
    base.update(
        cutoff_version=plan.cutoff_version,
        kept_checkpoint_version=plan.kept_version,
        kept_checkpoint=[f.name for f in plan.kept_checkpoint.files]
        if plan.kept_checkpoint
        else [],
        notes=list(plan.notes),
    )
    if plan.skipped is not None or plan.kept_checkpoint is None:
        return MetadataCleanupReport(**base, skipped=plan.skipped or "nothing to clean up")

    return _carry_out(
        uri,
        store,
        plan,
        plan.kept_checkpoint,
        listing,
        base,
        now=now,
        dry_run=dry_run,
        after_delete=after_delete,
        progress=progress,
        max_published_version=max_published_version,
    )


def _carry_out(
    uri: str,
    store: LogStore,
    plan: LogCleanupPlan,
    kept: CheckpointRef,
    listing: list[LogFile],
    base: dict[str, Any],
    *,
    now: int,
    dry_run: bool,
    after_delete: AfterDelete | None,
    progress: Progress | None,
    max_published_version: int | None,
) -> MetadataCleanupReport:
    """Carry out ``plan``, which keeps the checkpoint ``kept`` (verified first;
    nothing is deleted on a dry run), and report it."""
    verify_checkpoint(store, kept)
    if plan.classic_copy_name is not None and not dry_run:
        _write_classic_copy(
            uri,
            store,
            kept,
            plan.classic_copy_name,
            max_published_version=max_published_version,
        )

    if not dry_run:
        _delete(
            store, plan.to_delete, after_delete=after_delete, progress=progress, stage="log files"
        )
    sidecars, note = _sidecars_to_delete(store, listing, plan, now=now, dry_run=dry_run)
    notes = list(plan.notes) + ([note] if note else [])
    if not dry_run:
        _delete(store, sidecars, after_delete=after_delete, progress=progress, stage="sidecars")
    deleted = [*plan.to_delete, *sidecars]
    orphans = _orphan_crcs(store)
    if not dry_run:
        orphans = [name for name in orphans if store.delete_orphan_hadoop_crc(name)]
    return MetadataCleanupReport(
        **{**base, "notes": notes},
        classicCopy=plan.classic_copy_name,
        deleted=[f.name for f in deleted],
        deletedBytes=sum(max(f.size, 0) for f in deleted),
        counts=dict(Counter(f.kind.value for f in deleted)),
        orphanCrcsDeleted=len(orphans),
    )


_CRC_DIRS = ("", SIDECAR_DIR, STAGED_COMMITS_DIR)
_NOT_SWEPT = (LogFileKind.LAST_CHECKPOINT, LogFileKind.UNKNOWN)


def _orphan_crcs(store: LogStore) -> list[str]:
    """Log file names whose Hadoop checksum file is there without them (module
    doc). On a dry run the files to delete are still there, so neither are
    theirs."""
    targets = []
    for subdir in _CRC_DIRS:
        for crc in store.list_hadoop_crcs(subdir):  # none on object stores: no listing below
            target = hadoop_crc_target(crc)
            parsed = None if target is None else parse_log_file_name(target)
            if parsed is not None and parsed.kind not in _NOT_SWEPT:
                targets.append(parsed.name)
    if not targets:
        return []
    present = {f.name for d in _CRC_DIRS for f in store.list_dir(d)}
    return [t for t in targets if t not in present]


def _cleanup_plan(
    store: LogStore, listing: list[LogFile], config: TableConfiguration, cutoff: int
) -> LogCleanupPlan:
    """What expires before ``cutoff`` (ms), from the commits' timestamps, the
    ``_last_checkpoint`` hint and the table's checkpoint protection."""
    stamps = commit_timestamps(store, listing, config)
    protection = (
        config.require_checkpoint_protection_before_version
        if config.is_feature_supported(CHECKPOINT_PROTECTION)
        else 0
    )
    return plan_log_cleanup(
        listing,
        cutoff_version=cutoff_commit_version(stamps, cutoff),
        last_checkpoint=read_last_checkpoint(store),
        checkpoint_protection_before=protection,
    )


def _sidecars_to_delete(
    store: LogStore, listing: Sequence[LogFile], plan: LogCleanupPlan, *, now: int, dry_run: bool
) -> tuple[list[LogFile], str | None]:
    sidecars = store.list_dir(SIDECAR_DIR)
    if not sidecars:
        return [], None
    if dry_run:
        remaining = remaining_checkpoint_files(listing, plan)
    else:
        remaining = [f for f in store.list_from(0) if f.is_checkpoint]
    referenced, note = _referenced_sidecars(store, remaining)
    if referenced is None:
        logger.warning("metadata cleanup: %s", note)
        return [], note
    return unreferenced_sidecars(
        sidecars, referenced, cutoff_ms=sidecar_cutoff_timestamp(now)
    ), None
