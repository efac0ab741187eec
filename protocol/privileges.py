"""Privileges on catalog-managed tables, and judging a commit by its content.

A catalog that brokers every commit of a table can refuse a commit because of
what it *contains* (CATALOG_MANAGED.md, motivation 1: "block low-privilege
writers from modifying table metadata ... while still allowing normal reads
and writes"). This module is that judgement, as pure values:

- :class:`Privilege`: ``READ`` (load the table, its ratified commits),
  ``WRITE`` (commit data changes), ``ALTER`` (commit changes to the table's
  definition), ``OWN`` (everything, and granting).
- :func:`required_privileges`: what a commit's actions need. Any ``metaData``
  (schema, partitioning, properties), any ``protocol`` (table features), or a
  system domain (``delta.*``) needs ``ALTER``; anything else the commit
  carries (files added or removed, ``cdc``, ``txn`` app versions, user
  domains) needs ``WRITE``. A commit holding both kinds needs both; a
  commit holding only ``commitInfo`` needs ``WRITE``.
- :func:`missing_privileges`: what a principal's grants lack for a commit
  (``OWN`` implies every privilege).

Invariants:
- Judged on the actions as proposed, before the catalog stamps them: the
  bookkeeping the committer itself adds (``commitInfo``, the row-tracking
  high-water mark ``delta.rowTracking``, which every data commit on a
  row-tracking table carries) never needs ``ALTER``.
- The judgement is a function of the actions' kinds alone, never of who
  sends them or of the table's state: the same commit is judged the same
  way by every catalog.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence

from raydelta.protocol.actions import Action, CommitInfo, DomainMetadata, Metadata, Protocol
from raydelta.protocol.row_tracking import ROW_TRACKING_DOMAIN

SYSTEM_DOMAIN_PREFIX = "delta."
"""Domains whose names start with this are reserved to the Delta protocol."""

DATA_BOOKKEEPING_DOMAINS = frozenset({ROW_TRACKING_DOMAIN})
"""System domains a data commit carries as bookkeeping: they need ``WRITE`` only."""


class Privilege(enum.StrEnum):
    """What a principal may do with a securable. On a table (see the module
    docstring): ``READ``, ``WRITE``, ``ALTER``, ``OWN``. On catalogs, schemas
    and external locations, Unity Catalog's names
    (:mod:`raydelta.protocol.securables` says which apply where):
    ``USE_CATALOG``, ``USE_SCHEMA``, ``CREATE_SCHEMA`` (creating a schema in
    a catalog), ``CREATE_TABLE`` (creating a table in a schema),
    ``CREATE_EXTERNAL_TABLE`` (a table at a path inside an external
    location), ``READ_FILES`` / ``WRITE_FILES`` (path credentials inside an
    external location)."""

    READ = "read"
    WRITE = "write"
    ALTER = "alter"
    OWN = "own"
    USE_CATALOG = "use_catalog"
    USE_SCHEMA = "use_schema"
    CREATE_SCHEMA = "create_schema"
    CREATE_TABLE = "create_table"
    CREATE_EXTERNAL_TABLE = "create_external_table"
    READ_FILES = "read_files"
    WRITE_FILES = "write_files"


ALL_PRIVILEGES = frozenset(Privilege)


def parse_privileges(values: Iterable[Privilege | str] | Privilege | str) -> frozenset[Privilege]:
    """``values`` as a set of :class:`Privilege` (names or values, any case).

    Raises ``ValueError`` naming an unknown privilege.
    """
    if isinstance(values, (str, Privilege)):
        values = [values]
    out: set[Privilege] = set()
    for value in values:
        if isinstance(value, Privilege):
            out.add(value)
            continue
        text = str(value).strip().lower()
        try:
            out.add(Privilege(text))
        except ValueError:
            raise ValueError(
                f"unknown privilege {value!r}; expected one of {[p.value for p in Privilege]}"
            ) from None
    return frozenset(out)


def effective_privileges(granted: Iterable[Privilege]) -> frozenset[Privilege]:
    """``granted`` with what it implies: ``OWN`` implies every privilege."""
    granted = frozenset(granted)
    return ALL_PRIVILEGES if Privilege.OWN in granted else granted


def changes_definition(action: Action) -> bool:
    """Whether ``action`` changes the table's definition (needs ``ALTER``)."""
    if isinstance(action, (Metadata, Protocol)):
        return True
    if isinstance(action, DomainMetadata):
        return (
            action.domain.startswith(SYSTEM_DOMAIN_PREFIX)
            and action.domain not in DATA_BOOKKEEPING_DOMAINS
        )
    return False


def required_privileges(actions: Sequence[Action]) -> frozenset[Privilege]:
    """The privileges a commit of ``actions`` needs (module docstring)."""
    needed: set[Privilege] = set()
    for action in actions:
        if changes_definition(action):
            needed.add(Privilege.ALTER)
        elif not isinstance(action, CommitInfo):
            needed.add(Privilege.WRITE)
    if not needed:  # only provenance: still a write to the table's history
        needed.add(Privilege.WRITE)
    return frozenset(needed)


def missing_privileges(
    granted: Iterable[Privilege], required: Iterable[Privilege]
) -> tuple[Privilege, ...]:
    """The privileges in ``required`` that ``granted`` does not cover, in
    :class:`Privilege` order (empty: allowed)."""
    have = effective_privileges(granted)
    wanted = frozenset(required)
    return tuple(p for p in Privilege if p in wanted and p not in have)


__all__ = [
    "ALL_PRIVILEGES",
    "Privilege",
    "changes_definition",
    "effective_privileges",
    "missing_privileges",
    "parse_privileges",
    "required_privileges",
]
