"""The local-disk backend (``file://`` and plain paths): :class:`LocalLogStore`.

Put-if-absent writes a temp file, ``fsync``s it, then ``os.link``s it to the
name, which fails if the target exists; listings and VACUUM's directory
scans use ``os.scandir`` (``stat`` only where asked); parquet files are
opened by path, memory-mapped where the caller asks. Every other file method
goes through fsspec's local filesystem (:class:`~.fsspec_store.FsspecLogStore`).

Hadoop checksum files (local disks)
    delta-spark writes a local table through Hadoop's ``LocalFileSystem``,
    which keeps ``.<name>.crc`` beside every file it writes (commits, Delta
    checksums, checkpoints, ``_last_checkpoint``, sidecars, data files) and
    verifies it on every read: a stale one fails the read with
    ``ChecksumException``, a missing one is simply not verified (Hadoop's
    ``ChecksumFSInputChecker`` opens the file unverified when the checksum
    file is absent). So :class:`LocalLogStore` never replaces a file while
    leaving its checksum file behind, and never deletes a file without it:

    - :meth:`~LogStore.write` (``_last_checkpoint``, and any other file
      replaced in place) removes the checksum file, replaces the file
      (``os.replace``), and removes the checksum file again. We remove
      rather than rewrite it: a removal can only ever turn a verified read
      into an unverified one, never into a failed one, whatever runs
      concurrently; a rewritten checksum file is a second rename that can
      interleave with Hadoop's own pair of renames and land on Hadoop's file
      (or Hadoop's on ours). The first removal keeps readers from seeing our
      new bytes under the old checksum; the second removes a checksum that a
      concurrent Hadoop writer renamed into place between the first and our
      replace (its bytes are gone: ours replaced them). delta-spark writes
      ``_last_checkpoint`` as rename-the-file, then rename-its-checksum
      (``HDFSLogStore`` over ``ChecksumFs``): one interleaving is left, its
      file rename before our replace and its checksum rename after our second
      removal, which leaves its checksum on our bytes. That window (the few
      system calls between Hadoop's two renames) is the one two Hadoop
      writers of one name already have with each other; delta-spark reads a
      ``_last_checkpoint`` it cannot verify as a missing hint (three retries,
      then a listing), and every other engine ignores checksum files. The
      ``_last_checkpoint`` content carries Delta's own checksum, so removing
      Hadoop's loses no integrity check.
    - :meth:`~LogStore.delete` removes the checksum file first, then the file,
      as Hadoop does: a crash in between leaves an unverified file, never an
      orphaned checksum.
    - :meth:`~LogStore.put_if_absent` never touches checksum files: it
      creates names nobody else writes (a commit's loser is refused, a UUID is
      unique), or, for a classic checkpoint, stops where delta-spark's file
      is already in place. Where raydelta creates a name another engine
      may also write (classic checkpoints), it first removes a checksum
      file whose file is gone (:meth:`~LogStore.delete_orphan_hadoop_crc`).
    - Listings never show checksum files (:meth:`~LogStore.list_dir` skips
      every name starting with ``.``); :meth:`~LogStore.list_hadoop_crcs` lists
      them for the cleanup that removes orphans.

    Object stores have no checksum files (Hadoop's S3A, ABFS and GCS
    connectors write none); their stores do none of this.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import fsspec
import pyarrow.parquet as pq

from raydelta.protocol.errors import FileAlreadyExistsError
from raydelta.protocol.file_names import (
    LogFile,
    hadoop_crc_name,
    hadoop_crc_target,
    parse_log_file_name,
)
from raydelta.storage.backends.contract import (
    ENTRY_DIRECTORY,
    ENTRY_FILE,
    ENTRY_OTHER,
    ENTRY_SYMLINK,
    DirectoryScan,
    FileStatus,
)
from raydelta.storage.backends.fsspec_store import FsspecLogStore, filesystem_for
from raydelta.storage.storage_options import ParsedStorageOptions


def open_local(uri: str, options: ParsedStorageOptions) -> LocalLogStore:
    """The registry's entry for ``file`` (and plain paths)."""
    fs, root = filesystem_for(uri, options)
    return LocalLogStore(fs, root, fsync=options.fsync)


_IO_POOL: ThreadPoolExecutor | None = None
_IO_POOL_LOCK = threading.Lock()


def _parallel_io() -> ThreadPoolExecutor:
    """Threads for concurrent local writes (fsync releases the GIL, and the
    disk's journal commits concurrent fsyncs together)."""
    global _IO_POOL
    with _IO_POOL_LOCK:
        if _IO_POOL is None:
            _IO_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="raydelta-io")
        return _IO_POOL


