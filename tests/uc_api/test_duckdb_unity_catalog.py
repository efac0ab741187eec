"""DuckDB's ``unity_catalog`` extension (1.5.5) as a client of the server.

DuckDB attaches a Unity Catalog catalog (``CREATE SECRET`` of ``TYPE UC``,
``ATTACH ... (TYPE UC_CATALOG)``), lists its schemas and tables over the REST
API and reads the tables with its ``delta`` extension (delta-kernel-rs). The
extensions come from their pip packages, loaded by file path (this machine
cannot download extensions): ``unity_catalog`` sends its requests through
``httpfs`` and reads through ``delta``, so both are loaded first.

The client is a principal holding only ``READ`` on the two tables and the
``USE_CATALOG`` / ``USE_SCHEMA`` that Unity Catalog requires to reach them.
External tables are read; catalog-managed ones are refused by delta-kernel
(it wants the catalog's latest version, which this DuckDB does not ask
for): asserted as observed, so a DuckDB that reads them is noticed.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raydelta
from tests.uc_api.conftest import (
    UCServerFixture,
    create_uc_table,
    data_file,
    post_commit,
    stage_commit,
)

READER = "duck-reader"
EXTERNAL_ROWS = [(1, "a"), (2, "b"), (3, None)]


def _extension_file(module: str) -> str:
    """The ``.duckdb_extension`` file a pip package ships (skip when absent)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{module} is not installed")
    found = [
        path
        for location in spec.submodule_search_locations
        for path in sorted(Path(location).rglob("*.duckdb_extension"))
    ]
    if not found:
        pytest.skip(f"no .duckdb_extension file in {module}")
    return str(found[0])


@pytest.fixture
def tables(uc_server: UCServerFixture, tmp_path: Path) -> dict[str, Any]:
    """``main.default.ext`` (external, :data:`EXTERNAL_ROWS`) and
    ``main.default.events`` (catalog-managed, ids 1..4 in one commit), made by
    the admin; :data:`READER` may read both (``["token"]``: its token)."""
    location = tmp_path / "external"
    data = pa.table(
        {
            "id": pa.array([r[0] for r in EXTERNAL_ROWS], pa.int64()),
            "name": pa.array([r[1] for r in EXTERNAL_ROWS], pa.string()),
        }
    )
    raydelta.create_table(str(location), data.schema).append(data)
    managed = create_uc_table(uc_server, "events")
    info = stage_commit(
        managed["storage_location"], 1, [data_file(managed["storage_location"], [1, 2, 3, 4])]
    )
    assert post_commit(uc_server, managed, info) == (200, {})
    status, external = uc_server.request(
        "POST",
        "/tables",
        {
            "catalog_name": "main",
            "schema_name": "default",
            "name": "ext",
            "table_type": "EXTERNAL",
            "data_source_format": "DELTA",
            "columns": [],
            "storage_location": str(location),
        },
        token=uc_server.admin_token,
    )
    assert status == 200, external
    token = uc_server.token_for(READER, ["READ"], table="main.default.ext")
    uc_server.catalog.grant(READER, "main.default.events", ["READ"], token=uc_server.admin_token)
    return {"token": token}


def _attach(server: UCServerFixture, token: str) -> Any:
    """A DuckDB connection with the server's catalog ``main`` attached as ``uc``,
    calling as ``token``."""
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    for module in ("httpfs", "delta", "unity_catalog"):
        con.execute(f"LOAD '{_extension_file('duckdb_extension_' + module)}'")
    con.execute(
        f"CREATE SECRET (TYPE UC, TOKEN '{token}', ENDPOINT '{server.url}', "
        "AWS_REGION 'us-east-1')"  # required by the secret; unused for file: tables
    )
    con.execute("ATTACH 'main' AS uc (TYPE UC_CATALOG)")
    return con


@pytest.fixture
def attached(uc_server: UCServerFixture, tables: dict[str, Any]) -> Iterator[Any]:
    """:func:`_attach` as :data:`READER`."""
    con = _attach(uc_server, tables["token"])
    yield con
    con.close()


def test_duckdb_lists_schemas_and_tables(attached: Any) -> None:
    schemas = attached.execute(
        "SELECT schema_name FROM duckdb_schemas() WHERE database_name = 'uc'"
    ).fetchall()
    assert schemas == [("default",)]
    listed = attached.execute(
        "SELECT database, schema, name, column_names, column_types FROM (SHOW ALL TABLES) "
        "WHERE database = 'uc' ORDER BY name"
    ).fetchall()
    assert listed == [
        ("uc", "default", "events", ["id"], ["BIGINT"]),
        ("uc", "default", "ext", ["id", "name"], ["BIGINT", "VARCHAR"]),
    ]


def test_duckdb_reads_an_external_table(attached: Any) -> None:
    rows = attached.execute('SELECT id, name FROM uc."default".ext ORDER BY id').fetchall()
    assert rows == EXTERNAL_ROWS


def test_duckdb_refuses_a_catalog_managed_table(attached: Any) -> None:
    """Today's behaviour (DuckDB 1.5.5, unity_catalog 1.5.5): delta-kernel refuses
    the table because DuckDB loads it without the catalog's latest version. A
    DuckDB that reads catalog-managed tables through the catalog fails this
    test: flip it then to assert the rows (ids 1..4)."""
    import duckdb

    with pytest.raises(
        duckdb.IOException, match="Catalog-managed table requires max_catalog_version"
    ):
        attached.execute('SELECT id FROM uc."default".events').fetchall()


def test_duckdb_sees_nothing_without_use_catalog(
    uc_server: UCServerFixture, tables: dict[str, Any]
) -> None:
    """``READ`` on a table without ``USE_CATALOG``/``USE_SCHEMA``: the attach
    succeeds and shows no schema and no table, and the table is unknown."""
    import duckdb

    admin = uc_server.admin_token
    token = uc_server.catalog.create_principal("duck-no-usage", token=admin)
    uc_server.catalog.grant("duck-no-usage", "main.default.ext", ["READ"], token=admin)
    con = _attach(uc_server, token)
    try:
        assert (
            con.execute("SELECT * FROM duckdb_schemas() WHERE database_name = 'uc'").fetchall()
            == []
        )
        assert con.execute("SELECT * FROM (SHOW ALL TABLES) WHERE database = 'uc'").fetchall() == []
        with pytest.raises(duckdb.CatalogException, match="does not exist"):
            con.execute('SELECT * FROM uc."default".ext').fetchall()
    finally:
        con.close()
