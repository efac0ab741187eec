"""The catalog's namespaces: Unity Catalog's catalogs and schemas, and what
it says about each table beyond its name and location.

Unity Catalog names a table ``catalog.schema.table``; the catalog actor
registers tables under that full name in its
:class:`~raydelta.storage.catalog.ratified_store.RatifiedCommitStore`. This module
keeps the rest, as one JSON document (:data:`NAMESPACES_FILE`) under the
catalog's root:

- catalogs and schemas (name, comment, properties, id, creation time and
  creator);
- per table: its Unity Catalog type (``MANAGED``/``EXTERNAL``), format,
  comment, properties, columns as given at creation, creator and time;
- staging tables (``POST /staging-tables``): the id and location handed out
  for a managed table a client is about to create, until it is created.

Invariants:
- Every change is saved before the call returns, replacing the file
  atomically through the root's log store (local disks: temp file, fsync,
  rename; object stores: one PUT); a restarted catalog reloads it. With
  ``root`` None it lives in memory only.
- Names are stored as given (Unity Catalog compares names exactly).
- A schema belongs to an existing catalog; a catalog or schema holding
  something is deleted only with ``force``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raydelta.storage.catalog.root_documents import read_document, root_store, write_document
from raydelta.storage.log.store import LogStore

NAMESPACES_FILE = "unity_namespaces.json"


@dataclass
class NamespaceRegistry:
    """Catalogs, schemas, table details and staging tables (module docstring)."""

    root: str | None = None
    storage_options: dict[str, Any] | None = None
    catalogs: dict[str, dict[str, Any]] = field(default_factory=dict)
    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)
    """``{"catalog.schema": info}``."""
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    """``{"catalog.schema.table": info}``."""
    staging: dict[str, dict[str, Any]] = field(default_factory=dict)
    """``{table id: {"full_name", "location", "created_by", "created_at"}}``."""

    @classmethod
    def load(
        cls, *, root: str | None, storage_options: dict[str, Any] | None = None
    ) -> NamespaceRegistry:
        registry = cls(root=root, storage_options=storage_options)
        saved = read_document(registry._store(), NAMESPACES_FILE)
        if saved is not None:
            registry.catalogs = dict(saved.get("catalogs", {}))
            registry.schemas = dict(saved.get("schemas", {}))
            registry.tables = dict(saved.get("tables", {}))
            registry.staging = dict(saved.get("staging", {}))
        return registry

    def _store(self) -> LogStore | None:
        return root_store(self.root, self.storage_options)

    def save(self) -> None:
        body = {
            "catalogs": self.catalogs,
            "schemas": self.schemas,
            "tables": self.tables,
            "staging": self.staging,
        }
        write_document(self._store(), NAMESPACES_FILE, body)

    # --- queries -----------------------------------------------------------------

    def schemas_of(self, catalog: str) -> list[str]:
        return sorted(k for k in self.schemas if k.split(".", 1)[0] == catalog)

    def tables_of(self, schema_full_name: str) -> list[str]:
        return sorted(k for k in self.tables if k.rsplit(".", 1)[0] == schema_full_name)


__all__ = ["NAMESPACES_FILE", "NamespaceRegistry"]
