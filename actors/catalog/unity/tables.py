"""Unity Catalog's tables: staging tables, three-level table names, managed
and external tables: :class:`UnityTableService`.

Invariants:
- A table is created in an existing schema
  (:meth:`~raydelta.actors.catalog.unity.namespaces.NamespaceService.require_schema`)
  by a principal holding ``USE_CATALOG``, ``USE_SCHEMA`` and
  ``CREATE_TABLE``, at a location that passes
  :mod:`raydelta.actors.catalog.locations` (no overlap; outside managed
  storage an external location granting ``CREATE_EXTERNAL_TABLE``); the
  creator then owns it. Reading a table's description needs READ, dropping
  it OWN.
- A new managed table (its columns given) is created as raydelta's own are
  (:meth:`~raydelta.actors.catalog.lifecycle.TableLifecycle.create`), with
  ``io.unitycatalog.tableId`` set, and answered once its ``0.json`` is
  published (delta-spark reads version 0 from the filesystem, never from
  the catalog).
- A managed table whose version 0 the client wrote itself (Unity Catalog's
  creation: staging table, ``0.json``, then create) is taken over as the
  upgrade of a filesystem table is: its newest published commit is ratified
  as the first managed version and marked published; it must declare the
  ``catalogManaged`` feature and, if it names one, the staging table's id.
- A table's description (:class:`~raydelta.protocol.unity_catalog.TableInfo`)
  reads its columns, partitioning, properties and comment from its current
  Delta metadata when its log can be read, else from what it was created
  with.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping, Sequence

from raydelta.actors.catalog.auth import Authorizer
from raydelta.actors.catalog.lifecycle import TableLifecycle, ensure_staged_commits_dir
from raydelta.actors.catalog.locations import CatalogLocations
from raydelta.actors.catalog.managed import ManagedTables
from raydelta.actors.catalog.settings import CatalogSettings
from raydelta.actors.catalog.unity.namespaces import NamespaceService, now_ms, split_name
from raydelta.protocol.actions import CommitInfo, Metadata, Protocol, parse_actions
from raydelta.protocol.catalog_managed import (
    RatifiedCommit,
    check_managed_requirements,
    requires_catalog,
)
from raydelta.protocol.errors import (
    CatalogManagedTableError,
    InvalidArgumentError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from raydelta.protocol.file_names import LogFileKind, commit_name
from raydelta.protocol.locations import hadoop_location
from raydelta.protocol.privileges import Privilege
from raydelta.protocol.unity_catalog import ColumnInfo, StagingTableInfo, TableInfo
from raydelta.protocol.unity_columns import columns_from_schema
from raydelta.storage.catalog.namespaces import NamespaceRegistry
from raydelta.storage.catalog.ratified_store import TableEntry
from raydelta.storage.log.store import log_store_for
from raydelta.storage.snapshot import load_snapshot

PUBLISH_WAIT_S = 30.0
"""How long creating a managed table waits for its version 0 to be published."""

UC_TABLE_ID_PROPERTY = "io.unitycatalog.tableId"
"""The table property delta-spark's Unity Catalog client reads the table id from."""


def same_location(a: str, b: str) -> bool:
    """Whether two table URIs name one place (``file:/x`` = ``file:///x``, no
    trailing /: :func:`raydelta.protocol.locations.hadoop_location`)."""
    return hadoop_location(a) == hadoop_location(b)


