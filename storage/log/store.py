"""Log stores: list, read and atomically create files under ``_delta_log``.

:class:`LogStore` is the contract (an ABC; its docstring states it and
``tests/storage/test_log_store.py`` checks it on every concrete store).
:class:`FsspecLogStore` implements everything but put-if-absent over an
fsspec filesystem; the concrete stores add their backend's atomic create:

- :class:`LocalLogStore` (``file://`` and plain paths): temp file, ``fsync``,
  then ``os.link``, which fails if the target exists; listing with
  ``os.scandir``.
- :class:`MemoryLogStore` (``memory://``): a process-wide lock around
  exists+write, which is atomic for the only process that can see that
  filesystem.
- :class:`ObjectStoreLogStore`: exclusive create ``open(mode="xb")``, for a
  filesystem whose exclusive create is atomic.
- :class:`~raydelta.storage.log.s3_store.S3LogStore` (``s3://``, ``s3a://``):
  a conditional ``PutObject`` (``If-None-Match: *``).
- :class:`~raydelta.storage.log.s3_store.SingleWriterLogStore` (any other
  fsspec filesystem, and S3 with ``conditional_put="disabled"``): no atomic
  create, so writes are refused unless the user opts into single-writer mode.

Invariants:
- Put-if-absent is the backend's own atomic primitive, never emulated with
  check-then-write across processes.
- :func:`log_store_for` is the one place a URI picks its store; code outside
  ``storage/`` sees only :class:`LogStore` and asks its capabilities
  (:attr:`LogStore.on_local_disk`), never its concrete class.
- No Hadoop checksum file ever disagrees with its file because of us (local
  disks; see "Hadoop checksum files" below).

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

import abc
import contextlib
import os
import threading
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import fsspec
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem

from raydelta.protocol.errors import FileAlreadyExistsError
from raydelta.protocol.file_names import (
    DELTA_LOG_DIR,
    LogFile,
    hadoop_crc_name,
    hadoop_crc_target,
    parse_log_file_name,
)
from raydelta.storage.storage_options import fsspec_options, parse_storage_options


def split_uri(
    uri: str, storage_options: dict[str, Any] | None = None
) -> tuple[fsspec.AbstractFileSystem, str]:
    """Filesystem and root path (no trailing slash) of a table URI or local path;
    ``storage_options`` as :mod:`raydelta.storage.storage_options` reads them."""
    fs, path = fsspec.core.url_to_fs(uri, **fsspec_options(uri, storage_options))
    return fs, path.rstrip("/") or "/"


def mtime_ms(info: dict[str, Any]) -> int:
    """Modification time in ms from an fsspec ``info`` dict (key names vary by backend)."""
    for key in ("mtime", "LastModified", "last_modified", "created"):
        value = info.get(key)
        if value is None:
            continue
        if hasattr(value, "timestamp"):
            return int(value.timestamp() * 1000)
        return int(float(value) * 1000)
    return 0


class LogStore(abc.ABC):
    """The contract of a Delta log store: list, read and put-if-absent under
    ``<table_root>/_delta_log``.

    Names are relative to ``_delta_log`` (``00000000000000000007.json``,
    ``_sidecars/<uuid>.parquet``, ``_last_checkpoint``).

    Listing
        :meth:`list_dir` returns every file of ``_delta_log/<subdir>`` whose
        name the protocol recognises (:func:`parse_log_file_name`; temp files,
        directories and unknown names are left out), each with its size and
        modification time (ms), **sorted by name**. Lexicographic order is
        version order because versions are zero-padded to 20 digits; at one
        version the kinds sort by their suffix (``.checkpoint.parquet`` before
        ``.json``). A missing directory lists as empty, never raises.
        :meth:`list_from` is :meth:`list_dir` of the log itself restricted to
        files that carry a version (so not ``_last_checkpoint``) with version
        ``>= version``, in the same order. A listing is a snapshot: a file
        created during the call may or may not appear, but a listed file
        existed.

    Reading
        :meth:`read` returns the whole content of a file; a missing file
        raises :class:`FileNotFoundError` (never returns empty bytes).
        :meth:`read_many` is :meth:`read` of several names, in the order given,
        fetched concurrently where the backend can.

    Put-if-absent
        :meth:`put_if_absent` creates ``_delta_log/<name>`` holding exactly
        ``data`` **only if no file of that name exists**, atomically, with the
        backend's own primitive. When the name exists it raises
        :class:`FileAlreadyExistsError` and leaves the existing file as it was.
        Of concurrent callers (threads, processes, machines) on one name,
        exactly one wins. Readers never see a partial file. It is never
        emulated with check-then-write. Missing directories are created.

    Overwrite and delete
        :meth:`write` replaces a file (for ``_last_checkpoint`` and files with
        unique names such as UUID checkpoints and sidecars), atomically where
        the backend allows (temp file + rename on local disks).
        :meth:`delete` removes a file; a missing file is not an error.
        On local disks both also remove the file's Hadoop checksum file
        (module docstring).

    Hadoop checksum files
        :meth:`list_hadoop_crcs` names the Hadoop checksum files
        (``.<name>.crc``) of ``_delta_log/<subdir>``, sorted; stores without
        them list none. :meth:`delete_orphan_hadoop_crc` removes one whose
        file no longer exists.

    Capabilities
        :attr:`on_local_disk` is true when ``table_root`` and every path of
        the store are paths of the local operating system, so callers may use
        ``os`` calls and memory-mapped reads on them.
    """

    on_local_disk: ClassVar[bool] = False

    def __init__(self, fs: fsspec.AbstractFileSystem, table_root: str) -> None:
        self.fs = fs
        self.table_root = table_root
        self.log_dir = f"{table_root}/{DELTA_LOG_DIR}"

    def path_of(self, name: str) -> str:
        """The full path (in :attr:`fs`) of ``_delta_log/<name>``."""
        return f"{self.log_dir}/{name}"

    # --- listing -------------------------------------------------------------

    @abc.abstractmethod
    def list_dir(self, subdir: str = "") -> list[LogFile]:
        """Every recognised file in ``_delta_log/<subdir>``, sorted by name."""

    def list_from(self, version: int = 0) -> list[LogFile]:
        """Versioned files of ``_delta_log`` with version >= ``version``, sorted by name."""
        return [f for f in self.list_dir() if f.version is not None and f.version >= version]

    @abc.abstractmethod
    def log_exists(self) -> bool:
        """Whether ``_delta_log`` exists."""

    # --- reading ------------------------------------------------------------

    @abc.abstractmethod
    def read(self, name: str) -> bytes:
        """The bytes of ``_delta_log/<name>``; :class:`FileNotFoundError` when missing."""

    def read_many(self, names: Sequence[str]) -> list[bytes]:
        """The bytes of several log files, in the order of ``names``."""
        return [self.read(n) for n in names]

    # --- writing --------------------------------------------------------------

    @abc.abstractmethod
    def put_if_absent(self, name: str, data: bytes) -> None:
        """Create ``_delta_log/<name>`` atomically, or raise :class:`FileAlreadyExistsError`."""

    def put_if_absent_many(self, items: Sequence[tuple[str, bytes]]) -> int:
        """:meth:`put_if_absent` of each ``(name, data)`` in order, stopping at
        the first name that exists; returns how many were created (all of them:
        ``len(items)``). Each file becomes visible only after the ones before
        it, whole, with the durability of :meth:`put_if_absent`. Backends may
        write the contents concurrently (local disks: temp files written and
        fsynced in parallel, then linked into place in order)."""
        for index, (name, data) in enumerate(items):
            try:
                self.put_if_absent(name, data)
            except FileAlreadyExistsError:
                return index
        return len(items)

    def sync_names(self, names: Sequence[str]) -> None:
        """Make the creation of ``names`` durable (local disks: fsync their
        directories, once each; object stores: already durable)."""
        return None

    @abc.abstractmethod
    def write(self, name: str, data: bytes) -> None:
        """Create or replace ``_delta_log/<name>``."""

    @abc.abstractmethod
    def delete(self, name: str) -> None:
        """Remove ``_delta_log/<name>``; a missing file is fine."""

    # --- Hadoop checksum files --------------------------------------------------------

    def list_hadoop_crcs(self, subdir: str = "") -> list[str]:
        """Names (relative to ``_delta_log``) of the Hadoop checksum files in
        ``_delta_log/<subdir>``, sorted; none on stores that have none."""
        return []

    def delete_orphan_hadoop_crc(self, name: str) -> bool:
        """Remove ``name``'s Hadoop checksum file if ``name`` itself does not
        exist; whether one was removed."""
        return False


class FsspecLogStore(LogStore):
    """Listing, reading, overwriting and deleting through an fsspec filesystem;
    put-if-absent is left to the backend's subclass."""

    def _ls(self, directory: str) -> list[dict[str, Any]]:
        try:
            entries: list[dict[str, Any]] = self.fs.ls(directory, detail=True)
        except FileNotFoundError:
            return []
        return entries

    def list_dir(self, subdir: str = "") -> list[LogFile]:
        directory = f"{self.log_dir}/{subdir}" if subdir else self.log_dir
        prefix = f"{subdir}/" if subdir else ""
        files = []
        for info in self._ls(directory):
            if info.get("type") == "directory":
                continue
            name = prefix + info["name"].rstrip("/").rsplit("/", 1)[-1]
            parsed = parse_log_file_name(
                name, size=int(info.get("size") or 0), modification_time=mtime_ms(info)
            )
            if parsed is not None:
                files.append(parsed)
        files.sort(key=lambda f: f.name)
        return files

    def log_exists(self) -> bool:
        return bool(self.fs.isdir(self.log_dir))

    def read(self, name: str) -> bytes:
        data: bytes = self.fs.cat_file(self.path_of(name))
        return data

    def read_many(self, names: Sequence[str]) -> list[bytes]:
        if not names:
            return []
        paths = [self.path_of(n) for n in names]
        if len(paths) == 1:
            return [self.read(names[0])]
        fetched: dict[str, bytes] = self.fs.cat(paths, on_error="raise")
        return [fetched[p] for p in paths]

    def write(self, name: str, data: bytes) -> None:
        path = self.path_of(name)
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        with self.fs.open(path, "wb") as handle:
            handle.write(data)

    def delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self.path_of(name))


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


