"""Log stores for object stores: S3 with conditional writes, and single-writer mode.

:class:`S3LogStore` (``s3://`` and ``s3a://`` through s3fs) creates a log
file with one ``PutObject`` carrying ``If-None-Match: *`` (s3fs's
``pipe_file(mode="create")``): S3 and compatible stores refuse it with
``412 Precondition Failed`` when the key exists, which s3fs raises as
:class:`FileExistsError` and we as
:class:`~raydelta.protocol.errors.FileAlreadyExistsError`. Two conditional
writes of one key racing on S3 may also get ``409 ConditionalRequestConflict``:
that is not an answer, so the put is retried (with backoff) until S3 says
created or exists.

:class:`SingleWriterLogStore` serves backends with no atomic create (an
S3-compatible store that ignores ``If-None-Match``, declared with
``conditional_put="disabled"``; fsspec filesystems raydelta has no atomic
primitive for). Without the ``single_writer`` option it refuses every write
with :class:`~raydelta.protocol.errors.UnsupportedStorageError` (reads work);
with it, put-if-absent is check-then-write, correct only because the user
promised that one TableActor makes every commit of the table (the actor
serialises them) and no other engine writes it.

Invariants:
- Every listing reads the store, never s3fs's in-process listing cache (the
  directory is invalidated first), so a version another process committed is
  seen by the next listing.
- A 409 is retried at most :data:`CONFLICT_RETRIES` times, then the put fails
  with :class:`~raydelta.protocol.errors.CommitFailedError` (the file was not
  created by us; the caller may retry the commit).
- Error messages name paths, never credentials.
"""

from __future__ import annotations

import time
from typing import Any

import fsspec

from raydelta.protocol.errors import (
    CommitFailedError,
    FileAlreadyExistsError,
    UnsupportedStorageError,
)
from raydelta.storage.log.store import FsspecLogStore

CONFLICT_RETRIES = 8
"""How many times a put answered 409 ConditionalRequestConflict is retried."""
CONFLICT_BACKOFF_S = 0.01
"""First wait after a 409; doubled after each one, up to :data:`CONFLICT_BACKOFF_MAX_S`."""
CONFLICT_BACKOFF_MAX_S = 0.2


def _is_conditional_conflict(error: BaseException) -> bool:
    """Whether ``error`` is S3's 409 for concurrent conditional writes (s3fs
    raises it as an ``OSError`` caused by botocore's ``ClientError``)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        response = getattr(current, "response", None)
        if isinstance(response, dict):
            code = (response.get("Error") or {}).get("Code")
            status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            if code == "ConditionalRequestConflict" or status == 409:
                return True
        current = current.__cause__ or current.__context__
    return False


class _FreshListings(FsspecLogStore):
    """Listings that bypass fsspec's listing cache."""

    def _ls(self, directory: str) -> list[dict[str, Any]]:
        self.fs.invalidate_cache(directory)
        return super()._ls(directory)

    def log_exists(self) -> bool:
        self.fs.invalidate_cache(self.log_dir)
        return super().log_exists()


class S3LogStore(_FreshListings):
    """S3 and compatible stores: put-if-absent is a conditional ``PutObject``."""

    def put_if_absent(self, name: str, data: bytes) -> None:
        path = self.path_of(name)
        wait = CONFLICT_BACKOFF_S
        for attempt in range(CONFLICT_RETRIES + 1):
            try:
                self.fs.pipe_file(path, data, mode="create")
                return
            except FileExistsError:
                raise FileAlreadyExistsError(f"{name} already exists in {self.log_dir}") from None
            except OSError as error:
                if not _is_conditional_conflict(error) or attempt == CONFLICT_RETRIES:
                    raise CommitFailedError(
                        f"could not create {name} in {self.log_dir}: {error}"
                    ) from error
            time.sleep(wait)
            wait = min(wait * 2, CONFLICT_BACKOFF_MAX_S)

    def write(self, name: str, data: bytes) -> None:
        # One PutObject replaces the object atomically; no directories on S3.
        self.fs.pipe_file(self.path_of(name), data)


class SingleWriterLogStore(_FreshListings):
    """A backend with no atomic create: writes refused unless ``single_writer``."""

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
