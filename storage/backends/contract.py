"""The table-storage contract: every byte of a table goes through a :class:`LogStore`.

One object per table root serves the modules above it: the Delta log under
``_delta_log`` (list, read, put-if-absent, overwrite, delete, Hadoop
checksum files) and every other file of the table (checkpoint parts,
sidecars, data files, deletion vectors: open, status, write, delete,
directory scans for VACUUM). Its name is the one Delta engines give it
(delta-spark's and delta-rs's ``LogStore``); it is a table storage, not only
a log store, because a reader that opens a checkpoint part and a writer that
writes a data file need the same backend, credentials and path rules.

Two kinds of names
    *Log names* are relative to :attr:`LogStore.log_dir` (``_delta_log``):
    ``00000000000000000007.json``, ``_sidecars/<uuid>.parquet``,
    ``_last_checkpoint``; the log methods take them. *Paths* are the
    backend's own spelling of a file of the table (an OS path on a local
    disk, ``bucket/key`` on S3): :meth:`LogStore.path_of` (a log name),
    :meth:`LogStore.root_path` (a root-relative path), :meth:`LogStore.data_path`
    (an ``add.path``) and :meth:`LogStore.path_of_uri` (an absolute URI) make
    them, and the file methods take them. Nothing above the backends builds
    a path any other way than by joining onto one of these.

The contract is stated on each group of methods below and checked, with the
same tests for every backend, by ``tests/storage/test_log_store.py``.

Invariants:
- Put-if-absent is the backend's own atomic primitive, never emulated with
  check-then-write across processes (the single-writer backend is the one
  exception, and refuses to write unless the user opts in).
- Code above ``storage/backends/`` sees only this class and asks its
  capabilities (:attr:`LogStore.on_local_disk`, :attr:`LogStore.scheme`),
  never its concrete class nor the library under it.
- Listings and directory scans read the store, never a cache, so a file
  another process created before the call is seen.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, ClassVar

import pyarrow.parquet as pq

from raydelta.protocol.errors import FileAlreadyExistsError
from raydelta.protocol.file_actions import canonical_path
from raydelta.protocol.file_names import DELTA_LOG_DIR, LogFile


@dataclass(frozen=True, slots=True)
class FileStatus:
    """What a backend knows of one path: its size in bytes, its modification
    time in ms since the epoch (0 where the backend records none), and
    whether it is a regular file (False for a directory)."""

    size: int
    modification_time: int
    is_file: bool = True


ENTRY_FILE = "file"
ENTRY_DIRECTORY = "directory"
ENTRY_SYMLINK = "symlink"
ENTRY_OTHER = "other"
"""The kinds of :attr:`DirectoryScan.entries`: a regular file, a directory, a
symbolic link (never followed), anything else (a socket, a device)."""


@dataclass(frozen=True, slots=True)
class DirectoryScan:
    """One directory's entries, as :meth:`LogStore.scan_directory` found them.

    ``entries`` are ``(name, kind)`` pairs in the backend's order, a kind
    being one of the ``ENTRY_*`` names. ``modification_time`` is the
    directory's own (ms; 0 where the backend has no directories, as on object
    stores). ``status(name)`` is the :class:`FileStatus` of the file entry
    ``name`` (``lstat`` on a local disk, done only when asked: a scan of a
    directory of a million files costs no ``stat`` of the ones nobody asks
    about; the listing's own answer elsewhere); it raises
    :class:`FileNotFoundError` for a file removed since the scan.
    """

    entries: list[tuple[str, str]]
    modification_time: int
    status: Callable[[str], FileStatus]


class LogStore(abc.ABC):
    """The contract of a table's storage (module docstring for its two kinds of names).

    The log (names relative to ``_delta_log``)
        Listing: :meth:`list_dir` returns every file of ``_delta_log/<subdir>``
        whose name the protocol recognises (:func:`parse_log_file_name`; temp
        files, directories, unknown names and Hadoop checksum files are left
        out), each with its size and modification time (ms), **sorted by
        name**. Lexicographic order is version order because versions are
        zero-padded to 20 digits; at one version the kinds sort by their
        suffix (``.checkpoint.parquet`` before ``.json``). A missing directory
        lists as empty, never raises. :meth:`list_from` is :meth:`list_dir` of
        the log itself restricted to files that carry a version (so not
        ``_last_checkpoint``) with version ``>= version``, in the same order.
        A listing is a snapshot: a file created during the call may or may
        not appear, but a listed file existed.

        Reading: :meth:`read` returns the whole content of a file; a missing
        file raises :class:`FileNotFoundError` (never returns empty bytes).
        :meth:`read_many` is :meth:`read` of several names, in the order
        given, fetched concurrently where the backend can.

        Put-if-absent: :meth:`put_if_absent` creates ``_delta_log/<name>``
        holding exactly ``data`` **only if no file of that name exists**,
        atomically, with the backend's own primitive. When the name exists
        it raises :class:`FileAlreadyExistsError` and leaves the existing
        file as it was. Of concurrent callers (threads, processes, machines)
        on one name, exactly one wins. Readers never see a partial file.
        Missing directories are created.

        Overwrite and delete: :meth:`write` replaces a file (for
        ``_last_checkpoint`` and files with unique names such as UUID
        checkpoints and sidecars), atomically where the backend allows (temp
        file + rename on local disks). :meth:`delete` removes a file; a
        missing file is not an error. On local disks both also remove the
        file's Hadoop checksum file (``storage/backends/local.py``).

        Hadoop checksum files: :meth:`list_hadoop_crcs` names the Hadoop
        checksum files (``.<name>.crc``) of ``_delta_log/<subdir>``, sorted;
        stores without them list none. :meth:`delete_orphan_hadoop_crc`
        removes one whose file no longer exists.

    Files of the table (paths)
        :meth:`open_input` opens a file for reading (a seekable binary
        handle; :class:`FileNotFoundError` when missing), :meth:`read_range`
        reads bytes ``[start, end)`` of it, :meth:`open_parquet` opens it as
        a parquet file (memory-mapped where asked and the backend can).
        :meth:`status` and :meth:`exists` ask about a path without reading
        it. :meth:`open_output` creates or replaces a file (parent
        directories created where the backend has them) and is how data
        files and deletion-vector files are written. :meth:`remove_file`
        removes a file (:class:`FileNotFoundError` when missing, never a
        Hadoop checksum file: data files are removed as the caller says),
        :meth:`remove_directory_if_empty` an empty directory,
        :meth:`makedirs` creates a directory and its parents (nothing on
        object stores). :meth:`scan_directory` lists one directory without
        following symlinks (None when it does not exist): VACUUM's walk is
        made of these.

    Identity and capabilities
        :attr:`table_root` is the root in the backend's spelling;
        :attr:`table_root_key` the root as
        :func:`raydelta.protocol.file_actions.table_root_key` spells it
        (``/data/t``, ``s3://bucket/t``, ``memory:///t``), the key log paths
        are compared against; :attr:`scheme` the URI scheme (``file`` on
        local disks). :attr:`on_local_disk` is true when every path of the
        store is a path of the local operating system, so callers may use
        ``os`` calls on them.
    """

    on_local_disk: ClassVar[bool] = False

    def __init__(self, table_root: str) -> None:
        self.table_root = table_root
        self.log_dir = f"{table_root}/{DELTA_LOG_DIR}"

    # --- names and paths -----------------------------------------------------------

    def path_of(self, name: str) -> str:
        """The path of ``_delta_log/<name>`` (of ``<log_dir>/<name>``)."""
        return f"{self.log_dir}/{name}"

    def root_path(self, relative: str) -> str:
        """The path of root-relative ``relative`` (``""`` is the root itself)."""
        return f"{self.table_root}/{relative}" if relative else self.table_root

    def data_path(self, path: str) -> str:
        """The path of an ``add.path`` (relative and URI-encoded, or absolute).

        The path is decoded exactly once, by
        :func:`raydelta.protocol.file_actions.canonical_path` (the spelling
        every comparison uses); an absolute URI goes through
        :meth:`path_of_uri`."""
        canonical = canonical_path(path)
        if "://" in canonical:
            return self.path_of_uri(canonical)
        if canonical.startswith("/"):
            return canonical
        return f"{self.table_root.rstrip('/')}/{canonical}"

    @abc.abstractmethod
    def path_of_uri(self, uri: str) -> str:
        """The path of an absolute URI (or absolute path) on this store's backend."""

    @property
    @abc.abstractmethod
    def scheme(self) -> str:
        """The URI scheme of the store (``file`` on local disks)."""

    @property
    @abc.abstractmethod
    def table_root_key(self) -> str:
        """The table root as log paths are compared against it (class docstring)."""

    # --- the log: listing ------------------------------------------------------------

    @abc.abstractmethod
    def list_dir(self, subdir: str = "") -> list[LogFile]:
        """Every recognised file in ``_delta_log/<subdir>``, sorted by name."""

    def list_from(self, version: int = 0) -> list[LogFile]:
        """Versioned files of ``_delta_log`` with version >= ``version``, sorted by name."""
        return [f for f in self.list_dir() if f.version is not None and f.version >= version]

    @abc.abstractmethod
    def log_exists(self) -> bool:
        """Whether ``_delta_log`` exists."""

    # --- the log: reading --------------------------------------------------------------

    @abc.abstractmethod
    def read(self, name: str) -> bytes:
        """The bytes of ``_delta_log/<name>``; :class:`FileNotFoundError` when missing."""

    def read_many(self, names: Sequence[str]) -> list[bytes]:
        """The bytes of several log files, in the order of ``names``."""
        return [self.read(n) for n in names]

    # --- the log: writing ----------------------------------------------------------------

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

    def list_hadoop_crcs(self, subdir: str = "") -> list[str]:
        """Names (relative to ``_delta_log``) of the Hadoop checksum files in
        ``_delta_log/<subdir>``, sorted; none on stores that have none."""
        return []

    def delete_orphan_hadoop_crc(self, name: str) -> bool:
        """Remove ``name``'s Hadoop checksum file if ``name`` itself does not
        exist; whether one was removed."""
        return False

    # --- files of the table ----------------------------------------------------------------

    @abc.abstractmethod
    def open_input(self, path: str) -> IO[bytes]:
        """``path`` opened for reading (seekable); :class:`FileNotFoundError` when missing."""

    @abc.abstractmethod
    def read_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``path`` (fewer at its end);
        :class:`FileNotFoundError` when missing."""

    def open_parquet(
        self, path: str, *, memory_map: bool = False, buffer_size: int = 0
    ) -> pq.ParquetFile:
        """``path`` as a parquet file; ``memory_map`` maps it where the backend
        can (local disks) and is ignored elsewhere; ``buffer_size`` > 0 reads
        each column chunk that many bytes at a time instead of whole."""
        return pq.ParquetFile(self.open_input(path), buffer_size=buffer_size)

    @abc.abstractmethod
    def status(self, path: str) -> FileStatus:
        """Size, modification time and kind of ``path``; :class:`FileNotFoundError` when missing."""

    @abc.abstractmethod
    def exists(self, path: str) -> bool:
        """Whether anything (a file or a directory) is at ``path``."""

    @abc.abstractmethod
    def open_output(self, path: str) -> IO[bytes]:
        """``path`` opened to be written whole (created or replaced; parent
        directories created where the backend has them)."""

    @abc.abstractmethod
    def remove_file(self, path: str) -> None:
        """Remove the file ``path``; :class:`FileNotFoundError` when the backend
        sees it missing (object stores do not: deleting a missing key succeeds)."""

    @abc.abstractmethod
    def remove_directory_if_empty(self, path: str) -> bool:
        """Remove the directory ``path`` if it exists and is empty; whether it did."""

    @abc.abstractmethod
    def makedirs(self, path: str) -> None:
        """Create the directory ``path`` and its parents (nothing where there are none)."""

    @abc.abstractmethod
    def scan_directory(self, path: str) -> DirectoryScan | None:
        """The entries of directory ``path`` (symlinks not followed), or None when
        it does not exist (or is not a directory)."""
