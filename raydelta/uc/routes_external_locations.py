"""Unity Catalog's external locations: ``POST/GET /external-locations``,
``GET/PATCH/DELETE /external-locations/{name}``.

An external location is a path prefix an admin registered (``name``,
``url``, optional ``credential_name``, ``comment``, ``read_only``); a
principal granted ``CREATE_EXTERNAL_TABLE`` on it may create external tables
inside it, ``READ_FILES``/``WRITE_FILES`` get path credentials there.
Creating one is the admin's; changing or deleting one its owner's; lists
show the ones the caller holds a privilege on. ``credential_name`` is
stored and echoed: this catalog vends every S3 credential from the one role
it is configured with. Invariant: each handler is one call of the catalog's
locations service (:mod:`raydelta.actors.catalog.locations`); a field it holds
no value for is left out.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from raydelta.protocol.unity_catalog import ExternalLocationInfo
from raydelta.uc.errors import UCError
from raydelta.uc.routes_namespaces import flag, page, required
from raydelta.uc.routes_tables import normalize_location
from raydelta.uc.server import API_PREFIX, body_of, location_url, respond, unity


def _info(info: ExternalLocationInfo) -> dict[str, Any]:
    spelled = info.model_copy(update={"url": location_url(info.url)})
    return spelled.model_dump(mode="json", exclude_none=True)


async def create_external_location(request: web.Request) -> web.Response:
    body = await body_of(request)
    read_only = body.get("read_only", False)
    if not isinstance(read_only, bool):
        raise UCError("INVALID_ARGUMENT", "read_only must be true or false")
    url = normalize_location(required(body, "url"))
    if url is None:
        raise UCError("INVALID_ARGUMENT", "url is required")
    info = await unity(request).create_external_location(
        str(required(body, "name")),
        url,
        credential_name=body.get("credential_name"),
        comment=body.get("comment"),
        read_only=read_only,
    )
    return respond(_info(info))


async def list_external_locations(request: web.Request) -> web.Response:
    items, following = page(await unity(request).external_locations(), request)
    return respond({"external_locations": [_info(i) for i in items], "next_page_token": following})


async def get_external_location(request: web.Request) -> web.Response:
    info = await unity(request).external_location(request.match_info["name"])
    return respond(_info(info))


async def update_external_location(request: web.Request) -> web.Response:
    body = await body_of(request)
    url = None if body.get("url") is None else normalize_location(body["url"])
    read_only = body.get("read_only")
    info = await unity(request).update_external_location(
        request.match_info["name"],
        new_name=body.get("new_name"),
        url=url,
        comment=body.get("comment"),
        credential_name=body.get("credential_name"),
        read_only=None if read_only is None else bool(read_only),
    )
    return respond(_info(info))


async def delete_external_location(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    await unity(request).delete_external_location(name, force=flag(request, "force"))
    return respond({})


def add_routes(routes: web.RouteTableDef) -> None:
    p = f"{API_PREFIX}/external-locations"
    routes.post(p)(create_external_location)
    routes.get(p)(list_external_locations)
    routes.get(f"{p}/{{name}}")(get_external_location)
    routes.patch(f"{p}/{{name}}")(update_external_location)
    routes.delete(f"{p}/{{name}}")(delete_external_location)


__all__ = ["add_routes"]
