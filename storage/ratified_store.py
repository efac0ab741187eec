"""The catalog's durable store: ratified commits and the table-name registry.

:class:`RatifiedCommitStore` is the contract (CATALOG_MANAGED.md, "Commit
Protocol": "A catalog must not ratify version ``v`` until it has ratified
version ``v - 1``, and it must ratify version ``v`` at most once"; "The
catalog must store [...] ratified commits [...] until they are published").
Two implementations keep it across processes and machines:

- :class:`SqliteRatifiedStore` (the default): one embedded SQLite file;
  every change is one ``BEGIN IMMEDIATE`` transaction, so concurrent
  processes on one file are serialized by SQLite's own lock. ``:memory:``
  is refused: a store that dies with its process is not durable.
- :class:`LogStorageRatifiedStore`: one JSON record per ratified version under
  ``<root>/_raydelta_catalog/tables/<table_id>/commits/<v>.json``, created with
  the backend's atomic put-if-absent (the log store's primitive), so a
  catalog restarted on another node of a cluster with shared storage finds
  everything.

Contract (``tests/catalog_store/`` checks it on both):

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
    one version, exactly one wins.
Read
    :meth:`~RatifiedCommitStore.ratified` returns the commits not yet marked
    published, ascending and contiguous, optionally within
    ``[start_version, end_version]``. :meth:`~RatifiedCommitStore.latest_version`
    is the newest ratified version (None before the first), published or not.
Publish
    :meth:`~RatifiedCommitStore.mark_published` says ``_delta_log/<v>.json``
    exists for every version ``<= version``: those are no longer returned by
    :meth:`~RatifiedCommitStore.ratified`. It never moves backwards and
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
import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, unquote

from pydantic import BaseModel, ConfigDict, Field

from raydelta.protocol.catalog_managed import RatifiedCommit
from raydelta.protocol.errors import (
    FileAlreadyExistsError,
    InvalidArgumentError,
    RatificationError,
    RatificationOutOfOrderError,
    TableAlreadyExistsError,
    TableNotFoundError,
    VersionAlreadyRatifiedError,
)
from raydelta.storage.log_store import LogStore, log_store_for

__all__ = [
    "LogStorageRatifiedStore",
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


class RatifiedCommitStore(abc.ABC):
    """The durable store contract (module doc)."""

    # --- ratified commits --------------------------------------------------------

    @abc.abstractmethod
    def ratify(self, table_id: str, commit: RatifiedCommit, *, txn_id: str) -> RatifiedCommit:
        """Record ``commit`` as its version of ``table_id`` at most once (module doc);
        returns the stored commit (the original one when ``txn_id`` was ratified before)."""

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
        db = self._connection()
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
        _check_ids(table_id)
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


# --- records on shared storage ----------------------------------------------------------------

CATALOG_DIR = "_raydelta_catalog"
_VERSION_DIGITS = 20


def _record_name(version: int) -> str:
    return f"{version:0{_VERSION_DIGITS}d}.json"


def _txn_name(txn_id: str) -> str:
    return hashlib.sha256(txn_id.encode("utf-8")).hexdigest() + ".json"


class LogStorageRatifiedStore(RatifiedCommitStore):
    """The store as files under ``<root_uri>/_raydelta_catalog`` (module doc).

    Layout (names under ``_raydelta_catalog``):

    - ``tables/<table_id>/start.json``: the first managed version, created
      with put-if-absent by the first ratification;
    - ``tables/<table_id>/commits/<v>.json``: the record of version ``v``
      (``{"txnId": ..., "commit": {...}}``), created with put-if-absent and
      never changed: the put-if-absent *is* the ratification;
    - ``tables/<table_id>/txns/<sha256(txnId)>.json``: ``txnId`` → version,
      written after the record and before the version is marked published;
    - ``tables/<table_id>/published.json``: the published watermark;
    - ``names/<quoted name>.json`` and ``ids/<table_id>.json``: the registry.

    Version ``v`` is attempted only when the record of ``v - 1`` exists (or
    ``v`` is the start), so of racing writers exactly one creates each record
    and no version is skipped. A retried txnId is found either in its txn
    file or in an unpublished record (every record from the watermark up is
    read, once: records are immutable, so they are cached).
    """

    def __init__(self, root_uri: str, storage_options: dict[str, Any] | None = None) -> None:
        self.root_uri = root_uri.rstrip("/")
        self.storage_options = dict(storage_options or {})
        self._store: LogStore = log_store_for(
            f"{self.root_uri}/{CATALOG_DIR}", self.storage_options
        )
        # Names are relative to <root>/_raydelta_catalog itself, not to a _delta_log.
        self._store.log_dir = self._store.table_root
        self._records: dict[tuple[str, int], tuple[str, RatifiedCommit]] = {}
        self._latest: dict[str, int] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"root_uri": self.root_uri, "storage_options": self.storage_options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["root_uri"], state["storage_options"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"LogStorageRatifiedStore({self.root_uri!r})"

    # --- files -------------------------------------------------------------------

    def _read_json(self, name: str) -> Any:
        try:
            return json.loads(self._store.read(name))
        except FileNotFoundError:
            return None

    def _put(self, name: str, body: Any) -> bool:
        """Create ``name`` holding ``body``; False when it already exists."""
        try:
            self._store.put_if_absent(name, json.dumps(body, sort_keys=True).encode("utf-8"))
        except FileAlreadyExistsError:
            return False
        return True

    def _exists(self, name: str) -> bool:
        return bool(self._store.fs.exists(self._store.path_of(name)))

    def _list(self, directory: str) -> list[str]:
        try:
            infos = self._store.fs.ls(self._store.path_of(directory), detail=False)
        except FileNotFoundError:
            return []
        names = [str(p).rstrip("/").rsplit("/", 1)[-1] for p in infos]
        return sorted(n for n in names if n.endswith(".json") and not n.startswith("."))

    @staticmethod
    def _table(table_id: str, name: str) -> str:
        return f"tables/{quote(table_id, safe='')}/{name}"

    def _record(self, table_id: str, version: int) -> tuple[str, RatifiedCommit] | None:
        key = (table_id, version)
        cached = self._records.get(key)
        if cached is not None:
            return cached
        body = self._read_json(self._table(table_id, f"commits/{_record_name(version)}"))
        if body is None:
            return None
        record = (str(body["txnId"]), RatifiedCommit.model_validate(body["commit"]))
        self._records[key] = record
        return record

    def _start(self, table_id: str) -> int | None:
        body = self._read_json(self._table(table_id, "start.json"))
        return None if body is None else int(body["version"])

    def _scan_latest(self, table_id: str) -> int | None:
        """The newest record: from the cached one (or one listing), probing forward."""
        latest = self._latest.get(table_id)
        if latest is None:
            versions = [
                int(n[:_VERSION_DIGITS])
                for n in self._list(self._table(table_id, "commits"))
                if n[:_VERSION_DIGITS].isdigit()
            ]
            if not versions:
                return None
            latest = max(versions)
        while self._exists(self._table(table_id, f"commits/{_record_name(latest + 1)}")):
            latest += 1
        self._latest[table_id] = latest
        return latest

    def _published(self, table_id: str) -> int | None:
        body = self._read_json(self._table(table_id, "published.json"))
        return None if body is None else int(body["version"])

    # --- ratified commits --------------------------------------------------------

    def ratify(self, table_id: str, commit: RatifiedCommit, *, txn_id: str) -> RatifiedCommit:
        _check_ids(table_id, txn_id)
        with self._lock:
            latest = self._scan_latest(table_id)
            found = self._find_txn(table_id, txn_id, latest)
            if found is not None:
                record = self._record(table_id, found)
                if record is not None:
                    return record[1]
            version = commit.version
            if latest is None:
                start_written = self._put(self._table(table_id, "start.json"), {"version": version})
                start = version if start_written else self._start(table_id)
                if start != version:
                    raise _refuse(table_id, version, None if start is None else start - 1)
            elif version != latest + 1:
                raise _refuse(table_id, version, latest)
            name = self._table(table_id, f"commits/{_record_name(version)}")
            body = {"txnId": txn_id, "commit": commit.model_dump(mode="json")}
            if not self._put(name, body):
                record = self._record(table_id, version)
                self._latest[table_id] = max(version, self._latest.get(table_id, version))
                if record is not None and record[0] == txn_id:
                    return record[1]
                raise _refuse(table_id, version, self._scan_latest(table_id))
            self._records[(table_id, version)] = (txn_id, commit)
            self._latest[table_id] = version
            self._put(self._table(table_id, f"txns/{_txn_name(txn_id)}"), {"version": version})
            return commit

    def _find_txn(self, table_id: str, txn_id: str, latest: int | None) -> int | None:
        body = self._read_json(self._table(table_id, f"txns/{_txn_name(txn_id)}"))
        if body is not None:
            return int(body["version"])
        if latest is None:
            return None
        published = self._published(table_id)
        start = self._start(table_id)
        first = max(published + 1 if published is not None else 0, start or 0)
        for version in range(first, latest + 1):
            record = self._record(table_id, version)
            if record is not None and record[0] == txn_id:
                return version
        return None

    def ratified(
        self, table_id: str, *, start_version: int | None = None, end_version: int | None = None
    ) -> list[RatifiedCommit]:
        _check_ids(table_id)
        with self._lock:
            latest = self._scan_latest(table_id)
            if latest is None:
                return []
            published = self._published(table_id)
            first = max(
                published + 1 if published is not None else 0,
                self._start(table_id) or 0,
                start_version if start_version is not None else 0,
            )
            last = latest if end_version is None else min(latest, end_version)
            out = []
            for version in range(first, last + 1):
                record = self._record(table_id, version)
                if record is None:
                    raise RatificationError(
                        f"the record of ratified version {version} of table {table_id} is "
                        "missing from the catalog's storage",
                        table_id,
                        version,
                        latest,
                    )
                out.append(record[1])
            return out

    def latest_version(self, table_id: str) -> int | None:
        _check_ids(table_id)
        with self._lock:
            return self._scan_latest(table_id)

    def published_version(self, table_id: str) -> int | None:
        _check_ids(table_id)
        return self._published(table_id)

    def mark_published(self, table_id: str, version: int) -> None:
        _check_ids(table_id)
        with self._lock:
            latest = self._scan_latest(table_id)
            _check_published(table_id, version, latest)
            published = self._published(table_id)
            if published is not None and published >= version:
                return
            first = max(published + 1 if published is not None else 0, self._start(table_id) or 0)
            for v in range(first, version + 1):  # txn files first: find_txn must keep working
                record = self._record(table_id, v)
                if record is not None:
                    self._put(self._table(table_id, f"txns/{_txn_name(record[0])}"), {"version": v})
            self._store.write(
                self._table(table_id, "published.json"),
                json.dumps({"version": version}).encode("utf-8"),
            )

    def find_txn(self, table_id: str, txn_id: str) -> int | None:
        _check_ids(table_id, txn_id)
        with self._lock:
            return self._find_txn(table_id, txn_id, self._scan_latest(table_id))

    # --- names -------------------------------------------------------------------

    def register_table(
        self, name: str, *, location: str, table_id: str, catalog_managed: bool = True
    ) -> TableEntry:
        entry = TableEntry(
            name=name, location=location, table_id=table_id, catalog_managed=catalog_managed
        )
        id_name = f"ids/{quote(table_id, safe='')}.json"
        if not self._put(id_name, {"name": name}):
            raise TableAlreadyExistsError(f"cannot register {name!r}: table id {table_id} is taken")
        if not self._put(f"names/{quote(name, safe='')}.json", entry.model_dump(mode="json")):
            self._store.delete(id_name)
            raise TableAlreadyExistsError(f"cannot register {name!r}: the name is taken")
        return entry

    def lookup(self, name: str) -> TableEntry | None:
        body = self._read_json(f"names/{quote(name, safe='')}.json")
        return None if body is None else TableEntry.model_validate(body)

    def list_tables(self) -> list[TableEntry]:
        entries = [self.lookup(unquote(n[: -len(".json")])) for n in self._list("names")]
        return sorted((e for e in entries if e is not None), key=lambda e: e.name)

    def drop_table(self, name: str) -> TableEntry:
        entry = self.lookup(name)
        if entry is None:
            raise TableNotFoundError(f"no table named {name!r} in the catalog")
        self._store.delete(f"names/{quote(name, safe='')}.json")
        self._store.delete(f"ids/{quote(entry.table_id, safe='')}.json")
        return entry
