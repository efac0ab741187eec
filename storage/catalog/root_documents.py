"""JSON documents kept directly under a catalog's root (principals, namespaces).

Invariants: a document is read whole and written whole through the root's
log store (``write`` replaces it); a missing document reads as ``None``;
without a root (an in-memory catalog) nothing is read or written.
"""

from __future__ import annotations

import json
from typing import Any

from raydelta.storage.log.store import LogStore, log_store_for


def root_store(root: str | None, storage_options: dict[str, Any] | None) -> LogStore | None:
    """A log store whose names are relative to ``root`` itself (None without a root)."""
    if root is None:
        return None
    store = log_store_for(root, storage_options)
    store.log_dir = store.table_root
    return store


def read_document(store: LogStore | None, name: str) -> dict[str, Any] | None:
    """The JSON document ``name`` under the store's root, or None when absent."""
    if store is None:
        return None
    try:
        body: dict[str, Any] = json.loads(store.read(name))
    except FileNotFoundError:
        return None
    return body


def write_document(store: LogStore | None, name: str, body: dict[str, Any]) -> None:
    """Replace the JSON document ``name`` under the store's root (no-op without one)."""
    if store is not None:
        store.write(name, json.dumps(body, sort_keys=True).encode("utf-8"))


__all__ = ["read_document", "root_store", "write_document"]
