"""Readers of a managed table committed over HTTP, once it is published.

- raydelta through its catalog, and raydelta as any Unity Catalog client
  would: from what ``GET /delta/preview/commits`` returned (the spec's
  client rules: ``ratified_commits`` + ``latest_ratified_version``), while
  commits are unpublished and after;
- deltalake (delta-rs 1.6.6) and duckdb's delta extension (delta-kernel)
  read by path only: both refuse a catalog-managed table (they cannot learn
  the catalog's latest version), which is what the spec asks of them rather
  than a stale read. Measured here, asserted as measured.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import ray

import raydelta
from raydelta.protocol.catalog_managed import RatifiedCommit
from tests.uc_api.conftest import (
    UCServerFixture,
    create_uc_table,
    data_file,
    get_commits,
    local_path,
    post_commit,
    stage_commit,
)


def _commit_rows(server: UCServerFixture, table: dict[str, Any], batches: list[list[int]]) -> None:
    location = table["storage_location"]
    for version, ids in enumerate(batches, start=1):
        info = stage_commit(location, version, [data_file(location, ids)])
        assert post_commit(server, table, info) == (200, {})


def _as_client(server: UCServerFixture, table: dict[str, Any]) -> Any:
    """raydelta reading the table from what the server told a UC client."""
    status, listed = get_commits(server, table)
    assert status == 200
    held = [
        RatifiedCommit(version=c["version"], path=f"_delta_log/_staged_commits/{c['file_name']}")
        for c in sorted(listed["commits"], key=lambda c: c["version"])
    ]
    return raydelta.load_snapshot(
        table["storage_location"],
        ratified_commits=held,
        latest_ratified_version=listed["latest_table_version"],
    )


def _rows(snapshot: Any, uri: str) -> list[int]:
    from raydelta.storage.scan import scan

    data = scan(uri, snapshot.files, snapshot.schema, snapshot.metadata.partition_columns)
    return sorted(data.column("id").to_pylist())


def test_raydelta_reads_through_the_catalog_and_as_a_uc_client(uc_server: UCServerFixture) -> None:
    table = create_uc_table(uc_server)
    ray.get(uc_server.catalog.actor.pause_publishing.remote(True))
    try:
        _commit_rows(uc_server, table, [[1, 2], [3]])
        unpublished = _as_client(uc_server, table)
        assert unpublished.version == 2
        assert not (
            local_path(table["storage_location"]) / "_delta_log" / f"{2:020d}.json"
        ).exists()
        assert _rows(unpublished, table["storage_location"]) == [1, 2, 3]
    finally:
        ray.get(uc_server.catalog.actor.pause_publishing.remote(False))
    assert ray.get(uc_server.catalog.actor.wait_published.remote("main.default.events", 2, 60.0))
    published = _as_client(uc_server, table)
    assert published.version == 2
    assert _rows(published, table["storage_location"]) == [1, 2, 3]
    ours = uc_server.catalog.open_table("main.default.events")
    assert sorted(ours.to_arrow().column("id").to_pylist()) == [1, 2, 3]
    assert [h.version for h in ours.history()] == [2, 1, 0]


def test_path_only_peers_refuse_the_published_managed_table(
    uc_server: UCServerFixture, duck: Any
) -> None:
    deltalake = pytest.importorskip("deltalake")
    table = create_uc_table(uc_server)
    _commit_rows(uc_server, table, [[1, 2], [3]])
    assert ray.get(uc_server.catalog.actor.wait_published.remote("main.default.events", 2, 60.0))
    path = str(local_path(table["storage_location"]))
    with pytest.raises(deltalake.exceptions.DeltaError, match=r"(?i)catalog"):
        deltalake.DeltaTable(path)
    with pytest.raises(Exception, match=r"(?i)catalog-managed"):
        duck.execute(f"SELECT count(*) FROM delta_scan('{path}')").fetchall()
    # raydelta by path refuses the same way: only the catalog knows the latest version
    with pytest.raises(raydelta.CatalogManagedTableError):
        raydelta.load_snapshot(path)


def test_duckdb_extension_is_present() -> None:
    """The peer test above needs duckdb's delta extension from its pip package."""
    spec = importlib.util.find_spec("duckdb_extension_delta")
    assert spec is not None and spec.submodule_search_locations
    found = [
        p
        for location in spec.submodule_search_locations
        for p in Path(location).rglob("*.duckdb_extension")
    ]
    assert found