def _unlink_if_present(path: str) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def _fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalLogStore(FsspecLogStore):
    """Local disks: temp file + fsync + ``os.link`` (fails if the target exists)."""

    on_local_disk = True

    def __init__(self, fs: fsspec.AbstractFileSystem, table_root: str, *, fsync: bool = True):
        super().__init__(fs, table_root)
        self.fsync = fsync

    def _write_temp(self, target: str, data: bytes) -> str:
        directory = os.path.dirname(target)
        temp = os.path.join(directory, f".{os.path.basename(target)}.{uuid.uuid4().hex}.tmp")
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileNotFoundError:  # first file of a new table or a new subdirectory
            os.makedirs(directory, exist_ok=True)
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        return temp

    def put_if_absent(self, name: str, data: bytes) -> None:
        target = self.path_of(name)
        temp = self._write_temp(target, data)
        try:
            os.link(temp, target)
        except FileExistsError:
            raise FileAlreadyExistsError(f"{name} already exists in {self.log_dir}") from None
        finally:
            os.unlink(temp)

    def put_if_absent_many(self, items: Sequence[tuple[str, bytes]]) -> int:
        if len(items) < 2:
            return super().put_if_absent_many(items)
        targets = [self.path_of(name) for name, _ in items]
        try:
            temps = list(_parallel_io().map(self._write_temp, targets, [d for _, d in items]))
        except RuntimeError:  # the interpreter is exiting: no new threads
            return super().put_if_absent_many(items)
        created = 0
        try:
            for target, temp in zip(targets, temps, strict=True):
                try:
                    os.link(temp, target)  # in order: v is visible only after v - 1
                except FileExistsError:
                    break
                created += 1
        finally:
            for temp in temps:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp)
        return created

    def sync_names(self, names: Sequence[str]) -> None:
        if self.fsync:
            for directory in sorted({os.path.dirname(self.path_of(n)) for n in names}):
                _fsync_directory(directory)

    def write(self, name: str, data: bytes) -> None:
        target = self.path_of(name)
        temp = self._write_temp(target, data)
        checksum = self.path_of(hadoop_crc_name(name))
        # remove, replace, remove again: see "Hadoop checksum files" in the module docstring
        _unlink_if_present(checksum)
        os.replace(temp, target)
        _unlink_if_present(checksum)

    def delete(self, name: str) -> None:
        _unlink_if_present(self.path_of(hadoop_crc_name(name)))  # first, as Hadoop does
        _unlink_if_present(self.path_of(name))

    def list_hadoop_crcs(self, subdir: str = "") -> list[str]:
        directory = f"{self.log_dir}/{subdir}" if subdir else self.log_dir
        prefix = f"{subdir}/" if subdir else ""
        try:
            names = [entry.name for entry in os.scandir(directory)]
        except FileNotFoundError:
            return []
        return sorted(prefix + n for n in names if hadoop_crc_target(n) is not None)

    def delete_orphan_hadoop_crc(self, name: str) -> bool:
        checksum = self.path_of(hadoop_crc_name(name))
        if os.path.lexists(self.path_of(name)):
            return False
        # A writer may rename the file and its checksum in after the check: then
        # we remove a fresh checksum, which leaves its file unverified, not unreadable.
        return _unlink_if_present(checksum)

    def read(self, name: str) -> bytes:
        with open(self.path_of(name), "rb") as handle:
            return handle.read()

    def read_many(self, names: Sequence[str]) -> list[bytes]:
        return [self.read(n) for n in names]

    def list_dir(self, subdir: str = "") -> list[LogFile]:
        # os.scandir is ~10x faster than fsspec's ls for large log directories.
        directory = f"{self.log_dir}/{subdir}" if subdir else self.log_dir
        prefix = f"{subdir}/" if subdir else ""
        files = []
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            return []
        for entry in entries:
            if entry.name.startswith("."):  # our own (and others') temp files
                continue
            name = prefix + entry.name
            if parse_log_file_name(name) is None:
                continue
            try:
                if not entry.is_file():
                    continue
                stat = entry.stat()
            except FileNotFoundError:  # removed while we listed (cleanup, a temp file)
                continue
            parsed = parse_log_file_name(
                name, size=stat.st_size, modification_time=int(stat.st_mtime * 1000)
            )
            if parsed is not None:
                files.append(parsed)
        files.sort(key=lambda f: f.name)
        return files

    def open_parquet(
        self, path: str, *, memory_map: bool = False, buffer_size: int = 0
    ) -> pq.ParquetFile:
        return pq.ParquetFile(path, memory_map=memory_map, buffer_size=buffer_size)

    def scan_directory(self, path: str) -> DirectoryScan | None:
        try:
            with os.scandir(path) as iterator:
                entries = [(entry.name, _kind(entry)) for entry in iterator]
        except (FileNotFoundError, NotADirectoryError):
            return None
        modified = os.stat(path, follow_symlinks=False).st_mtime_ns // 1_000_000

        def status(name: str) -> FileStatus:
            info = os.lstat(os.path.join(path, name))
            return FileStatus(info.st_size, info.st_mtime_ns // 1_000_000)

        return DirectoryScan(entries, modified, status)


def _kind(entry: os.DirEntry[str]) -> str:
    if entry.is_file(follow_symlinks=False):
        return ENTRY_FILE
    if entry.is_dir(follow_symlinks=False):
        return ENTRY_DIRECTORY
    return ENTRY_SYMLINK if entry.is_symlink() else ENTRY_OTHER
