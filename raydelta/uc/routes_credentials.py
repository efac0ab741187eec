"""Unity Catalog's temporary credentials: ``POST /temporary-table-credentials``
and ``POST /temporary-path-credentials``.

The catalog vends what it holds itself: for ``s3://``/``s3a://`` locations
the access key, secret and session token of the catalog's own storage
options (or the environment); for local paths no cloud credential at all,
only the normalized URL and an expiration. Each call checks the privilege
its operation needs first: ``READ`` → READ, ``READ_WRITE`` → WRITE on the
table; ``PATH_READ``/``PATH_READ_WRITE`` likewise on the table holding the
path (outside every table: the catalog's owner only), ``PATH_CREATE_TABLE``
a path that overlaps no table (anyone authenticated).
"""

from __future__ import annotations

import os
import time
from typing import Any

from aiohttp import web

from raydelta.protocol.privileges import Privilege
from raydelta.storage.storage_options import fsspec_options, is_s3_uri
from raydelta.uc.errors import UCError
from raydelta.uc.routes_namespaces import required
from raydelta.uc.routes_tables import _location_url, normalize_location
from raydelta.uc.server import API_PREFIX, CATALOG_KEY, body_of, call, respond

LIFETIME_MS = 3_600_000
"""How long a vended credential is said to last."""

TABLE_OPERATIONS = {"READ": [Privilege.READ], "READ_WRITE": [Privilege.WRITE]}
PATH_OPERATIONS = {"PATH_READ": "read", "PATH_READ_WRITE": "write", "PATH_CREATE_TABLE": "create"}


def credentials_for(location: str, storage_options: dict[str, Any] | None) -> dict[str, Any]:
    """Unity Catalog's ``TemporaryCredentials`` for ``location``."""
    answer: dict[str, Any] = {
        "expiration_time": int(time.time() * 1000) + LIFETIME_MS,
        "url": _location_url(location),
    }
    if is_s3_uri(location):
        options = fsspec_options(location, storage_options)
        key = options.get("key") or os.environ.get("AWS_ACCESS_KEY_ID")
        secret = options.get("secret") or os.environ.get("AWS_SECRET_ACCESS_KEY")
        token = options.get("token") or os.environ.get("AWS_SESSION_TOKEN")
        if not key or not secret:
            raise UCError(
                "FAILED_PRECONDITION",
                f"the catalog holds no S3 credentials to vend for {location} "
                "(give the catalog storage_options with a key and secret)",
            )
        answer["aws_temp_credentials"] = {
            "access_key_id": key,
            "secret_access_key": secret,
            "session_token": token or "",
        }
    return answer


def _operation(body: dict[str, Any], known: dict[str, Any]) -> Any:
    operation = str(required(body, "operation")).upper()
    if operation not in known:
        raise UCError(
            "INVALID_ARGUMENT", f"operation must be one of {sorted(known)}, got {operation!r}"
        )
    return known[operation]


async def table_credentials(request: web.Request) -> web.Response:
    body = await body_of(request)
    needed = _operation(body, TABLE_OPERATIONS)
    entry = await call(request, "uc_table_by_id", str(required(body, "table_id")), needed)
    options = request.app[CATALOG_KEY].storage_options
    return respond(credentials_for(entry.location, options))


async def path_credentials(request: web.Request) -> web.Response:
    body = await body_of(request)
    operation = _operation(body, PATH_OPERATIONS)
    url = normalize_location(required(body, "url"))
    assert url is not None
    await call(request, "uc_path_access", url, operation)
    options = request.app[CATALOG_KEY].storage_options
    return respond(credentials_for(url, options))


def add_routes(routes: web.RouteTableDef) -> None:
    routes.post(f"{API_PREFIX}/temporary-table-credentials")(table_credentials)
    routes.post(f"{API_PREFIX}/temporary-path-credentials")(path_credentials)


__all__ = ["add_routes", "credentials_for"]
