"""VACUUM's listing of the table directory: the files it may delete.

A listing walks the table root (or some root-relative prefixes of it)
without following symlinks and returns the unprotected, non-hidden files
with their size and modification time, plus every directory seen. It is one
walk for every backend, made of the store's directory scans
(:meth:`LogStore.scan_directory`: ``os.scandir`` on a local disk, a listing
request on an object store), asking a file's size and time only for files
it may delete.

Invariants:
- Hidden names (``_``/``.`` prefixes, except partition directories such as
  ``_col=1``: :func:`raydelta.protocol.cleanup_rules.is_hidden_name`) are
  never listed as files nor entered; ``_delta_log`` is among them.
- Symlinks are never followed and never listed as files; they are reported
  in :attr:`DirectoryListing.symlinks`.
- Every skipped entry that stays whatever VACUUM decides (hidden, symlink,
  protected, an unentered subdirectory) is counted in its directory's
  ``entries_kept``, so a directory is only removed when it really ends up empty.
- Hadoop checksum files (``.<name>.crc``: delta-spark writes one beside
  every data file through Hadoop's local file system) are never data: never
  in ``files``, never in ``num_seen``. On local disks the ones whose file is
  a listed (deletable) file or a non-hidden file that is gone are reported
  in :attr:`DirectoryListing.crcs`, not counted as kept (their fate is
  their file's, or an orphan's: see :mod:`raydelta.storage.cleanup.vacuum`); the
  others (their file stays: hidden, protected, a symlink; or their file is
  a hidden one, such as a writer's temporary file) are counted as kept.
- Listing is pluggable (:data:`Lister`): the CleanupActor fans
  :func:`list_tree` out over Ray tasks, one batch of top-level prefixes each;
  the default, :func:`list_parallel`, lists the top-level directories on
  threads of one process on object stores (requests release the GIL) and
  in one thread on a local disk (:data:`LISTING_THREADS`). Every lister
  returns the same listing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa

from raydelta.protocol.cleanup_rules import is_hidden_name
from raydelta.protocol.file_names import hadoop_crc_target
from raydelta.storage.backends.contract import (
    ENTRY_DIRECTORY,
    ENTRY_FILE,
    ENTRY_SYMLINK,
    DirectoryScan,
)
from raydelta.storage.log.store import LogStore

LISTING_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string()),
        pa.field("size", pa.int64()),
        pa.field("modification_time", pa.int64()),
    ]
)


@dataclass(frozen=True, slots=True)
class CrcFile:
    """A Hadoop checksum file whose fate VACUUM decides: root-relative
    ``path``, the listed file it belongs to (``target``; None when that file
    is gone: an orphan), and its modification time (ms)."""

    path: str
    target: str | None
    modification_time: int


@dataclass
class DirectoryListing:
    """Unprotected files under some prefixes, and the directories seen.

    ``dirs`` holds ``(path, modification_time_ms, entries_kept)`` where
    ``entries_kept`` counts entries the listing skipped that stay in the
    directory whatever VACUUM decides (hidden names, symlinks, protected files).
    ``crcs`` are the Hadoop checksum files of listed files and of files that
    are gone (module doc).
    """

    files: pa.Table = field(default_factory=LISTING_SCHEMA.empty_table)
    dirs: list[tuple[str, int, int]] = field(default_factory=list)
    num_seen: int = 0
    symlinks: list[str] = field(default_factory=list)
    crcs: list[CrcFile] = field(default_factory=list)

    @staticmethod
    def merge(parts: Iterable[DirectoryListing]) -> DirectoryListing:
        parts = list(parts)
        if not parts:
            return DirectoryListing()
        return DirectoryListing(
            files=pa.concat_tables([p.files for p in parts]),
            dirs=[d for p in parts for d in p.dirs],
            num_seen=sum(p.num_seen for p in parts),
            symlinks=[s for p in parts for s in p.symlinks],
            crcs=[c for p in parts for c in p.crcs],
        )


Lister = Callable[[LogStore, frozenset[str], Collection[str]], DirectoryListing]
"""``lister(store, partition_columns, protected)`` lists the whole table."""


def _walk(
    store: LogStore,
    prefix: str,
    partition_columns: frozenset[str],
    protected: Collection[str],
    *,
    recursive: bool,
) -> tuple[DirectoryListing, list[str]]:
    """List ``prefix`` (root-relative; ``""`` is the root) with the module's
    rules, one :meth:`~LogStore.scan_directory` per directory; with
    ``recursive`` false, only ``prefix`` itself, returning its non-hidden
    subdirectories unentered. Hadoop checksum files are sorted out only on
    local disks (the only stores that have them); elsewhere a ``.crc`` is a
    hidden file like any other."""
    paths: list[str] = []
    sizes: list[int] = []
    mtimes: list[int] = []
    listing = DirectoryListing()
    subdirs: list[str] = []
    checksums = store.on_local_disk
    stack = [prefix]
    while stack:
        relative = stack.pop()
        scan = store.scan_directory(store.root_path(relative))
        if scan is None:
            continue
        kept = 0
        base = relative + "/" if relative else ""
        candidates: set[str] = set()
        crcs: list[str] = []
        for name, kind in scan.entries:
            if kind == ENTRY_FILE:
                if name[0] in "_.":  # a hidden file
                    if checksums and name[0] == "." and hadoop_crc_target(name) is not None:
                        crcs.append(name)  # decided below, once every name is known
                    else:
                        kept += 1
                    continue
                listing.num_seen += 1
                path = base + name
                if path in protected:
                    kept += 1
                    continue
                status = scan.status(name)
                paths.append(path)
                sizes.append(status.size)
                mtimes.append(status.modification_time)
                candidates.add(name)
            elif kind == ENTRY_DIRECTORY:
                if is_hidden_name(name, partition_columns, is_dir=True):
                    kept += 1
                elif recursive:
                    stack.append(base + name)
                else:
                    subdirs.append(base + name)
                    kept += 1
            else:  # a symlink (never followed, never deleted) or a special file
                if kind == ENTRY_SYMLINK:
                    listing.symlinks.append(base + name)
                kept += 1
        if crcs:
            names = {name for name, _ in scan.entries}
            kept += _sort_crcs(scan, crcs, base, candidates, names, listing)
        if relative:
            listing.dirs.append((relative, scan.modification_time, kept))
    listing.files = pa.table(
        [pa.array(paths, pa.string()), pa.array(sizes, pa.int64()), pa.array(mtimes, pa.int64())],
        schema=LISTING_SCHEMA,
    )
    return listing, subdirs


def _sort_crcs(
    scan: DirectoryScan,
    crcs: Sequence[str],
    base: str,
    candidates: Collection[str],
    names: Collection[str],
    listing: DirectoryListing,
) -> int:
    """Record the checksum files of listed files and of files that are gone in
    ``listing.crcs``; return how many others there are (their files stay)."""
    kept = 0
    for name in crcs:
        target = hadoop_crc_target(name)
        if target is not None and target in candidates:
            owner: str | None = base + target
        elif target is None or target in names or target[0] in "_.":
            kept += 1  # its file stays, or is hidden (a writer's temporary file): not ours
            continue
        else:
            owner = None
        try:
            mtime = scan.status(name).modification_time
        except FileNotFoundError:  # removed while we listed
            continue
        listing.crcs.append(CrcFile(base + name, owner, mtime))
    return kept


def list_tree(
    store: LogStore,
    prefixes: Sequence[str],
    partition_columns: frozenset[str],
    protected: Collection[str],
) -> DirectoryListing:
    """Unprotected, non-hidden files under each root-relative directory in ``prefixes``
    (``""`` is the whole table), recursively."""
    parts = []
    for prefix in prefixes:
        part, _ = _walk(store, prefix, partition_columns, protected, recursive=True)
        parts.append(part)
    return DirectoryListing.merge(parts)


def list_top_level(
    store: LogStore, partition_columns: frozenset[str], protected: Collection[str]
) -> tuple[DirectoryListing, list[str]]:
    """The files directly under the root, and its non-hidden subdirectories."""
    return _walk(store, "", partition_columns, protected, recursive=False)


def list_sequential(
    store: LogStore, partition_columns: frozenset[str], protected: Collection[str]
) -> DirectoryListing:
    """The default :data:`Lister`: one process walks the whole tree."""
    return list_tree(store, [""], partition_columns, protected)


LISTING_THREADS = 1
"""Threads of :func:`list_parallel` on a local disk. One: every ``stat`` releases
and retakes the GIL, and with more threads each of those becomes a handoff
between them. Measured with a warm cache on 2 cores (1M files in 1,000
directories): 1 thread 2.5-2.7 s, 2 threads 3.1-4.0 s, 4 threads 4.9-5.0 s."""
OBJECT_STORE_LISTING_THREADS = 16
"""Threads of :func:`list_parallel` on object stores, where a listing waits on requests."""


def list_parallel(
    store: LogStore, partition_columns: frozenset[str], protected: Collection[str]
) -> DirectoryListing:
    """A :data:`Lister` listing the top-level directories on threads (object
    stores; one thread on a local disk, see :data:`LISTING_THREADS`); the
    listing is :func:`list_sequential`'s (order aside)."""
    top, subdirs = list_top_level(store, partition_columns, protected)
    threads = LISTING_THREADS if store.on_local_disk else OBJECT_STORE_LISTING_THREADS
    threads = min(threads, len(subdirs))
    if threads < 2:
        rest = list_tree(store, subdirs, partition_columns, protected)
        return DirectoryListing.merge([top, rest])
    batches = [subdirs[i::threads] for i in range(threads)]
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="raydelta-vacuum") as pool:
        parts = list(
            pool.map(lambda batch: list_tree(store, batch, partition_columns, protected), batches)
        )
    return DirectoryListing.merge([top, *parts])
