"""The catalog's durable store: ratified commits and the table-name registry.

:class:`RatifiedCommitStore` is the contract (CATALOG_MANAGED.md, "Commit
Protocol": "A catalog must not ratify version ``v`` until it has ratified
version ``v - 1``, and it must ratify version ``v`` at most once"; "The
catalog must store [...] ratified commits [...] until they are published").
Three implementations keep it across processes and machines (SQLite and
PostgreSQL also open by URL: :func:`raydelta.storage.catalog.stores.open_store`):

- :class:`SqliteRatifiedStore` (the default): one embedded SQLite file;
  every change is one ``BEGIN IMMEDIATE`` transaction, so concurrent
  processes on one file are serialized by SQLite's own lock. ``:memory:``
  is refused: a store that dies with its process is not durable.
- :class:`LogStorageRatifiedStore` (in :mod:`raydelta.storage.catalog.ratified_store_files`):
  one JSON record per ratified version under
  ``<root>/_raydelta_catalog/tables/<table_id>/commits/<v>.json``, created with
  the backend's atomic put-if-absent (the log store's primitive), so a
  catalog restarted on another node of a cluster with shared storage finds
  everything.
- :class:`PostgresRatifiedStore` (in :mod:`raydelta.storage.catalog.postgres_store`,
  the ``postgres`` extra): tables in a PostgreSQL database, each
  ratification one transaction under the table's advisory lock, for a
  catalog whose hosts span nodes.

Contract (``tests/catalog_store/`` checks it on every one):

Ratify
    :meth:`~RatifiedCommitStore.ratify` records ``commit`` as version
    ``commit.version`` of ``table_id``, atomically, durably, at most once.
    The first ratification of a table id fixes where its managed history
    starts (0 for a new table, the upgrade version for a filesystem table the
    catalog took over: the caller has checked the published log). After that
    only ``latest + 1`` is accepted: a version already held raises
    :class:`VersionAlreadyRatifiedError`, a later one
    :class:`RatificationOutOfOrderError` (both carry ``latest_version``).
    A ``txn_id`` the store has ratified before is answered with that original
    commit, whatever version is asked for now: retries are exactly-once.
    Of concurrent callers (threads, processes, two catalog incarnations) on
    one version, exactly one wins. :meth:`~RatifiedCommitStore.ratify_many`
    ratifies several commits in order (group commit: SQLite and PostgreSQL
    write them in one transaction, so one fsync makes all of them durable, or
    none).
Read
    :meth:`~RatifiedCommitStore.ratified` returns the commits not yet marked
    published, ascending and contiguous, optionally within
    ``[start_version, end_version]``. :meth:`~RatifiedCommitStore.latest_version`
    is the newest ratified version (None before the first), published or not.
Publish
    :meth:`~RatifiedCommitStore.mark_published` says ``_delta_log/<v>.json``
    exists for every version ``<= version``: those are no longer returned by
    :meth:`~RatifiedCommitStore.ratified`. It need not be durable at once (a
    crash may lose the last marks: the catalog then publishes those versions
    again, which is idempotent), but it never becomes durable before the
    ratifications it covers. It never moves backwards and
    refuses versions past the latest. The txnIds of published commits are
    remembered (:meth:`~RatifiedCommitStore.find_txn`).
Names
    :meth:`~RatifiedCommitStore.register_table` maps a unique name to a
    location and a unique table id (:class:`TableAlreadyExistsError` when
    either is taken); :meth:`~RatifiedCommitStore.drop_table` removes the
    name only (a soft delete: the table's commits stay with its id).
"""

from __future__ import annotations

import abc
import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from raydelta.protocol.catalog_managed import RatifiedCommit
from raydelta.protocol.errors import (
    InvalidArgumentError,
    RatificationError,
    RatificationOutOfOrderError,
    TableAlreadyExistsError,
    TableNotFoundError,
    VersionAlreadyRatifiedError,
)

__all__ = [
    "Ratification",
    "RatifiedCommitStore",
    "SqliteRatifiedStore",
    "TableEntry",
]


