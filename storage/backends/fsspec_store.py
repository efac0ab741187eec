"""The contract over an fsspec filesystem: what every fsspec backend shares.

:class:`FsspecLogStore` implements all of :class:`~.contract.LogStore` but
put-if-absent (each backend brings its own atomic primitive) through one
fsspec filesystem, :attr:`FsspecLogStore.fs`. That attribute belongs to the
backends: no module above ``storage/backends/`` reaches it.

Invariants:
- With :attr:`FsspecLogStore.fresh_listings` (object stores whose fsspec
  filesystem caches listings, such as s3fs), every listing, directory scan
  and :meth:`~FsspecLogStore.log_exists` drops the cached listing first, so a
  file another process created is seen by the next call.
- Modification times come from whichever key the backend's ``info`` uses
  (:func:`mtime_ms`); 0 when it has none.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import IO, Any, ClassVar

import fsspec

from raydelta.protocol.file_actions import table_root_key
from raydelta.protocol.file_names import LogFile, parse_log_file_name
from raydelta.storage.backends.contract import (
    ENTRY_DIRECTORY,
    ENTRY_FILE,
    ENTRY_SYMLINK,
    DirectoryScan,
    FileStatus,
    LogStore,
)
from raydelta.storage.storage_options import ParsedStorageOptions


def filesystem_for(
    uri: str, options: ParsedStorageOptions
) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem of ``uri`` and its root path (no trailing slash)."""
    fs, path = fsspec.core.url_to_fs(uri, **options.fsspec)
    return fs, path.rstrip("/") or "/"


def protocols_of(fs: fsspec.AbstractFileSystem) -> tuple[str, ...]:
    """The protocol names of an fsspec filesystem, its main one first."""
    return (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)


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


def _status_of(info: dict[str, Any]) -> FileStatus:
    return FileStatus(
        size=int(info.get("size") or 0),
        modification_time=mtime_ms(info),
        is_file=info.get("type") == "file",
    )


class FsspecLogStore(LogStore):
    """Listing, reading, overwriting, deleting and every file method through an
    fsspec filesystem; put-if-absent is left to the backend's subclass."""

    fresh_listings: ClassVar[bool] = False

    def __init__(self, fs: fsspec.AbstractFileSystem, table_root: str) -> None:
        super().__init__(table_root)
        self.fs = fs

    # --- identity ------------------------------------------------------------------

    @property
    def scheme(self) -> str:
        return protocols_of(self.fs)[0]

    @property
    def table_root_key(self) -> str:
        protocol = protocols_of(self.fs)[0]
        if protocol in ("file", "local"):
            return table_root_key(self.table_root)
        return table_root_key(f"{protocol}://{self.table_root}")

    def path_of_uri(self, uri: str) -> str:
        return str(self.fs._strip_protocol(uri))

    # --- the log ----------------------------------------------------------------------

    def _ls(self, directory: str) -> list[dict[str, Any]]:
        if self.fresh_listings:
            self.fs.invalidate_cache(directory)
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
        if self.fresh_listings:
            self.fs.invalidate_cache(self.log_dir)
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

    # --- files of the table -------------------------------------------------------------

    def open_input(self, path: str) -> IO[bytes]:
        handle: IO[bytes] = self.fs.open(path, "rb")
        return handle

    def read_range(self, path: str, start: int, end: int) -> bytes:
        return bytes(self.fs.cat_file(path, start=start, end=end))

    def status(self, path: str) -> FileStatus:
        return _status_of(self.fs.info(path))

    def exists(self, path: str) -> bool:
        return bool(self.fs.exists(path))

    def open_output(self, path: str) -> IO[bytes]:
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        handle: IO[bytes] = self.fs.open(path, "wb")
        return handle

    def remove_file(self, path: str) -> None:
        self.fs.rm_file(path)

    def remove_directory_if_empty(self, path: str) -> bool:
        if not self.fs.exists(path) or self.fs.ls(path):
            return False
        self.fs.rmdir(path)
        return True

    def makedirs(self, path: str) -> None:
        self.fs.makedirs(path, exist_ok=True)

    def scan_directory(self, path: str) -> DirectoryScan | None:
        if self.fresh_listings:
            self.fs.invalidate_cache(path)
        try:
            infos: list[dict[str, Any]] = self.fs.ls(path, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return None
        entries: list[tuple[str, str]] = []
        statuses: dict[str, FileStatus] = {}
        for info in infos:
            name = info["name"].rstrip("/").rsplit("/", 1)[-1]
            if info.get("islink"):
                entries.append((name, ENTRY_SYMLINK))
            elif info.get("type") == "directory":
                entries.append((name, ENTRY_DIRECTORY))
            else:
                entries.append((name, ENTRY_FILE))
                statuses[name] = _status_of(info)

        def status(name: str) -> FileStatus:
            try:
                return statuses[name]
            except KeyError:
                raise FileNotFoundError(f"{path}/{name}") from None

        return DirectoryScan(entries, 0, status)
