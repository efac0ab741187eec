"""Unity Catalog's Delta REST API (``/delta/v1/...``, kebab-case JSON), the API
delta-storage 4.4.0's ``UCDeltaTokenBasedRestClient`` speaks (delta-spark's
default).

- ``GET /delta/v1/config``: the endpoints served, protocol version ``1.0``;
- ``POST .../schemas/{s}/staging-tables``: a table id and location, with the
  protocol and properties a catalog-managed table needs here;
- ``POST .../schemas/{s}/tables``: register the managed table the client
  created there (its ``0.json``), or an external table;
- ``GET``/``HEAD``/``DELETE .../tables/{t}``: load (metadata, etag,
  unbackfilled commits newest first, latest version), exists, drop;
- ``POST .../tables/{t}``: ``updateTable``: ``assert-table-uuid`` /
  ``assert-etag`` requirements, an ``add-commit`` (ratified exactly as
  staged) and ``set-latest-backfilled-version``. The other updates
  (``set-properties``, ``set-columns``, ``set-protocol``...) describe what the
  staged commit holds; the catalog judges and applies the staged file
  itself, so they are accepted only next to an ``add-commit``;
- credentials: ``GET .../tables/{t}/credentials``,
  ``GET /delta/v1/staging-tables/{id}/credentials``,
  ``GET /delta/v1/temporary-path-credentials``;
- ``POST .../tables/{t}/metrics``: accepted and ignored.

Errors on these paths are the Delta API's ``{"error": {"message", "type",
"code"}}`` (:func:`raydelta.uc.errors.delta_error_body`).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from raydelta.actors.catalog.unity.tables import UC_TABLE_ID_PROPERTY
from raydelta.actors.table.client import new_table_actions
from raydelta.protocol.schema import parse_schema
from raydelta.protocol.table_features import (
    CATALOG_MANAGED,
    IN_COMMIT_TIMESTAMP,
    VACUUM_PROTOCOL_CHECK,
)
from raydelta.protocol.table_properties import ENABLE_IN_COMMIT_TIMESTAMPS
from raydelta.protocol.unity_catalog import LoadedTable, TemporaryCredentials
from raydelta.uc.errors import UCError
from raydelta.uc.routes_tables import normalize_location
from raydelta.uc.server import API_PREFIX, body_of, location_url, respond, unity

DELTA_PREFIX = f"{API_PREFIX}/delta/v1"
TABLES = "/catalogs/{catalog}/schemas/{schema}/tables"

ENDPOINTS = (
    "POST /v1/catalogs/{catalog}/schemas/{schema}/staging-tables",
    "POST /v1/catalogs/{catalog}/schemas/{schema}/tables",
    "GET /v1/catalogs/{catalog}/schemas/{schema}/tables/{table}",
    "POST /v1/catalogs/{catalog}/schemas/{schema}/tables/{table}",
    "DELETE /v1/catalogs/{catalog}/schemas/{schema}/tables/{table}",
    "HEAD /v1/catalogs/{catalog}/schemas/{schema}/tables/{table}",
    "GET /v1/catalogs/{catalog}/schemas/{schema}/tables/{table}/credentials",
    "POST /v1/catalogs/{catalog}/schemas/{schema}/tables/{table}/metrics",
    "GET /v1/staging-tables/{table_id}/credentials",
    "GET /v1/temporary-path-credentials",
)

DESCRIBING_UPDATES = frozenset(
    {
        "set-properties",
        "remove-properties",
        "set-columns",
        "set-partition-columns",
        "set-table-comment",
        "set-protocol",
        "set-domain-metadata",
        "remove-domain-metadata",
        "update-metadata-snapshot-version",
    }
)
"""Updates that describe the staged commit next to them (module docstring), as
Unity Catalog's ``api/delta.yaml`` names them (``DeltaTableUpdate``'s mapping)."""


def _full_name(request: web.Request, table: str | None = None) -> str:
    info = request.match_info
    return f"{info['catalog']}.{info['schema']}.{table or info['table']}"


def load_response(loaded: LoadedTable) -> dict[str, Any]:
    """``DeltaLoadTableResponse`` of what the service loaded (kebab-case keys)."""
    table = loaded.table
    schema = json.loads(loaded.schema_string) if loaded.schema_string else None
    metadata: dict[str, Any] = {
        "etag": loaded.etag,
        "table-type": table.table_type,
        "table-uuid": table.table_id,
        "location": location_url(table.storage_location or ""),
        "created-time": table.created_at,
        "updated-time": table.updated_at,
        "columns": schema or {"type": "struct", "fields": []},
        "partition-columns": list(loaded.partition_columns),
        "properties": table.properties,
    }
    if loaded.last_commit_version is not None:  # optional: left out when unknown
        metadata["last-commit-version"] = loaded.last_commit_version
        if loaded.last_commit_timestamp_ms is not None:
            metadata["last-commit-timestamp-ms"] = loaded.last_commit_timestamp_ms
    answer: dict[str, Any] = {
        "metadata": metadata,
        "commits": [
            {
                "version": c.version,
                "timestamp": c.timestamp,
                "file-name": c.file_name,
                "file-size": c.file_size,
                "file-modification-timestamp": c.file_modification_timestamp,
            }
            for c in loaded.commits
        ],
    }
    if loaded.latest_table_version is not None:
        answer["latest-table-version"] = loaded.latest_table_version
    return answer


async def config(request: web.Request) -> web.Response:
    return respond({"endpoints": list(ENDPOINTS), "protocol-version": "1.0"})


async def create_staging_table(request: web.Request) -> web.Response:
    body = await body_of(request)
    name = body.get("name")
    if not name:
        raise UCError("INVALID_ARGUMENT", "name is required")
    client = unity(request)
    staged = await client.create_staging_table(_full_name(request, str(name)))
    vended = await client.table_credentials(staged.id, "READ_WRITE")
    return respond(
        {
            "table-id": staged.id,
            "table-type": "MANAGED",
            "location": location_url(staged.staging_location),
            "storage-credentials": _storage_credentials(vended, "READ_WRITE"),
            "required-protocol": {
                "min-reader-version": 3,
                "min-writer-version": 7,
                "reader-features": [CATALOG_MANAGED, VACUUM_PROTOCOL_CHECK],
                "writer-features": [CATALOG_MANAGED, IN_COMMIT_TIMESTAMP, VACUUM_PROTOCOL_CHECK],
            },
            "required-properties": {
                UC_TABLE_ID_PROPERTY: staged.id,
                ENABLE_IN_COMMIT_TIMESTAMPS: "true",
            },
            "suggested-properties": {},
        }
    )


async def create_table(request: web.Request) -> web.Response:
    body = await body_of(request)
    name = body.get("name")
    if not name:
        raise UCError("INVALID_ARGUMENT", "name is required")
    full = _full_name(request, str(name))
    table_type = str(body.get("table-type") or "MANAGED").upper()
    properties = {str(k): str(v) for k, v in (body.get("properties") or {}).items()}
    columns = body.get("columns")
    new_table = None
    if table_type == "MANAGED" and isinstance(columns, dict) and columns.get("fields"):
        config = {**properties, ENABLE_IN_COMMIT_TIMESTAMPS: "true"}
        new_table = new_table_actions(
            parse_schema(json.dumps(columns)),
            partition_by=list(body.get("partition-columns") or []),
            properties=config,
            description=body.get("comment"),
        )
    client = unity(request)
    await client.create_table(
        full,
        table_type=table_type,
        data_source_format="DELTA",
        location=normalize_location(body.get("location")),
        comment=body.get("comment"),
        properties=properties,
        columns=[],
        new_table=new_table,
    )
    return respond(load_response(await client.load_table(full)))


async def load_table(request: web.Request) -> web.Response:
    return respond(load_response(await unity(request).load_table(_full_name(request))))


async def table_exists(request: web.Request) -> web.Response:
    await unity(request).get_table(_full_name(request))
    return web.Response(status=204)


async def delete_table(request: web.Request) -> web.Response:
    await unity(request).delete_table(_full_name(request))
    return web.Response(status=204)


async def update_table(request: web.Request) -> web.Response:
    body = await body_of(request)
    full = _full_name(request)
    table_uuid = etag = None
    for requirement in body.get("requirements") or []:
        kind = requirement.get("type")
        if kind == "assert-table-uuid":
            table_uuid = str(requirement.get("uuid"))
        elif kind == "assert-etag":
            etag = str(requirement.get("etag"))
        else:
            raise UCError("INVALID_ARGUMENT", f"unknown requirement type {kind!r}")
    commit_info = None
    backfilled = None
    described = []
    for update in body.get("updates") or []:
        action = update.get("action")
        if action == "add-commit":
            commit = update.get("commit") or {}
            commit_info = {
                "version": commit.get("version"),
                "timestamp": commit.get("timestamp"),
                "file_name": commit.get("file-name"),
                "file_size": commit.get("file-size"),
                "file_modification_timestamp": commit.get("file-modification-timestamp"),
            }
        elif action == "set-latest-backfilled-version":
            backfilled = update.get("latest-published-version")
        elif action in DESCRIBING_UPDATES:
            described.append(action)
        else:
            raise UCError("INVALID_ARGUMENT", f"unknown update action {action!r}")
    if described and commit_info is None:
        raise UCError(
            "INVALID_ARGUMENT",
            f"{', '.join(described)} on a managed table must come with the add-commit that "
            "holds the change (the catalog applies the staged commit itself)",
        )
    if commit_info is not None and not isinstance(commit_info["version"], int):
        raise UCError("INVALID_ARGUMENT", "add-commit needs an integer commit version")
    if backfilled is not None and (not isinstance(backfilled, int) or backfilled < 0):
        raise UCError("INVALID_ARGUMENT", "latest-published-version must be a version")
    loaded = await unity(request).update_table(
        full,
        table_uuid=table_uuid,
        etag=etag,
        commit_info=commit_info,
        latest_backfilled_version=backfilled,
    )
    return respond(load_response(loaded))


async def report_metrics(request: web.Request) -> web.Response:
    await body_of(request)
    return web.Response(status=204)


def _operation(request: web.Request, key: str = "operation") -> str:
    operation = (request.query.get(key) or "").upper()
    if operation not in ("READ", "READ_WRITE"):
        raise UCError(
            "INVALID_ARGUMENT", f"operation must be READ or READ_WRITE, got {operation!r}"
        )
    return operation


def _storage_credentials(vended: TemporaryCredentials, operation: str) -> list[dict[str, Any]]:
    """The Delta API's ``storage-credentials`` of what the service vended."""
    config: dict[str, str] = {}
    aws = vended.aws_temp_credentials
    if aws:
        config = {
            "s3.access-key-id": aws.access_key_id,
            "s3.secret-access-key": aws.secret_access_key,
            "s3.session-token": aws.session_token,
        }
    return [
        {
            "prefix": location_url(vended.url),
            "operation": operation,
            "config": config,
            "expiration-time-ms": vended.expiration_time,
        }
    ]


