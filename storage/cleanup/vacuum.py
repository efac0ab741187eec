"""VACUUM: delete data files the table no longer needs.

Two modes, one report (:class:`VacuumReport`):

- **full** lists the table directory (not following symlinks, skipping hidden
  files and directories, see :mod:`raydelta.protocol.cleanup_rules`) and deletes every
  file that is not protected and was last modified before the cutoff
  (``now - retention``).
- **lite** lists nothing: the candidates are the files (and deletion-vector
  files) of the tombstones that expired before the cutoff; those that are
  not protected (and still exist, in a real run) are deleted.

Protected, in both modes: every file a live ``add`` names, every file an
unexpired tombstone names, and the deletion-vector files of both, compared
as decoded paths relative to the table root.

Invariants:
- Nothing outside the table root is ever deleted: paths from the log that
  resolve outside it (absolute paths, ``file:`` and other URIs, ``..``
  segments) are ignored with a warning and listed in the report; on local
  disks the target's real parent directory must also lie inside the root's
  real path (a symlinked directory pointing elsewhere is refused), and
  symlinks themselves are never deleted or followed.
- ``_delta_log`` and other hidden names are never touched.
- The writer protocol check runs first, always (``vacuumProtocolCheck``).
- A retention shorter than ``delta.deletedFileRetentionDuration`` raises
  :class:`RetentionTooShortError` unless ``force``.
- ``dry_run`` deletes nothing. In full mode it returns the list a real run
  would delete. In lite mode it does not look at the files, as delta-spark's
  ``VACUUM ... LITE DRY RUN`` (and delta-rs' default dry run) do not: it
  lists every unprotected expired tombstone's file, present on disk or
  already gone (sizes as the log records them, else the file's, else 0); a
  real run deletes, and reports, only the ones that are regular files.
  ``after_delete(path)`` is called after each deletion, in order.
- Deletions are batched: up to :data:`DELETE_BATCH` files at once on
  threads, batches growing from one file, each batch finished (and its
  ``after_delete`` calls made) before the next starts. Every deletion is
  checked as before (a regular file inside the root's real path).
- Listing is pluggable (:data:`~raydelta.storage.cleanup.listing.Lister`):
  the CleanupActor fans
  :func:`~raydelta.storage.cleanup.listing.list_tree` out over Ray tasks.
- Hadoop checksum files (``.<name>.crc``, beside every data file delta-spark
  writes to a local disk) are never data: never listed, counted, reported
  or sized as files. On local disks a deleted file's checksum file is
  deleted with it, first (as delta-spark's VACUUM does through Hadoop), in
  both modes; a full run also deletes the checksum files whose file is gone
  (left by other tools) once they are older than the cutoff and their file
  is still absent when deleted (``orphanCrcsDeleted``), and a directory
  holding nothing else is removed like an empty one. Checksum files of
  hidden files are hidden files: never touched.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field

from raydelta.protocol.cleanup_rules import (
    HOUR_MS,
    TableRoot,
    check_vacuum_retention,
    vacuum_cutoff_timestamp,
)
from raydelta.protocol.file_names import hadoop_crc_name, hadoop_crc_target
from raydelta.storage.cleanup.listing import (
    DirectoryListing,
    Lister,
    list_parallel,
)
from raydelta.storage.cleanup.log_references import VacuumLogView, load_vacuum_view, log_paths
from raydelta.storage.cleanup.tombstones import LocalGuard, lite_candidates
from raydelta.storage.log.store import LogStore, log_store_for
from raydelta.storage.snapshot import Snapshot

logger = logging.getLogger(__name__)

Mode = Literal["full", "lite"]
AfterDelete = Callable[[str], None]
Progress = Callable[[str, int, int], None]
MAX_WARNINGS_LOGGED = 20


class IgnoredPath(BaseModel):
    """A path from the log that VACUUM refused to touch, and why."""

    model_config = ConfigDict(frozen=True)

    path: str
    reason: str


class VacuumReport(BaseModel):
    """What one VACUUM did (or, for a dry run, would do)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    table_uri: str = Field(alias="tableUri")
    version: int
    mode: Mode
    dry_run: bool = Field(alias="dryRun")
    now: int
    retention_ms: int = Field(alias="retentionMs")
    cutoff_timestamp: int = Field(alias="cutoffTimestamp")
    files: list[str] = Field(default_factory=list)
    """Root-relative paths deleted (to delete, on a dry run), sorted. A lite dry
    run lists its candidates without looking at the disk (module doc)."""
    total_bytes: int = Field(default=0, alias="bytes")
    dirs: list[str] = Field(default_factory=list)
    """Directories removed because they ended up empty (to remove, on a dry run)."""
    num_listed: int | None = Field(default=None, alias="numListed")
    """Files seen by the listing (full mode)."""
    ignored: list[IgnoredPath] = Field(default_factory=list)
    orphan_crcs_deleted: int = Field(default=0, alias="orphanCrcsDeleted")
    """Hadoop checksum files deleted (to delete, on a dry run) because their
    file was gone; not in ``files`` (module doc)."""

    @property
    def num_files(self) -> int:
        return len(self.files)

    @property
    def retention_hours(self) -> float:
        return self.retention_ms / HOUR_MS

    def to_json_dict(self) -> dict[str, Any]:
        body = self.model_dump(by_alias=True, mode="json")
        body["numFiles"] = self.num_files
        body["retentionHours"] = self.retention_hours
        return body


