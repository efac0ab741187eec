"""Unity Catalog's external locations: ``POST/GET /external-locations``,
``GET/PATCH/DELETE /external-locations/{name}``.

An external location is a path prefix an admin registered (``name``,
``url``, optional ``credential_name``, ``comment``, ``read_only``); a
principal granted ``CREATE_EXTERNAL_TABLE`` on it may create external tables
inside it, ``READ_FILES``/``WRITE_FILES`` get path credentials there.
Creating one is the admin's; changing or deleting one its owner's; lists
show the ones the caller holds a privilege on. ``credential_name`` is
stored and echoed: this catalog vends every S3 credential from the one role
it is configured with. Invariant: each handler is one catalog actor call.
"""

from __future__ import annotations

from aiohttp import web

from raydelta.uc.errors import UCError
from raydelta.uc.routes_namespaces import flag, page, required
from raydelta.uc.routes_tables import _location_url, normalize_location
from raydelta.uc.server import API_PREFIX, body_of, call, respond


def _info(info: dict[str, object]) -> dict[str, object]:
    out = {k: v for k, v in info.items() if v is not None}
    out["url"] = _location_url(str(info["url"]))
    return out


async def create_external_location(request: web.Request) -> web.Response:
    body = await body_of(request)
    read_only = body.get("read_only", False)
    if not isinstance(read_only, bool):
        raise UCError("INVALID_ARGUMENT", "read_only must be true or false")
    info = await call(
        request,
        "uc_create_external_location",
        str(required(body, "name")),
        normalize_location(required(body, "url")),
        credential_name=body.get("credential_name"),
        comment=body.get("comment"),
        read_only=read_only,
    )
    return respond(_info(info))


async def list_external_locations(request: web.Request) -> web.Response:
    items, following = page(await call(request, "uc_external_locations"), request)
    return respond({"external_locations": [_info(i) for i in items], "next_page_token": following})


async def get_external_location(request: web.Request) -> web.Response:
    (info,) = await call(request, "uc_external_locations", request.match_info["name"])
    return respond(_info(info))


async def update_external_location(request: web.Request) -> web.Response:
    body = await body_of(request)
    if body.get("url") is not None:
        body["url"] = normalize_location(body["url"])
    info = await call(request, "uc_update_external_location", request.match_info["name"], body)
    return respond(_info(info))


async def delete_external_location(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    await call(request, "uc_delete_external_location", name, flag(request, "force"))
    return respond({})


def add_routes(routes: web.RouteTableDef) -> None:
    p = f"{API_PREFIX}/external-locations"
    routes.post(p)(create_external_location)
    routes.get(p)(list_external_locations)
    routes.get(f"{p}/{{name}}")(get_external_location)
    routes.patch(f"{p}/{{name}}")(update_external_location)
    routes.delete(f"{p}/{{name}}")(delete_external_location)


__all__ = ["add_routes"]
