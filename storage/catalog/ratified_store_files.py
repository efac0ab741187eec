"""The durable store as records on the tables' own storage: :class:`LogStorageRatifiedStore`.

One of the two implementations of the contract in
:mod:`raydelta.storage.catalog.ratified_store` (which states it): for Ray clusters
with shared storage, a catalog restarted on another node finds everything.

Invariants:
- A version is ratified by creating its record with the backend's atomic
  put-if-absent (the log store's primitive); records never change.
- Version ``v`` is attempted only when the record of ``v - 1`` exists (or
  ``v`` is the start), so of racing writers exactly one creates each record
  and no version is skipped.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any
from urllib.parse import quote, unquote

from raydelta.protocol.catalog_managed import RatifiedCommit
from raydelta.protocol.errors import (
    FileAlreadyExistsError,
    RatificationError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from raydelta.storage.catalog.ratified_store import (
    RatifiedCommitStore,
    TableEntry,
    _check_ids,
    _check_published,
    _refuse,
)
from raydelta.storage.log.store import LogStore, log_store_for

__all__ = ["CATALOG_DIR", "LogStorageRatifiedStore"]

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
        return self._store.exists(self._store.path_of(name))

    def _list(self, directory: str) -> list[str]:
        scan = self._store.scan_directory(self._store.path_of(directory))
        if scan is None:
            return []
        names = [name for name, _ in scan.entries]
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
