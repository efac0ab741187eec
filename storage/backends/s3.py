"""The S3 backend (``s3://``, ``s3a://``): :class:`S3LogStore`, conditional writes.

:class:`S3LogStore` (``s3://`` and ``s3a://`` through s3fs) creates a log
file with one ``PutObject`` carrying ``If-None-Match: *`` (s3fs's
``pipe_file(mode="create")``): S3 and compatible stores refuse it with
``412 Precondition Failed`` when the key exists, which s3fs raises as
:class:`FileExistsError` and we as
:class:`~raydelta.protocol.errors.FileAlreadyExistsError`. Two conditional
writes of one key racing on S3 may also get ``409 ConditionalRequestConflict``:
that is not an answer, so the put is retried (with backoff) until S3 says
created or exists.

With ``conditional_put="disabled"`` (an S3-compatible store that ignores
``If-None-Match``) the registry entry returns the single-writer backend
(:mod:`raydelta.storage.backends.single_writer`) instead.

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

from raydelta.protocol.errors import CommitFailedError, FileAlreadyExistsError
from raydelta.storage.backends.contract import LogStore
from raydelta.storage.backends.fsspec_store import FsspecLogStore, filesystem_for
from raydelta.storage.backends.single_writer import SingleWriterLogStore
from raydelta.storage.storage_options import ParsedStorageOptions

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


def open_s3(uri: str, options: ParsedStorageOptions) -> LogStore:
    """The registry's entry for ``s3`` and ``s3a``: conditional writes, unless the
    options say the store ignores them (then single-writer mode)."""
    fs, root = filesystem_for(uri, options)
    if options.atomic_create:
        return S3LogStore(fs, root)
    why = 'the storage options say it ignores If-None-Match (conditional_put="disabled")'
    return SingleWriterLogStore(fs, root, single_writer=options.single_writer, why=why)


class S3LogStore(FsspecLogStore):
    """S3 and compatible stores: put-if-absent is a conditional ``PutObject``."""

    fresh_listings = True

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
