"""What privileges are granted on, and what creating a table needs (pure data).

Unity Catalog grants privileges on *securables*: the metastore, catalogs,
schemas, tables, external locations. A :class:`Securable` is a type and a
name; this module says which :class:`~raydelta.protocol.privileges.Privilege`
each type takes (:data:`APPLICABLE`), which securables a grant on another
one covers (:meth:`Securable.ancestors`: a table ``c.s.t`` inherits what is
granted on schema ``c.s``, catalog ``c`` and the metastore), and what
creating a table asks for (:func:`table_creation_requirements`).

Invariants:
- The metastore securable is the catalog-wide grant (its name ``*``: what
  raydelta called "every table" before securables had types): a privilege
  granted there holds on every securable, and ``OWN`` there is the admin's.
- ``OWN`` on a securable implies every privilege on it and on everything it
  covers.
- A table's effective privileges are only table privileges (``READ``,
  ``WRITE``, ``ALTER``, ``OWN``) however they were inherited: a
  ``USE_SCHEMA`` grant never makes a table visible.
- Usage (Unity Catalog's rule, :func:`missing_usage`): a principal holds
  nothing on schema ``c.s`` without ``USE_CATALOG`` on catalog ``c``, and
  nothing on table ``c.s.t`` without ``USE_CATALOG`` on ``c`` and
  ``USE_SCHEMA`` on ``c.s`` (each inherited from above like any grant, and
  implied by ``OWN`` there). Any grant on the metastore (raydelta's
  catalog-wide grant, covering every table) implies usage of every catalog
  and schema. Flat table names have no catalog and no usage rule.
- Creating a table named ``catalog.schema.table`` needs ``USE_CATALOG`` on
  the catalog, ``USE_SCHEMA`` and ``CREATE_TABLE`` on the schema (Unity
  Catalog's rule); a name of another shape (raydelta's own flat names) has
  no schema and needs ``CREATE_TABLE`` on the metastore. A table placed
  outside the catalog's managed storage also needs ``CREATE_EXTERNAL_TABLE``
  on the external location holding its path (the caller supplies which).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from raydelta.protocol.privileges import Privilege, effective_privileges

METASTORE_NAME = "*"
"""The name of the metastore securable (a catalog-wide grant)."""


class SecurableType(enum.StrEnum):
    """Unity Catalog's securable types that raydelta grants privileges on."""

    METASTORE = "metastore"
    CATALOG = "catalog"
    SCHEMA = "schema"
    TABLE = "table"
    EXTERNAL_LOCATION = "external_location"


TABLE_PRIVILEGES = frozenset({Privilege.READ, Privilege.WRITE, Privilege.ALTER, Privilege.OWN})
"""What a table takes (and what schemas and catalogs pass down to their tables)."""

APPLICABLE: dict[SecurableType, frozenset[Privilege]] = {
    SecurableType.METASTORE: frozenset(Privilege),
    SecurableType.CATALOG: TABLE_PRIVILEGES
    | {
        Privilege.USE_CATALOG,
        Privilege.USE_SCHEMA,
        Privilege.CREATE_SCHEMA,
        Privilege.CREATE_TABLE,
    },
    SecurableType.SCHEMA: TABLE_PRIVILEGES | {Privilege.USE_SCHEMA, Privilege.CREATE_TABLE},
    SecurableType.TABLE: TABLE_PRIVILEGES,
    SecurableType.EXTERNAL_LOCATION: frozenset(
        {
            Privilege.CREATE_EXTERNAL_TABLE,
            Privilege.READ_FILES,
            Privilege.WRITE_FILES,
            Privilege.OWN,
        }
    ),
}
"""The privileges each securable type can be granted."""


@dataclass(frozen=True, order=True)
class Securable:
    """One securable: its type and its name (full name for schemas and tables)."""

    type: SecurableType
    name: str

    @classmethod
    def metastore(cls) -> Securable:
        return cls(SecurableType.METASTORE, METASTORE_NAME)

    @classmethod
    def table(cls, name: str) -> Securable:
        """Table ``name``; ``*`` stands for the metastore (the old catalog-wide grant)."""
        if name == METASTORE_NAME:
            return cls.metastore()
        return cls(SecurableType.TABLE, name)

    @classmethod
    def schema(cls, full_name: str) -> Securable:
        return cls(SecurableType.SCHEMA, full_name)

    @classmethod
    def catalog(cls, name: str) -> Securable:
        return cls(SecurableType.CATALOG, name)

    @classmethod
    def external_location(cls, name: str) -> Securable:
        return cls(SecurableType.EXTERNAL_LOCATION, name)

    def ancestors(self) -> tuple[Securable, ...]:
        """The securables whose grants cover this one, nearest first (the
        metastore last; nothing for the metastore itself)."""
        if self.type is SecurableType.METASTORE:
            return ()
        top = Securable.metastore()
        if self.type is SecurableType.TABLE:
            parts = self.name.split(".")
            if len(parts) == 3 and all(parts):
                return (
                    Securable.schema(f"{parts[0]}.{parts[1]}"),
                    Securable.catalog(parts[0]),
                    top,
                )
            return (top,)
        if self.type is SecurableType.SCHEMA:
            return (Securable.catalog(self.name.split(".", 1)[0]), top)
        return (top,)

    def describe(self) -> str:
        """``table 'c.s.t'``, ``external location 'landing'``, ``the metastore``."""
        if self.type is SecurableType.METASTORE:
            return "the metastore"
        return f"{self.type.value.replace('_', ' ')} {self.name!r}"


