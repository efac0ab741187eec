"""Unity Catalog's permissions API and raydelta's admin API for principals.

Unity Catalog (``/api/2.1/unity-catalog``):

- ``GET /permissions/{securable_type}/{full_name}[?principal=...]``: a
  ``PermissionsList`` (``privilege_assignments``: ``principal``,
  ``privileges``), privileges as Unity Catalog names them (``SELECT``,
  ``MODIFY``, ``USE CATALOG``...);
- ``PATCH`` the same path with an ``UpdatePermissions`` body (``changes``:
  ``principal``, ``add``, ``remove``).

raydelta's admin API (:data:`ADMIN_PREFIX`, ``/api/raydelta/v1``: Unity
Catalog OSS has no principal API of this kind), which ``raydelta catalog``
speaks:

- ``GET /principals`` (``{"principals": [{"name": ...}]}``), ``POST
  /principals`` (``{"name"}``: ``{"name", "token"}``, the token shown once),
  ``DELETE /principals/{name}``, ``POST /principals/{name}/token`` (rotate:
  ``{"name", "token"}``);
- ``GET``/``PATCH /permissions/{securable_type}/{full_name}``: the same
  shapes as Unity Catalog's, privileges named as raydelta names them
  (``read``, ``write``, ``alter``, ``own``, ``use_catalog``...), so ``ALTER``
  and ``OWN`` are shown too.

Invariant: each handler is one call of the catalog's Unity Catalog service
(:class:`~raydelta.actors.catalog.unity.permissions.PermissionService`),
which judges the request's token.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import ValidationError

from raydelta.actors.catalog.unity.permissions import Naming
from raydelta.protocol.unity_catalog import PermissionsChange
from raydelta.uc.errors import UCError
from raydelta.uc.server import API_PREFIX, body_of, respond, unity

ADMIN_PREFIX = "/api/raydelta/v1"
"""Where raydelta's own admin API lives under the server's base URL."""


def _changes(body: dict[str, Any]) -> list[PermissionsChange]:
    raw = body.get("changes")
    if not isinstance(raw, list):
        raise UCError("INVALID_ARGUMENT", "changes (a list of PermissionsChange) is required")
    try:
        return [PermissionsChange.model_validate(change) for change in raw]
    except ValidationError as error:
        raise UCError("INVALID_ARGUMENT", f"invalid PermissionsChange: {error}") from None


def _get_permissions(naming: Naming) -> Any:
    async def handler(request: web.Request) -> web.Response:
        info = request.match_info
        listed = await unity(request).permissions(
            info["securable_type"], info["full_name"], request.query.get("principal"), naming
        )
        return respond(listed.model_dump(mode="json"))

    return handler


def _update_permissions(naming: Naming) -> Any:
    async def handler(request: web.Request) -> web.Response:
        info = request.match_info
        changes = _changes(await body_of(request))
        listed = await unity(request).update_permissions(
            info["securable_type"], info["full_name"], changes, naming
        )
        return respond(listed.model_dump(mode="json"))

    return handler


async def list_principals(request: web.Request) -> web.Response:
    names = await unity(request).principals()
    return respond({"principals": [{"name": name} for name in names]})


async def create_principal(request: web.Request) -> web.Response:
    name = (await body_of(request)).get("name")
    if not isinstance(name, str) or not name:
        raise UCError("INVALID_ARGUMENT", "name is required")
    return respond({"name": name, "token": await unity(request).create_principal(name)})


async def rotate_token(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    return respond({"name": name, "token": await unity(request).rotate_token(name)})


async def delete_principal(request: web.Request) -> web.Response:
    await unity(request).delete_principal(request.match_info["name"])
    return respond({})


def add_routes(routes: web.RouteTableDef) -> None:
    path = "/permissions/{securable_type}/{full_name}"
    routes.get(API_PREFIX + path)(_get_permissions("unity"))
    routes.patch(API_PREFIX + path)(_update_permissions("unity"))
    routes.get(ADMIN_PREFIX + path)(_get_permissions("raydelta"))
    routes.patch(ADMIN_PREFIX + path)(_update_permissions("raydelta"))
    routes.get(f"{ADMIN_PREFIX}/principals")(list_principals)
    routes.post(f"{ADMIN_PREFIX}/principals")(create_principal)
    routes.delete(f"{ADMIN_PREFIX}/principals/{{name}}")(delete_principal)
    routes.post(f"{ADMIN_PREFIX}/principals/{{name}}/token")(rotate_token)


__all__ = ["ADMIN_PREFIX", "add_routes"]
