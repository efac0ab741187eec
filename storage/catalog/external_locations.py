"""The catalog's external locations: path prefixes an admin registered, where
tables outside the catalog's managed storage may live (Unity Catalog's
external locations).

One JSON document (:data:`EXTERNAL_LOCATIONS_FILE`) under the catalog's
root holds ``{name: info}``; an info is Unity Catalog's
``ExternalLocationInfo`` (``name``, ``url``, ``credential_name``,
``comment``, ``read_only``, ``owner``, ``created_at``/``created_by``,
``updated_at``/``updated_by``, ``external_location_id``).

Invariants:
- Every change is saved before the call returns (the root's log store
  replaces the file atomically); a restarted catalog reloads it. With
  ``root`` None it lives in memory only.
- This module stores; the rules (who may create one, no two overlapping,
  none overlapping the managed root) are the catalog actor's
  (:mod:`raydelta.actors.catalog.locations`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raydelta.storage.catalog.root_documents import read_document, root_store, write_document
from raydelta.storage.log.store import LogStore

EXTERNAL_LOCATIONS_FILE = "external_locations.json"


@dataclass
class ExternalLocationRegistry:
    """Every external location by name (module docstring)."""

    root: str | None = None
    storage_options: dict[str, Any] | None = None
    locations: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(
        cls, *, root: str | None, storage_options: dict[str, Any] | None = None
    ) -> ExternalLocationRegistry:
        registry = cls(root=root, storage_options=storage_options)
        saved = read_document(registry._store(), EXTERNAL_LOCATIONS_FILE)
        if saved is not None:
            registry.locations = dict(saved.get("external_locations", {}))
        return registry

    def _store(self) -> LogStore | None:
        return root_store(self.root, self.storage_options)

    def save(self) -> None:
        write_document(
            self._store(), EXTERNAL_LOCATIONS_FILE, {"external_locations": self.locations}
        )


__all__ = ["EXTERNAL_LOCATIONS_FILE", "ExternalLocationRegistry"]
