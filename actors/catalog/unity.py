"""Unity Catalog's model on the ``Catalog`` actor: catalogs, schemas, staging
tables, three-level table names, and Unity Catalog's commit protocol.

:class:`UnityCatalogMethods` is mixed into
:class:`~raydelta.actors.catalog.actor.CatalogActor`; the REST server
(:mod:`raydelta.uc`) calls these methods, one actor call per request.

Invariants:
- A table's catalog name is its full name ``catalog.schema.table``; the
  catalog and schema exist (:class:`~raydelta.storage.catalog.namespaces.NamespaceRegistry`,
  saved under the catalog's root) before a table is created in them.
- Privileges are the catalog's own (:mod:`raydelta.actors.catalog.auth`):
  creating or deleting a catalog or schema needs OWN on every table (the
  bootstrap principal); creating a table (or a staging table) needs
  ``USE_CATALOG``, ``USE_SCHEMA`` and ``CREATE_TABLE``, and its location
  must pass :mod:`raydelta.actors.catalog.locations` (no overlap; outside
  managed storage an external location granting ``CREATE_EXTERNAL_TABLE``);
  the creator then owns it. Reading a table's details needs READ, its data
  credentials READ or WRITE, dropping it OWN. A Unity Catalog commit is judged by the
  content of its staged file (:func:`~raydelta.protocol.privileges.required_privileges`):
  a data-only commit needs WRITE, one that changes metadata, protocol or a
  system domain ALTER, and a refused commit leaves the table unchanged.
- Unity Catalog's commits are ratified exactly as staged, never rebased
  (:mod:`raydelta.actors.catalog.unity_commits`, mixed in here).
- Managed tables get ``_delta_log/_staged_commits`` when they are created
  (:func:`ensure_staged_commits_dir`): delta-storage's client writes there
  without creating it. A managed table created over the API is answered
  once its ``0.json`` is published (delta-spark reads version 0 from the
  filesystem, never from the catalog).
- A managed table whose version 0 the client wrote itself (Unity
  Catalog's creation: staging table, ``0.json``, then create) is taken over
  as the upgrade of a filesystem table is: its newest published commit is
  ratified as the first managed version and marked published.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from raydelta.actors.catalog.auth import ALL_TABLES
from raydelta.actors.catalog.locations import CatalogLocationMethods
from raydelta.actors.catalog.unity_commits import UnityCommitMethods, same_location
from raydelta.protocol.actions import Metadata, Protocol, parse_actions
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
from raydelta.protocol.file_names import STAGED_COMMITS_DIR, LogFileKind, commit_name
from raydelta.protocol.privileges import Privilege
from raydelta.storage.catalog.namespaces import NamespaceRegistry
from raydelta.storage.catalog.ratified_store import TableEntry
from raydelta.storage.log.store import log_store_for
from raydelta.storage.snapshot import load_snapshot

if TYPE_CHECKING:
    from raydelta.actors.catalog.actor import CatalogSettings
    from raydelta.actors.catalog.auth import Authorizer
    from raydelta.actors.catalog.group_commit import GroupRatifier
    from raydelta.actors.catalog.publisher import Publisher
    from raydelta.actors.catalog.tables import ManagedTableCoordinator
    from raydelta.storage.catalog.ratified_store import RatifiedCommitStore

PUBLISH_WAIT_S = 30.0
"""How long creating a managed table waits for its version 0 to be published."""

UC_TABLE_ID_PROPERTY = "io.unitycatalog.tableId"
"""The table property delta-spark's Unity Catalog client reads the table id from."""


class NamespaceNotFoundError(TableNotFoundError):
    """A catalog or schema that does not exist (``kind`` says which)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message, kind)  # both in args: the error crosses processes
        self.kind = kind

    def __str__(self) -> str:
        return str(self.args[0])


class NamespaceAlreadyExistsError(TableAlreadyExistsError):
    """A catalog or schema that exists already (``kind`` says which)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message, kind)  # both in args: the error crosses processes
        self.kind = kind

    def __str__(self) -> str:
        return str(self.args[0])


