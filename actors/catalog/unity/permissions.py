"""Principals and grants administered over HTTP: Unity Catalog's permissions
API and raydelta's admin API, as one part of the Unity Catalog service:
:class:`PermissionService`.

- :meth:`PermissionService.permissions` / :meth:`~PermissionService.update_permissions`:
  ``GET`` / ``PATCH /permissions/{securable_type}/{full_name}`` on the
  metastore, catalogs, schemas, tables and external locations, privileges
  named as Unity Catalog names them (``naming="unity"``,
  :mod:`raydelta.protocol.unity_privileges`) or as raydelta does
  (``naming="raydelta"``: ``read``, ``write``, ``alter``, ``own``...; the
  admin API's spelling, which shows ``ALTER`` and ``OWN`` too, and which
  accepts Unity Catalog's names on input as well);
- principals: list, create, rotate a token, delete (the admin only).

Invariants:
- Like Unity Catalog: a reply lists the privileges granted *on* the
  securable itself (inherited ones are not repeated); a caller owning the
  securable (``OWN`` on it or above) sees every principal's, any other
  caller only its own, and a caller holding nothing on it (no usage of its
  catalog and schema, say) is refused: it sees nothing of it.
- ``PATCH`` needs ``OWN`` on the securable; every change is checked (the
  principal exists, each privilege is known and applies to the securable)
  before any is applied, so a refused request changes nothing. It answers
  the changed principals' assignments.
- With authorization off every operation is refused with
  :class:`~raydelta.protocol.errors.AuthorizationDisabledError`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Literal

from raydelta.actors.catalog.auth import ALL_TABLES, Authorizer
from raydelta.protocol.errors import (
    InvalidArgumentError,
    PermissionDeniedError,
    PrincipalAlreadyExistsError,
    TableNotFoundError,
)
from raydelta.protocol.privileges import Privilege, parse_privileges
from raydelta.protocol.securables import Securable, SecurableType, check_applicable
from raydelta.protocol.unity_catalog import (
    PermissionsChange,
    PermissionsList,
    PrivilegeAssignment,
)
from raydelta.protocol.unity_privileges import parse_unity_privileges, unity_names
from raydelta.storage.catalog.external_locations import ExternalLocationRegistry
from raydelta.storage.catalog.namespaces import NamespaceRegistry
from raydelta.storage.catalog.ratified_store import RatifiedCommitStore

Naming = Literal["unity", "raydelta"]

SUPPORTED_TYPES = (
    SecurableType.METASTORE,
    SecurableType.CATALOG,
    SecurableType.SCHEMA,
    SecurableType.TABLE,
    SecurableType.EXTERNAL_LOCATION,
)


class PermissionService:
    """Grants and principals over HTTP (module docstring)."""

    def __init__(
        self,
        *,
        lock: threading.RLock,
        auth: Authorizer,
        store: RatifiedCommitStore,
        namespaces: NamespaceRegistry,
        external: ExternalLocationRegistry,
    ) -> None:
        self._lock = lock
        self._auth = auth
        self._store = store
        self._ns = namespaces
        self._external = external

    # --- principals --------------------------------------------------------------------

    def _admin(self, token: str | None, what: str) -> str:
        self._auth.require_enabled(what)
        principal = self._auth.authenticate(token)
        self._auth.require(principal, ALL_TABLES, [Privilege.OWN])
        return principal

    def principals(self, token: str | None) -> list[str]:
        with self._lock:
            self._admin(token, "listing principals")
            return self._auth.principal_names()

    def create_principal(self, token: str | None, name: str, exist_ok: bool = False) -> str:
        """The new principal's token (shown once); an existing name is refused
        unless ``exist_ok`` (then its token is replaced, as by :meth:`rotate_token`)."""
        with self._lock:
            self._admin(token, f"creating principal {name!r}")
            if not exist_ok and self._auth.has_principal(name):
                raise PrincipalAlreadyExistsError(
                    f"principal {name!r} already exists (rotate its token instead)"
                )
            try:
                return self._auth.issue_token(name)
            except ValueError as error:
                raise InvalidArgumentError(str(error)) from None

    def rotate_token(self, token: str | None, name: str) -> str:
        """A new token for principal ``name``; its old token stops working."""
        with self._lock:
            self._admin(token, f"rotating the token of {name!r}")
            if not self._auth.has_principal(name):
                raise InvalidArgumentError(f"no principal {name!r}")
            return self._auth.issue_token(name)

    def delete_principal(self, token: str | None, name: str) -> None:
        """Forget principal ``name``: its token and its grants."""
        with self._lock:
            self._admin(token, f"deleting principal {name!r}")
            self._auth.delete_principal(name)

    # --- permissions -------------------------------------------------------------------

    def permissions(
        self,
        token: str | None,
        securable_type: str,
        full_name: str,
        principal: str | None = None,
        naming: Naming = "unity",
    ) -> PermissionsList:
        """``GET /permissions/{securable_type}/{full_name}`` (module invariants)."""
        with self._lock:
            self._auth.require_enabled("reading permissions")
            caller = self._auth.authenticate(token)
            securable = self._existing(securable_type, full_name)
            held = self._auth.privileges_on(caller, securable)
            if not held:
                raise PermissionDeniedError(
                    f"principal {caller!r} holds no privilege on {securable.describe()}",
                    principal=caller,
                    table=securable.name,
                )
            grants = self._auth.grants_on(securable)
            if Privilege.OWN not in held:
                grants = {caller: grants[caller]} if caller in grants else {}
            if principal is not None:
                grants = {principal: grants[principal]} if principal in grants else {}
            return _listed(grants, naming)

    def update_permissions(
        self,
        token: str | None,
        securable_type: str,
        full_name: str,
        changes: Sequence[PermissionsChange],
        naming: Naming = "unity",
    ) -> PermissionsList:
        """``PATCH /permissions/{securable_type}/{full_name}`` (module invariants)."""
        with self._lock:
            self._auth.require_enabled("changing permissions")
            caller = self._auth.authenticate(token)
            securable = self._existing(securable_type, full_name)
            self._auth.require_on(caller, securable, [Privilege.OWN])
            planned = []
            for change in changes:
                if not self._auth.has_principal(change.principal):
                    raise InvalidArgumentError(f"no principal {change.principal!r}")
                add = _parse(change.add, securable, naming)
                remove = _parse(change.remove, securable, naming)
                check_applicable(securable, add)
                planned.append((change.principal, add, remove))
            for who, add, remove in planned:
                if add:
                    self._auth.grant_on(who, securable, add)
                if remove:
                    self._auth.revoke_on(who, securable, remove)
            changed = {who for who, _, _ in planned}
            grants = {w: p for w, p in self._auth.grants_on(securable).items() if w in changed}
            return _listed(grants, naming)

    def _existing(self, securable_type: str, full_name: str) -> Securable:
        """The securable named, which must exist (the lock held)."""
        try:
            kind = SecurableType(str(securable_type).strip().lower())
        except ValueError:
            kind = None
        if kind not in SUPPORTED_TYPES:
            raise InvalidArgumentError(
                f"securable type {securable_type!r} is not supported by raydelta's catalog; "
                f"supported: {[t.value for t in SUPPORTED_TYPES]}"
            )
        if not isinstance(full_name, str) or not full_name:
            raise InvalidArgumentError(f"a {kind.value} needs a name, got {full_name!r}")
        if kind is SecurableType.METASTORE:
            return Securable.metastore()
        found = {
            SecurableType.CATALOG: lambda: full_name in self._ns.catalogs,
            SecurableType.SCHEMA: lambda: full_name in self._ns.schemas,
            SecurableType.TABLE: lambda: self._store.lookup(full_name) is not None,
            SecurableType.EXTERNAL_LOCATION: lambda: full_name in self._external.locations,
        }[kind]()
        if not found:
            if kind is SecurableType.TABLE:
                raise TableNotFoundError(f"table {full_name!r} does not exist")
            what = kind.value.replace("_", " ")
            raise InvalidArgumentError(f"{what} {full_name!r} does not exist")
        return Securable(kind, full_name)


def _parse(names: Sequence[str], securable: Securable, naming: Naming) -> frozenset[Privilege]:
    if naming == "unity":
        return parse_unity_privileges(names, securable.type)
    out: set[Privilege] = set()
    for name in names:  # raydelta's names, else Unity Catalog's (SELECT, MODIFY...)
        try:
            out |= parse_privileges(name)
        except ValueError:
            out |= parse_unity_privileges([name], securable.type)
    return frozenset(out)


def _listed(grants: dict[str, frozenset[Privilege]], naming: Naming) -> PermissionsList:
    assignments = []
    for who, privileges in sorted(grants.items()):
        names = (
            unity_names(privileges)
            if naming == "unity"
            else tuple(p.value for p in Privilege if p in privileges)
        )
        if names:
            assignments.append(PrivilegeAssignment(principal=who, privileges=names))
    return PermissionsList(privilege_assignments=tuple(assignments))


__all__ = ["Naming", "PermissionService"]