class TableEntry(BaseModel):
    """One registered table name."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(min_length=1)
    location: str = Field(min_length=1)
    table_id: str = Field(min_length=1)
    catalog_managed: bool = True


@dataclass(frozen=True)
class Ratification:
    """One commit to ratify: ``commit`` as its version of ``table_id``, for ``txn_id``."""

    table_id: str
    commit: RatifiedCommit
    txn_id: str


class RatifiedCommitStore(abc.ABC):
    """The durable store contract (module doc)."""

    # --- ratified commits --------------------------------------------------------

    @abc.abstractmethod
    def ratify(self, table_id: str, commit: RatifiedCommit, *, txn_id: str) -> RatifiedCommit:
        """Record ``commit`` as its version of ``table_id`` at most once (module doc);
        returns the stored commit (the original one when ``txn_id`` was ratified before)."""

    def ratify_many(self, ratifications: Sequence[Ratification]) -> int:
        """Ratify ``ratifications`` in order, as :meth:`ratify` would one by one
        (group commit). A txnId ratified before counts as a failure here (its
        commit is not the one proposed now). Stops at the first failure and
        raises it; ``error.ratified_before`` is how many were ratified durably
        before it (a store that writes them in one transaction ratifies none).
        Returns ``len(ratifications)`` on success."""
        done = 0
        for item in ratifications:
            try:
                stored = self.ratify(item.table_id, item.commit, txn_id=item.txn_id)
                if stored.version != item.commit.version:
                    raise _refuse(item.table_id, item.commit.version, stored.version)
            except Exception as error:
                error.ratified_before = done  # type: ignore[attr-defined]
                raise
            done += 1
        return done

    @abc.abstractmethod
    def ratified(
        self, table_id: str, *, start_version: int | None = None, end_version: int | None = None
    ) -> list[RatifiedCommit]:
        """Unpublished ratified commits in ``[start_version, end_version]``, ascending."""

    @abc.abstractmethod
    def latest_version(self, table_id: str) -> int | None:
        """The newest ratified version of ``table_id`` (None before its first)."""

    @abc.abstractmethod
    def published_version(self, table_id: str) -> int | None:
        """The newest version marked published (None before the first)."""

    @abc.abstractmethod
    def mark_published(self, table_id: str, version: int) -> None:
        """Every version ``<= version`` is published: stop returning it."""

    @abc.abstractmethod
    def find_txn(self, table_id: str, txn_id: str) -> int | None:
        """The version ``txn_id`` was ratified as, or None."""

    # --- names -------------------------------------------------------------------

    @abc.abstractmethod
    def register_table(
        self, name: str, *, location: str, table_id: str, catalog_managed: bool = True
    ) -> TableEntry:
        """Register ``name``; :class:`TableAlreadyExistsError` if the name or id is taken."""

    @abc.abstractmethod
    def lookup(self, name: str) -> TableEntry | None:
        """The entry of ``name``, or None."""

    @abc.abstractmethod
    def list_tables(self) -> list[TableEntry]:
        """Every registered table, sorted by name."""

    @abc.abstractmethod
    def drop_table(self, name: str) -> TableEntry:
        """Remove ``name`` (its commits stay); :class:`TableNotFoundError` if unknown."""


def _check_ids(table_id: str, txn_id: str | None = None) -> None:
    if not isinstance(table_id, str) or not table_id:
        raise InvalidArgumentError(f"a table id must be a non-empty string, got {table_id!r}")
    if txn_id is not None and (not isinstance(txn_id, str) or not txn_id):
        raise InvalidArgumentError(f"a txn id must be a non-empty string, got {txn_id!r}")


def _refuse(table_id: str, version: int, latest: int | None) -> RatificationError:
    if latest is not None and version <= latest:
        return VersionAlreadyRatifiedError(
            f"version {version} of table {table_id} is already ratified (latest {latest})",
            table_id,
            version,
            latest,
        )
    expected = "its first version" if latest is None else f"version {latest + 1}"
    return RatificationOutOfOrderError(
        f"cannot ratify version {version} of table {table_id}: the next one is {expected}",
        table_id,
        version,
        latest,
    )


def _check_published(table_id: str, version: int, latest: int | None) -> None:
    if latest is None or version > latest:
        raise RatificationError(
            f"cannot mark version {version} of table {table_id} published: the latest "
            f"ratified version is {latest}",
            table_id,
            version,
            latest,
        )


# --- SQLite ----------------------------------------------------------------------------------

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS catalog_tables (
        name TEXT PRIMARY KEY,
        location TEXT NOT NULL,
        table_id TEXT NOT NULL UNIQUE,
        catalog_managed INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS table_versions (
        table_id TEXT PRIMARY KEY,
        start_version INTEGER NOT NULL,
        latest_version INTEGER NOT NULL,
        published_version INTEGER)""",
    """CREATE TABLE IF NOT EXISTS ratified_commits (
        table_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        txn_id TEXT NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (table_id, version),
        UNIQUE (table_id, txn_id))""",
)