# --- planning and running -------------------------------------------------------------------


def table_root_of(store: LogStore) -> TableRoot:
    return TableRoot(store.table_root, store.scheme)


@dataclass
class VacuumPlan:
    """The files one VACUUM deletes (``files``: relative path, size, mtime)."""

    snapshot_version: int
    mode: Mode
    retention_ms: int
    cutoff_ms: int
    now_ms: int
    files: pa.Table
    dirs: list[str]
    num_listed: int | None
    ignored: dict[str, str]
    orphan_crcs: list[str] = field(default_factory=list)
    """Root-relative Hadoop checksum files whose file is gone (module doc)."""


def _warn_ignored(ignored: dict[str, str]) -> None:
    for index, (path, reason) in enumerate(sorted(ignored.items())):
        if index == MAX_WARNINGS_LOGGED:
            logger.warning("vacuum: %d more paths ignored", len(ignored) - index)
            break
        logger.warning("vacuum: ignoring %r from the log: %s", path, reason)


def _orphan_crcs(listing: DirectoryListing, cutoff_ms: int) -> list[str]:
    """Checksum files whose file is gone, older than the cutoff (unknown times are young)."""
    return sorted(
        c.path for c in listing.crcs if c.target is None and 0 < c.modification_time < cutoff_ms
    )


def _removable_dirs(
    listing: DirectoryListing, doomed: set[str], orphans: set[str], cutoff_ms: int
) -> list[str]:
    """Directories that will be empty once ``doomed`` files (with their checksum
    files) and ``orphans`` are gone, deepest first."""
    remaining: dict[str, int] = {path: kept for path, _, kept in listing.dirs}
    old = {path for path, mtime, _ in listing.dirs if 0 < mtime < cutoff_ms}
    for path in listing.files.column("path").to_pylist():
        parent = path.rpartition("/")[0]
        if parent and path not in doomed and parent in remaining:
            remaining[parent] += 1
    for crc in listing.crcs:
        parent = crc.path.rpartition("/")[0]
        stays = crc.target not in doomed if crc.target is not None else crc.path not in orphans
        if parent and stays and parent in remaining:
            remaining[parent] += 1
    removable = []
    for path in sorted(remaining, key=lambda p: (-p.count("/"), p)):
        parent = path.rpartition("/")[0]
        if remaining[path] == 0 and path in old:
            removable.append(path)
        elif parent in remaining:
            remaining[parent] += 1
    return removable