def parse_securable_type(value: SecurableType | str) -> SecurableType:
    """``value`` as a :class:`SecurableType` (any case); ``ValueError`` names the known ones."""
    if isinstance(value, SecurableType):
        return value
    try:
        return SecurableType(str(value).strip().lower())
    except ValueError:
        known = [t.value for t in SecurableType]
        raise ValueError(f"unknown securable type {value!r}; expected one of {known}") from None


def check_applicable(securable: Securable, privileges: Iterable[Privilege]) -> None:
    """``ValueError`` naming the privileges ``securable``'s type cannot be granted."""
    wrong = sorted(p.value for p in privileges if p not in APPLICABLE[securable.type])
    if wrong:
        allowed = sorted(p.value for p in APPLICABLE[securable.type])
        raise ValueError(
            f"{', '.join(wrong)} cannot be granted on {securable.describe()} "
            f"(a {securable.type.value} takes {allowed})"
        )


def _granted_on(
    securable: Securable, grants: Mapping[Securable, Iterable[Privilege]]
) -> frozenset[Privilege]:
    """``securable``'s own grants and its ancestors', ``OWN`` implying all."""
    held: set[Privilege] = set()
    for covering in (securable, *securable.ancestors()):
        held |= set(grants.get(covering, ()))
    return effective_privileges(held)


def missing_usage(
    securable: Securable, grants: Mapping[Securable, Iterable[Privilege]]
) -> tuple[tuple[Securable, Privilege], ...]:
    """The usage privileges (``USE_CATALOG`` on the catalog, ``USE_SCHEMA`` on
    the schema) ``grants`` lack for ``securable`` (module invariants); empty
    when nothing is missing."""
    if set(grants.get(Securable.metastore(), ())):
        return ()
    needed: list[tuple[Securable, Privilege]] = []
    if securable.type is SecurableType.SCHEMA:
        needed.append((Securable.catalog(securable.name.split(".", 1)[0]), Privilege.USE_CATALOG))
    elif securable.type is SecurableType.TABLE:
        parts = securable.name.split(".")
        if len(parts) == 3 and all(parts):
            needed.append((Securable.catalog(parts[0]), Privilege.USE_CATALOG))
            needed.append((Securable.schema(f"{parts[0]}.{parts[1]}"), Privilege.USE_SCHEMA))
    return tuple((s, p) for s, p in needed if p not in _granted_on(s, grants))


def held_on(
    securable: Securable, grants: Mapping[Securable, Iterable[Privilege]]
) -> frozenset[Privilege]:
    """What ``grants`` (one principal's, per securable) give on ``securable``:
    its own grants and its ancestors', ``OWN`` anywhere above implying all;
    nothing without usage of its catalog and schema (:func:`missing_usage`);
    a table keeps only table privileges (module invariants)."""
    if missing_usage(securable, grants):
        return frozenset()
    effective = _granted_on(securable, grants)
    if securable.type is SecurableType.TABLE:
        return effective & TABLE_PRIVILEGES
    return effective & APPLICABLE[securable.type]


def table_creation_requirements(name: str) -> list[tuple[Securable, frozenset[Privilege]]]:
    """What creating table ``name`` needs, securable by securable (module invariants),
    not counting the external location a table outside managed storage needs."""
    parts = name.split(".") if isinstance(name, str) else []
    if len(parts) == 3 and all(parts):
        catalog, schema = Securable.catalog(parts[0]), Securable.schema(f"{parts[0]}.{parts[1]}")
        return [
            (catalog, frozenset({Privilege.USE_CATALOG})),
            (schema, frozenset({Privilege.USE_SCHEMA, Privilege.CREATE_TABLE})),
        ]
    return [(Securable.metastore(), frozenset({Privilege.CREATE_TABLE}))]


__all__ = [
    "APPLICABLE",
    "METASTORE_NAME",
    "TABLE_PRIVILEGES",
    "Securable",
    "SecurableType",
    "check_applicable",
    "held_on",
    "missing_usage",
    "parse_securable_type",
    "table_creation_requirements",
]
