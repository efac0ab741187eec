"""Readers of a managed table that delta-storage's real UC client committed.

- raydelta as a Unity Catalog client, from exactly what delta's own
  ``getCommits`` returned (staged paths + latest version; the spec's client
  rules), while commits are unpublished and after; and through its catalog;
- delta's own backfill racing the catalog's publisher (publishing paused
  first, so delta publishes alone; then resumed): one set of files, the
  staged bytes, and the catalog agrees;
- deltalake (delta-rs) and duckdb's delta extension read by path only: the
  spec asks them to refuse a catalog-managed table, and they do; duckdb
  reads the data files raydelta's snapshot lists.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import ray

import raydelta
from raydelta.protocol.catalog_managed import RatifiedCommit
from tests.uc_api.conftest import UCServerFixture, create_uc_table, data_file, local_path
from tests.uc_api.jvm_clients import JvmUCClient, JvmUCTable

pytestmark = pytest.mark.spark

NAME = "main.default.events"


def jvm_table(spark: Any, server: UCServerFixture, info: dict[str, Any]) -> JvmUCTable:
    client = JvmUCClient(spark, uri=server.url, token=server.admin_token, api="delta")
    return client.table(info["storage_location"], name=("main", "default", "events"))


def as_uc_client(table: JvmUCTable) -> Any:
    """raydelta's snapshot from what delta's getCommits told delta."""
    commits, latest = table.get_commits()
    log = table.root / "_delta_log"
    held = [
        RatifiedCommit(
            version=c.version,
            path=str(Path(local_path(c.path)).relative_to(log.parent)),
        )
        for c in commits
    ]
    return raydelta.load_snapshot(
        table.location, ratified_commits=held, latest_ratified_version=latest
    )


def rows_of(snapshot: Any, uri: str) -> list[int]:
    from raydelta.storage.scan import scan

    data = scan(uri, snapshot.files, snapshot.schema, snapshot.metadata.partition_columns)
    return sorted(data.column("id").to_pylist())


def test_raydelta_reads_what_delta_committed(spark: Any, uc_server: UCServerFixture) -> None:
    info = create_uc_table(uc_server)
    table = jvm_table(spark, uc_server, info)
    location = info["storage_location"]
    ray.get(uc_server.catalog.actor.pause_publishing.remote(True))
    try:
        table.commit(1, [data_file(location, [1, 2])])
        table.commit(2, [data_file(location, [3])])
        snapshot = as_uc_client(table)
        assert snapshot.version == 2
        assert rows_of(snapshot, location) == [1, 2, 3]
    finally:
        ray.get(uc_server.catalog.actor.pause_publishing.remote(False))
    assert ray.get(uc_server.catalog.actor.wait_published.remote(NAME, 2, 60.0))
    snapshot = as_uc_client(table)
    assert (snapshot.version, rows_of(snapshot, location)) == (2, [1, 2, 3])
    ours = uc_server.catalog.open_table(NAME)
    assert sorted(ours.to_arrow().column("id").to_pylist()) == [1, 2, 3]
    assert [h.version for h in ours.history()] == [2, 1, 0]


def test_delta_backfills_alone_then_the_publisher_agrees(
    spark: Any, uc_server: UCServerFixture
) -> None:
    info = create_uc_table(uc_server)
    table = jvm_table(spark, uc_server, info)
    location = info["storage_location"]
    log = table.root / "_delta_log"
    ray.get(uc_server.catalog.actor.pause_publishing.remote(True))
    try:
        done = [table.commit(v, [data_file(location, [v])]) for v in (1, 2, 3)]
        # delta backfills on its own threads after each commit: wait for its files
        deadline = time.monotonic() + 60
        while table.published_versions() != [0, 1, 2, 3] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert table.published_versions() == [0, 1, 2, 3]
        for commit in done:
            staged = Path(local_path(commit.path)).read_bytes()
            assert (log / f"{commit.version:020d}.json").read_bytes() == staged
        # the catalog has not forgotten them (nobody told it they are published
        # except delta's next commit), and raydelta reads the same either way
        assert rows_of(as_uc_client(table), location) == [1, 2, 3]
    finally:
        ray.get(uc_server.catalog.actor.pause_publishing.remote(False))
    assert ray.get(uc_server.catalog.actor.wait_published.remote(NAME, 3, 60.0))
    for commit in done:  # the publisher found delta's identical files and kept them
        staged = Path(local_path(commit.path)).read_bytes()
        assert (log / f"{commit.version:020d}.json").read_bytes() == staged
    assert table.get_commits() == ([], 3)
    assert sorted(uc_server.catalog.open_table(NAME).to_arrow().column("id").to_pylist()) == [
        1,
        2,
        3,
    ]


def test_path_only_peers_refuse_and_duckdb_reads_the_files(
    spark: Any, uc_server: UCServerFixture, duck: Any
) -> None:
    deltalake = pytest.importorskip("deltalake")
    info = create_uc_table(uc_server)
    table = jvm_table(spark, uc_server, info)
    location = info["storage_location"]
    table.commit(1, [data_file(location, [1, 2])])
    table.commit(2, [data_file(location, [3])])
    assert ray.get(uc_server.catalog.actor.wait_published.remote(NAME, 2, 60.0))
    path = str(table.root)
    with pytest.raises(deltalake.exceptions.DeltaError, match=r"(?i)catalog"):
        deltalake.DeltaTable(path)
    with pytest.raises(Exception, match=r"(?i)catalog-managed"):
        duck.execute(f"SELECT count(*) FROM delta_scan('{path}')").fetchall()
    snapshot = as_uc_client(table)
    files = [str(table.root / p) for p in snapshot.files.column("path").to_pylist()]
    found = duck.execute("SELECT id FROM read_parquet(?) ORDER BY id", [files]).fetchall()
    assert [row[0] for row in found] == [1, 2, 3]