def plan_vacuum(
    snapshot: Snapshot | VacuumLogView,
    store: LogStore,
    *,
    retention_hours: float | None = None,
    lite: bool = False,
    force: bool = False,
    now_ms: int | None = None,
    lister: Lister | None = None,
    check_existence: bool = True,
) -> VacuumPlan:
    """Decide what VACUUM deletes (nothing is deleted here).

    ``check_existence=False`` (lite mode, for a dry run) keeps the candidates
    without asking the filesystem which still exist (module doc)."""
    config = snapshot.table_configuration
    config.ensure_writable()  # vacuumProtocolCheck: always check the writer protocol
    requested = None if retention_hours is None else round(retention_hours * HOUR_MS)
    retention = check_vacuum_retention(requested, config.deleted_file_retention_ms, force=force)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff = vacuum_cutoff_timestamp(now, retention)
    root = table_root_of(store)
    partition_columns = frozenset(config.partition_columns) | frozenset(
        config.physical_partition_columns
    )
    paths = log_paths(snapshot, root, cutoff_ms=cutoff)
    ignored = dict(paths.ignored)
    orphan_crcs: list[str] = []
    if lite:
        files = lite_candidates(
            store, paths, partition_columns, ignored, check_existence=check_existence
        )
        dirs: list[str] = []
        num_listed = None
    else:
        listing = (lister or list_parallel)(store, partition_columns, paths.protected)
        for link in listing.symlinks:
            logger.info("vacuum: not following or deleting symlink %s", link)
        mtimes = listing.files.column("modification_time")
        # An unknown modification time (0) never counts as old.
        old = pc.and_(
            pc.less(mtimes, pa.scalar(cutoff, pa.int64())),
            pc.greater(mtimes, pa.scalar(0, pa.int64())),
        )
        files = listing.files.filter(old)
        doomed = set(files.column("path").to_pylist())
        orphan_crcs = _orphan_crcs(listing, cutoff)
        dirs = _removable_dirs(listing, doomed, set(orphan_crcs), cutoff) if root.is_local else []
        num_listed = listing.num_seen
    _warn_ignored(ignored)
    files = files.sort_by("path")
    return VacuumPlan(
        snapshot_version=snapshot.version,
        mode="lite" if lite else "full",
        retention_ms=retention,
        cutoff_ms=cutoff,
        now_ms=now,
        files=files,
        dirs=dirs,
        num_listed=num_listed,
        ignored=ignored,
        orphan_crcs=orphan_crcs,
    )


DELETE_BATCH = 1024
"""Most deletions in flight at once; batches grow 1, 2, 4, ... up to it."""
DELETE_THREADS = 8
"""Threads deleting one batch (``unlink`` and object-store requests release the GIL)."""


def _delete_batches(count: int) -> list[range]:
    """Index ranges of the deletion batches: 1, 2, 4, ... files, then DELETE_BATCH each
    (a small VACUUM never deletes more at once than it needs to)."""
    batches = []
    start, size = 0, 1
    while start < count:
        batches.append(range(start, min(count, start + size)))
        start += size
        size = min(size * 2, DELETE_BATCH)
    return batches


def execute_vacuum(
    store: LogStore,
    plan: VacuumPlan,
    *,
    after_delete: AfterDelete | None = None,
    progress: Progress | None = None,
) -> tuple[list[str], int, list[str], int]:
    """Delete the planned files in batches on threads (each with its Hadoop
    checksum file), then the orphaned checksum files, then the emptied directories.

    ``after_delete`` and ``progress`` run in this thread, in the plan's order,
    once each file's batch is done. Returns ``(deleted, bytes, dirs_removed,
    orphan_crcs_deleted)``; files found missing are not counted.
    """
    paths = plan.files.column("path").to_pylist()
    sizes = plan.files.column("size").to_pylist()
    deleted: list[str] = []
    total = 0
    local = store.on_local_disk
    guard = LocalGuard(store.table_root) if local else None

    def delete(relative: str) -> bool:
        full = f"{store.table_root}/{relative}"
        try:
            if guard is not None:
                if guard.stat_inside(relative) is None:
                    return False
                with contextlib.suppress(FileNotFoundError):  # its Hadoop checksum file, first
                    os.unlink(f"{store.table_root}/{hadoop_crc_name(relative)}")
                os.unlink(full)
            else:
                store.remove_file(full)
        except FileNotFoundError:
            return False
        return True

    with ThreadPoolExecutor(
        max_workers=DELETE_THREADS, thread_name_prefix="raydelta-vacuum"
    ) as pool:
        for batch in _delete_batches(len(paths)):
            done = list(pool.map(delete, [paths[i] for i in batch]))
            for index, gone in zip(batch, done, strict=True):
                if not gone:
                    continue
                deleted.append(paths[index])
                total += sizes[index]
                if after_delete is not None:
                    after_delete(paths[index])
                if progress is not None:
                    progress("deleting files", index + 1, len(paths))
    removed = []
    orphans = 0
    if guard is not None:
        orphans = sum(_delete_orphan_crc(store, guard, crc) for crc in plan.orphan_crcs)
    if local:
        for directory in plan.dirs:
            try:
                os.rmdir(os.path.join(store.table_root, directory))
            except OSError:
                continue  # not empty any more (a writer), or gone
            removed.append(directory)
    return deleted, total, removed, orphans


