"""The fallback backend: :class:`SingleWriterLogStore`, for filesystems with no atomic create.

It serves an S3-compatible store that ignores ``If-None-Match`` (declared
with ``conditional_put="disabled"``) and every fsspec filesystem raydelta
has no atomic primitive for. Without the ``single_writer`` option it refuses every write
with :class:`~raydelta.protocol.errors.UnsupportedStorageError` (reads work);
with it, put-if-absent is check-then-write, correct only because the user
promised that one TableActor makes every commit of the table (the actor
serialises them) and no other engine writes it.

The registry (:mod:`raydelta.storage.backends.registry`) gives it every
scheme it has no line for, and the S3 backend gives it S3 with
``conditional_put="disabled"``. Only the log's writes are refused: data files
are written as on any backend (a data file has a fresh UUID name, and only a
commit makes it part of the table).

Invariants:
- Listings bypass the filesystem's listing cache (as on S3).
- Without ``single_writer`` no log file is ever created, replaced or deleted.
- Error messages name paths, never credentials.
"""

from __future__ import annotations

import fsspec

from raydelta.protocol.errors import FileAlreadyExistsError, UnsupportedStorageError
from raydelta.storage.backends.fsspec_store import FsspecLogStore, filesystem_for, protocols_of
from raydelta.storage.storage_options import ParsedStorageOptions


def open_single_writer(uri: str, options: ParsedStorageOptions) -> SingleWriterLogStore:
    """The registry's fallback: any fsspec filesystem raydelta has no atomic create for."""
    fs, root = filesystem_for(uri, options)
    why = f"raydelta knows no atomic create-if-absent for the {protocols_of(fs)[0]!r} filesystem"
    return SingleWriterLogStore(fs, root, single_writer=options.single_writer, why=why)


class SingleWriterLogStore(FsspecLogStore):
    """A backend with no atomic create: log writes refused unless ``single_writer``."""

    fresh_listings = True

    def __init__(
        self, fs: fsspec.AbstractFileSystem, table_root: str, *, single_writer: bool, why: str
    ) -> None:
        super().__init__(fs, table_root)
        self.single_writer = single_writer
        self.why = why

    def _refuse_unless_single_writer(self) -> None:
        if not self.single_writer:
            raise UnsupportedStorageError(
                f"cannot write the Delta log at {self.log_dir}: {self.why}, so two writers "
                "could both create the same version. If every commit of this table goes "
                "through its one raydelta TableActor and no other engine writes it, opt "
                'into single-writer mode with storage_options={"single_writer": "true"}'
            )

    def put_if_absent(self, name: str, data: bytes) -> None:
        self._refuse_unless_single_writer()
        path = self.path_of(name)
        # Check-then-write: atomic only because the one TableActor serialises commits.
        self.fs.invalidate_cache(path)
        if self.fs.exists(path):
            raise FileAlreadyExistsError(f"{name} already exists in {self.log_dir}")
        super().write(name, data)

    def write(self, name: str, data: bytes) -> None:
        self._refuse_unless_single_writer()
        super().write(name, data)

    def delete(self, name: str) -> None:
        self._refuse_unless_single_writer()
        super().delete(name)