_MEMORY_LOCK = threading.Lock()


class MemoryLogStore(FsspecLogStore):
    """fsspec's in-process memory filesystem; a process-wide lock makes create atomic."""

    def put_if_absent(self, name: str, data: bytes) -> None:
        path = self.path_of(name)
        with _MEMORY_LOCK:
            if self.fs.exists(path):
                raise FileAlreadyExistsError(f"{name} already exists in {self.log_dir}")
            self.fs.pipe_file(path, data)

    def write(self, name: str, data: bytes) -> None:
        with _MEMORY_LOCK:
            self.fs.pipe_file(self.path_of(name), data)


class ObjectStoreLogStore(FsspecLogStore):
    """Other fsspec backends: exclusive create (``mode="xb"``), i.e. a conditional put."""

    def put_if_absent(self, name: str, data: bytes) -> None:
        path = self.path_of(name)
        try:
            with self.fs.open(path, "xb") as handle:
                handle.write(data)
        except FileExistsError:
            raise FileAlreadyExistsError(f"{name} already exists in {self.log_dir}") from None


def log_store_for(uri: str, storage_options: dict[str, Any] | None = None) -> LogStore:
    """The log store for a table URI (``file://``, a plain path, ``memory://``,
    ``s3://``, ...); see the module docstring for which store each gets."""
    options = parse_storage_options(uri, storage_options)
    fs, path = fsspec.core.url_to_fs(uri, **options.fsspec)
    root = path.rstrip("/") or "/"
    if isinstance(fs, LocalFileSystem):
        return LocalLogStore(fs, root, fsync=options.fsync)
    if isinstance(fs, MemoryFileSystem):
        return MemoryLogStore(fs, root)
    from raydelta.storage.log.s3_store import S3LogStore, SingleWriterLogStore

    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    if "s3" in protocols:
        if options.atomic_create:
            return S3LogStore(fs, root)
        why = 'the storage options say it ignores If-None-Match (conditional_put="disabled")'
    else:
        why = f"raydelta knows no atomic create-if-absent for the {protocols[0]!r} filesystem"
    return SingleWriterLogStore(fs, root, single_writer=options.single_writer, why=why)
