"""delta-spark 4.4.0's SQL on a table managed by raydelta's Unity Catalog server.

Unity Catalog's Spark connector jar is not served by this machine's Maven
mirror, so the session is wired as ``jvm_clients.attach_spark_sql`` explains:
delta-spark's own ``UCCommitCoordinatorBuilder`` builds its own UC client
from ``spark.sql.catalog.uc.*`` (the connector class named, never loaded),
and the table has a name in ``spark_catalog``. Every commit is then made by
delta-spark: staged file, ``POST /delta/preview/commits``, delta's backfill.

Checked: a pipeline (INSERT, ``df.writeTo().append()``, UPDATE, DELETE,
MERGE, time travel, DESCRIBE HISTORY) gives the same results as on a plain
path-based table; raydelta reads what Spark wrote; a principal allowed to
write but not alter can INSERT but not ``ALTER TABLE SET TBLPROPERTIES``
(the table unchanged); delta-spark itself refuses client-side maintenance
of the managed table (OPTIMIZE by name, VACUUM by path), the log untouched.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from tests.uc_api.conftest import UCServerFixture, create_uc_table, local_path
from tests.uc_api.jvm_clients import attach_spark_sql, register_managed_table

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture
def managed(spark: Any, uc_server: UCServerFixture) -> Iterator[tuple[str, dict[str, Any]]]:
    """A server-created managed table with a name in spark_catalog."""
    attach_spark_sql(spark, uri=uc_server.url, token=uc_server.admin_token)
    info = create_uc_table(uc_server)
    name = f"uc_events_{uuid.uuid4().hex[:8]}"
    register_managed_table(spark, name, info["storage_location"], "id BIGINT")
    yield name, info
    spark.sql(f"DROP TABLE IF EXISTS {name}")


def pipeline(spark: Any, name: str) -> dict[str, Any]:
    """The same pipeline on any table with one ``id bigint`` column: its observations."""
    seen: dict[str, Any] = {}

    def ids() -> list[int]:
        return [r.id for r in spark.sql(f"SELECT id FROM {name} ORDER BY id").collect()]

    spark.sql(f"INSERT INTO {name} VALUES (1), (2), (3)")
    seen["insert"] = ids()
    spark.range(10, 13).writeTo(name).append()
    seen["append"] = ids()
    spark.sql(f"UPDATE {name} SET id = id + 100 WHERE id = 2")
    seen["update"] = ids()
    spark.sql(f"DELETE FROM {name} WHERE id = 11")
    seen["delete"] = ids()
    spark.range(12, 15).createOrReplaceTempView("changes")
    spark.sql(
        f"MERGE INTO {name} t USING changes s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET t.id = s.id + 1000 "
        "WHEN NOT MATCHED THEN INSERT (id) VALUES (s.id)"
    )
    seen["merge"] = ids()
    history = spark.sql(f"DESCRIBE HISTORY {name}").collect()
    seen["history"] = [(r.version, r.operation) for r in sorted(history, key=lambda r: r.version)]
    first_write = min(v for v, op in seen["history"] if op == "WRITE")
    rows = spark.sql(f"SELECT id FROM {name} VERSION AS OF {first_write} ORDER BY id").collect()
    seen["time_travel"] = [r.id for r in rows]
    return seen


def test_pipeline_matches_a_path_table(
    spark: Any, uc_server: UCServerFixture, managed: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    name, info = managed
    plain = f"plain_events_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {plain} (id BIGINT) USING delta LOCATION '{tmp_path / 'plain'}'")
    try:
        expected = pipeline(spark, plain)
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {plain}")
    got = pipeline(spark, name)
    history = got.pop("history")
    plain_history = expected.pop("history")
    assert got == expected
    # same operations after each table's own creation commit
    assert [op for _, op in history[1:]] == [op for _, op in plain_history[1:]]
    # every commit went through the catalog: ratified, published, as raydelta sees it
    last = history[-1][0]
    full = f"{info['catalog_name']}.{info['schema_name']}.{info['name']}"
    assert ray.get(uc_server.catalog.actor.wait_published.remote(full, last, 60.0))
    ours = uc_server.catalog.open_table(full)
    assert sorted(ours.to_arrow().column("id").to_pylist()) == got["merge"]
    assert [h.version for h in ours.history()] == list(range(last, -1, -1))
    staged = list(
        (local_path(info["storage_location"]) / "_delta_log" / "_staged_commits").iterdir()
    )
    assert len(staged) >= last  # delta-spark staged each of its commits


def test_write_without_alter(
    spark: Any, uc_server: UCServerFixture, managed: tuple[str, dict[str, Any]]
) -> None:
    name, info = managed
    full = f"{info['catalog_name']}.{info['schema_name']}.{info['name']}"
    writer = uc_server.token_for(f"writer-{uuid.uuid4().hex[:6]}", ["READ", "WRITE"], table=full)
    attach_spark_sql(spark, uri=uc_server.url, token=writer)
    try:
        spark.sql(f"INSERT INTO {name} VALUES (1), (2)")
        assert [r.id for r in spark.sql(f"SELECT id FROM {name} ORDER BY id").collect()] == [1, 2]
        log = local_path(info["storage_location"]) / "_delta_log"
        before = sorted(p.name for p in log.glob("[0-9]*.json"))
        with pytest.raises(Exception, match=r"(?i)alter|permission|403"):
            spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('owner.note' = 'x')")
        ours = uc_server.catalog.open_table(full)
        assert "owner.note" not in ours.snapshot().metadata.configuration
        assert sorted(p.name for p in log.glob("[0-9]*.json")) == before
        metadata = [
            json.loads(line)
            for p in sorted(log.glob("[0-9]*.json"))
            for line in p.read_text().splitlines()
        ]
        assert all("owner.note" not in json.dumps(a) for a in metadata)
    finally:
        attach_spark_sql(spark, uri=uc_server.url, token=uc_server.admin_token)


def test_client_side_maintenance_is_blocked(
    spark: Any, uc_server: UCServerFixture, managed: tuple[str, dict[str, Any]]
) -> None:
    """delta-spark 4.4.0 refuses, before any request to the server, OPTIMIZE of a
    catalog-managed table by name and VACUUM / OPTIMIZE of it by path: for a
    managed table only the catalog maintains it. Nothing in the table changes.

    Not asserted: VACUUM *by name* under this session's wiring fails on
    delta-spark's internal assertion that a catalog-owned table is a MANAGED
    one in the session catalog (``register_managed_table`` can only register
    it as EXTERNAL without Unity Catalog's connector), which says nothing of
    what delta-spark does for a user with the connector."""
    name, info = managed
    spark.sql(f"INSERT INTO {name} VALUES (1), (2)")
    spark.sql(f"INSERT INTO {name} VALUES (3)")
    full = f"{info['catalog_name']}.{info['schema_name']}.{info['name']}"
    assert ray.get(uc_server.catalog.actor.wait_published.remote(full, 2, 60.0))
    ours = uc_server.catalog.open_table(full)
    assert ours.version() == 2  # created at 0, one commit per INSERT
    root = local_path(info["storage_location"])
    data_files = sorted(p.name for p in root.glob("*.parquet"))
    with pytest.raises(
        Exception, match=r"DELTA_UNSUPPORTED_CATALOG_MANAGED_TABLE_OPERATION.*OPTIMIZE is blocked"
    ):
        spark.sql(f"OPTIMIZE {name}")
    with pytest.raises(Exception, match=r"DELTA_UNSUPPORTED_CATALOG_MANAGED_TABLE_OPERATION"):
        spark.sql(f"OPTIMIZE {name} ZORDER BY (id)")
    for command in ("VACUUM", "OPTIMIZE"):
        with pytest.raises(
            Exception, match=r"DELTA_PATH_BASED_ACCESS_TO_CATALOG_MANAGED_TABLE_BLOCKED"
        ):
            spark.sql(f"{command} delta.`{info['storage_location']}`")
    # no maintenance commit was made and no data file rewritten or deleted
    assert uc_server.catalog.open_table(full).version() == 2
    assert sorted(p.name for p in root.glob("*.parquet")) == data_files
    assert not {h.operation for h in ours.history()} & {"OPTIMIZE", "VACUUM START", "VACUUM END"}
    assert [r.id for r in spark.sql(f"SELECT id FROM {name} ORDER BY id").collect()] == [1, 2, 3]
