"""The stores every contract test runs on: ``make_store`` opens the *same*
durable store anew on each call (a restarted catalog).

SQLite (a file in the test's ``tmp_path``), log storage (records under
``tmp_path``) and PostgreSQL (a fresh database on the session's real server,
``postgres_server``, started only when a PostgreSQL case runs).
``make_database_store`` is the same for the stores that are databases
(SQLite and PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from raydelta.storage.catalog.ratified_store import RatifiedCommitStore, SqliteRatifiedStore
from raydelta.storage.catalog.ratified_store_files import LogStorageRatifiedStore

StoreFactory = Callable[[], RatifiedCommitStore]


def _factory(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    if kind == "sqlite":
        return lambda: SqliteRatifiedStore(tmp_path / "catalog.db")
    if kind == "log_storage":
        return lambda: LogStorageRatifiedStore(tmp_path.as_uri())
    from raydelta.storage.catalog.postgres_store import PostgresRatifiedStore

    dsn = request.getfixturevalue("postgres_server").new_database()
    return lambda: PostgresRatifiedStore(dsn)


@pytest.fixture(params=["sqlite", "log_storage", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """A factory: each call opens the *same* durable store anew (a restarted catalog)."""
    return _factory(request.param, request, tmp_path)


@pytest.fixture(params=["sqlite", "postgres"])
def make_database_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """``make_store`` for the stores that are databases."""
    return _factory(request.param, request, tmp_path)
