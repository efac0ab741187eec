"""Lite VACUUM's candidates: which expired tombstones' files it deletes.

:func:`lite_candidates` takes the expired tombstones' files from the log
(:func:`raydelta.storage.cleanup.log_references.log_paths`) and drops the protected ones
(one hash membership on Arrow), the hidden ones and, on local disks, the
ones under a symlinked directory (:func:`local_inside`: one
``lstat`` per distinct directory, ``realpath`` only for a symlink). A real
run then asks the filesystem which are regular files (:func:`local_existing`,
:func:`store_existence`): on local disks a directory holding many
candidates is scanned once (names and types, no ``stat``), the others
get one ``lstat`` each; on other filesystems one
:meth:`~raydelta.storage.log.store.LogStore.status` each. A dry run does
not (delta-spark's VACUUM LITE does not): it only looks up the size of the few candidates the log
records none for (:func:`local_sizes`, :func:`store_sizes`).

Invariants:
- A path whose real parent directory lies outside the root's real path
  (a symlinked directory) is never a candidate: it is added to ``ignored``
  instead.
- Symlinks, directories and special files never count as existing files.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc

from raydelta.protocol.cleanup_rules import is_hidden_path
from raydelta.storage.cleanup.listing import LISTING_SCHEMA, LISTING_THREADS
from raydelta.storage.cleanup.log_references import CANDIDATES_SCHEMA, LogPaths, values_may_match
from raydelta.storage.log.store import LogStore

logger = logging.getLogger(__name__)

SCAN_DIRECTORY_MIN_CANDIDATES = 64
"""A directory holding at least this many candidates is scanned once."""
_MAYBE_HIDDEN = re.compile(r"(^|/)[_.]")
_HIDDEN_AFTER_SLASH = re.compile(rb"/[_.]")  # the same over all values' bytes


def lite_candidates(
    store: LogStore,
    paths: LogPaths,
    partition_columns: frozenset[str],
    ignored: dict[str, str],
    *,
    check_existence: bool,
) -> pa.Table:
    """The expired tombstones' files that are not protected, not hidden, not under a
    symlinked directory and, when ``check_existence``, exist as regular files.

    Sizes are the ones the log records, else the file's (0 when a dry run finds
    none). On local disks a real run scans a directory holding many candidates
    once (names and types, no ``stat``) instead of one ``lstat`` per candidate.
    """
    candidates = paths.expired
    if (
        not paths.expired_unique
        and pc.count_distinct(candidates.column("path")).as_py() != candidates.num_rows
    ):
        grouped = candidates.group_by("path").aggregate([("size", "max")])
        candidates = pa.table(
            [grouped.column("path"), grouped.column("size_max")], schema=CANDIDATES_SCHEMA
        )
    candidates = _unprotected(candidates, paths.protected_paths)
    candidates = _not_hidden(candidates, partition_columns, ignored)
    if store.on_local_disk:
        guard = LocalGuard(store.table_root)
        candidates, parents = local_inside(guard, candidates, ignored)
        if check_existence:
            found = local_existing(guard, candidates, parents)
        else:
            found = local_sizes(guard, candidates)
    elif check_existence:
        exists, sizes = store_existence(store, candidates)
        kept = candidates.filter(pa.array(exists, pa.bool_()))
        found = pa.table(
            [kept.column("path"), pa.array(sizes, pa.int64())], schema=CANDIDATES_SCHEMA
        )
    else:
        found = store_sizes(store, candidates)
    return pa.table(
        [found.column("path"), found.column("size"), pa.nulls(found.num_rows, pa.int64())],
        schema=LISTING_SCHEMA,
    )


def _unprotected(candidates: pa.Table, protected: pa.ChunkedArray) -> pa.Table:
    """The candidates whose path no protected path equals. The hash set is built
    from the smaller side: with more protected paths than candidates, the
    protected paths that are candidates are found first (usually none)."""
    if not len(protected) or not candidates.num_rows:
        return candidates
    paths = candidates.column("path")
    if len(protected) > candidates.num_rows:
        protected = pc.filter(protected, pc.is_in(protected, value_set=paths))
        if not len(protected):
            return candidates
    known = pc.is_in(paths, value_set=protected)
    if not pc.any(known).as_py():
        return candidates
    return candidates.filter(pc.invert(known))


def _not_hidden(
    candidates: pa.Table, partition_columns: frozenset[str], ignored: dict[str, str]
) -> pa.Table:
    """The candidates no segment of which is hidden; the others go to ``ignored``."""
    if not values_may_match(
        candidates.column("path"), anywhere=(), after_slash=_HIDDEN_AFTER_SLASH, starts=("_", ".")
    ):
        return candidates
    maybe_hidden = pc.match_substring_regex(candidates.column("path"), _MAYBE_HIDDEN.pattern)
    if not pc.any(maybe_hidden).as_py():
        return candidates
    keep = []
    for relative, flagged in zip(
        candidates.column("path").to_pylist(), maybe_hidden.to_pylist(), strict=True
    ):
        hidden = bool(flagged) and is_hidden_path(relative, partition_columns)
        if hidden:
            ignored.setdefault(relative, "hidden path")
        keep.append(not hidden)
    return candidates.filter(pa.array(keep, pa.bool_()))


def _parents(paths: pa.ChunkedArray | pa.Array) -> pa.Array:
    """The parent directory of every root-relative path (``""`` at the root)."""
    pieces = pc.split_pattern(paths, "/", max_splits=1, reverse=True)
    return pc.if_else(pc.equal(pc.list_value_length(pieces), 2), pc.list_element(pieces, 0), "")


def local_inside(
    guard: LocalGuard, candidates: pa.Table, ignored: dict[str, str]
) -> tuple[pa.Table, pa.Array]:
    """The candidates whose parent directory really lies inside the root, and the
    parent directory of each of them; the others go to ``ignored``."""
    parents = _parents(candidates.column("path"))
    outside = [
        parent
        for parent in pc.unique(parents).to_pylist()
        if parent and not guard.parent_inside(parent)
    ]
    if not outside:
        return candidates, parents
    is_outside = pc.is_in(parents, value_set=pa.array(outside, pa.string()))
    for relative in pc.filter(candidates.column("path"), is_outside).to_pylist():
        ignored.setdefault(relative, "leaves the table root through a symlink")
    inside = pc.invert(is_outside)
    return candidates.filter(inside), pc.filter(parents, inside)


def local_existing(guard: LocalGuard, candidates: pa.Table, parents: pa.Array) -> pa.Table:
    """The candidates (inside the root, see :func:`local_inside`; ``parents`` their
    parent directories) that are regular files, with their sizes."""
    paths = candidates.column("path")
    counts = pc.value_counts(parents)
    scan = [
        parent
        for parent, count in zip(
            counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True
        )
        if count >= SCAN_DIRECTORY_MIN_CANDIDATES
    ]
    existing = _existing_in(guard, scan)
    # Scanned directory and a size from the log: no system call per file.
    fast = pc.and_(
        pc.is_in(parents, value_set=pa.array(scan, pa.string())),
        pc.is_valid(candidates.column("size")),
    )
    quick = candidates.filter(pc.and_(fast, pc.is_in(paths, value_set=existing)))
    slow = candidates.filter(pc.invert(fast))
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


def local_sizes(guard: LocalGuard, candidates: pa.Table) -> pa.Table:
    """The candidates with a size for each: the log's, else the regular file's, else 0."""
    return _fill_sizes(candidates, lambda relative: _local_size(guard, relative))


def store_sizes(store: LogStore, candidates: pa.Table) -> pa.Table:
    """As :func:`local_sizes`, asking the store (one ``info`` per unsized candidate)."""
    return _fill_sizes(candidates, lambda relative: _store_size(store, relative))


def _local_size(guard: LocalGuard, relative: str) -> int:
    info = guard.stat_inside(relative)
    return 0 if info is None else int(info.st_size)


def _store_size(store: LogStore, relative: str) -> int:
    try:
        status = store.status(store.root_path(relative))
    except FileNotFoundError:
        return 0
    return status.size if status.is_file else 0


def _fill_sizes(candidates: pa.Table, size_of: Callable[[str], int]) -> pa.Table:
    sizes = candidates.column("size")
    if sizes.null_count == 0:
        return candidates
    unsized = pc.is_null(sizes)
    paths = pc.filter(candidates.column("path"), unsized).to_pylist()
    found = pa.array([size_of(relative) for relative in paths], pa.int64())
    return pa.concat_tables(
        [
            candidates.filter(pc.invert(unsized)),
            pa.table([pa.array(paths, pa.string()), found], schema=CANDIDATES_SCHEMA),
        ]
    )


def _existing_in(guard: LocalGuard, parents: list[str]) -> pa.Array:
    """Root-relative paths of the regular files directly in each of ``parents``,
    the directories scanned on :data:`~raydelta.storage.cleanup.listing.LISTING_THREADS`
    threads."""
    if not parents:
        return pa.array([], pa.string())
    threads = min(LISTING_THREADS, len(parents))
    if threads < 2:
        found = [guard.regular_files(parent) for parent in parents]
    else:
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="raydelta-vacuum") as pool:
            found = list(pool.map(guard.regular_files, parents))
    pieces = []
    for parent, names in zip(parents, found, strict=True):
        array = pa.array(names, pa.string())
        if parent:
            array = pc.binary_join_element_wise(pa.scalar(parent + "/"), array, "")
        pieces.append(array)
    return pa.concat_arrays(pieces)


def store_existence(store: LogStore, candidates: pa.Table) -> tuple[list[bool], list[int]]:
    exists: list[bool] = []
    sizes: list[int] = []
    for relative, size in zip(
        candidates.column("path").to_pylist(), candidates.column("size").to_pylist(), strict=True
    ):
        try:
            status = store.status(store.root_path(relative))
        except FileNotFoundError:
            exists.append(False)
            continue
        exists.append(status.is_file)
        if status.is_file:
            sizes.append(status.size if size is None else size)
    return exists, sizes


class LocalGuard:
    """Local-disk check that a relative path really lies inside the root."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.real_root = os.path.realpath(root)
        self._parents: dict[str, bool] = {}

    def parent_inside(self, parent: str) -> bool:
        """Whether the root-relative directory ``parent`` really lies inside the root.

        One ``lstat`` per directory (its ancestors' answers are cached): a path
        none of whose components below the root is a symlink cannot leave it;
        ``realpath`` decides for the others (and for dot segments)."""
        known = self._parents.get(parent)
        if known is None:
            head, _, name = parent.rpartition("/")
            if head and not self.parent_inside(head):
                known = False
            elif name in ("", ".", "..") or self._is_symlink(parent):
                real = os.path.realpath(os.path.join(self.root, parent) if parent else self.root)
                known = real == self.real_root or real.startswith(self.real_root + os.sep)
            else:
                known = True
            self._parents[parent] = known
        return known

    def _is_symlink(self, relative: str) -> bool:
        try:
            return stat.S_ISLNK(os.lstat(os.path.join(self.root, relative)).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False  # nothing there (or under it) to delete

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
