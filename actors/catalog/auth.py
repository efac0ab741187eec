"""Principals, their tokens and their privileges, for the ``Catalog`` actor.

A principal is a name with one secret token the catalog issued
(``<name>.<secret>``, the secret from :func:`secrets.token_urlsafe`). The
catalog keeps only a SHA-256 hash of the secret and compares hashes with
:func:`hmac.compare_digest` (constant time). Privileges
(:class:`~raydelta.protocol.privileges.Privilege`) are granted on
securables (:mod:`raydelta.protocol.securables`): tables by name, Unity
Catalog's catalogs, schemas and external locations, and the metastore, whose
name is :data:`ALL_TABLES`: a grant there covers every securable. Grants on
a catalog or schema reach the tables in it.

Invariants:
- A token is shown once, when it is issued; nothing stored can rebuild it.
- Every check either returns the authenticated principal or raises
  :class:`~raydelta.protocol.errors.UnauthenticatedError` (unknown name,
  forged or missing secret) / :class:`~raydelta.protocol.errors.PermissionDeniedError`
  (naming the privileges missing); a refusal changes nothing.
- With authorization off (:attr:`Authorizer.enabled` False) every caller is
  :data:`ANONYMOUS` and owns everything; tokens are then not needed, and
  every security setting (a principal, a grant, a revoke) is refused with
  :class:`~raydelta.protocol.errors.AuthorizationDisabledError`
  (:meth:`Authorizer.require_enabled`): nothing would enforce it.
- Once on, authorization stays on: the registry records it
  (``"authorization": true``; a registry holding the bootstrap principal
  counts as on too), and :meth:`Authorizer.load` turns it on whatever the
  caller asked. Turning it on for a catalog that ran without it is one
  explicit step, :meth:`Authorizer.enable`.
- The registry is saved after every change, as JSON in
  :data:`PRINCIPALS_FILE` under the catalog's ``root`` (any URI the log
  stores take: a local path, ``memory://``, ``s3://`` with the catalog's
  storage options), replaced atomically (local disks: temp file, fsync,
  rename; object stores: one PUT); a restarted catalog, on this node or
  another one sharing the storage, reloads it. With ``root`` None it lives
  in memory only.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from raydelta.protocol.errors import (
    AuthorizationDisabledError,
    InvalidArgumentError,
    PermissionDeniedError,
    UnauthenticatedError,
)
from raydelta.protocol.privileges import Privilege, missing_privileges
from raydelta.protocol.securables import (
    APPLICABLE,
    Securable,
    SecurableType,
    check_applicable,
    held_on,
    missing_usage,
)
from raydelta.storage.catalog.root_documents import read_document, root_store, write_document
from raydelta.storage.log.store import LogStore

PRINCIPALS_FILE = "principals.json"

ALL_TABLES = "*"
"""The table name of a catalog-wide grant (the metastore securable)."""

ANONYMOUS = "anonymous"
"""The principal of every caller while authorization is off."""

BOOTSTRAP_PRINCIPAL = "catalog-admin"
"""The principal whose token the catalog's creator holds: owns everything."""

