"""Unity Catalog's official Python SDK (``unitycatalog-client`` 0.4.0) against the
server: catalogs, schemas and tables (managed and external) created, read,
listed (paged), updated and deleted; the SDK's own models parse every answer.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from unitycatalog.client import (
    CatalogsApi,
    ColumnInfo,
    ColumnTypeName,
    CreateCatalog,
    CreateSchema,
    CreateStagingTable,
    CreateTable,
    DataSourceFormat,
    SchemasApi,
    TablesApi,
    TableType,
    UpdateCatalog,
    UpdateSchema,
)
from unitycatalog.client.exceptions import ApiException

import raydelta
from tests.uc_api.conftest import UCServerFixture, sdk_client

COLUMNS = [
    ColumnInfo(
        name="id", type_name=ColumnTypeName.LONG, type_text="bigint", position=0, nullable=False
    ),
    ColumnInfo(
        name="day",
        type_name=ColumnTypeName.STRING,
        type_text="string",
        position=1,
        partition_index=0,
    ),
    ColumnInfo(
        name="amount",
        type_name=ColumnTypeName.DECIMAL,
        type_text="decimal(10,2)",
        type_precision=10,
        type_scale=2,
        position=2,
        comment="in euros",
    ),
]


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_catalogs_and_schemas(uc_server: UCServerFixture) -> None:
    async def scenario() -> None:
        async with sdk_client(uc_server, uc_server.admin_token) as client:
            catalogs, schemas = CatalogsApi(client), SchemasApi(client)
            made = await catalogs.create_catalog(
                CreateCatalog(name="main", comment="the main one", properties={"team": "a"})
            )
            assert (made.name, made.comment, made.properties) == (
                "main",
                "the main one",
                {"team": "a"},
            )
            assert made.id and made.created_at and made.owner == "catalog-admin"
            for name in ("b", "c", "d"):
                await catalogs.create_catalog(CreateCatalog(name=name))
            first = await catalogs.list_catalogs(max_results=2)
            assert [c.name for c in first.catalogs] == ["b", "c"]
            rest = await catalogs.list_catalogs(max_results=2, page_token=first.next_page_token)
            assert [c.name for c in rest.catalogs] == ["d", "main"] and not rest.next_page_token
            assert (await catalogs.get_catalog("main")).comment == "the main one"
            updated = await catalogs.update_catalog("main", UpdateCatalog(comment="renamed"))
            assert updated.comment == "renamed"
            assert (await catalogs.get_catalog("main")).comment == "renamed"

            schema = await schemas.create_schema(
                CreateSchema(name="default", catalog_name="main", comment="s")
            )
            assert (schema.full_name, schema.catalog_name, schema.comment) == (
                "main.default",
                "main",
                "s",
            )
            await schemas.create_schema(CreateSchema(name="other", catalog_name="main"))
            listed = await schemas.list_schemas(catalog_name="main")
            assert [s.name for s in listed.schemas] == ["default", "other"]
            assert (await schemas.get_schema("main.other")).full_name == "main.other"
            await schemas.update_schema("main.other", UpdateSchema(comment="x"))
            assert (await schemas.get_schema("main.other")).comment == "x"
            await schemas.delete_schema("main.other")
            with pytest.raises(ApiException) as missing:
                await schemas.get_schema("main.other")
            assert missing.value.status == 404 and "SCHEMA_NOT_FOUND" in str(missing.value.body)
            with pytest.raises(ApiException) as twice:
                await catalogs.create_catalog(CreateCatalog(name="main"))
            assert twice.value.status == 400 and "CATALOG_ALREADY_EXISTS" in str(twice.value.body)
            # a catalog holding a schema goes only with force
            with pytest.raises(ApiException) as busy:
                await catalogs.delete_catalog("main")
            assert busy.value.status == 400
            await catalogs.delete_catalog("main", force=True)
            names = [c.name for c in (await catalogs.list_catalogs()).catalogs]
            assert names == ["b", "c", "d"]

    run(scenario())


def test_managed_and_external_tables(uc_server: UCServerFixture, tmp_path: Path) -> None:
    external_path = tmp_path / "external"
    data = pa.table({"x": pa.array([1, 2], pa.int32())})
    raydelta.create_table(str(external_path), data.schema).append(data)

    async def scenario() -> None:
        async with sdk_client(uc_server, uc_server.admin_token) as client:
            await CatalogsApi(client).create_catalog(CreateCatalog(name="main"))
            await SchemasApi(client).create_schema(
                CreateSchema(name="default", catalog_name="main")
            )
            tables = TablesApi(client)
            # Unity Catalog's way: a staging table allocates the id and the location,
            # then the managed table is created there (the server writes version 0)
            staged = await tables.create_staging_table(
                CreateStagingTable(name="sales", catalog_name="main", schema_name="default")
            )
            assert staged.id and staged.staging_location.startswith("file:///")
            managed = await tables.create_table(
                CreateTable(
                    name="sales",
                    catalog_name="main",
                    schema_name="default",
                    table_type=TableType.MANAGED,
                    data_source_format=DataSourceFormat.DELTA,
                    columns=COLUMNS,
                    storage_location=staged.staging_location,
                    comment="daily sales",
                    properties={"owner.team": "finance"},
                )
            )
            assert managed.table_type == TableType.MANAGED
            assert managed.table_id == staged.id
            assert managed.storage_location == staged.staging_location
            assert [c.name for c in managed.columns] == ["id", "day", "amount"]
            by_name = {c.name: c for c in managed.columns}
            assert by_name["id"].type_name == ColumnTypeName.LONG and not by_name["id"].nullable
            assert by_name["day"].partition_index == 0
            assert (by_name["amount"].type_precision, by_name["amount"].type_scale) == (10, 2)
            assert by_name["amount"].comment == "in euros"
            assert managed.properties["owner.team"] == "finance"
            assert managed.properties["io.unitycatalog.tableId"] == managed.table_id
            assert managed.comment == "daily sales"

            external = await tables.create_table(
                CreateTable(
                    name="ext",
                    catalog_name="main",
                    schema_name="default",
                    table_type=TableType.EXTERNAL,
                    data_source_format=DataSourceFormat.DELTA,
                    columns=[],
                    storage_location=str(external_path),
                )
            )
            assert external.table_type == TableType.EXTERNAL
            assert [c.name for c in external.columns] == ["x"]  # read from its log
            assert [c.type_text for c in external.columns] == ["int"]

            later = await tables.create_staging_table(
                CreateStagingTable(name="later", catalog_name="main", schema_name="default")
            )
            assert later.id != staged.id and later.staging_location != staged.staging_location

            listed = await tables.list_tables(catalog_name="main", schema_name="default")
            assert [t.name for t in listed.tables] == ["ext", "sales"]
            got = await tables.get_table("main.default.sales")
            assert got.table_id == managed.table_id
            await tables.delete_table("main.default.ext")
            listed = await tables.list_tables(catalog_name="main", schema_name="default")
            assert [t.name for t in listed.tables] == ["sales"]
            with pytest.raises(ApiException) as gone:
                await tables.get_table("main.default.ext")
            assert gone.value.status == 404 and "TABLE_NOT_FOUND" in str(gone.value.body)
            with pytest.raises(ApiException) as twice:
                await tables.create_table(
                    CreateTable(
                        name="sales",
                        catalog_name="main",
                        schema_name="default",
                        table_type=TableType.MANAGED,
                        data_source_format=DataSourceFormat.DELTA,
                        columns=COLUMNS,
                        storage_location=later.staging_location,
                    )
                )
            assert twice.value.status == 400 and "TABLE_ALREADY_EXISTS" in str(twice.value.body)

    run(scenario())
    # the external table's files are untouched by its drop; the managed one is a real table
    assert raydelta.open_table(str(external_path)).to_arrow().num_rows == 2
    sales = uc_server.catalog.open_table("main.default.sales")
    assert list(sales.snapshot().metadata.partition_columns) == ["day"]
    assert sales.to_arrow().schema.names == ["id", "day", "amount"]
