"""The catalog's durable store by URL: :func:`open_store`, one scheme per implementation.

``Catalog(store="postgresql://catalog@db:5432/raydelta")`` and ``raydelta
catalog serve --store postgresql://...`` come here.

Schemes (:data:`STORE_SCHEMES`):

- ``postgresql://`` and ``postgres://``: :class:`PostgresRatifiedStore`
  (the ``postgres`` extra; imported only when asked for), the URL is its DSN;
- ``sqlite:///absolute/path`` or ``sqlite:relative/path``, and a plain
  filesystem path: :class:`~raydelta.storage.catalog.ratified_store.SqliteRatifiedStore`
  in that file.

Invariants:
- A URL's password never appears in an error raised here.
- Anything else (another scheme, an empty string) is an
  :class:`~raydelta.protocol.errors.InvalidArgumentError` naming the schemes.
  The log-storage store is built from its class
  (``LogStorageRatifiedStore(root_uri)``): its root is a table-storage URI,
  which a URL here could not tell from a SQLite path.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from raydelta.protocol.errors import InvalidArgumentError
from raydelta.storage.catalog.ratified_store import RatifiedCommitStore, SqliteRatifiedStore

__all__ = ["STORE_SCHEMES", "is_store_url", "open_store"]


def _postgres(url: str) -> RatifiedCommitStore:
    from raydelta.storage.catalog.postgres_store import PostgresRatifiedStore

    return PostgresRatifiedStore(url)


def _sqlite(url: str) -> RatifiedCommitStore:
    path = url[len("sqlite:") :]
    if path.startswith("//"):  # sqlite:///abs/path: an empty authority
        path = path[2:]
    return SqliteRatifiedStore(path)


STORE_SCHEMES: dict[str, Callable[[str], RatifiedCommitStore]] = {
    "postgresql": _postgres,
    "postgres": _postgres,
    "sqlite": _sqlite,
}
"""URL scheme -> the function opening a store of that URL."""

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def _scheme(text: str) -> str | None:
    match = _SCHEME.match(text)
    # "C:\\catalog.db" is a path: a one-letter scheme is a drive
    return match.group(1).lower() if match and len(match.group(1)) > 1 else None


def is_store_url(text: str) -> bool:
    """Whether ``text`` is a URL of one of :data:`STORE_SCHEMES`."""
    return isinstance(text, str) and _scheme(text) in STORE_SCHEMES


def open_store(url: str | os.PathLike[str]) -> RatifiedCommitStore:
    """The store ``url`` names (module doc): a URL of :data:`STORE_SCHEMES`,
    or a filesystem path for a SQLite file."""
    text = os.fspath(url)
    if not isinstance(text, str) or not text:
        raise InvalidArgumentError(f"a catalog store needs a URL or a path, got {url!r}")
    scheme = _scheme(text)
    if scheme is None:
        return SqliteRatifiedStore(text)
    opener = STORE_SCHEMES.get(scheme)
    if opener is None:
        raise InvalidArgumentError(
            f"no catalog store for URLs of scheme {scheme!r}: use "
            f"{', '.join(s + '://' for s in STORE_SCHEMES)} or a path to a SQLite file "
            "(on table storage: LogStorageRatifiedStore(root_uri))"
        )
    return opener(text)
