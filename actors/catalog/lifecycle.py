"""Creating, upgrading and dropping a catalog's tables: :class:`TableLifecycle`.

The ``CatalogActor`` answers raydelta's own clients with it, and Unity
Catalog's tables service (:mod:`raydelta.actors.catalog.unity.tables`)
creates its new managed tables and drops its tables through it, so both
APIs keep one set of rules.

Invariants:
- Creation (CATALOG_MANAGED.md, "Creating and Dropping"): a unique location
  (given, or ``<root>/<table id>``) → version 0 ratified → name registered,
  in one call, idempotent for the same ``table_id``/``txn_id`` (a retried call
  finishes the work instead of making a second table).
- Upgrading a filesystem table: the commit that adds ``catalogManaged`` is
  written with put-if-absent ("Option 3": ratified and published in one
  step, so a concurrent filesystem writer either precedes it or sees it),
  then the catalog records it as its first version and registers the name.
  From then on our own ``TableActor`` refuses to commit to the table.
- Creating or upgrading needs ``CREATE_TABLE`` (and Unity Catalog's
  ``USE_*`` for a three-part name) and a location that overlaps no other
  table's (:mod:`raydelta.actors.catalog.locations`); dropping needs OWN
  and is a soft delete (the name goes, the files stay).
- Every managed table has ``_delta_log/_staged_commits`` once created
  (:func:`ensure_staged_commits_dir`).
- Every method takes the catalog's lock (re-entrant: the Unity Catalog
  services call in with it held).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from raydelta.actors.catalog.auth import Authorizer
from raydelta.actors.catalog.locations import CatalogLocations
from raydelta.actors.catalog.managed import ManagedTables
from raydelta.actors.catalog.settings import CatalogSettings
from raydelta.actors.catalog.tables import ManagedTableCoordinator
from raydelta.actors.faults import crash_point
from raydelta.actors.table.committer import FilesystemCommitter
from raydelta.actors.table.coordinator import CommitCoordinator
from raydelta.protocol.actions import Metadata, Protocol
from raydelta.protocol.catalog_managed import RatifiedCommit, requires_catalog
from raydelta.protocol.errors import (
    CatalogManagedTableError,
    InvalidArgumentError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from raydelta.protocol.events import CommitRequest, ReadSet
from raydelta.protocol.file_names import STAGED_COMMITS_DIR
from raydelta.protocol.privileges import Privilege
from raydelta.protocol.table_features import (
    CATALOG_MANAGED,
    IN_COMMIT_TIMESTAMP,
    VACUUM_PROTOCOL_CHECK,
    upgrade_protocol,
)
from raydelta.protocol.table_properties import ENABLE_IN_COMMIT_TIMESTAMPS
from raydelta.storage.catalog.ratified_store import TableEntry
from raydelta.storage.log.store import log_store_for

UPGRADE_OPERATION = "UPGRADE TO CATALOG-MANAGED"


class TableLifecycle:
    """Creates, upgrades and drops tables (module docstring)."""

    def __init__(
        self,
        *,
        lock: threading.RLock,
        auth: Authorizer,
        settings: CatalogSettings,
        tables: ManagedTables,
        locations: CatalogLocations,
    ) -> None:
        self._lock = lock
        self._auth = auth
        self._settings = settings
        self._tables = tables
        self._store = tables.store
        self._locations = locations

    def create(
        self,
        name: str,
        token: str | None,
        protocol: Protocol,
        metadata: Metadata,
        *,
        location: str | None,
        table_id: str,
        txn_id: str,
    ) -> TableEntry:
        """Create the catalog-managed table ``name`` (module doc: creation)."""
        with self._lock:
            principal = self._auth.authenticate(token)
            if not name or not isinstance(name, str):
                raise InvalidArgumentError(f"a table name must be a non-empty string, got {name!r}")
            existing = self._store.lookup(name)
            if existing is not None:
                if existing.table_id == table_id:
                    return existing  # a retried call that finished
                raise TableAlreadyExistsError(f"the catalog already has a table named {name!r}")
            self._locations.require_creation(principal, name)
            where = location or f"{self._settings.root.rstrip('/')}/{table_id}"
            self._locations.check_table_location(principal, where, managed=True, skip_id=table_id)
            entry = TableEntry(name=name, location=where, table_id=table_id)
            coordinator = self._tables.coordinator(entry)  # a retry: publishes what it ratified
            if self._store.find_txn(table_id, txn_id) is None:
                self._ratify_version_zero(coordinator, entry, protocol, metadata, txn_id)
            crash_point("catalog_before_register")
            registered = self._store.register_table(name, location=where, table_id=table_id)
            self._auth.grant_owner(principal, name)
            ensure_staged_commits_dir(where, self._settings.storage_options)
            return registered

    def _ratify_version_zero(
        self,
        coordinator: ManagedTableCoordinator,
        entry: TableEntry,
        protocol: Protocol,
        metadata: Metadata,
        txn_id: str,
    ) -> None:
        """Version 0 of a new table, ratified and durable (nothing there yet)."""
        store = coordinator.store
        if coordinator.exists or (store.log_exists() and store.list_from(0)):
            self._tables.forget(entry.table_id)
            raise TableAlreadyExistsError(f"a Delta table already exists at {entry.location}")
        request = CommitRequest(
            txn_id=txn_id,
            read_set=ReadSet(read_version=-1),
            actions=(managed_protocol(protocol), _with_ict(metadata)),
            operation="CREATE TABLE",
            operation_parameters={"partitionBy": list(metadata.partition_columns)},
            commit_time_ms=int(time.time() * 1000),
        )
        ratifier = self._tables.ratifier
        try:
            coordinator.create(request).raise_if_conflict()
            ratifier.wait(ratifier.last)  # durable before registered
        except BaseException:
            self._tables.forget(entry.table_id)
            raise

    def upgrade(self, name: str, token: str | None, location: str, txn_id: str) -> TableEntry:
        """Make the filesystem table at ``location`` catalog-managed, as ``name``."""
        with self._lock:
            principal = self._auth.authenticate(token)
            if self._store.lookup(name) is not None:
                raise TableAlreadyExistsError(f"the catalog already has a table named {name!r}")
            self._locations.require_creation(principal, name)
            self._locations.check_table_location(principal, location, managed=True)
            filesystem = _upgrade_coordinator(location, self._settings.storage_options)
            if not filesystem.exists:
                raise TableNotFoundError(f"no Delta table at {location}")
            config = filesystem.table_configuration
            if requires_catalog(config.protocol):
                raise CatalogManagedTableError(
                    f"{location} is catalog-managed already: register it with its own catalog",
                    location,
                )
            table_id = config.metadata.id
            request = CommitRequest(
                txn_id=txn_id,
                read_set=ReadSet(read_version=filesystem.version),
                actions=(managed_protocol(config.protocol), _with_ict(config.metadata)),
                operation=UPGRADE_OPERATION,
                commit_time_ms=int(time.time() * 1000),
            )
            version = filesystem.commit(request).raise_if_conflict().version
            actions = filesystem.tail(version - 1) or []
            committed = next(a for v, a in actions if v == version)
            self._store.ratify(table_id, RatifiedCommit.inline(version, committed), txn_id=txn_id)
            self._store.mark_published(table_id, version)
            registered = self._store.register_table(name, location=location, table_id=table_id)
            self._auth.grant_owner(principal, name)
            ensure_staged_commits_dir(location, self._settings.storage_options)
            return registered

    def drop(self, name: str, token: str | None) -> TableEntry:
        """Soft delete: the name goes, the table's files stay."""
        with self._lock:
            self._auth.require(self._auth.authenticate(token), name, [Privilege.OWN])
            entry = self._store.drop_table(name)
            self._tables.forget(entry.table_id)
            self._auth.forget_table(name)
            self._locations.find_overlaps()  # dropping one of two overlapping tables resolves both
            return entry