class UnityTableService:
    """Unity Catalog's tables (module docstring)."""

    def __init__(
        self,
        *,
        lock: threading.RLock,
        auth: Authorizer,
        settings: CatalogSettings,
        tables: ManagedTables,
        namespaces: NamespaceRegistry,
        schemas: NamespaceService,
        locations: CatalogLocations,
        lifecycle: TableLifecycle,
    ) -> None:
        self._lock = lock
        self._auth = auth
        self._settings = settings
        self._tables = tables
        self._store = tables.store
        self._ns = namespaces
        self._schemas = schemas
        self._locations = locations
        self._lifecycle = lifecycle

    def create_staging_table(self, token: str | None, full_name: str) -> StagingTableInfo:
        """Hand out a table id and a location for a managed table about to be created."""
        with self._lock:
            principal = self._auth.authenticate(token)
            catalog, schema, name = split_name(full_name, 3)
            self._schemas.require_schema(f"{catalog}.{schema}")
            self._locations.require_creation(principal, full_name)
            if self._store.lookup(full_name) is not None:
                raise TableAlreadyExistsError(f"table {full_name!r} already exists")
            table_id = str(uuid.uuid4())
            location = f"{self._settings.root.rstrip('/')}/{table_id}"
            self._ns.staging[table_id] = {
                "full_name": full_name,
                "location": location,
                "created_by": principal,
                "created_at": now_ms(),
            }
            self._ns.save()
            return StagingTableInfo(
                id=table_id,
                name=name,
                catalog_name=catalog,
                schema_name=schema,
                staging_location=location,
            )

    def create_table(
        self,
        token: str | None,
        full_name: str,
        *,
        table_type: str,
        data_source_format: str,
        location: str | None,
        comment: str | None,
        properties: Mapping[str, str],
        columns: Sequence[ColumnInfo],
        new_table: tuple[Protocol, Metadata] | None = None,
    ) -> TableInfo:
        """Create ``full_name``: an external table (a name for a location), a
        managed table whose version 0 the client wrote (taken over), or a new
        managed table (``new_table``: its version 0, committed here)."""
        with self._lock:
            principal = self._auth.authenticate(token)
            catalog, schema, _ = split_name(full_name, 3)
            self._schemas.require_schema(f"{catalog}.{schema}")
            self._locations.require_creation(principal, full_name)
            if self._store.lookup(full_name) is not None:
                raise TableAlreadyExistsError(f"table {full_name!r} already exists")
            if table_type == "EXTERNAL":
                if not location:
                    raise InvalidArgumentError("an external table needs a storage_location")
                self._locations.check_table_location(principal, location, managed=False)
                entry = self._store.register_table(
                    full_name, location=location, table_id=str(uuid.uuid4()), catalog_managed=False
                )
                self._auth.grant_owner(principal, full_name)
            elif table_type == "MANAGED":
                entry = self._create_managed(principal, token, full_name, location, new_table)
            else:
                raise InvalidArgumentError(
                    f"table_type {table_type!r} is not supported (MANAGED or EXTERNAL)"
                )
            self._ns.tables[full_name] = {
                "table_type": table_type,
                "data_source_format": data_source_format,
                "comment": comment,
                "properties": dict(properties),
                "columns": [c.model_dump(mode="json") for c in columns],
                "created_at": now_ms(),
                "created_by": principal,
                "table_id": entry.table_id,
            }
            self._ns.save()
        if entry.catalog_managed:  # 0.json on storage before the answer: path readers need it
            deadline = time.monotonic() + PUBLISH_WAIT_S
            while time.monotonic() < deadline:
                if self._store.published_version(entry.table_id) is not None:
                    break
                time.sleep(0.002)
        with self._lock:
            return self.describe(full_name, entry)[0]

    def _staged_id(self, full_name: str, location: str | None) -> tuple[str | None, str | None]:
        """The staging table handed out at ``location`` (its id, and its location
        as handed out), if any; refused if it was handed out for another name."""
        staged_id = None
        if location is not None:
            for table_id, staging in self._ns.staging.items():
                if same_location(staging["location"], location):
                    if staging["full_name"] != full_name:
                        raise InvalidArgumentError(
                            f"staging location {location} was handed out for "
                            f"{staging['full_name']!r}, not {full_name!r}"
                        )
                    staged_id, location = table_id, staging["location"]
        return staged_id, location

    def _create_managed(
        self,
        principal: str,
        token: str | None,
        full_name: str,
        location: str | None,
        new_table: tuple[Protocol, Metadata] | None,
    ) -> TableEntry:
        staged_id, location = self._staged_id(full_name, location)
        if location is not None:
            self._locations.check_table_location(
                principal, location, managed=True, skip_id=staged_id
            )
        store = (
            None if location is None else log_store_for(location, self._settings.storage_options)
        )
        if store is not None and store.log_exists() and store.list_from(0):
            entry = self._take_over(principal, full_name, location or "", staged_id)
        elif new_table is not None:
            protocol, metadata = new_table
            table_id = staged_id or str(uuid.uuid4())
            configuration = {**metadata.configuration, UC_TABLE_ID_PROPERTY: table_id}
            metadata = metadata.model_copy(update={"configuration": configuration})
            entry = self._lifecycle.create(
                full_name,
                token,
                protocol,
                metadata,
                location=location,
                table_id=table_id,
                txn_id=str(uuid.uuid4()),
            )
        else:
            raise InvalidArgumentError(
                f"managed table {full_name!r}: no Delta table at {location} and no columns"
            )
        if staged_id is not None:
            self._ns.staging.pop(staged_id, None)
        ensure_staged_commits_dir(entry.location, self._settings.storage_options)
        return entry

    def _take_over(
        self, principal: str, full_name: str, location: str, staged_id: str | None
    ) -> TableEntry:
        """Register the catalog-managed table a client created at ``location``."""
        store = log_store_for(location, self._settings.storage_options)
        published = [f.version for f in store.list_from(0) if f.kind is LogFileKind.COMMIT]
        if not published:
            raise TableNotFoundError(f"no Delta table at {location}")
        version = max(v for v in published if v is not None)
        snapshot = load_snapshot(  # the client's published log is all there is yet
            location,
            storage_options=self._settings.storage_options,
            ratified_commits=[],
            latest_ratified_version=version,
        )
        if not requires_catalog(snapshot.protocol):
            raise CatalogManagedTableError(
                f"the Delta table at {location} is not catalog-managed: a MANAGED table needs "
                "the catalogManaged table feature (create it as EXTERNAL instead)",
                location,
            )
        declared = snapshot.metadata.configuration.get(UC_TABLE_ID_PROPERTY)
        table_id = staged_id or declared or str(uuid.uuid4())
        if declared is not None and declared != table_id:
            raise InvalidArgumentError(
                f"the table at {location} declares {UC_TABLE_ID_PROPERTY}={declared}, "
                f"the staging table is {table_id}"
            )
        actions = parse_actions(store.read(commit_name(version)))
        info = next((a for a in actions if isinstance(a, CommitInfo)), None)
        check_managed_requirements(snapshot.protocol, snapshot.metadata, info)
        txn = (info.txn_id if info is not None else None) or str(uuid.uuid4())
        self._store.ratify(table_id, RatifiedCommit.inline(version, actions), txn_id=txn)
        self._store.mark_published(table_id, version)
        entry = self._store.register_table(full_name, location=location, table_id=table_id)
        self._auth.grant_owner(principal, full_name)
        return entry

    def get_table(
        self, token: str | None, full_name: str, needed: Sequence[Privilege] | None = None
    ) -> TableInfo:
        """The table's description; the caller needs ``needed`` (default READ)."""
        with self._lock:
            principal = self._auth.authenticate(token)
            split_name(full_name, 3)
            entry = self._store.lookup(full_name)
            if entry is None:
                raise TableNotFoundError(f"table {full_name!r} does not exist")
            self._auth.require(principal, full_name, needed or [Privilege.READ])
            return self.describe(full_name, entry)[0]

    def list_tables(self, token: str | None, catalog: str, schema: str) -> list[TableInfo]:
        """The tables of ``catalog.schema`` the caller holds a privilege on."""
        with self._lock:
            principal = self._auth.authenticate(token)
            full = f"{catalog}.{schema}"
            self._schemas.require_schema(full)
            out = []
            for entry in self._store.list_tables():
                if entry.name.rsplit(".", 1)[0] != full:
                    continue
                if self._auth.privileges(principal, entry.name):
                    out.append(self.describe(entry.name, entry)[0])
            return out

    def delete_table(self, token: str | None, full_name: str) -> None:
        with self._lock:
            split_name(full_name, 3)
            self._lifecycle.drop(full_name, token)
            self._ns.tables.pop(full_name, None)
            self._ns.save()

    def describe(self, full_name: str, entry: TableEntry) -> tuple[TableInfo, Metadata | None]:
        """``entry``'s description (module docstring), and the current Delta
        metadata it was read from (None when the log cannot be read)."""
        catalog, schema, name = full_name.split(".")
        info = self._ns.tables.get(full_name, {})
        comment = info.get("comment")
        properties = dict(info.get("properties") or {})
        columns = tuple(ColumnInfo.model_validate(c) for c in info.get("columns") or [])
        metadata = self._current_metadata(entry)
        if metadata is not None:
            properties = {**properties, **metadata.configuration}
            if entry.catalog_managed:
                properties[UC_TABLE_ID_PROPERTY] = entry.table_id
            if metadata.description and not comment:
                comment = metadata.description
            if metadata.schema_string:
                columns = columns_from_schema(metadata.schema_string, metadata.partition_columns)
        described = TableInfo(
            name=name,
            catalog_name=catalog,
            schema_name=schema,
            table_type=info.get("table_type", "MANAGED" if entry.catalog_managed else "EXTERNAL"),
            data_source_format=info.get("data_source_format", "DELTA"),
            columns=columns,
            storage_location=entry.location,
            comment=comment,
            properties=properties,
            owner=info.get("created_by"),
            created_at=info.get("created_at"),
            created_by=info.get("created_by"),
            updated_at=info.get("created_at"),
            table_id=entry.table_id,
        )
        return described, metadata

    def _current_metadata(self, entry: TableEntry) -> Metadata | None:
        try:
            if entry.catalog_managed:
                self._tables.ratifier.settle()
                metadata: Metadata = self._tables.coordinator(entry).table_configuration.metadata
                return metadata
            found: Metadata = load_snapshot(
                entry.location, storage_options=self._settings.storage_options
            ).metadata
            return found
        except (TableNotFoundError, FileNotFoundError, CatalogManagedTableError):
            return None


__all__ = ["PUBLISH_WAIT_S", "UC_TABLE_ID_PROPERTY", "UnityTableService", "same_location"]
