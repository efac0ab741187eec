"""Which of VACUUM's candidate files exist, checked without leaving the table root.

Lite mode knows its candidates from the log (expired tombstones); before it
lists them it asks the filesystem which exist as regular files. On local
disks a directory holding many candidates is scanned once (names and types,
no ``stat``; directories scanned on threads), the others get one ``lstat``
each; on other filesystems one ``info`` each.

Invariants:
- A path whose real parent directory lies outside the root's real path
  (a symlinked directory) is never reported as existing: it is added to
  ``ignored`` instead.
- Symlinks, directories and special files never count as existing files.
"""

from __future__ import annotations

import logging
import os
import stat
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc

from raydelta.storage.log_store import LogStore
from raydelta.storage.vacuum_listing import LISTING_THREADS

logger = logging.getLogger(__name__)

SCAN_DIRECTORY_MIN_CANDIDATES = 64
"""A directory holding at least this many candidates is scanned once."""
CANDIDATES_SCHEMA = pa.schema([pa.field("path", pa.string()), pa.field("size", pa.int64())])


def local_existing(store: LogStore, candidates: pa.Table, ignored: dict[str, str]) -> pa.Table:
    """The candidates that are regular files inside the root, with their sizes."""
    guard = LocalGuard(store.table_root)
    paths = candidates.column("path")
    pieces = pc.split_pattern(paths, "/", max_splits=1, reverse=True)
    parents = pc.if_else(pc.equal(pc.list_value_length(pieces), 2), pc.list_element(pieces, 0), "")
    counts = pc.value_counts(parents)
    outside: list[str] = []
    scan: list[str] = []
    for parent, count in zip(
        counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True
    ):
        if parent and not guard.parent_inside(parent):
            outside.append(parent)
        elif count >= SCAN_DIRECTORY_MIN_CANDIDATES:
            scan.append(parent)
    existing = _existing_in(guard, scan)
    is_outside = pc.is_in(parents, value_set=pa.array(outside, pa.string()))
    for relative in pc.filter(paths, is_outside).to_pylist():
        ignored.setdefault(relative, "leaves the table root through a symlink")
    # Scanned directory and a size from the log: no system call per file.
    fast = pc.and_(
        pc.is_in(parents, value_set=pa.array(scan, pa.string())),
        pc.is_valid(candidates.column("size")),
    )
    quick = candidates.filter(pc.and_(fast, pc.is_in(paths, value_set=existing)))
    slow = candidates.filter(pc.and_(pc.invert(fast), pc.invert(is_outside)))
    slow_paths: list[str] = []
    slow_sizes: list[int] = []
    for relative, size in zip(
        slow.column("path").to_pylist(), slow.column("size").to_pylist(), strict=True
    ):
        info = guard.stat_inside(relative)
        if info is not None:
            slow_paths.append(relative)
            slow_sizes.append(info.st_size if size is None else size)
    return pa.concat_tables(
        [
            quick,
            pa.table(
                [pa.array(slow_paths, pa.string()), pa.array(slow_sizes, pa.int64())],
                schema=CANDIDATES_SCHEMA,
            ),
        ]
    )


def _existing_in(guard: LocalGuard, parents: list[str]) -> pa.Array:
    """Root-relative paths of the regular files directly in each of ``parents``,
    the directories scanned on threads (``scandir`` releases the GIL)."""
    if not parents:
        return pa.array([], pa.string())
    threads = min(LISTING_THREADS, len(parents))
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="raydelta-vacuum") as pool:
        found = list(pool.map(guard.regular_files, parents))
    pieces = []
    for parent, names in zip(parents, found, strict=True):
        array = pa.array(names, pa.string())
        if parent:
            array = pc.binary_join_element_wise(pa.scalar(parent + "/"), array, "")
        pieces.append(array)
    return pa.concat_arrays(pieces)


def fsspec_existence(store: LogStore, candidates: pa.Table) -> tuple[list[bool], list[int]]:
    exists: list[bool] = []
    sizes: list[int] = []
    for relative, size in zip(
        candidates.column("path").to_pylist(), candidates.column("size").to_pylist(), strict=True
    ):
        try:
            info = store.fs.info(f"{store.table_root}/{relative}")
        except FileNotFoundError:
            exists.append(False)
            continue
        regular = info.get("type") == "file"
        exists.append(regular)
        if regular:
            sizes.append(int(info.get("size") or 0) if size is None else size)
    return exists, sizes


class LocalGuard:
    """Local-disk check that a relative path really lies inside the root."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.real_root = os.path.realpath(root)
        self._parents: dict[str, bool] = {}

    def parent_inside(self, parent: str) -> bool:
        known = self._parents.get(parent)
        if known is None:
            real = os.path.realpath(os.path.join(self.root, parent) if parent else self.root)
            known = real == self.real_root or real.startswith(self.real_root + os.sep)
            self._parents[parent] = known
        return known

    def regular_files(self, parent: str) -> list[str]:
        """Names of the regular files (not symlinks) directly in ``parent``."""
        try:
            with os.scandir(os.path.join(self.root, parent) if parent else self.root) as it:
                return [e.name for e in it if e.is_file(follow_symlinks=False)]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def stat_inside(self, relative: str) -> os.stat_result | None:
        """``lstat`` of a regular file inside the root; None when missing or refused."""
        parent = relative.rpartition("/")[0]
        if parent and not self.parent_inside(parent):
            logger.warning("vacuum: %s leaves the table root through a symlink; skipped", relative)
            return None
        try:
            info = os.lstat(self.root + "/" + relative)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not stat.S_ISREG(info.st_mode):
            return None
        return info
