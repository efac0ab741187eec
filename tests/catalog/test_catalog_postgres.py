"""A catalog on the PostgreSQL store: killed, restarted, crashed mid-commit, replaced
by a new incarnation, served by ``raydelta catalog serve --store postgresql://...``;
every acknowledged commit is found, published once, and a retried txnId keeps its
version. The server is the session's real PostgreSQL (``postgres_server``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
import ray

from raydelta.actors.catalog.actor import CatalogActor, CatalogSettings, catalog_actor_name
from raydelta.actors.cluster import NAMESPACE
from raydelta.actors.faults import FAULT_FILE_ENV, arm
from raydelta.catalog import Catalog, CatalogTable
from raydelta.protocol.errors import CatalogStoreError
from raydelta.storage.catalog.postgres_store import PostgresRatifiedStore
from raydelta.storage.table_location import normalize_uri
from tests.catalog.conftest import NewCatalog, kill_actor
from tests.catalog.published_commits import add, check

SCHEMA = pa.schema([("date", pa.string()), ("value", pa.int64())])


def commit(table: CatalogTable, path: str, acknowledged: dict[str, int]) -> int:
    txn = table.transaction().add(add(f"date=d/{path}.parquet"))
    acknowledged[txn.txn_id] = txn.commit()
    return acknowledged[txn.txn_id]


def test_killed_restarted_and_a_new_incarnation_find_every_commit(
    new_catalog: NewCatalog, postgres_server: Any, tmp_path: Path
) -> None:
    dsn = postgres_server.new_database()
    root = str(tmp_path / "warehouse")
    catalog = new_catalog(store=dsn, root=root)
    assert not (tmp_path / "warehouse" / "catalog.sqlite").exists()
    catalog.create_table("events", SCHEMA, partition_by=["date"])
    acknowledged: dict[str, int] = {}
    inline = catalog.open_table("events")
    staged = catalog.open_table("events", commit_mode="staged")
    assert [commit(inline, "a", acknowledged), commit(staged, "b", acknowledged)] == [1, 2]

    ray.kill(catalog.actor, no_restart=False)  # Ray restarts it: it recovers from PostgreSQL
    assert commit(catalog.open_table("events"), "c", acknowledged) == 3
    check(catalog, catalog.open_table("events"), acknowledged)

    # The catalog's host is lost for good; a new incarnation (another actor,
    # as on another node) opens the same PostgreSQL store and root.
    ray.kill(catalog.actor, no_restart=True)
    second = new_catalog(store=PostgresRatifiedStore(dsn), root=root)
    assert [e.name for e in second.list_tables()] == ["events"]
    table = second.open_table("events")
    assert table.version() == 3
    check(second, table, acknowledged)
    # A client whose reply was lost retries its commit with the same txnId: same version.
    retried = table.transaction().add(add("date=d/c.parquet"))
    retried.txn_id = next(t for t, v in acknowledged.items() if v == 3)
    assert retried.commit() == 3
    assert commit(table, "d", acknowledged) == 4
    check(second, table, acknowledged)
    with psycopg.connect(dsn) as db:
        rows = db.execute(
            "SELECT version, txn_id FROM raydelta_ratified_commits ORDER BY version"
        ).fetchall()
    assert [v for v, _ in rows] == [0, 1, 2, 3, 4]
    assert {t: v for v, t in rows if v > 0} == acknowledged


@pytest.mark.slow  # an actor restart per case
@pytest.mark.parametrize("point", ["catalog_after_ratify", "catalog_mid_publish"])
def test_a_crash_mid_commit_is_exactly_once(
    ray_cluster: Any, postgres_server: Any, tmp_path: Path, point: str
) -> None:
    fault_file = tmp_path / "faults.json"
    arm(str(fault_file))
    name = f"pg-faulty-{uuid.uuid4().hex[:10]}"
    store = PostgresRatifiedStore(postgres_server.new_database())
    CatalogActor.options(  # type: ignore[attr-defined]
        name=catalog_actor_name(name),
        namespace=NAMESPACE,
        lifetime="detached",
        runtime_env={"env_vars": {FAULT_FILE_ENV: str(fault_file)}},
    ).remote(store, CatalogSettings(root=normalize_uri(str(tmp_path / "catalog"))))
    catalog = Catalog(name=name, root=str(tmp_path / "catalog"))
    try:
        catalog.create_table("t", SCHEMA, partition_by=["date"])
        table = catalog.open_table("t")
        acknowledged: dict[str, int] = {}
        commit(table, "before", acknowledged)
        arm(str(fault_file), point)
        txn = table.transaction().add(add("date=d/crash.parquet"))
        version = txn.commit()  # the actor dies; Ray restarts it and re-sends
        deadline = time.monotonic() + 120
        while json.loads(fault_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert json.loads(fault_file.read_text()) == []  # the point was reached
        assert version == 2 and txn.commit() == 2
        acknowledged[txn.txn_id] = version
        commit(table, "after", acknowledged)
        check(catalog, table, acknowledged)
    finally:
        kill_actor(catalog_actor_name(name))


def test_a_bad_store_url_fails_before_any_actor_starts(
    ray_cluster: Any, postgres_server: Any, tmp_path: Path
) -> None:
    database = postgres_server.new_database().rsplit("/", 1)[1]
    name = f"pg-bad-{uuid.uuid4().hex[:10]}"
    with pytest.raises(CatalogStoreError, match="password authentication failed") as refused:
        Catalog(
            store=postgres_server.dsn(database, password="wrong-Pa55"),
            name=name,
            root=str(tmp_path / "w"),
        )
    assert "wrong-Pa55" not in str(refused.value)
    with pytest.raises(ValueError, match="Failed to look up actor"):
        ray.get_actor(catalog_actor_name(name), namespace=NAMESPACE)


@pytest.mark.slow  # its own process and its own local Ray
def test_catalog_serve_with_a_postgresql_store(postgres_server: Any, tmp_path: Path) -> None:
    from tests.uc_api.conftest import uc_request

    dsn = postgres_server.new_database()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    command = [sys.executable, "-m", "raydelta.cli", "catalog", "serve", "--port", "0"]
    root = tmp_path / "warehouse"
    command += ["--store", dsn, "--root", str(root), "--name", "pg-cli", "--no-auth"]
    log = tmp_path / "serve.log"  # a file, not a pipe: Ray's output cannot fill it and block
    with log.open("w") as stderr:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env
        )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        api = url + "/api/2.1/unity-catalog"
        assert uc_request("POST", api + "/catalogs", {"name": "main"})[0] == 200
        assert (root / "unity_namespaces.json").exists()
        assert not (root / "catalog.sqlite").exists()
        with psycopg.connect(dsn) as db:
            assert db.execute("SELECT version FROM raydelta_schema_version").fetchone() == (1,)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
    assert process.returncode == 0, log.read_text()[-3000:]
    assert postgres_server.password not in log.read_text()