def managed_protocol(protocol: Protocol) -> Protocol:
    """``protocol`` with ``catalogManaged`` (reader and writer), in-commit timestamps
    and ``vacuumProtocolCheck`` (reader and writer): the spec needs the first
    two; delta-spark (4.4.0) also requires the third of every catalog-managed
    table and refuses to operate on one without it."""
    return upgrade_protocol(
        protocol,
        reader_features=[CATALOG_MANAGED, VACUUM_PROTOCOL_CHECK],
        writer_features=[CATALOG_MANAGED, IN_COMMIT_TIMESTAMP, VACUUM_PROTOCOL_CHECK],
    )


def _upgrade_coordinator(
    location: str, storage_options: dict[str, Any] | None
) -> CommitCoordinator:
    """A filesystem coordinator allowed to write the one commit that makes the
    table catalog-managed (put-if-absent, rebased over filesystem writers)."""
    store = log_store_for(location, storage_options)
    return CommitCoordinator(
        location, committer=FilesystemCommitter(location, store, catalog_managed=True)
    )


def _with_ict(metadata: Metadata) -> Metadata:
    """``metadata`` with in-commit timestamps enabled (a managed table needs them)."""
    if metadata.configuration.get(ENABLE_IN_COMMIT_TIMESTAMPS) == "true":
        return metadata
    configuration = {**metadata.configuration, ENABLE_IN_COMMIT_TIMESTAMPS: "true"}
    return metadata.model_copy(update={"configuration": configuration})


def ensure_staged_commits_dir(location: str, storage_options: dict[str, Any] | None) -> None:
    """Create ``_delta_log/_staged_commits`` of a local table: delta-storage's Unity
    Catalog client writes its staged files there without creating the directory
    (delta-spark creates it with every log it makes itself). Object stores
    have no directories: nothing to do."""
    store = log_store_for(location, storage_options)
    if store.on_local_disk:
        store.makedirs(store.path_of(STAGED_COMMITS_DIR))


__all__ = ["UPGRADE_OPERATION", "TableLifecycle", "ensure_staged_commits_dir", "managed_protocol"]