async def table_credentials(request: web.Request) -> web.Response:
    operation = _operation(request)
    vended = await unity(request).table_credentials_by_name(_full_name(request), operation)
    return respond({"storage-credentials": _storage_credentials(vended, operation)})


async def staging_credentials(request: web.Request) -> web.Response:
    table_id = request.match_info["table_id"]
    vended = await unity(request).table_credentials(table_id, "READ_WRITE")
    return respond({"storage-credentials": _storage_credentials(vended, "READ_WRITE")})


async def path_credentials(request: web.Request) -> web.Response:
    operation = _operation(request)
    url = normalize_location(request.query.get("location"))
    if url is None:
        raise UCError("INVALID_ARGUMENT", "location is required")
    path_operation = "read" if operation == "READ" else "write"
    vended = await unity(request).path_credentials(url, path_operation)
    return respond({"storage-credentials": _storage_credentials(vended, operation)})


def add_routes(routes: web.RouteTableDef) -> None:
    p = DELTA_PREFIX
    table = f"{p}{TABLES}/{{table}}"
    routes.get(f"{p}/config")(config)
    routes.post(f"{p}/catalogs/{{catalog}}/schemas/{{schema}}/staging-tables")(create_staging_table)
    routes.post(f"{p}{TABLES}")(create_table)
    routes.get(table, allow_head=False)(load_table)
    routes.head(table)(table_exists)
    routes.post(table)(update_table)
    routes.delete(table)(delete_table)
    routes.get(f"{table}/credentials")(table_credentials)
    routes.post(f"{table}/metrics")(report_metrics)
    routes.get(f"{p}/staging-tables/{{table_id}}/credentials")(staging_credentials)
    routes.get(f"{p}/temporary-path-credentials")(path_credentials)


__all__ = ["DELTA_PREFIX", "add_routes", "load_response"]