_WRITER_LOCKS: dict[str, threading.Lock] = {}
_WRITER_LOCKS_GUARD = threading.Lock()


def _writer_lock(path: str) -> threading.Lock:
    """The process-wide lock of the SQLite file at ``path``."""
    with _WRITER_LOCKS_GUARD:
        lock = _WRITER_LOCKS.get(path)
        if lock is None:
            lock = _WRITER_LOCKS[path] = threading.Lock()
        return lock


class SqliteRatifiedStore(RatifiedCommitStore):
    """The store in one SQLite file (``path``); safe across threads and processes.

    Picklable (it keeps only the path): a Ray actor or task opens its own
    connection. ``busy_timeout_s`` is how long a writer waits for another
    process's transaction.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_s: float = 30.0) -> None:
        text = os.fspath(path)
        if not text or text == ":memory:" or "mode=memory" in text or text.startswith(":"):
            raise InvalidArgumentError(
                f"SqliteRatifiedStore needs a file path, not {text!r}: ratified commits must "
                "outlive the process"
            )
        self.path = os.path.abspath(text)
        self.busy_timeout_s = busy_timeout_s
        self._local = threading.local()
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with self._transaction() as db:
            for statement in _SCHEMA:
                db.execute(statement)

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "busy_timeout_s": self.busy_timeout_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = state["path"]
        self.busy_timeout_s = state["busy_timeout_s"]
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"SqliteRatifiedStore({self.path!r})"

    def _connection(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None or getattr(self._local, "pid", None) != os.getpid():
            db = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            self._local.db, self._local.pid = db, os.getpid()
        return db

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction. Threads of this process take turns on a
        lock first: SQLite's own busy handler sleeps (1 ms and more) when it
        finds the file locked, a lock wakes the next thread at once. Other
        processes are still serialized by SQLite (``busy_timeout_s``)."""
        db = self._connection()
        with _writer_lock(self.path):
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def close(self) -> None:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    # --- ratified commits --------------------------------------------------------

    def ratify(self, table_id: str, commit: RatifiedCommit, *, txn_id: str) -> RatifiedCommit:
        _check_ids(table_id, txn_id)
        with self._transaction() as db:
            return self._ratify_in(db, table_id, commit, txn_id)

    def ratify_many(self, ratifications: Sequence[Ratification]) -> int:
        """All of ``ratifications`` in one transaction (one fsync): all or none."""
        for item in ratifications:
            _check_ids(item.table_id, item.txn_id)
        try:
            with self._transaction() as db:
                for item in ratifications:
                    stored = self._ratify_in(db, item.table_id, item.commit, item.txn_id)
                    if stored.version != item.commit.version:
                        raise _refuse(item.table_id, item.commit.version, stored.version)
        except Exception as error:
            error.ratified_before = 0  # type: ignore[attr-defined]  # rolled back: none
            raise
        return len(ratifications)

    @staticmethod
    def _ratify_in(
        db: sqlite3.Connection, table_id: str, commit: RatifiedCommit, txn_id: str
    ) -> RatifiedCommit:
        """:meth:`ratify` inside the open transaction ``db``."""
        row = db.execute(
            "SELECT record FROM ratified_commits WHERE table_id = ? AND txn_id = ?",
            (table_id, txn_id),
        ).fetchone()
        if row is not None:
            return RatifiedCommit.model_validate_json(row[0])
        state = db.execute(
            "SELECT latest_version FROM table_versions WHERE table_id = ?", (table_id,)
        ).fetchone()
        latest = None if state is None else int(state[0])
        version = commit.version
        if latest is not None and version != latest + 1:
            raise _refuse(table_id, version, latest)
        db.execute(
            "INSERT INTO ratified_commits (table_id, version, txn_id, record) VALUES (?,?,?,?)",
            (table_id, version, txn_id, commit.model_dump_json()),
        )
        if state is None:
            db.execute(
                "INSERT INTO table_versions (table_id, start_version, latest_version) "
                "VALUES (?, ?, ?)",
                (table_id, version, version),
            )
        else:
            db.execute(
                "UPDATE table_versions SET latest_version = ? WHERE table_id = ?",
                (version, table_id),
            )
        return commit

    def ratified(
        self, table_id: str, *, start_version: int | None = None, end_version: int | None = None
    ) -> list[RatifiedCommit]:
        _check_ids(table_id)
        db = self._connection()
        rows = db.execute(
            "SELECT c.record FROM ratified_commits c JOIN table_versions t USING (table_id) "
            "WHERE c.table_id = ? AND c.version > coalesce(t.published_version, -1) "
            "AND c.version >= ? AND c.version <= ? ORDER BY c.version",
            (
                table_id,
                -1 if start_version is None else start_version,
                2**63 - 1 if end_version is None else end_version,
            ),
        ).fetchall()
        return [RatifiedCommit.model_validate_json(r[0]) for r in rows]

    def _versions(self, table_id: str) -> tuple[int | None, int | None]:
        _check_ids(table_id)
        row = (
            self._connection()
            .execute(
                "SELECT latest_version, published_version FROM table_versions WHERE table_id = ?",
                (table_id,),
            )
            .fetchone()
        )
        return (None, None) if row is None else (row[0], row[1])

    def latest_version(self, table_id: str) -> int | None:
        return self._versions(table_id)[0]

    def published_version(self, table_id: str) -> int | None:
        return self._versions(table_id)[1]

    def mark_published(self, table_id: str, version: int) -> None:
        """Without its own fsync (``synchronous=NORMAL`` for this transaction):
        WAL order makes it durable with the next ratification's fsync, and
        if a crash loses it, the catalog republishes those versions, which is
        idempotent (the files are there, identical)."""
        _check_ids(table_id)
        db = self._connection()
        db.execute("PRAGMA synchronous=NORMAL")
        try:
            self._mark_published(table_id, version)
        finally:
            db.execute("PRAGMA synchronous=FULL")

    def _mark_published(self, table_id: str, version: int) -> None:
        with self._transaction() as db:
            row = db.execute(
                "SELECT latest_version, published_version FROM table_versions WHERE table_id = ?",
                (table_id,),
            ).fetchone()
            _check_published(table_id, version, None if row is None else row[0])
            if row[1] is None or row[1] < version:
                db.execute(
                    "UPDATE table_versions SET published_version = ? WHERE table_id = ?",
                    (version, table_id),
                )

    def find_txn(self, table_id: str, txn_id: str) -> int | None:
        _check_ids(table_id, txn_id)
        row = (
            self._connection()
            .execute(
                "SELECT version FROM ratified_commits WHERE table_id = ? AND txn_id = ?",
                (table_id, txn_id),
            )
            .fetchone()
        )
        return None if row is None else int(row[0])

    # --- names -------------------------------------------------------------------

    def register_table(
        self, name: str, *, location: str, table_id: str, catalog_managed: bool = True
    ) -> TableEntry:
        entry = TableEntry(
            name=name, location=location, table_id=table_id, catalog_managed=catalog_managed
        )
        with self._transaction() as db:
            try:
                db.execute(
                    "INSERT INTO catalog_tables (name, location, table_id, catalog_managed) "
                    "VALUES (?, ?, ?, ?)",
                    (name, location, table_id, int(catalog_managed)),
                )
            except sqlite3.IntegrityError:
                raise TableAlreadyExistsError(
                    f"cannot register {name!r}: the name or table id {table_id} is taken"
                ) from None
        return entry

    @staticmethod
    def _entry(row: tuple[Any, ...]) -> TableEntry:
        return TableEntry(
            name=row[0], location=row[1], table_id=row[2], catalog_managed=bool(row[3])
        )

    def lookup(self, name: str) -> TableEntry | None:
        row = (
            self._connection()
            .execute(
                "SELECT name, location, table_id, catalog_managed FROM catalog_tables "
                "WHERE name = ?",
                (name,),
            )
            .fetchone()
        )
        return None if row is None else self._entry(row)

    def list_tables(self) -> list[TableEntry]:
        rows = (
            self._connection()
            .execute(
                "SELECT name, location, table_id, catalog_managed FROM catalog_tables ORDER BY name"
            )
            .fetchall()
        )
        return [self._entry(r) for r in rows]

    def drop_table(self, name: str) -> TableEntry:
        with self._transaction() as db:
            row = db.execute(
                "SELECT name, location, table_id, catalog_managed FROM catalog_tables "
                "WHERE name = ?",
                (name,),
            ).fetchone()
            if row is None:
                raise TableNotFoundError(f"no table named {name!r} in the catalog")
            db.execute("DELETE FROM catalog_tables WHERE name = ?", (name,))
        return self._entry(row)


def __getattr__(name: str) -> Any:
    """``LogStorageRatifiedStore`` lives in :mod:`raydelta.storage.catalog.ratified_store_files`
    (imported on first use: that module builds on this one)."""
    if name in ("LogStorageRatifiedStore", "CATALOG_DIR"):
        from raydelta.storage.catalog import ratified_store_files

        return getattr(ratified_store_files, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
