"""Connections to the PostgreSQL store: DSNs without their secrets, and a small per-process pool.

Used by :mod:`raydelta.storage.catalog.postgres_store` (which states the
store's invariants). Importing this module without psycopg 3 raises
:class:`~raydelta.protocol.errors.MissingDependencyError` naming the extra
(``pip install 'raydelta[postgres]'``).

Invariants:
- :func:`redacted` and :func:`scrub` never let a DSN's password through:
  every spelling of it (as written, percent-decoded, unquoted) is replaced.
- A :class:`ConnectionPool` belongs to the process that made it: it lends
  each of at most ``size`` connections to one thread at a time, and takes
  one back only healthy and outside any transaction (else it closes it).
- In a forked child, every connection inherited from the parent has its
  socket pointed at ``/dev/null`` (``os.register_at_fork``): closing or
  finalizing it there can never end the parent's session on the server.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from raydelta.protocol.errors import CatalogStoreError, MissingDependencyError

try:
    import psycopg
    from psycopg.pq import TransactionStatus
except ImportError as missing:  # pragma: no cover - exercised by the packaging test
    raise MissingDependencyError(
        "the PostgreSQL catalog store needs psycopg 3: pip install 'raydelta[postgres]'",
        "psycopg",
        "postgres",
    ) from missing

__all__ = ["Connection", "ConnectionPool", "redacted", "scrub", "secrets_of"]

Connection = psycopg.Connection[tuple[Any, ...]]

# --- DSNs without their secrets -----------------------------------------------------------

# key=value DSNs and URI query strings (``?password=...&...``) alike
_KEYWORD_SECRET = re.compile(r"(?:ssl)?password\s*=\s*('(?:[^'\\]|\\.)*'|[^\s&]+)")
_URI_SECRET = re.compile(r"^[a-z]+://[^:@/?#]*:([^@/?#]*)@", re.IGNORECASE)


def secrets_of(dsn: str) -> set[str]:
    """Every spelling of the DSN's passwords (raw, percent-decoded, unquoted)."""
    found: set[str] = set()
    for pattern in (_KEYWORD_SECRET, _URI_SECRET):
        for match in pattern.finditer(dsn):
            raw = match.group(1)
            found |= {raw, raw.strip("'"), unquote(raw)}
    with contextlib.suppress(ValueError):
        password = urlsplit(dsn).password
        if password:
            found |= {password, unquote(password)}
    return {secret for secret in found if secret}


def scrub(text: str, secrets: set[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def redacted(params: dict[str, Any]) -> str:
    """``postgresql://user@host:port/dbname``: what names the store in messages."""
    user = quote(str(params.get("user", "")), safe="")
    host = str(params.get("host", ""))
    port = f":{params['port']}" if params.get("port") else ""
    at = "@" if user else ""
    return f"postgresql://{user}{at}{host}{port}/{params.get('dbname', '')}"


# --- connections ---------------------------------------------------------------------------

_POOLS: weakref.WeakSet[ConnectionPool] = weakref.WeakSet()


class ConnectionPool:
    """At most ``size`` connections of one process to ``dsn`` (opened with the
    keywords ``options``), each lent to one thread at a time, opened on demand
    and kept while healthy and idle. ``setup`` runs on each new connection,
    ``first_use`` on the first one the pool opens (until it succeeds). A
    connection idle for more than ``check_after_s`` is pinged before it is
    lent (the server may have restarted or dropped it meanwhile: a write must
    not be the first to find out). It holds no reference to its store: a
    store's finalizer can close it."""

    def __init__(
        self,
        dsn: str,
        *,
        options: dict[str, Any],
        setup: Callable[[Connection], None],
        first_use: Callable[[Connection], None],
        size: int,
        wait_s: float,
        name: str,
        check_after_s: float = 5.0,
    ) -> None:
        self.pid = os.getpid()
        self._dsn = dsn
        self._options = options
        self._setup = setup
        self._first_use: Callable[[Connection], None] | None = first_use
        self._slots = threading.BoundedSemaphore(size)
        self._wait_s = wait_s
        self._name = name
        self._lock = threading.Lock()
        self._check_after_s = check_after_s
        self._idle: list[tuple[Connection, float]] = []  # (connection, idle since)
        self.opened: weakref.WeakSet[Connection] = weakref.WeakSet()
        _POOLS.add(self)

    def _open(self) -> Connection:
        conn = psycopg.connect(self._dsn, **self._options)
        try:
            self._setup(conn)
            first_use = self._first_use
            if first_use is not None:
                first_use(conn)
                self._first_use = None
        except BaseException:
            conn.close()
            raise
        self.opened.add(conn)
        return conn

    @contextlib.contextmanager
    def connection(self) -> Iterator[Connection]:
        if not self._slots.acquire(timeout=self._wait_s):
            raise CatalogStoreError(
                f"the catalog store {self._name}: every connection of this process was "
                f"busy for {self._wait_s:g} s",
                self._name,
            )
        try:
            conn = self._take_idle() or self._open()
            try:
                yield conn
            finally:
                healthy = not (conn.closed or conn.broken)
                if healthy and conn.info.transaction_status == TransactionStatus.IDLE:
                    with self._lock:
                        self._idle.append((conn, time.monotonic()))
                else:
                    conn.close()
        finally:
            self._slots.release()

    def _take_idle(self) -> Connection | None:
        """The most recently returned idle connection that still answers, or None."""
        while True:
            with self._lock:
                if not self._idle:
                    return None
                conn, since = self._idle.pop()
            if time.monotonic() - since <= self._check_after_s:
                return conn
            try:
                conn.execute("SELECT 1")
                return conn
            except psycopg.Error:
                conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn, _ in idle:
            conn.close()


def _disown_inherited_connections() -> None:
    """In a forked child: point every inherited connection's socket at
    /dev/null, so that closing it here (or its finalizer) cannot send the
    server a goodbye on the parent's session."""
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        for pool in list(_POOLS):
            for conn in list(pool.opened):
                with contextlib.suppress(Exception):
                    os.dup2(devnull, conn.fileno())
    finally:
        os.close(devnull)


os.register_at_fork(after_in_child=_disown_inherited_connections)
