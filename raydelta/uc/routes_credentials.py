"""Unity Catalog's temporary credentials: ``POST /temporary-table-credentials``
and ``POST /temporary-path-credentials``.

Each is one call of the catalog's credential service
(:mod:`raydelta.actors.catalog.credentials`),
which checks the privilege the operation needs and then vends: for
``s3://``/``s3a://`` locations short-lived STS credentials scoped to the
table's (or the path's) prefix, read-only for ``READ``/``PATH_READ``, with
the expiration STS states; for local paths no cloud credential, only the
URL and an expiration. The catalog's own keys are never handed out. Table
operations: ``READ`` → READ, ``READ_WRITE`` → WRITE on the table; path
operations: ``PATH_READ``/``PATH_READ_WRITE`` → the table's privileges
inside a table, ``READ_FILES``/``WRITE_FILES`` inside an external location;
``PATH_CREATE_TABLE`` → ``CREATE_EXTERNAL_TABLE`` on the external location,
at a path that overlaps no table.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from raydelta.protocol.unity_catalog import TemporaryCredentials
from raydelta.uc.errors import UCError
from raydelta.uc.routes_namespaces import required
from raydelta.uc.routes_tables import normalize_location
from raydelta.uc.server import API_PREFIX, body_of, location_url, respond, unity

TABLE_OPERATIONS = {"READ": "READ", "READ_WRITE": "READ_WRITE"}
PATH_OPERATIONS = {"PATH_READ": "read", "PATH_READ_WRITE": "write", "PATH_CREATE_TABLE": "create"}


def _operation(body: dict[str, Any], known: dict[str, str]) -> str:
    operation = str(required(body, "operation")).upper()
    if operation not in known:
        raise UCError(
            "INVALID_ARGUMENT", f"operation must be one of {sorted(known)}, got {operation!r}"
        )
    return known[operation]


def temporary_credentials(vended: TemporaryCredentials) -> dict[str, Any]:
    """Unity Catalog's ``TemporaryCredentials`` JSON of what the service vended
    (no cloud credential: the key left out)."""
    spelled = vended.model_copy(update={"url": location_url(vended.url)})
    return spelled.model_dump(mode="json", exclude_none=True)


async def table_credentials(request: web.Request) -> web.Response:
    body = await body_of(request)
    operation = _operation(body, TABLE_OPERATIONS)
    table_id = str(required(body, "table_id"))
    vended = await unity(request).table_credentials(table_id, operation)
    return respond(temporary_credentials(vended))


async def path_credentials(request: web.Request) -> web.Response:
    body = await body_of(request)
    operation = _operation(body, PATH_OPERATIONS)
    url = normalize_location(required(body, "url"))
    if url is None:
        raise UCError("INVALID_ARGUMENT", "url is required")
    vended = await unity(request).path_credentials(url, operation)
    return respond(temporary_credentials(vended))


def add_routes(routes: web.RouteTableDef) -> None:
    routes.post(f"{API_PREFIX}/temporary-table-credentials")(table_credentials)
    routes.post(f"{API_PREFIX}/temporary-path-credentials")(path_credentials)


__all__ = ["add_routes", "temporary_credentials"]