Grants = dict[Securable, dict[str, set[Privilege]]]


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass
class Authorizer:
    """Tokens and grants (see the module docstring)."""

    enabled: bool
    root: str | None = None
    """The catalog's root URI, where :data:`PRINCIPALS_FILE` is kept."""
    storage_options: dict[str, Any] | None = None
    token_hashes: dict[str, str] = field(default_factory=dict)
    grants: Grants = field(default_factory=dict)
    """``{securable: {principal: privileges}}``."""

    @classmethod
    def load(
        cls, *, enabled: bool, root: str | None, storage_options: dict[str, Any] | None = None
    ) -> Authorizer:
        """The registry saved under ``root`` (empty when there is none yet).

        The file keeps table and catalog-wide grants under ``grants`` by table
        name (as before securables had types) and the others under
        ``securable_grants`` by type and name."""
        auth = cls(enabled=enabled, root=root, storage_options=storage_options)
        saved = read_document(auth._store(), PRINCIPALS_FILE)
        if saved is not None:
            auth.token_hashes = dict(saved.get("principals", {}))
            recorded = saved.get("authorization", BOOTSTRAP_PRINCIPAL in auth.token_hashes)
            auth.enabled = enabled or bool(recorded)
            for table, holders in saved.get("grants", {}).items():
                auth._load_holders(Securable.table(table), holders)
            for kind, by_name in saved.get("securable_grants", {}).items():
                for name, holders in by_name.items():
                    auth._load_holders(Securable(SecurableType(kind), name), holders)
        return auth

    def _load_holders(self, securable: Securable, holders: dict[str, list[str]]) -> None:
        self.grants[securable] = {
            who: {Privilege(p) for p in privs} for who, privs in holders.items()
        }

    def _store(self) -> LogStore | None:
        """The root's files (names relative to the root itself)."""
        return root_store(self.root, self.storage_options)

    def save(self) -> None:
        """Write the registry (see the module docstring)."""
        self._save()

    def _save(self) -> None:
        tables: dict[str, Any] = {}
        others: dict[str, dict[str, Any]] = {}
        for securable, holders in sorted(self.grants.items()):
            saved = {who: sorted(p.value for p in privs) for who, privs in holders.items()}
            if securable.type in (SecurableType.TABLE, SecurableType.METASTORE):
                tables[securable.name] = saved
            else:
                others.setdefault(securable.type.value, {})[securable.name] = saved
        body = {
            "authorization": self.enabled,
            "principals": self.token_hashes,
            "grants": tables,
            "securable_grants": others,
        }
        write_document(self._store(), PRINCIPALS_FILE, body)

    @staticmethod
    def recorded(root: str | None, storage_options: dict[str, Any] | None = None) -> bool | None:
        """Whether the registry under ``root`` records authorization as on (None:
        no registry there yet: a new catalog)."""
        saved = read_document(root_store(root, storage_options), PRINCIPALS_FILE)
        if saved is None:
            return None
        principals = saved.get("principals", {})
        return bool(saved.get("authorization", BOOTSTRAP_PRINCIPAL in principals))

    def require_enabled(self, what: str) -> None:
        """Refuse ``what`` (a security setting) while authorization is off."""
        if not self.enabled:
            raise AuthorizationDisabledError(
                f"{what} refused: this catalog runs without authorization, so nothing "
                "would enforce it; turn authorization on first (Catalog.enable_authorization(), "
                "or raydelta catalog serve --authorization)"
            )

    def enable(self) -> str | None:
        """Turn authorization on (recorded: it stays on) and return the bootstrap
        token, or None when it was on already (its token was handed out then)."""
        if self.enabled:
            return None
        self.enabled = True
        token = self.bootstrap()
        self._save()
        return token

    # --- principals -------------------------------------------------------------

    def principal_names(self) -> list[str]:
        return sorted(self.token_hashes)

    def delete_principal(self, principal: str) -> None:
        """Forget ``principal``: its token stops working, its grants go."""
        if principal == BOOTSTRAP_PRINCIPAL:
            raise InvalidArgumentError(
                f"the bootstrap principal {BOOTSTRAP_PRINCIPAL!r} cannot be deleted "
                "(rotate its token instead)"
            )
        if principal not in self.token_hashes:
            raise InvalidArgumentError(f"no principal {principal!r}")
        del self.token_hashes[principal]
        for holders in self.grants.values():
            holders.pop(principal, None)
        self.grants = {s: h for s, h in self.grants.items() if h}
        self._save()

    def grants_on(self, securable: Securable) -> dict[str, frozenset[Privilege]]:
        """The privileges granted on ``securable`` itself, by principal (not
        inherited ones; empty sets left out)."""
        holders = self.grants.get(securable, {})
        return {who: frozenset(p) for who, p in sorted(holders.items()) if p}

    def issue_token(self, principal: str) -> str:
        """A new token for ``principal`` (created if new; an old token stops working)."""
        if not principal or "." in principal or principal in (ANONYMOUS, ALL_TABLES):
            raise ValueError(f"invalid principal name {principal!r} (non-empty, no '.')")
        secret = secrets.token_urlsafe(32)
        self.token_hashes[principal] = _hash(secret)
        self._save()
        return f"{principal}.{secret}"

    def has_principal(self, principal: str) -> bool:
        return principal in self.token_hashes

    def bootstrap(self) -> str | None:
        """Issue the bootstrap principal's token if it has none yet (first start),
        granting it ownership of every table; None when it exists already."""
        if BOOTSTRAP_PRINCIPAL in self.token_hashes:
            return None
        token = self.issue_token(BOOTSTRAP_PRINCIPAL)
        self.grant(BOOTSTRAP_PRINCIPAL, ALL_TABLES, [Privilege.OWN])
        return token

    def authenticate(self, token: str | None) -> str:
        """The principal ``token`` belongs to (``ANONYMOUS`` when authorization is off)."""
        if not self.enabled:
            return ANONYMOUS
        if not isinstance(token, str) or "." not in token:
            raise UnauthenticatedError("a catalog token is required (Catalog.create_principal)")
        principal, _, secret = token.partition(".")
        expected = self.token_hashes.get(principal)
        # compare even for an unknown name, so timing does not tell names apart
        presented = _hash(secret)
        if not hmac.compare_digest(presented, expected or _hash("")) or expected is None:
            raise UnauthenticatedError("the catalog token is not valid")
        return principal

    # --- privileges -------------------------------------------------------------

    def privileges_on(self, principal: str, securable: Securable) -> frozenset[Privilege]:
        """What ``principal`` holds on ``securable`` (inherited grants and OWN included)."""
        if not self.enabled:
            return APPLICABLE[securable.type]
        return held_on(securable, self._grants_of(principal))

    def _grants_of(self, principal: str) -> dict[Securable, set[Privilege]]:
        return {s: holders[principal] for s, holders in self.grants.items() if principal in holders}

    def privileges(self, principal: str, table: str) -> frozenset[Privilege]:
        """What ``principal`` holds on ``table`` (with catalog-wide grants and OWN)."""
        return self.privileges_on(principal, Securable.table(table))

    def require_on(self, principal: str, securable: Securable, needed: Iterable[Privilege]) -> None:
        """Raise :class:`PermissionDeniedError` naming what ``principal`` lacks
        (the usage of the securable's catalog and schema first)."""
        unusable = missing_usage(securable, self._grants_of(principal)) if self.enabled else ()
        missing = missing_privileges(self.privileges_on(principal, securable), needed)
        if missing or unusable:
            names = ", ".join(p.value.upper() for p in missing)
            message = f"principal {principal!r} lacks {names} on {securable.describe()}"
            if unusable:
                on, privilege = unusable[0]
                usage = f"{privilege.value.upper()} on {on.describe()}"
                first = f"{message} and" if missing else f"principal {principal!r} lacks"
                message = f"{first} {usage} (nothing in {on.describe()} is reachable without it)"
            raise PermissionDeniedError(
                message,
                principal=principal,
                table=securable.name,
                missing=tuple(p.value for p in missing) + tuple(p.value for _, p in unusable),
            )

    def require(self, principal: str, table: str, needed: Iterable[Privilege]) -> None:
        """Raise :class:`PermissionDeniedError` naming what ``principal`` lacks on ``table``."""
        self.require_on(principal, Securable.table(table), needed)

    def is_admin(self, principal: str) -> bool:
        """Whether ``principal`` owns the metastore (everything)."""
        return Privilege.OWN in self.privileges_on(principal, Securable.metastore())

    def grant_on(
        self, principal: str, securable: Securable, privileges: Iterable[Privilege]
    ) -> None:
        if not self.has_principal(principal):
            raise ValueError(f"no principal {principal!r}")
        wanted = set(privileges)
        check_applicable(securable, wanted)
        self.grants.setdefault(securable, {}).setdefault(principal, set()).update(wanted)
        self._save()

    def grant(self, principal: str, table: str, privileges: Iterable[Privilege]) -> None:
        self.grant_on(principal, Securable.table(table), privileges)

    def revoke_on(
        self, principal: str, securable: Securable, privileges: Iterable[Privilege]
    ) -> None:
        holders = self.grants.get(securable, {})
        held = holders.get(principal)
        if held is None:
            return
        held.difference_update(privileges)
        if not held:
            del holders[principal]
        self._save()

    def revoke(self, principal: str, table: str, privileges: Iterable[Privilege]) -> None:
        self.revoke_on(principal, Securable.table(table), privileges)

    def grant_owner(self, principal: str, table: str) -> None:
        """``principal`` created ``table``: it owns it (nothing to do when off)."""
        self.grant_owner_of(principal, Securable.table(table))

    def grant_owner_of(self, principal: str, securable: Securable) -> None:
        """``principal`` created ``securable``: it owns it (nothing to do when off)."""
        if self.enabled and principal != ANONYMOUS:
            self.grant_on(principal, securable, [Privilege.OWN])

    def forget_table(self, table: str) -> None:
        """Drop every grant on ``table`` (it was dropped)."""
        self.forget(Securable.table(table))

    def forget(self, securable: Securable) -> None:
        """Drop every grant on ``securable`` (it was deleted)."""
        if self.grants.pop(securable, None) is not None:
            self._save()
