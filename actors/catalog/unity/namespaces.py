"""Unity Catalog's catalogs and schemas: :class:`NamespaceService`.

Invariants:
- A table's catalog name is its full name ``catalog.schema.table``
  (:func:`split_name`); its catalog and schema exist
  (:class:`~raydelta.storage.catalog.namespaces.NamespaceRegistry`, saved
  under the catalog's root before the call returns) before a table is
  created in them.
- Creating, changing or deleting a catalog needs OWN on every table (the
  admin); creating a schema, the admin or ``USE_CATALOG`` and
  ``CREATE_SCHEMA`` on its catalog (the creator then owns it); changing or
  deleting a schema, the admin. Reading or listing them needs a privilege
  on each (:meth:`NamespaceService.visible`): a principal without
  ``USE_CATALOG`` on a catalog sees nothing in it (reading it is refused;
  lists of catalogs, schemas and tables leave out what it holds nothing
  on). Names are stored as given and never renamed.
- Deleting a catalog or schema that holds schemas or tables needs
  ``force``; its tables are then dropped as the catalog drops any table
  (:meth:`~raydelta.actors.catalog.lifecycle.TableLifecycle.drop`: OWN,
  soft delete).
- The registry stores each catalog and schema as its reply model's dump
  (:class:`~raydelta.protocol.unity_catalog.CatalogInfo`,
  :class:`~raydelta.protocol.unity_catalog.SchemaInfo`).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping
from typing import TypeVar

from raydelta.actors.catalog.auth import ALL_TABLES, Authorizer
from raydelta.actors.catalog.lifecycle import TableLifecycle
from raydelta.actors.catalog.settings import CatalogSettings
from raydelta.actors.catalog.unity.errors import (
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NamespaceNotFoundError,
)
from raydelta.protocol.errors import InvalidArgumentError, PermissionDeniedError
from raydelta.protocol.privileges import Privilege
from raydelta.protocol.securables import Securable
from raydelta.protocol.unity_catalog import CatalogInfo, GetMetastoreSummaryResponse, SchemaInfo
from raydelta.storage.catalog.namespaces import NamespaceRegistry
from raydelta.storage.catalog.ratified_store import RatifiedCommitStore

Info = TypeVar("Info", CatalogInfo, SchemaInfo)


def now_ms() -> int:
    return int(time.time() * 1000)


def split_name(full_name: str, parts: int) -> list[str]:
    """``full_name`` split into ``parts`` non-empty dot-separated names."""
    names = full_name.split(".") if isinstance(full_name, str) else []
    if len(names) != parts or not all(names):
        what = {2: "catalog.schema", 3: "catalog.schema.table"}[parts]
        raise InvalidArgumentError(f"expected a full name {what}, got {full_name!r}")
    return names


def _properties(properties: Mapping[str, object] | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in (properties or {}).items()}


class NamespaceService:
    """Catalogs and schemas (module docstring)."""

    def __init__(
        self,
        *,
        lock: threading.RLock,
        auth: Authorizer,
        settings: CatalogSettings,
        store: RatifiedCommitStore,
        namespaces: NamespaceRegistry,
        lifecycle: TableLifecycle,
    ) -> None:
        self._lock = lock
        self._auth = auth
        self._settings = settings
        self._store = store
        self._ns = namespaces
        self._lifecycle = lifecycle

    def _admin(self, token: str | None) -> str:
        principal = self._auth.authenticate(token)
        self._auth.require(principal, ALL_TABLES, [Privilege.OWN])
        return principal

    def visible(self, principal: str, securable: Securable) -> bool:
        """Whether ``principal`` holds any privilege on ``securable`` (module docstring)."""
        return bool(self._auth.privileges_on(principal, securable))

    def require_visible(self, principal: str, securable: Securable) -> None:
        """Refuse a ``principal`` holding nothing on ``securable``, naming why."""
        if not self.visible(principal, securable):
            self._auth.require_on(principal, securable, [])  # names a missing USE_*
            raise PermissionDeniedError(
                f"principal {principal!r} holds no privilege on {securable.describe()}",
                principal=principal,
                table=securable.name,
            )

    def metastore_summary(self) -> GetMetastoreSummaryResponse:
        """The metastore's id: stable for the catalog's root (no token needed)."""
        return GetMetastoreSummaryResponse(
            metastore_id=str(uuid.uuid5(uuid.NAMESPACE_URL, self._settings.root))
        )

    # --- catalogs ----------------------------------------------------------------------

    def create_catalog(
        self,
        token: str | None,
        name: str,
        comment: str | None,
        properties: Mapping[str, object] | None,
    ) -> CatalogInfo:
        with self._lock:
            principal = self._admin(token)
            if not isinstance(name, str) or not name or "." in name:
                raise InvalidArgumentError(f"invalid catalog name {name!r}")
            if name in self._ns.catalogs:
                raise NamespaceAlreadyExistsError(f"catalog {name!r} already exists", "catalog")
            now = now_ms()
            info = CatalogInfo(
                name=name,
                comment=comment,
                properties=_properties(properties),
                owner=principal,
                created_at=now,
                created_by=principal,
                updated_at=now,
                id=str(uuid.uuid4()),
            )
            self._ns.catalogs[name] = info.model_dump()
            self._ns.save()
            return info

    def catalogs(self, token: str | None) -> list[CatalogInfo]:
        """Every catalog, by name."""
        with self._lock:
            principal = self._auth.authenticate(token)
            return [
                CatalogInfo.model_validate(v)
                for name, v in sorted(self._ns.catalogs.items())
                if self.visible(principal, Securable.catalog(name))
            ]

    def catalog(self, token: str | None, name: str) -> CatalogInfo:
        with self._lock:
            principal = self._auth.authenticate(token)
            self.require_visible(principal, Securable.catalog(name))  # before: no existence leak
            return self._catalog(name)

    def _catalog(self, name: str) -> CatalogInfo:
        info = self._ns.catalogs.get(name)
        if info is None:
            raise NamespaceNotFoundError(f"catalog {name!r} does not exist", "catalog")
        return CatalogInfo.model_validate(info)

    def update_catalog(
        self,
        token: str | None,
        name: str,
        *,
        comment: str | None = None,
        properties: Mapping[str, object] | None = None,
        new_name: str | None = None,
    ) -> CatalogInfo:
        """Change a catalog's comment or properties (None: unchanged)."""
        with self._lock:
            self._admin(token)
            info = self._catalog(name)
            updated = _updated(info, comment, properties, new_name, "catalog")
            self._ns.catalogs[name] = updated.model_dump()
            self._ns.save()
            return updated

    def delete_catalog(self, token: str | None, name: str, force: bool) -> None:
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
            self._auth.forget(Securable.catalog(name))

    # --- schemas -----------------------------------------------------------------------

    def create_schema(
        self,
        token: str | None,
        catalog: str,
        name: str,
        comment: str | None,
        properties: Mapping[str, object] | None,
    ) -> SchemaInfo:
        with self._lock:
            principal = self._auth.authenticate(token)
            self._catalog(catalog)
            if not self._auth.is_admin(principal):
                self._auth.require_on(
                    principal,
                    Securable.catalog(catalog),
                    [Privilege.USE_CATALOG, Privilege.CREATE_SCHEMA],
                )
            if not name or "." in name:
                raise InvalidArgumentError(f"invalid schema name {name!r}")
            full = f"{catalog}.{name}"
            if full in self._ns.schemas:
                raise NamespaceAlreadyExistsError(f"schema {full!r} already exists", "schema")
            now = now_ms()
            info = SchemaInfo(
                name=name,
                comment=comment,
                properties=_properties(properties),
                owner=principal,
                created_at=now,
                created_by=principal,
                updated_at=now,
                catalog_name=catalog,
                full_name=full,
                schema_id=str(uuid.uuid4()),
            )
            self._ns.schemas[full] = info.model_dump()
            self._ns.save()
            self._auth.grant_owner_of(principal, Securable.schema(full))
            return info

    def require_schema(self, full_name: str) -> SchemaInfo:
        """Schema ``catalog.schema``, which must exist (the lock held)."""
        catalog, _ = split_name(full_name, 2)
        self._catalog(catalog)
        info = self._ns.schemas.get(full_name)
        if info is None:
            raise NamespaceNotFoundError(f"schema {full_name!r} does not exist", "schema")
        return SchemaInfo.model_validate(info)

    def schemas(self, token: str | None, catalog: str) -> list[SchemaInfo]:
        """The schemas of ``catalog``, by name."""
        with self._lock:
            principal = self._auth.authenticate(token)
            self._catalog(catalog)
            return [
                SchemaInfo.model_validate(self._ns.schemas[k])
                for k in self._ns.schemas_of(catalog)
                if self.visible(principal, Securable.schema(k))
            ]

    def schema(self, token: str | None, full_name: str) -> SchemaInfo:
        with self._lock:
            principal = self._auth.authenticate(token)
            split_name(full_name, 2)
            self.require_visible(principal, Securable.schema(full_name))
            return self.require_schema(full_name)

    def update_schema(
        self,
        token: str | None,
        full_name: str,
        *,
        comment: str | None = None,
        properties: Mapping[str, object] | None = None,
        new_name: str | None = None,
    ) -> SchemaInfo:
        """Change a schema's comment or properties (None: unchanged)."""
        with self._lock:
            self._admin(token)
            info = self.require_schema(full_name)
            updated = _updated(info, comment, properties, new_name, "schema")
            self._ns.schemas[full_name] = updated.model_dump()
            self._ns.save()
            return updated

    def delete_schema(self, token: str | None, full_name: str, force: bool) -> None:
        with self._lock:
            self._admin(token)
            self.require_schema(full_name)
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
                self._lifecycle.drop(table, token)
            self._ns.tables.pop(table, None)
        self._ns.schemas.pop(full_name, None)
        self._auth.forget(Securable.schema(full_name))


def _updated(
    info: Info,
    comment: str | None,
    properties: Mapping[str, object] | None,
    new_name: str | None,
    kind: str,
) -> Info:
    """``info`` with the changes an update asks for (a rename is refused)."""
    if new_name and new_name != info.name:
        raise InvalidArgumentError(f"renaming a {kind} is not supported")
    changes: dict[str, object] = {"updated_at": now_ms()}
    if comment is not None:
        changes["comment"] = comment
    if properties is not None:
        changes["properties"] = _properties(properties)
    return type(info).model_validate({**info.model_dump(), **changes})


__all__ = ["NamespaceService", "split_name"]
