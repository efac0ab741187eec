"""raydelta: a Delta Lake transaction-log engine where Ray actors own each table.

>>> import pyarrow as pa, raydelta                                    # doctest: +SKIP
>>> table = raydelta.create_table("events", pa.schema([("id", pa.int64())]))
>>> table.append(pa.table({"id": [1, 2, 3]}))                         # doctest: +SKIP
1
>>> raydelta.load_snapshot("events").num_files                        # doctest: +SKIP
1

The names in ``__all__`` are the public API; :mod:`raydelta.errors` holds
every error class (the common ones are importable from ``raydelta`` too). The subpackages
``raydelta.protocol`` (the Delta protocol as pure values, including the typed
events actor handles take and return), ``raydelta.storage`` and
``raydelta.actors`` are documented layers for log-level work; any name not
listed in a module's ``__all__`` or starting with an underscore is internal.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from raydelta.errors import (
    CommitFailedError,
    DeltaConcurrentModificationException,
    InvalidArgumentError,
    PermissionDeniedError,
    RaydeltaError,
    TableAlreadyExistsError,
    TableNotFoundError,
    VersionNotFoundError,
)

if TYPE_CHECKING:
    from raydelta.actors.checkpoint.results import CheckpointSummary
    from raydelta.actors.cluster import connect
    from raydelta.catalog import Catalog, CatalogTable
    from raydelta.history import History
    from raydelta.protocol.catalog_managed import RatifiedCommit
    from raydelta.protocol.durations import parse_duration
    from raydelta.protocol.privileges import Privilege
    from raydelta.protocol.securables import SecurableType
    from raydelta.storage.cleanup.metadata import MetadataCleanupReport
    from raydelta.storage.cleanup.vacuum import VacuumReport
    from raydelta.storage.history import HistoryEntry
    from raydelta.storage.snapshot import Snapshot
    from raydelta.table import Table, Transaction, create_table, open_table, release_table

_LAZY = {
    "CheckpointSummary": "raydelta.actors.checkpoint.results",
    "connect": "raydelta.actors.cluster",
    "Catalog": "raydelta.catalog",
    "CatalogTable": "raydelta.catalog",
    "RatifiedCommit": "raydelta.protocol.catalog_managed",
    "parse_duration": "raydelta.protocol.durations",
    "Privilege": "raydelta.protocol.privileges",
    "SecurableType": "raydelta.protocol.securables",
    "HistoryEntry": "raydelta.storage.history",
    "MetadataCleanupReport": "raydelta.storage.cleanup.metadata",
    "Snapshot": "raydelta.storage.snapshot",
    "VacuumReport": "raydelta.storage.cleanup.vacuum",
    "History": "raydelta.history",
    "Table": "raydelta.table",
    "Transaction": "raydelta.table",
    "check_version": "raydelta.table",
    "create_table": "raydelta.table",
    "open_table": "raydelta.table",
    "release_table": "raydelta.table",
}
"""Public names imported on first use (PEP 562): ``import raydelta`` (or any of
its submodules) does not pull in Ray, pandas or the catalog until asked."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        # every error class stays reachable as ``raydelta.<Name>`` too
        from raydelta import errors

        if name in errors.__all__:
            return getattr(errors, name)
        raise AttributeError(f"module 'raydelta' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.2.0"


def load_snapshot(
    uri: str,
    *,
    version: int | None = None,
    timestamp: int | str | datetime | None = None,
    storage_options: dict[str, Any] | None = None,
    ratified_commits: Sequence[RatifiedCommit] | None = None,
    latest_ratified_version: int | None = None,
) -> Snapshot:
    """The table at ``uri`` as of the latest version, ``version``, or
    ``timestamp`` (time travel), read from storage: no Ray needed.

    A catalog-managed table (table feature ``catalogManaged``) is read from
    what its catalog returned: ``ratified_commits`` (staged or inline
    :class:`RatifiedCommit` s it still holds) and ``latest_ratified_version``;
    the catalog's commit wins over a published file of the same version and
    published files past its latest version are ignored.

    Raises :class:`TableNotFoundError` when there is no table,
    :class:`VersionNotFoundError` when the version is not reachable, and
    :class:`CatalogManagedTableError` for a catalog-managed table read
    without its catalog's commits.
    """
    if version is not None and timestamp is not None:
        raise InvalidArgumentError("pass version or timestamp, not both")
    from raydelta.arguments import check_version
    from raydelta.storage.snapshot import load_snapshot as _load_snapshot
    from raydelta.storage.table_location import normalize_uri

    check_version(version)
    return _load_snapshot(
        normalize_uri(uri),
        version=version,
        timestamp=timestamp,
        storage_options=storage_options,
        ratified_commits=ratified_commits,
        latest_ratified_version=latest_ratified_version,
    )


__all__ = [
    "Catalog",
    "CatalogTable",
    "CheckpointSummary",
    "CommitFailedError",
    "DeltaConcurrentModificationException",
    "History",
    "HistoryEntry",
    "InvalidArgumentError",
    "MetadataCleanupReport",
    "OverlappingTablesError",
    "PermissionDeniedError",
    "Privilege",
    "RatifiedCommit",
    "RaydeltaError",
    "SecurableType",
    "Snapshot",
    "Table",
    "TableAlreadyExistsError",
    "TableNotFoundError",
    "Transaction",
    "VacuumReport",
    "VersionNotFoundError",
    "__version__",
    "connect",
    "create_table",
    "load_snapshot",
    "open_table",
    "parse_duration",
    "release_table",
]
