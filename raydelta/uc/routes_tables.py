"""Unity Catalog's tables: ``POST /staging-tables``, ``POST/GET /tables``,
``GET/DELETE /tables/{full_name}``.

Creating a table (``POST /tables``):
- ``EXTERNAL``: a name for ``storage_location`` (no commits go through the catalog);
- ``MANAGED`` at a location where the client already wrote a catalog-managed
  version 0 (Unity Catalog's creation: a staging table, its ``0.json``,
  then this call): the catalog takes the table over;
- ``MANAGED`` anywhere else: the catalog creates the Delta table itself from
  ``columns`` (version 0 ratified through it, in-commit timestamps on,
  ``io.unitycatalog.tableId`` set), at the location given or a new one under
  its root.
Columns of an existing table are always read from its current schema.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from raydelta.actors.table.client import new_table_actions
from raydelta.protocol.schema import parse_schema
from raydelta.protocol.table_properties import ENABLE_IN_COMMIT_TIMESTAMPS
from raydelta.protocol.unity_catalog import ColumnInfo, ListTablesResponse, TableInfo
from raydelta.protocol.unity_columns import schema_from_columns
from raydelta.storage.table_location import normalize_uri
from raydelta.uc.errors import UCError
from raydelta.uc.routes_namespaces import page, required
from raydelta.uc.server import API_PREFIX, body_of, location_url, respond, unity


def table_info(described: TableInfo) -> TableInfo:
    """``described`` as the REST API answers it (its location spelled for Spark)."""
    if described.storage_location is None:
        return described
    return described.model_copy(
        update={"storage_location": location_url(described.storage_location)}
    )


def normalize_location(location: Any) -> str | None:
    if location is None or location == "":
        return None
    if not isinstance(location, str):
        raise UCError("INVALID_ARGUMENT", "storage_location must be a string")
    return normalize_uri(location)


def columns_of(body: dict[str, Any]) -> list[ColumnInfo]:
    """The request's ``columns``, each a ``ColumnInfo`` object (its keys kept as given)."""
    columns = list(body.get("columns") or [])
    if not all(isinstance(c, dict) for c in columns):
        raise UCError("INVALID_ARGUMENT", "columns must be a list of ColumnInfo objects")
    return [ColumnInfo.model_validate(c) for c in columns]


async def create_staging_table(request: web.Request) -> web.Response:
    body = await body_of(request)
    full = ".".join(str(required(body, k)) for k in ("catalog_name", "schema_name", "name"))
    staged = await unity(request).create_staging_table(full)
    spelled = staged.model_copy(update={"staging_location": location_url(staged.staging_location)})
    return respond(spelled.model_dump(mode="json"))


async def create_table(request: web.Request) -> web.Response:
    body = await body_of(request)
    full = ".".join(str(required(body, k)) for k in ("catalog_name", "schema_name", "name"))
    table_type = str(required(body, "table_type")).upper()
    data_source_format = str(body.get("data_source_format") or "DELTA").upper()
    if data_source_format != "DELTA":
        raise UCError(
            "INVALID_ARGUMENT",
            f"data_source_format {data_source_format} is not supported: this catalog "
            "serves Delta tables",
        )
    columns = columns_of(body)
    properties = {str(k): str(v) for k, v in (body.get("properties") or {}).items()}
    new_table = None
    if table_type == "MANAGED" and columns:
        schema_string, partition_by = schema_from_columns(columns)
        config = {**properties, ENABLE_IN_COMMIT_TIMESTAMPS: "true"}
        new_table = new_table_actions(
            parse_schema(schema_string),
            partition_by=partition_by,
            properties=config,
            description=body.get("comment"),
        )
    described = await unity(request).create_table(
        full,
        table_type=table_type,
        data_source_format=data_source_format,
        location=normalize_location(body.get("storage_location")),
        comment=body.get("comment"),
        properties=properties,
        columns=columns,
        new_table=new_table,
    )
    return respond(table_info(described).model_dump(mode="json"))


async def list_tables(request: web.Request) -> web.Response:
    catalog = request.query.get("catalog_name")
    schema = request.query.get("schema_name")
    if not catalog or not schema:
        raise UCError("INVALID_ARGUMENT", "catalog_name and schema_name are required")
    described = await unity(request).list_tables(catalog, schema)
    items, following = page(sorted(described, key=lambda d: d.name), request)
    listed = ListTablesResponse(
        tables=tuple(table_info(d) for d in items), next_page_token=following
    )
    return respond(listed.model_dump(mode="json"))


async def get_table(request: web.Request) -> web.Response:
    described = await unity(request).get_table(request.match_info["full_name"])
    return respond(table_info(described).model_dump(mode="json"))


async def delete_table(request: web.Request) -> web.Response:
    await unity(request).delete_table(request.match_info["full_name"])
    return respond({})


def add_routes(routes: web.RouteTableDef) -> None:
    p = API_PREFIX
    routes.post(f"{p}/staging-tables")(create_staging_table)
    routes.post(f"{p}/tables")(create_table)
    routes.get(f"{p}/tables")(list_tables)
    routes.get(f"{p}/tables/{{full_name}}")(get_table)
    routes.delete(f"{p}/tables/{{full_name}}")(delete_table)


__all__ = ["add_routes", "columns_of", "normalize_location", "table_info"]
