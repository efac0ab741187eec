"""Ray actors and the public API of deltaray.

>>> from actors import create_table, open_table   # doctest: +SKIP
"""

from actors.api import (
    Table,
    Transaction,
    create_table,
    normalize_uri,
    open_table,
    release_table,
)

__all__ = ["Table", "Transaction", "create_table", "normalize_uri", "open_table", "release_table"]
