"""Principals, their tokens and their privileges, for the ``Catalog`` actor.

A principal is a name with one secret token the catalog issued
(``<name>.<secret>``, the secret from :func:`secrets.token_urlsafe`). The
catalog keeps only a SHA-256 hash of the secret and compares hashes with
:func:`hmac.compare_digest` (constant time). Privileges
(:class:`~raydelta.protocol.privileges.Privilege`) are granted per table
name; a grant on :data:`ALL_TABLES` covers every table.

Invariants:
- A token is shown once, when it is issued; nothing stored can rebuild it.
- Every check either returns the authenticated principal or raises
  :class:`~raydelta.protocol.errors.UnauthenticatedError` (unknown name,
  forged or missing secret) / :class:`~raydelta.protocol.errors.PermissionDeniedError`
  (naming the privileges missing); a refusal changes nothing.
- With authorization off (:attr:`Authorizer.enabled` False) every caller is
  :data:`ANONYMOUS` and owns everything; tokens are then not needed.
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

from raydelta.protocol.errors import PermissionDeniedError, UnauthenticatedError
from raydelta.protocol.privileges import (
    Privilege,
    effective_privileges,
    missing_privileges,
)
from raydelta.storage.catalog.root_documents import read_document, root_store, write_document
from raydelta.storage.log.store import LogStore

PRINCIPALS_FILE = "principals.json"

ALL_TABLES = "*"
"""The table name of a catalog-wide grant."""

ANONYMOUS = "anonymous"
"""The principal of every caller while authorization is off."""

BOOTSTRAP_PRINCIPAL = "catalog-admin"
"""The principal whose token the catalog's creator holds: owns everything."""


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
    grants: dict[str, dict[str, set[Privilege]]] = field(default_factory=dict)
    """``{table name: {principal: privileges}}``."""

    @classmethod
    def load(
        cls, *, enabled: bool, root: str | None, storage_options: dict[str, Any] | None = None
    ) -> Authorizer:
        """The registry saved under ``root`` (empty when there is none yet)."""
        auth = cls(enabled=enabled, root=root, storage_options=storage_options)
        saved = read_document(auth._store(), PRINCIPALS_FILE)
        if saved is not None:
            auth.token_hashes = dict(saved.get("principals", {}))
            auth.grants = {
                table: {who: {Privilege(p) for p in privs} for who, privs in holders.items()}
                for table, holders in saved.get("grants", {}).items()
            }
        return auth

    def _store(self) -> LogStore | None:
        """The root's files (names relative to the root itself)."""
        return root_store(self.root, self.storage_options)

    def _save(self) -> None:
        body = {
            "principals": self.token_hashes,
            "grants": {
                table: {who: sorted(p.value for p in privs) for who, privs in holders.items()}
                for table, holders in self.grants.items()
            },
        }
        write_document(self._store(), PRINCIPALS_FILE, body)

    # --- principals -------------------------------------------------------------

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

    def privileges(self, principal: str, table: str) -> frozenset[Privilege]:
        """What ``principal`` holds on ``table`` (with catalog-wide grants and OWN)."""
        if not self.enabled:
            return frozenset(Privilege)
        held = set(self.grants.get(table, {}).get(principal, set()))
        held |= self.grants.get(ALL_TABLES, {}).get(principal, set())
        return effective_privileges(held)

    def require(self, principal: str, table: str, needed: Iterable[Privilege]) -> None:
        """Raise :class:`PermissionDeniedError` naming what ``principal`` lacks."""
        missing = missing_privileges(self.privileges(principal, table), needed)
        if missing:
            names = ", ".join(p.value.upper() for p in missing)
            raise PermissionDeniedError(
                f"principal {principal!r} lacks {names} on table {table!r}",
                principal=principal,
                table=table,
                missing=tuple(p.value for p in missing),
            )

    def grant(self, principal: str, table: str, privileges: Iterable[Privilege]) -> None:
        if not self.has_principal(principal):
            raise ValueError(f"no principal {principal!r}")
        self.grants.setdefault(table, {}).setdefault(principal, set()).update(privileges)
        self._save()

    def revoke(self, principal: str, table: str, privileges: Iterable[Privilege]) -> None:
        holders = self.grants.get(table, {})
        held = holders.get(principal)
        if held is None:
            return
        held.difference_update(privileges)
        if not held:
            del holders[principal]
        self._save()

    def grant_owner(self, principal: str, table: str) -> None:
        """``principal`` created ``table``: it owns it (nothing to do when off)."""
        if self.enabled and principal != ANONYMOUS:
            self.grant(principal, table, [Privilege.OWN])

    def forget_table(self, table: str) -> None:
        """Drop every grant on ``table`` (it was dropped)."""
        if self.grants.pop(table, None) is not None:
            self._save()
