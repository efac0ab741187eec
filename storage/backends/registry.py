"""Which backend serves a URI: a registry keyed by URI scheme.

:data:`BACKENDS` maps a scheme (lower case, as
:func:`raydelta.storage.storage_options.scheme_of` reads it: ``file`` for
plain paths, the outermost one of a chained URL) to the function that opens
that backend's :class:`~raydelta.storage.backends.contract.LogStore`;
:data:`FALLBACK` opens every other scheme (single-writer mode, which refuses
log writes unless the user opts in). :func:`storage_for` is the one place a
URI picks its backend.

Adding a backend (GCS, Azure, HDFS): one module in ``storage/backends/``
holding its :class:`~raydelta.storage.backends.contract.LogStore` subclass
(usually a :class:`~raydelta.storage.backends.fsspec_store.FsspecLogStore`
with the backend's atomic put-if-absent) and an ``open_<name>(uri, options)``
function, plus one line here; ``tests/storage/test_log_store.py`` then runs
the contract suite on it once its fixture can build one.

Invariants:
- A scheme has one backend; the lookup is a dictionary access, never a
  chain of type checks, and imports nothing lazily.
- Storage options are parsed (and bad ones refused, with
  :class:`~raydelta.protocol.errors.InvalidArgumentError`) before any backend
  is opened.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from raydelta.storage.backends.contract import LogStore
from raydelta.storage.backends.local import open_local
from raydelta.storage.backends.memory import open_memory
from raydelta.storage.backends.s3 import open_s3
from raydelta.storage.backends.single_writer import open_single_writer
from raydelta.storage.storage_options import (
    ParsedStorageOptions,
    parse_storage_options,
    scheme_of,
)

OpenBackend = Callable[[str, ParsedStorageOptions], LogStore]
"""``open(uri, options)``: the store of the table at ``uri``."""

BACKENDS: Mapping[str, OpenBackend] = {
    "file": open_local,
    "local": open_local,
    "memory": open_memory,
    "s3": open_s3,
    "s3a": open_s3,
}
FALLBACK: OpenBackend = open_single_writer


def storage_for(uri: str, storage_options: Mapping[str, Any] | None = None) -> LogStore:
    """The store of the table at ``uri`` (``file://``, a plain path,
    ``memory://``, ``s3://``, ...): :data:`BACKENDS`' entry for its scheme,
    else :data:`FALLBACK`."""
    options = parse_storage_options(uri, storage_options)
    return BACKENDS.get(scheme_of(uri), FALLBACK)(uri, options)
