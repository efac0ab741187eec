"""The in-process memory backend (``memory://``): :class:`MemoryLogStore`.

fsspec's memory filesystem is one dictionary per process, visible to no other
process, so a process-wide lock around exists-then-write makes put-if-absent
atomic for every writer that can see the files. For tests and throwaway tables.
"""

from __future__ import annotations

import threading

from raydelta.protocol.errors import FileAlreadyExistsError
from raydelta.storage.backends.fsspec_store import FsspecLogStore, filesystem_for
from raydelta.storage.storage_options import ParsedStorageOptions

_MEMORY_LOCK = threading.Lock()


def open_memory(uri: str, options: ParsedStorageOptions) -> MemoryLogStore:
    """The registry's entry for ``memory``."""
    fs, root = filesystem_for(uri, options)
    return MemoryLogStore(fs, root)


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