def _delete_orphan_crc(store: LogStore, guard: LocalGuard, relative: str) -> bool:
    """Delete a checksum file inside the root whose file is still gone."""
    target = hadoop_crc_target(relative)
    if target is None or guard.stat_inside(relative) is None:
        return False
    if os.path.lexists(f"{store.table_root}/{target}"):
        return False  # its file came back (a writer): it goes with its file now
    try:
        os.unlink(f"{store.table_root}/{relative}")
    except FileNotFoundError:
        return False
    return True


def vacuum(
    uri: str,
    *,
    retention_hours: float | None = None,
    lite: bool = False,
    dry_run: bool = False,
    force: bool = False,
    now_ms: int | None = None,
    storage_options: dict[str, Any] | None = None,
    store: LogStore | None = None,
    snapshot: Snapshot | VacuumLogView | None = None,
    lister: Lister | None = None,
    after_delete: AfterDelete | None = None,
    progress: Progress | None = None,
    on_start: Callable[[VacuumPlan], None] | None = None,
    on_end: Callable[[VacuumReport], None] | None = None,
) -> VacuumReport:
    """VACUUM the table at ``uri`` (module doc); returns what was (to be) deleted.

    ``on_start`` runs once the plan is made, before the first deletion, and
    ``on_end`` after the last (neither on a dry run): the table actor records
    them as delta-spark's ``VACUUM START`` / ``VACUUM END`` commits.

    >>> report = vacuum("file:///tmp/events", dry_run=True)   # doctest: +SKIP
    >>> report.files[:3], report.bytes                          # doctest: +SKIP
    """
    store = store or log_store_for(uri, storage_options)
    if progress is not None:
        progress("loading snapshot", 0, 0)
    if snapshot is None:
        snapshot = load_vacuum_view(uri, store)
    if progress is not None:
        progress("planning", 0, 0)
    plan = plan_vacuum(
        snapshot,
        store,
        retention_hours=retention_hours,
        lite=lite,
        force=force,
        now_ms=now_ms,
        lister=lister,
        check_existence=not dry_run,
    )
    ignored = [IgnoredPath(path=p, reason=r) for p, r in sorted(plan.ignored.items())]
    common: dict[str, Any] = {
        "table_uri": uri,
        "version": plan.snapshot_version,
        "mode": plan.mode,
        "dry_run": dry_run,
        "now": plan.now_ms,
        "retention_ms": plan.retention_ms,
        "cutoff_timestamp": plan.cutoff_ms,
        "num_listed": plan.num_listed,
        "ignored": ignored,
    }
    if dry_run:
        return VacuumReport(
            **common,
            files=plan.files.column("path").to_pylist(),
            bytes=pc.sum(plan.files.column("size")).as_py() or 0,
            dirs=plan.dirs,
            orphanCrcsDeleted=len(plan.orphan_crcs),
        )
    if on_start is not None:
        on_start(plan)
    deleted, total, removed, orphans = execute_vacuum(
        store, plan, after_delete=after_delete, progress=progress
    )
    report = VacuumReport(
        **common, files=deleted, bytes=total, dirs=removed, orphanCrcsDeleted=orphans
    )
    if on_end is not None:
        on_end(report)
    return report
