"""Log stores: list, read and atomically create files under ``_delta_log``.

Contract every backend keeps (and ``tests/storage/test_log_store.py`` checks):

- ``list_from(version)`` returns the log files whose version is >= ``version``
  (non-version files such as ``_last_checkpoint`` excluded), **sorted** by
  file name, which for zero-padded names is version order, with size and
  modification time.
- ``read(name)`` returns the bytes of ``_delta_log/<name>``; a missing file
  raises ``FileNotFoundError``.
- ``put_if_absent(name, data)`` creates ``_delta_log/<name>`` holding exactly
  ``data`` **only if it does not exist**, atomically, using the backend's own
  primitive; if it exists it raises :class:`FileAlreadyExistsError` and the
  existing file is untouched. Readers never see a partial file. It is never
  emulated with check-then-write.
- ``write(name, data)`` overwrites (for ``_last_checkpoint`` and files with
  unique names such as UUID checkpoints and sidecars), atomically where the
  backend allows (temp file + rename on local disks).

Backends: :class:`LocalLogStore` (``file://``: temp file, ``fsync``, then
``os.link`` which fails if the target exists), :class:`MemoryLogStore`
(``memory://``: a process-wide lock around exists+write, which is atomic for
the only process that can see that filesystem), and
:class:`ObjectStoreLogStore` (any other fsspec filesystem: exclusive-create
``open(mode="xb")``, which object stores with conditional puts implement).
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Sequence
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem

from raydelta.protocol.errors import FileAlreadyExistsError
from raydelta.protocol.file_names import DELTA_LOG_DIR, LogFile, parse_log_file_name


def split_uri(
    uri: str, storage_options: dict[str, Any] | None = None
) -> tuple[fsspec.AbstractFileSystem, str]:
    """Filesystem and root path (no trailing slash) of a table URI or local path."""
    fs, path = fsspec.core.url_to_fs(uri, **(storage_options or {}))
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


class LogStore:
    """Base log store over an fsspec filesystem; see the module contract."""

    def __init__(self, fs: fsspec.AbstractFileSystem, table_root: str) -> None:
        self.fs = fs
        self.table_root = table_root
        self.log_dir = f"{table_root}/{DELTA_LOG_DIR}"

    # --- listing -------------------------------------------------------------

    def _ls(self, directory: str) -> list[dict[str, Any]]:
        try:
            entries: list[dict[str, Any]] = self.fs.ls(directory, detail=True)
        except FileNotFoundError:
            return []
        return entries

    def list_dir(self, subdir: str = "") -> list[LogFile]:
        """Every recognised file in ``_delta_log/<subdir>``, sorted by name."""
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

    def list_from(self, version: int = 0) -> list[LogFile]:
        """Versioned files of ``_delta_log`` with version >= ``version``, sorted."""
        return [f for f in self.list_dir() if f.version is not None and f.version >= version]

    def log_exists(self) -> bool:
        return bool(self.fs.isdir(self.log_dir))

    # --- reading ------------------------------------------------------------

    def path_of(self, name: str) -> str:
        return f"{self.log_dir}/{name}"

    def read(self, name: str) -> bytes:
        data: bytes = self.fs.cat_file(self.path_of(name))
        return data

    def read_many(self, names: Sequence[str]) -> list[bytes]:
        """Bytes of several log files, fetched concurrently where the backend can."""
        if not names:
            return []
        paths = [self.path_of(n) for n in names]
        if len(paths) == 1:
            return [self.read(names[0])]
        fetched: dict[str, bytes] = self.fs.cat(paths, on_error="raise")
        return [fetched[p] for p in paths]

    # --- writing --------------------------------------------------------------

    def put_if_absent(self, name: str, data: bytes) -> None:
        raise NotImplementedError

    def write(self, name: str, data: bytes) -> None:
        path = self.path_of(name)
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        with self.fs.open(path, "wb") as handle:
            handle.write(data)

    def delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self.path_of(name))


class LocalLogStore(LogStore):
    """Local disks: temp file + fsync + ``os.link`` (fails if the target exists)."""

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

    def write(self, name: str, data: bytes) -> None:
        target = self.path_of(name)
        temp = self._write_temp(target, data)
        os.replace(temp, target)

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


class MemoryLogStore(LogStore):
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


class ObjectStoreLogStore(LogStore):
    """Other fsspec backends: exclusive create (``mode="xb"``), i.e. a conditional put."""

    def put_if_absent(self, name: str, data: bytes) -> None:
        path = self.path_of(name)
        try:
            with self.fs.open(path, "xb") as handle:
                handle.write(data)
        except FileExistsError:
            raise FileAlreadyExistsError(f"{name} already exists in {self.log_dir}") from None


def log_store_for(uri: str, storage_options: dict[str, Any] | None = None) -> LogStore:
    """The log store for a table URI (``file://``, a plain path, ``memory://``, ...)."""
    options = dict(storage_options or {})
    fsync = str(options.pop("fsync", "true")).lower() != "false"
    fs, root = split_uri(uri, options)
    if isinstance(fs, LocalFileSystem):
        return LocalLogStore(fs, root, fsync=fsync)
    if isinstance(fs, MemoryFileSystem):
        return MemoryLogStore(fs, root)
    return ObjectStoreLogStore(fs, root)