class NamespaceNotEmptyError(InvalidArgumentError):
    """A catalog or schema still holding schemas or tables (delete with force)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


def split_name(full_name: str, parts: int) -> list[str]:
    """``full_name`` split into ``parts`` non-empty dot-separated names."""
    names = full_name.split(".") if isinstance(full_name, str) else []
    if len(names) != parts or not all(names):
        what = {2: "catalog.schema", 3: "catalog.schema.table"}[parts]
        raise InvalidArgumentError(f"expected a full name {what}, got {full_name!r}")
    return names


class UnityCatalogMethods(UnityCommitMethods, CatalogLocationMethods):
    """Mixed into ``CatalogActor`` (module docstring). Relies on the actor's
    ``_lock``, ``_store``, ``_auth``, ``_settings``, ``_ratifier``,
    ``_publisher`` and its table methods."""

    _lock: Any
    _store: RatifiedCommitStore
    _auth: Authorizer
    _settings: CatalogSettings
    _ratifier: GroupRatifier
    _publisher: Publisher
    _uc_registry: NamespaceRegistry | None = None

    if TYPE_CHECKING:  # the actor's

        def _table(self, name: str) -> ManagedTableCoordinator: ...

        def _coordinator(self, entry: TableEntry) -> ManagedTableCoordinator: ...

        def create_table(self, *args: Any, **kwargs: Any) -> TableEntry: ...

        def drop_table(self, name: str, token: str | None) -> TableEntry: ...

    @property
    def _ns(self) -> NamespaceRegistry:
        if self._uc_registry is None:
            self._uc_registry = NamespaceRegistry.load(
                root=self._settings.root, storage_options=self._settings.storage_options
            )
        return self._uc_registry

    def _who(self, token: str | None) -> str:
        principal: str = self._auth.authenticate(token)
        return principal

    def _admin(self, token: str | None) -> str:
        principal = self._who(token)
        self._auth.require(principal, ALL_TABLES, [Privilege.OWN])
        return principal

    # --- catalogs and schemas ----------------------------------------------------------

    def uc_metastore_id(self) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, self._settings.root))

    def uc_create_catalog(
        self, token: str | None, name: str, comment: str | None, properties: Mapping[str, str]
    ) -> dict[str, Any]:
        with self._lock:
            principal = self._admin(token)
            if not isinstance(name, str) or not name or "." in name:
                raise InvalidArgumentError(f"invalid catalog name {name!r}")
            if name in self._ns.catalogs:
                raise NamespaceAlreadyExistsError(f"catalog {name!r} already exists", "catalog")
            info = _namespace_info(name, comment, properties, principal)
            self._ns.catalogs[name] = info
            self._ns.save()
            return dict(info)

    def uc_catalogs(self, token: str | None, name: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            self._who(token)
            if name is not None:
                return [dict(self._catalog(name))]
            return [dict(v) for _, v in sorted(self._ns.catalogs.items())]

    def _catalog(self, name: str) -> dict[str, Any]:
        info = self._ns.catalogs.get(name)
        if info is None:
            raise NamespaceNotFoundError(f"catalog {name!r} does not exist", "catalog")
        return info

    def uc_update_catalog(
        self, token: str | None, name: str, changes: Mapping[str, Any]
    ) -> dict[str, Any]:
        with self._lock:
            self._admin(token)
            info = self._catalog(name)
            return dict(self._update(self._ns.catalogs, name, info, changes, "catalog"))

    def uc_delete_catalog(self, token: str | None, name: str, force: bool) -> None:
        with self._lock:
            self._admin(token)
            self._catalog(name)
            schemas = self._ns.schemas_of(name)
            if schemas and not force:
                raise NamespaceNotEmptyError(
                    f"catalog {name!r} is not empty (schemas {schemas}); delete with force=true"
                )
            for schema in schemas:
                self._drop_schema(token, schema)
            del self._ns.catalogs[name]
            self._ns.save()

    def uc_create_schema(
        self,
        token: str | None,
        catalog: str,
        name: str,
        comment: str | None,
        properties: Mapping[str, str],
    ) -> dict[str, Any]:
        with self._lock:
            principal = self._admin(token)
            self._catalog(catalog)
            if not name or "." in name:
                raise InvalidArgumentError(f"invalid schema name {name!r}")
            full = f"{catalog}.{name}"
            if full in self._ns.schemas:
                raise NamespaceAlreadyExistsError(f"schema {full!r} already exists", "schema")
            info = _namespace_info(name, comment, properties, principal)
            info.update(catalog_name=catalog, full_name=full, schema_id=info.pop("id"))
            self._ns.schemas[full] = info
            self._ns.save()
            return dict(info)

    def _schema(self, full: str) -> dict[str, Any]:
        catalog, _ = split_name(full, 2)
        self._catalog(catalog)
        info = self._ns.schemas.get(full)
        if info is None:
            raise NamespaceNotFoundError(f"schema {full!r} does not exist", "schema")
        return info

    def uc_schemas(
        self, token: str | None, catalog: str | None = None, full_name: str | None = None
    ) -> list[dict[str, Any]]:
        with self._lock:
            self._who(token)
            if full_name is not None:
                return [dict(self._schema(full_name))]
            assert catalog is not None
            self._catalog(catalog)
            return [dict(self._ns.schemas[k]) for k in self._ns.schemas_of(catalog)]

    def uc_update_schema(
        self, token: str | None, full_name: str, changes: Mapping[str, Any]
    ) -> dict[str, Any]:
        with self._lock:
            self._admin(token)
            info = self._schema(full_name)
            return dict(self._update(self._ns.schemas, full_name, info, changes, "schema"))

    def uc_delete_schema(self, token: str | None, full_name: str, force: bool) -> None:
        with self._lock:
            self._admin(token)
            self._schema(full_name)
            tables = [t for t in self._ns.tables_of(full_name) if self._store.lookup(t)]
            if tables and not force:
                raise NamespaceNotEmptyError(
                    f"schema {full_name!r} is not empty (tables {tables}); delete with force=true"
                )
            self._drop_schema(token, full_name)
            self._ns.save()

    def _drop_schema(self, token: str | None, full_name: str) -> None:
        for table in self._ns.tables_of(full_name):
            if self._store.lookup(table) is not None:
                self.drop_table(table, token)
            self._ns.tables.pop(table, None)
        self._ns.schemas.pop(full_name, None)

    def _update(
        self,
        registry: dict[str, dict[str, Any]],
        key: str,
        info: dict[str, Any],
        changes: Mapping[str, Any],
        kind: str,
    ) -> dict[str, Any]:
        info = dict(info)
        if changes.get("comment") is not None:
            info["comment"] = changes["comment"]
        if changes.get("properties") is not None:
            info["properties"] = {str(k): str(v) for k, v in changes["properties"].items()}
        new_name = changes.get("new_name")
        info["updated_at"] = _now_ms()
        if new_name and new_name != info["name"]:
            raise InvalidArgumentError(f"renaming a {kind} is not supported")
        registry[key] = info
        self._ns.save()
        return info

    # --- tables ------------------------------------------------------------------------

    def uc_create_staging_table(self, token: str | None, full_name: str) -> dict[str, Any]:
        """Hand out a table id and a location for a managed table about to be created."""
        with self._lock:
            principal = self._who(token)
            catalog, schema, name = split_name(full_name, 3)
            self._schema(f"{catalog}.{schema}")
            self._require_creation(principal, full_name)
            if self._store.lookup(full_name) is not None:
                raise TableAlreadyExistsError(f"table {full_name!r} already exists")
            table_id = str(uuid.uuid4())
            location = f"{self._settings.root.rstrip('/')}/{table_id}"
            self._ns.staging[table_id] = {
                "full_name": full_name,
                "location": location,
                "created_by": principal,
                "created_at": _now_ms(),
            }
            self._ns.save()
            return {
                "id": table_id,
                "name": name,
                "catalog_name": catalog,
                "schema_name": schema,
                "staging_location": location,
            }

    def uc_create_table(
        self,
        token: str | None,
        full_name: str,
        *,
        table_type: str,
        data_source_format: str,
        location: str | None,
        comment: str | None,
        properties: Mapping[str, str],
        columns: list[dict[str, Any]],
        new_table: tuple[Protocol, Metadata] | None = None,
    ) -> dict[str, Any]:
        """Create ``full_name``: an external table (a name for a location), a
        managed table whose version 0 the client wrote (taken over), or a new
        managed table (``new_table``: its version 0, committed here)."""
        with self._lock:
            principal = self._who(token)
            catalog, schema, _ = split_name(full_name, 3)
            self._schema(f"{catalog}.{schema}")
            self._require_creation(principal, full_name)
            if self._store.lookup(full_name) is not None:
                raise TableAlreadyExistsError(f"table {full_name!r} already exists")
            if table_type == "EXTERNAL":
                if not location:
                    raise InvalidArgumentError("an external table needs a storage_location")
                self._check_table_location(principal, location, managed=False)
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
                "columns": columns,
                "created_at": _now_ms(),
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
            return self._table_info(full_name, entry)

    def _create_managed(
        self,
        principal: str,
        token: str | None,
        full_name: str,
        location: str | None,
        new_table: tuple[Protocol, Metadata] | None,
    ) -> TableEntry:
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
        if location is not None:
            self._check_table_location(principal, location, managed=True, skip_id=staged_id)
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
            entry = self.create_table(
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
        info = next((a for a in actions if a.__class__.__name__ == "CommitInfo"), None)
        check_managed_requirements(snapshot.protocol, snapshot.metadata, info)  # type: ignore[arg-type]
        txn = getattr(info, "txn_id", None) or str(uuid.uuid4())
        self._store.ratify(table_id, RatifiedCommit.inline(version, actions), txn_id=txn)
        self._store.mark_published(table_id, version)
        entry: TableEntry = self._store.register_table(
            full_name, location=location, table_id=table_id
        )
        self._auth.grant_owner(principal, full_name)
        return entry

    def uc_get_table(
        self, token: str | None, full_name: str, needed: list[Privilege] | None = None
    ) -> dict[str, Any]:
        """The table's description; the caller needs ``needed`` (default READ)."""
        with self._lock:
            principal = self._who(token)
            split_name(full_name, 3)
            entry = self._store.lookup(full_name)
            if entry is None:
                raise TableNotFoundError(f"table {full_name!r} does not exist")
            self._auth.require(principal, full_name, needed or [Privilege.READ])
            return self._table_info(full_name, entry)

    def uc_list_tables(self, token: str | None, catalog: str, schema: str) -> list[dict[str, Any]]:
        with self._lock:
            principal = self._who(token)
            full = f"{catalog}.{schema}"
            self._schema(full)
            out = []
            for entry in self._store.list_tables():
                if entry.name.rsplit(".", 1)[0] != full:
                    continue
                if self._auth.privileges(principal, entry.name):
                    out.append(self._table_info(entry.name, entry))
            return out

    def uc_delete_table(self, token: str | None, full_name: str) -> None:
        with self._lock:
            split_name(full_name, 3)
            self.drop_table(full_name, token)
            self._ns.tables.pop(full_name, None)
            self._ns.save()

    def _table_info(self, full_name: str, entry: TableEntry) -> dict[str, Any]:
        catalog, schema, name = full_name.split(".")
        info = self._ns.tables.get(full_name, {})
        described: dict[str, Any] = {
            "name": name,
            "catalog_name": catalog,
            "schema_name": schema,
            "table_type": info.get(
                "table_type", "MANAGED" if entry.catalog_managed else "EXTERNAL"
            ),
            "data_source_format": info.get("data_source_format", "DELTA"),
            "storage_location": entry.location,
            "comment": info.get("comment"),
            "properties": dict(info.get("properties") or {}),
            "owner": info.get("created_by"),
            "created_at": info.get("created_at"),
            "created_by": info.get("created_by"),
            "updated_at": info.get("created_at"),
            "table_id": entry.table_id,
            "columns": info.get("columns") or [],
            "schema_string": None,
            "partition_columns": [],
        }
        metadata = self._current_metadata(entry)
        if metadata is not None:
            described["schema_string"] = metadata.schema_string
            described["partition_columns"] = list(metadata.partition_columns)
            described["properties"] = {**described["properties"], **metadata.configuration}
            if entry.catalog_managed:
                described["properties"][UC_TABLE_ID_PROPERTY] = entry.table_id
            if metadata.description and not described["comment"]:
                described["comment"] = metadata.description
        return described

    def _current_metadata(self, entry: TableEntry) -> Metadata | None:
        try:
            if entry.catalog_managed:
                self._ratifier.settle()
                metadata: Metadata = self._coordinator(entry).table_configuration.metadata
                return metadata
            found: Metadata = load_snapshot(
                entry.location, storage_options=self._settings.storage_options
            ).metadata
            return found
        except (TableNotFoundError, FileNotFoundError, CatalogManagedTableError):
            return None


def ensure_staged_commits_dir(location: str, storage_options: dict[str, Any] | None) -> None:
    """Create ``_delta_log/_staged_commits`` of a local table: delta-storage's Unity
    Catalog client writes its staged files there without creating the directory
    (delta-spark creates it with every log it makes itself). Object stores
    have no directories: nothing to do."""
    store = log_store_for(location, storage_options)
    if store.on_local_disk:
        store.makedirs(store.path_of(STAGED_COMMITS_DIR))


def _namespace_info(
    name: str, comment: str | None, properties: Mapping[str, str], principal: str
) -> dict[str, Any]:
    now = _now_ms()
    return {
        "name": name,
        "comment": comment,
        "properties": {str(k): str(v) for k, v in (properties or {}).items()},
        "owner": principal,
        "created_at": now,
        "created_by": principal,
        "updated_at": now,
        "id": str(uuid.uuid4()),
    }


__all__ = [
    "UC_TABLE_ID_PROPERTY",
    "NamespaceAlreadyExistsError",
    "NamespaceNotEmptyError",
    "NamespaceNotFoundError",
    "UnityCatalogMethods",
    "ensure_staged_commits_dir",
    "split_name",
]
