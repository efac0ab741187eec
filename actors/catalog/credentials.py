"""Temporary credentials for tables and paths (Unity Catalog's
``/temporary-table-credentials`` and ``/temporary-path-credentials``, and the
Delta REST API's credentials endpoints): :class:`CredentialService`.

Invariants:
- The privilege is checked under the catalog's lock, the credentials are
  vended outside it
  (:func:`~raydelta.storage.catalog.credential_vending.vend_credentials`:
  STS for S3, nothing but the URL and an expiration elsewhere).
- A table's credentials: ``READ`` needs READ on it, ``READ_WRITE`` WRITE;
  a staging table's, its creator or the admin; none for a table whose
  location overlaps another's
  (:meth:`~raydelta.actors.catalog.locations.CatalogLocations.refuse_if_overlapping`).
- A path's credentials follow the path access rules of
  :mod:`raydelta.actors.catalog.locations`; creating a table there gets
  write access.
"""

from __future__ import annotations

import threading
import time

from raydelta.actors.catalog.auth import Authorizer
from raydelta.actors.catalog.locations import CatalogLocations
from raydelta.actors.catalog.managed import ManagedTables
from raydelta.actors.catalog.settings import CatalogSettings
from raydelta.protocol.credential_scope import AccessLevel
from raydelta.protocol.errors import InvalidArgumentError, TableNotFoundError
from raydelta.protocol.privileges import Privilege
from raydelta.protocol.securables import Securable
from raydelta.protocol.unity_catalog import TemporaryCredentials
from raydelta.storage.catalog.credential_vending import vend_credentials
from raydelta.storage.catalog.namespaces import NamespaceRegistry


class CredentialService:
    """Vends temporary credentials (module docstring)."""

    def __init__(
        self,
        *,
        lock: threading.RLock,
        auth: Authorizer,
        settings: CatalogSettings,
        tables: ManagedTables,
        namespaces: NamespaceRegistry,
        locations: CatalogLocations,
    ) -> None:
        self._lock = lock
        self._auth = auth
        self._settings = settings
        self._tables = tables
        self._ns = namespaces
        self._locations = locations

    def table_credentials(
        self, token: str | None, table_id: str, operation: str
    ) -> TemporaryCredentials:
        """Temporary credentials for table (or staging table) ``table_id``:
        ``operation`` ``READ`` needs READ, ``READ_WRITE`` WRITE."""
        access = _access(operation)
        with self._lock:
            principal = self._auth.authenticate(token)
            entry = self._tables.entry_by_id(table_id)
            if entry is None:
                staging = self._ns.staging.get(table_id)
                if staging is None:
                    raise TableNotFoundError(f"no table with id {table_id!r}")
                if principal != staging["created_by"]:
                    self._auth.require_on(principal, Securable.metastore(), [Privilege.OWN])
                location = str(staging["location"])
            else:
                needed = Privilege.READ if access is AccessLevel.READ else Privilege.WRITE
                self._auth.require(principal, entry.name, [needed])
                self._locations.refuse_if_overlapping(entry.name)
                location = entry.location
        return self._vend(principal, location, access)

    def table_credentials_by_name(
        self, token: str | None, full_name: str, operation: str
    ) -> TemporaryCredentials:
        """:meth:`table_credentials` for the table named ``full_name``."""
        access = _access(operation)
        with self._lock:
            principal = self._auth.authenticate(token)
            entry = self._tables.store.lookup(full_name)
            if entry is None:
                raise TableNotFoundError(f"table {full_name!r} does not exist")
            needed = Privilege.READ if access is AccessLevel.READ else Privilege.WRITE
            self._auth.require(principal, full_name, [needed])
            self._locations.refuse_if_overlapping(full_name)
        return self._vend(principal, entry.location, access)

    def path_access(self, token: str | None, url: str, operation: str) -> str | None:
        """Check access to the storage path ``url`` for ``operation`` (``"read"``,
        ``"write"`` or ``"create"``); the name of the table holding it, or None."""
        with self._lock:
            return self._locations.path_access(self._auth.authenticate(token), url, operation)

    def path_credentials(self, token: str | None, url: str, operation: str) -> TemporaryCredentials:
        """Temporary credentials for the path ``url`` (``operation`` as in
        :meth:`path_access`; creating a table there gets write access)."""
        with self._lock:
            principal = self._auth.authenticate(token)
            self._locations.path_access(principal, url, operation)
        access = AccessLevel.READ if operation == "read" else AccessLevel.READ_WRITE
        return self._vend(principal, url, access)

    def _vend(self, principal: str, url: str, access: AccessLevel) -> TemporaryCredentials:
        vended = vend_credentials(
            url,
            self._locations.location(url),
            access,
            principal=principal,
            settings=self._settings.vending(),
            storage_options=self._settings.storage_options,
            now_ms=int(time.time() * 1000),
        )
        return TemporaryCredentials.model_validate(vended)


def _access(operation: str) -> AccessLevel:
    if operation == "READ":
        return AccessLevel.READ
    if operation == "READ_WRITE":
        return AccessLevel.READ_WRITE
    raise InvalidArgumentError(f"operation must be READ or READ_WRITE, got {operation!r}")


__all__ = ["CredentialService"]
