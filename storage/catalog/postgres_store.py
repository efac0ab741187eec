"""The durable store in PostgreSQL (:class:`PostgresRatifiedStore`): a catalog across nodes.

One of the implementations of the contract in
:mod:`raydelta.storage.catalog.ratified_store` (which states it), on
PostgreSQL's own guarantees (psycopg 3: ``pip install 'raydelta[postgres]'``;
importing this module without it raises
:class:`~raydelta.protocol.errors.MissingDependencyError`).

Invariants:
- Version ``v`` only after ``v - 1``, at most once: every ratification runs in
  one transaction holding the table's advisory transaction lock
  (``pg_advisory_xact_lock``, keyed by a hash of the table id, so different
  tables do not wait for each other), which reads the latest version and the
  txnId's earlier commit, if any, after taking the lock. The database keeps
  the rest on its own: primary key ``(table_id, version)``, unique
  ``(table_id, txn_id)``, and the version row moves only from ``v - 1`` to
  ``v`` (a conditional upsert, checked).
- :meth:`~PostgresRatifiedStore.ratify_many` is one transaction (one commit,
  one WAL flush for the group): all or none. It takes its tables' locks in
  one global order (sorted keys), so two groups never deadlock.
- Durable before the reply: ratifications commit with
  ``synchronous_commit = on`` whatever the server's default (on a server with
  synchronous standbys, that waits for them too). Marking published commits
  with it off: it may be lost in a crash (the catalog then republishes, which
  is idempotent), and WAL order makes it durable only after the
  ratifications it covers.
- Exactly once by txnId across processes and catalog incarnations: the txnId
  is looked up under the table's lock, and ``(table_id, txn_id)`` is unique.
- The DSN's password never appears in ``repr``, ``str`` or an error message:
  :attr:`~PostgresRatifiedStore.redacted_dsn` names the store; every message
  from the driver is scrubbed of the DSN's secrets.
- Connections: each process keeps its own small pool (``pool_size``, opened
  lazily); a thread holds one connection for one call. The store pickles as
  its DSN and options (a Ray actor opens its own connections), and a forked
  child never touches the connections it inherited (their sockets are
  pointed at ``/dev/null`` in the child, so closing them there cannot end
  the parent's sessions).
- The schema (tables prefixed ``raydelta_``, in the connection's
  ``search_path``: pass ``options=-csearch_path=...`` in the DSN for another
  schema) is created on first use, idempotently and under a lock, and
  versioned (``raydelta_schema_version``): a newer schema than this raydelta
  knows is refused, an older one would be migrated there.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, LiteralString

from raydelta.protocol.catalog_managed import RatifiedCommit
from raydelta.protocol.errors import (
    CatalogStoreError,
    InvalidArgumentError,
    MissingDependencyError,
    TableAlreadyExistsError,
    TableNotFoundError,
    VersionAlreadyRatifiedError,
)
from raydelta.storage.catalog.postgres_connections import (
    Connection,
    ConnectionPool,
    redacted,
    scrub,
    secrets_of,
)
from raydelta.storage.catalog.ratified_store import (
    Ratification,
    RatifiedCommitStore,
    TableEntry,
    _check_ids,
    _check_published,
    _refuse,
)

try:  # without psycopg, postgres_connections (above) has raised this already
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg.conninfo import conninfo_to_dict
except ImportError as missing:  # pragma: no cover - exercised by the packaging test
    raise MissingDependencyError(
        "PostgresRatifiedStore needs psycopg 3: pip install 'raydelta[postgres]'",
        "psycopg",
        "postgres",
    ) from missing

__all__ = ["SCHEMA_VERSION", "PostgresRatifiedStore"]

SCHEMA_VERSION = 1
"""The version of the tables below; a store holding a newer one is refused."""

_SCHEMA: tuple[LiteralString, ...] = (
    """CREATE TABLE IF NOT EXISTS raydelta_schema_version (
        singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
        version integer NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS raydelta_catalog_tables (
        name text PRIMARY KEY,
        location text NOT NULL,
        table_id text NOT NULL UNIQUE,
        catalog_managed boolean NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS raydelta_table_versions (
        table_id text PRIMARY KEY,
        start_version bigint NOT NULL,
        latest_version bigint NOT NULL,
        published_version bigint)""",
    """CREATE TABLE IF NOT EXISTS raydelta_ratified_commits (
        table_id text NOT NULL,
        version bigint NOT NULL,
        txn_id text NOT NULL,
        record text NOT NULL,
        PRIMARY KEY (table_id, version),
        UNIQUE (table_id, txn_id))""",
)

_SESSION: tuple[LiteralString, ...] = (
    "SET synchronous_commit TO on",
    # A client stuck inside a transaction (a frozen process) must not hold a
    # table's lock for ever: the server ends such a session after a minute.
    "SET idle_in_transaction_session_timeout TO '60s'",
)

_ENTRY_COLUMNS: LiteralString = "name, location, table_id, catalog_managed"


def _lock_key(kind: str, name: str) -> int:
    """A signed 64-bit advisory-lock key, the same in every process."""
    digest = hashlib.sha256(f"raydelta:{kind}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


_SCHEMA_LOCK = _lock_key("schema", "raydelta_schema_version")


# --- the store -----------------------------------------------------------------------------


class PostgresRatifiedStore(RatifiedCommitStore):
    """The store in a PostgreSQL database (module doc).

    ``dsn``: a libpq connection string, ``postgresql://user:password@host:5432/db``
    or ``host=... dbname=...``. The first connection is opened (and the schema
    created) here, so a bad DSN, a refused password or an unreachable server
    fails at once with :class:`~raydelta.protocol.errors.CatalogStoreError`
    (:class:`~raydelta.protocol.errors.InvalidArgumentError` for a string that
    is not a DSN), naming the store without its password. ``pool_size``: the
    connections each process keeps at most; ``wait_s``: how long a call
    waits for one of them; ``connect_timeout_s``: for each connection attempt.
    """

    def __init__(
        self,
        dsn: str,
        *,
        pool_size: int = 4,
        connect_timeout_s: int = 10,
        wait_s: float = 60.0,
    ) -> None:
        if not isinstance(dsn, str) or not dsn.strip():
            raise InvalidArgumentError("a PostgreSQL store needs a DSN (postgresql://...)")
        for option, value in (("pool_size", pool_size), ("connect_timeout_s", connect_timeout_s)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidArgumentError(f"{option} must be a positive int, got {value!r}")
        self._configure(dsn, pool_size, connect_timeout_s, wait_s)
        with self._errors(), self._connection():
            pass  # fail fast: connect and check the schema now

    def _configure(self, dsn: str, pool_size: int, connect_timeout_s: int, wait_s: float) -> None:
        self._secrets = secrets_of(dsn)
        try:
            params = conninfo_to_dict(dsn)
        except psycopg.Error as error:
            raise InvalidArgumentError(
                f"not a PostgreSQL connection string: {scrub(str(error).strip(), self._secrets)}"
            ) from None
        self._secrets |= {str(params[k]) for k in ("password", "sslpassword") if params.get(k)}
        self._dsn = dsn
        self._params = params
        self.redacted_dsn = redacted(params)
        """The DSN without its password: how messages name this store."""
        self.pool_size = pool_size
        self.connect_timeout_s = connect_timeout_s
        self.wait_s = wait_s
        self._pools: dict[int, ConnectionPool] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {
            "dsn": self._dsn,
            "pool_size": self.pool_size,
            "connect_timeout_s": self.connect_timeout_s,
            "wait_s": self.wait_s,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._configure(
            state["dsn"], state["pool_size"], state["connect_timeout_s"], state["wait_s"]
        )

    def __repr__(self) -> str:
        return f"PostgresRatifiedStore({self.redacted_dsn!r})"

    # --- plumbing ------------------------------------------------------------------

    def _pool(self) -> ConnectionPool:
        pid = os.getpid()
        pool = self._pools.get(pid)
        if pool is None:  # first use in this process (a new store, unpickled, or forked)
            options: dict[str, Any] = {"autocommit": True}
            if "connect_timeout" not in self._params:
                options["connect_timeout"] = self.connect_timeout_s
            if "application_name" not in self._params:
                options["application_name"] = "raydelta-catalog"
            created = ConnectionPool(
                self._dsn,
                options=options,
                setup=_setup_session,
                first_use=functools.partial(_ensure_schema, store=self.redacted_dsn),
                size=self.pool_size,
                wait_s=self.wait_s,
                name=self.redacted_dsn,
            )
            pool = self._pools.setdefault(pid, created)
            if pool is created:
                weakref.finalize(self, created.close)
        return pool

    def _connection(self) -> contextlib.AbstractContextManager[Connection]:
        return self._pool().connection()

    def _store_error(self, error: psycopg.Error) -> CatalogStoreError:
        message = scrub(str(error).strip(), self._secrets)
        return CatalogStoreError(
            f"the catalog store {self.redacted_dsn} failed: {type(error).__name__}: {message}",
            self.redacted_dsn,
        )

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """The driver's errors as :class:`CatalogStoreError`, secrets scrubbed
        (``from None``: the driver's own exception, unscrubbed, is dropped)."""
        try:
            yield
        except psycopg.Error as error:
            raise self._store_error(error) from None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """One transaction on a connection of the pool; rolled back on any error."""
        with self._errors(), self._connection() as conn, conn.transaction():
            yield conn

    def _fetch(self, query: LiteralString, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """A read; tried twice, since a pooled connection may have died idle."""
        for attempt in (1, 2):
            try:
                with self._connection() as conn:
                    return conn.execute(query, params).fetchall()
            except psycopg.OperationalError as error:
                if attempt == 2:
                    raise self._store_error(error) from None
            except psycopg.Error as error:
                raise self._store_error(error) from None
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close this process's idle connections (the store stays usable)."""
        pool = self._pools.get(os.getpid())
        if pool is not None:
            pool.close()

    # --- ratified commits --------------------------------------------------------------

    def ratify(self, table_id: str, commit: RatifiedCommit, *, txn_id: str) -> RatifiedCommit:
        _check_ids(table_id, txn_id)
        with self._transaction() as conn:
            _lock_tables(conn, [table_id])
            return _ratify_in(conn, table_id, commit, txn_id)

    def ratify_many(self, ratifications: Sequence[Ratification]) -> int:
        """All of ``ratifications`` in one transaction (one commit): all or none.
        A :class:`CatalogStoreError` from the commit itself leaves the outcome
        unknown (``ratified_before`` 0 all the same): retry by txnId."""
        for item in ratifications:
            _check_ids(item.table_id, item.txn_id)
        if not ratifications:
            return 0
        try:
            with self._transaction() as conn:
                _lock_tables(conn, [item.table_id for item in ratifications])
                for item in ratifications:
                    stored = _ratify_in(conn, item.table_id, item.commit, item.txn_id)
                    if stored.version != item.commit.version:
                        raise _refuse(item.table_id, item.commit.version, stored.version)
        except Exception as error:
            error.ratified_before = 0  # type: ignore[attr-defined]  # rolled back: none
            raise
        return len(ratifications)

    def ratified(
        self, table_id: str, *, start_version: int | None = None, end_version: int | None = None
    ) -> list[RatifiedCommit]:
        _check_ids(table_id)
        rows = self._fetch(
            "SELECT c.record FROM raydelta_ratified_commits c "
            "JOIN raydelta_table_versions t USING (table_id) "
            "WHERE c.table_id = %s AND c.version > coalesce(t.published_version, -1) "
            "AND c.version >= %s AND c.version <= %s ORDER BY c.version",
            (
                table_id,
                -1 if start_version is None else start_version,
                2**63 - 1 if end_version is None else end_version,
            ),
        )
        return [RatifiedCommit.model_validate_json(row[0]) for row in rows]

    def _versions(self, table_id: str) -> tuple[int | None, int | None]:
        _check_ids(table_id)
        rows = self._fetch(
            "SELECT latest_version, published_version FROM raydelta_table_versions "
            "WHERE table_id = %s",
            (table_id,),
        )
        return (None, None) if not rows else (rows[0][0], rows[0][1])

    def latest_version(self, table_id: str) -> int | None:
        return self._versions(table_id)[0]

    def published_version(self, table_id: str) -> int | None:
        return self._versions(table_id)[1]

    def mark_published(self, table_id: str, version: int) -> None:
        """Without waiting for its own WAL flush (module doc)."""
        _check_ids(table_id)
        with self._transaction() as conn:
            conn.execute("SET LOCAL synchronous_commit TO off")
            row = conn.execute(
                "SELECT latest_version, published_version FROM raydelta_table_versions "
                "WHERE table_id = %s FOR UPDATE",
                (table_id,),
            ).fetchone()
            _check_published(table_id, version, None if row is None else row[0])
            published = None if row is None else row[1]
            if published is None or published < version:
                conn.execute(
                    "UPDATE raydelta_table_versions SET published_version = %s WHERE table_id = %s",
                    (version, table_id),
                )

    def find_txn(self, table_id: str, txn_id: str) -> int | None:
        _check_ids(table_id, txn_id)
        rows = self._fetch(
            "SELECT version FROM raydelta_ratified_commits WHERE table_id = %s AND txn_id = %s",
            (table_id, txn_id),
        )
        return None if not rows else int(rows[0][0])

    # --- names -------------------------------------------------------------------------

    def register_table(
        self, name: str, *, location: str, table_id: str, catalog_managed: bool = True
    ) -> TableEntry:
        entry = TableEntry(
            name=name, location=location, table_id=table_id, catalog_managed=catalog_managed
        )
        with self._transaction() as conn:
            try:
                conn.execute(
                    "INSERT INTO raydelta_catalog_tables (name, location, table_id, "
                    "catalog_managed) VALUES (%s, %s, %s, %s)",
                    (name, location, table_id, catalog_managed),
                )
            except pg_errors.UniqueViolation:
                raise TableAlreadyExistsError(
                    f"cannot register {name!r}: the name or table id {table_id} is taken"
                ) from None
        return entry

    def lookup(self, name: str) -> TableEntry | None:
        rows = self._fetch(
            "SELECT " + _ENTRY_COLUMNS + " FROM raydelta_catalog_tables WHERE name = %s",
            (name,),
        )
        return None if not rows else _entry(rows[0])

    def list_tables(self) -> list[TableEntry]:
        rows = self._fetch(
            "SELECT " + _ENTRY_COLUMNS + " FROM raydelta_catalog_tables ORDER BY name", ()
        )
        return [_entry(row) for row in rows]

    def drop_table(self, name: str) -> TableEntry:
        with self._transaction() as conn:
            row = conn.execute(
                "DELETE FROM raydelta_catalog_tables WHERE name = %s RETURNING " + _ENTRY_COLUMNS,
                (name,),
            ).fetchone()
        if row is None:
            raise TableNotFoundError(f"no table named {name!r} in the catalog")
        return _entry(row)


def _entry(row: tuple[Any, ...]) -> TableEntry:
    return TableEntry(name=row[0], location=row[1], table_id=row[2], catalog_managed=row[3])


def _setup_session(conn: Connection) -> None:
    for statement in _SESSION:
        conn.execute(statement)


def _ensure_schema(conn: Connection, store: str) -> None:
    """Create the tables if missing and check the schema version (module doc)."""

    def refuse_newer(held: int) -> None:
        if held > SCHEMA_VERSION:
            raise CatalogStoreError(
                f"the catalog store {store} has schema version {held}; this raydelta knows "
                f"versions up to {SCHEMA_VERSION}: upgrade raydelta",
                store,
            )

    found = conn.execute("SELECT to_regclass('raydelta_schema_version') IS NOT NULL")
    if found.fetchone() == (True,):
        row = conn.execute("SELECT version FROM raydelta_schema_version").fetchone()
        if row is not None and int(row[0]) >= SCHEMA_VERSION:
            refuse_newer(int(row[0]))
            return  # the common case: no lock, no DDL (nor the privilege it needs)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        # The DDL runs even if another process created the tables while we
        # waited: a lookup in this transaction may still miss them (its
        # catalog cache predates their commit), and IF NOT EXISTS makes it a
        # no-op. The lock keeps two creations from colliding.
        for statement in _SCHEMA:
            conn.execute(statement)
        conn.execute(
            "INSERT INTO raydelta_schema_version (version) VALUES (%s) "
            "ON CONFLICT (singleton) DO NOTHING",
            (SCHEMA_VERSION,),
        )
        row = conn.execute("SELECT version FROM raydelta_schema_version").fetchone()
        refuse_newer(SCHEMA_VERSION if row is None else int(row[0]))
        # an older version: none exists yet; its migration goes here


def _lock_tables(conn: Connection, table_ids: Sequence[str]) -> None:
    """Take the advisory transaction locks of ``table_ids`` in one global order."""
    for key in sorted({_lock_key("table", table_id) for table_id in table_ids}):
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (key,))


def _ratify_in(
    conn: Connection, table_id: str, commit: RatifiedCommit, txn_id: str
) -> RatifiedCommit:
    """:meth:`PostgresRatifiedStore.ratify` inside the open transaction ``conn``,
    which holds the table's lock."""
    row = conn.execute(
        "SELECT (SELECT record FROM raydelta_ratified_commits "
        "        WHERE table_id = %(table)s AND txn_id = %(txn)s), "
        "       (SELECT latest_version FROM raydelta_table_versions WHERE table_id = %(table)s)",
        {"table": table_id, "txn": txn_id},
    ).fetchone()
    original, latest = (None, None) if row is None else row
    if original is not None:
        return RatifiedCommit.model_validate_json(original)
    version = commit.version
    if latest is not None and version != latest + 1:
        raise _refuse(table_id, version, latest)
    try:
        moved = conn.execute(
            "WITH ratified AS (INSERT INTO raydelta_ratified_commits "
            "    (table_id, version, txn_id, record) "
            "    VALUES (%(table)s, %(version)s, %(txn)s, %(record)s)) "
            "INSERT INTO raydelta_table_versions (table_id, start_version, latest_version) "
            "VALUES (%(table)s, %(version)s, %(version)s) "
            "ON CONFLICT (table_id) DO UPDATE SET latest_version = EXCLUDED.latest_version "
            "WHERE raydelta_table_versions.latest_version = EXCLUDED.latest_version - 1",
            {
                "table": table_id,
                "version": version,
                "txn": txn_id,
                "record": commit.model_dump_json(),
            },
        ).rowcount
    except pg_errors.UniqueViolation:
        moved = 0
    if moved != 1:  # only a writer bypassing the table's lock gets here
        raise VersionAlreadyRatifiedError(
            f"version {version} of table {table_id} was ratified concurrently",
            table_id,
            version,
            version,
        )
    return commit
