"""The log's names for the table storage: :class:`LogStore` and :func:`log_store_for`.

The contract lives in :mod:`raydelta.storage.backends.contract` (it covers the
whole table, not only ``_delta_log``), the backends in
``storage/backends/`` (one module each), and the choice of backend by URI
scheme in :mod:`raydelta.storage.backends.registry`. Modules above
``storage/backends/`` import these two names from here and never a backend.
"""

from __future__ import annotations

from raydelta.storage.backends.contract import LogStore
from raydelta.storage.backends.registry import storage_for as log_store_for

__all__ = ["LogStore", "log_store_for"]
