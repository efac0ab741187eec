"""Unity Catalog's privilege names and raydelta's privileges (pure data).

Unity Catalog's permissions API (``api/all.yaml``: ``Privilege``,
``PrivilegeAssignment``, ``PermissionsChange``) names privileges with
spaces: ``SELECT``, ``MODIFY``, ``USE CATALOG``, ``USE SCHEMA``,
``CREATE SCHEMA``, ``CREATE TABLE``, ``CREATE EXTERNAL TABLE``,
``READ FILES``, ``WRITE FILES``. :func:`parse_unity_privilege` reads those
(and their ``_`` spellings, any case) into raydelta's
:class:`~raydelta.protocol.privileges.Privilege`:

- ``SELECT`` is ``READ``, ``MODIFY`` is ``WRITE``; the others keep their names;
- Databricks' ``MANAGE`` is ``ALTER`` (changing a table's definition; it is
  not in Unity Catalog OSS's enum), and ``ALL PRIVILEGES`` (or
  ``ALL_PRIVILEGES``) is every privilege the securable takes except
  ``OWN`` (as in Unity Catalog: all privileges do not make an owner).

Invariants:
- A name raydelta cannot enforce (``CREATE CATALOG``, ``EXECUTE``, volume and
  model privileges...) is refused with
  :class:`~raydelta.protocol.errors.InvalidArgumentError`, never dropped.
- :func:`unity_names` answers only with names of Unity Catalog OSS's enum,
  so its own SDK parses every reply: ``ALTER`` and ``OWN``, which have no
  name there, are left out, exactly as Unity Catalog leaves out its own
  ``OWNER``. raydelta's admin API (``/api/raydelta/v1``) shows them.
"""

from __future__ import annotations

from collections.abc import Iterable

from raydelta.protocol.errors import InvalidArgumentError
from raydelta.protocol.privileges import Privilege
from raydelta.protocol.securables import APPLICABLE, SecurableType

UNITY_NAMES: dict[Privilege, str] = {
    Privilege.USE_CATALOG: "USE CATALOG",
    Privilege.CREATE_SCHEMA: "CREATE SCHEMA",
    Privilege.USE_SCHEMA: "USE SCHEMA",
    Privilege.CREATE_TABLE: "CREATE TABLE",
    Privilege.READ: "SELECT",
    Privilege.WRITE: "MODIFY",
    Privilege.READ_FILES: "READ FILES",
    Privilege.WRITE_FILES: "WRITE FILES",
    Privilege.CREATE_EXTERNAL_TABLE: "CREATE EXTERNAL TABLE",
}
"""raydelta's privileges that Unity Catalog OSS's enum names, in its enum's order."""

MANAGE = "MANAGE"
ALL_PRIVILEGES = "ALL PRIVILEGES"
_BY_NAME = {name: privilege for privilege, name in UNITY_NAMES.items()}


def _normal(name: str) -> str:
    return " ".join(str(name).strip().upper().replace("_", " ").split())


def parse_unity_privilege(name: str, securable_type: SecurableType) -> frozenset[Privilege]:
    """What granting Unity Catalog's privilege ``name`` on a securable of
    ``securable_type`` grants (module docstring)."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgumentError(f"a privilege name is a non-empty string, got {name!r}")
    normal = _normal(name)
    if normal == ALL_PRIVILEGES:
        return APPLICABLE[securable_type] - {Privilege.OWN}
    if normal == MANAGE:
        return frozenset({Privilege.ALTER})
    privilege = _BY_NAME.get(normal)
    if privilege is None:
        known = [*UNITY_NAMES.values(), MANAGE, ALL_PRIVILEGES]
        raise InvalidArgumentError(
            f"privilege {name!r} is not supported by raydelta's catalog (it would not be "
            f"enforced); supported: {known}"
        )
    return frozenset({privilege})


def parse_unity_privileges(
    names: Iterable[str], securable_type: SecurableType
) -> frozenset[Privilege]:
    out: set[Privilege] = set()
    for name in names:
        out |= parse_unity_privilege(name, securable_type)
    return frozenset(out)


def unity_names(privileges: Iterable[Privilege]) -> tuple[str, ...]:
    """``privileges`` as Unity Catalog names them, in its enum's order (those it
    has no name for left out: module invariants)."""
    held = set(privileges)
    return tuple(name for privilege, name in UNITY_NAMES.items() if privilege in held)


__all__ = [
    "ALL_PRIVILEGES",
    "MANAGE",
    "UNITY_NAMES",
    "parse_unity_privilege",
    "parse_unity_privileges",
    "unity_names",
]
