"""Opening the catalog's store by URL (storage/catalog/stores.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from raydelta.protocol.errors import CatalogStoreError, InvalidArgumentError
from raydelta.storage.catalog.postgres_store import PostgresRatifiedStore
from raydelta.storage.catalog.ratified_store import SqliteRatifiedStore
from raydelta.storage.catalog.stores import STORE_SCHEMES, is_store_url, open_store


def test_sqlite_paths_and_urls(tmp_path: Path) -> None:
    for spelling in (
        str(tmp_path / "a.db"),
        tmp_path / "a.db",
        f"sqlite://{tmp_path / 'a.db'}",  # sqlite:///abs/path
        f"sqlite:{tmp_path / 'a.db'}",
    ):
        store = open_store(spelling)
        assert isinstance(store, SqliteRatifiedStore), spelling
        assert store.path == str(tmp_path / "a.db"), spelling
    assert is_store_url("sqlite:///x.db") and not is_store_url(str(tmp_path / "a.db"))


def test_postgresql_urls(postgres_server: Any) -> None:
    dsn = postgres_server.new_database()
    for url in (dsn, dsn.replace("postgresql://", "postgres://", 1)):
        assert is_store_url(url)
        store = open_store(url)
        assert isinstance(store, PostgresRatifiedStore)
        assert postgres_server.password not in repr(store)
    with pytest.raises(CatalogStoreError) as refused:
        open_store(postgres_server.dsn(dsn.rsplit("/", 1)[1], password="not-the-password"))
    assert "not-the-password" not in str(refused.value)


def test_other_urls_are_refused_without_their_secrets() -> None:
    assert set(STORE_SCHEMES) == {"postgresql", "postgres", "sqlite"}
    for url in ("mysql://user:hunter2@db/x", "s3://bucket/catalog"):
        assert not is_store_url(url)
        with pytest.raises(InvalidArgumentError, match="no catalog store for URLs") as refused:
            open_store(url)
        assert "hunter2" not in str(refused.value)
    with pytest.raises(InvalidArgumentError):
        open_store("")
    with pytest.raises(InvalidArgumentError, match="file path"):
        open_store("sqlite::memory:")
