"""Unity Catalog's metastore summary, catalogs and schemas.

``GET /metastore_summary``; ``POST/GET /catalogs``, ``GET/PATCH/DELETE
/catalogs/{name}``; ``POST/GET /schemas``, ``GET/PATCH/DELETE
/schemas/{full_name}``. Lists page with ``max_results``/``page_token``
(:func:`page`). Invariant: each handler is one call of the catalog's Unity
Catalog service (:func:`raydelta.uc.server.unity`); its replies are sent as
they dump (``null`` kept).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from raydelta.protocol.unity_catalog import ListCatalogsResponse, ListSchemasResponse
from raydelta.uc.errors import UCError
from raydelta.uc.server import API_PREFIX, body_of, respond, unity

MAX_PAGE = 1000
"""The server's page size when a list request asks for 0 (or more)."""


def page(items: list[Any], request: web.Request) -> tuple[list[Any], str | None]:
    """``items`` cut to the requested page; the token of the next one, if any."""
    raw = request.query.get("max_results")
    try:
        size = int(raw) if raw not in (None, "") else 0
    except ValueError:
        raise UCError("INVALID_ARGUMENT", f"max_results must be an integer, got {raw!r}") from None
    if size < 0:
        raise UCError("INVALID_ARGUMENT", f"max_results must not be negative, got {size}")
    size = MAX_PAGE if size == 0 else min(size, MAX_PAGE)
    token = request.query.get("page_token") or "0"
    try:
        start = int(token)
    except ValueError:
        raise UCError("INVALID_ARGUMENT", f"invalid page_token {token!r}") from None
    chunk = items[start : start + size]
    following = start + size
    return chunk, (str(following) if following < len(items) else None)


def required(body: dict[str, Any], key: str) -> Any:
    value = body.get(key)
    if value is None or value == "":
        raise UCError("INVALID_ARGUMENT", f"{key} is required")
    return value


def flag(request: web.Request, key: str) -> bool:
    return request.query.get(key, "false").lower() == "true"


async def metastore_summary(request: web.Request) -> web.Response:
    return respond((await unity(request).metastore_summary()).model_dump(mode="json"))


async def create_catalog(request: web.Request) -> web.Response:
    body = await body_of(request)
    info = await unity(request).create_catalog(
        required(body, "name"), body.get("comment"), body.get("properties") or {}
    )
    return respond(info.model_dump(mode="json"))


async def list_catalogs(request: web.Request) -> web.Response:
    items, following = page(await unity(request).catalogs(), request)
    listed = ListCatalogsResponse(catalogs=tuple(items), next_page_token=following)
    return respond(listed.model_dump(mode="json"))


async def get_catalog(request: web.Request) -> web.Response:
    info = await unity(request).catalog(request.match_info["name"])
    return respond(info.model_dump(mode="json"))


async def update_catalog(request: web.Request) -> web.Response:
    body = await body_of(request)
    info = await unity(request).update_catalog(
        request.match_info["name"],
        comment=body.get("comment"),
        properties=body.get("properties"),
        new_name=body.get("new_name"),
    )
    return respond(info.model_dump(mode="json"))


async def delete_catalog(request: web.Request) -> web.Response:
    await unity(request).delete_catalog(request.match_info["name"], force=flag(request, "force"))
    return respond({})


async def create_schema(request: web.Request) -> web.Response:
    body = await body_of(request)
    info = await unity(request).create_schema(
        required(body, "catalog_name"),
        required(body, "name"),
        body.get("comment"),
        body.get("properties") or {},
    )
    return respond(info.model_dump(mode="json"))


async def list_schemas(request: web.Request) -> web.Response:
    catalog = request.query.get("catalog_name")
    if not catalog:
        raise UCError("INVALID_ARGUMENT", "catalog_name is required")
    items, following = page(await unity(request).schemas(catalog), request)
    listed = ListSchemasResponse(schemas=tuple(items), next_page_token=following)
    return respond(listed.model_dump(mode="json"))


async def get_schema(request: web.Request) -> web.Response:
    info = await unity(request).schema(request.match_info["full_name"])
    return respond(info.model_dump(mode="json"))


async def update_schema(request: web.Request) -> web.Response:
    body = await body_of(request)
    info = await unity(request).update_schema(
        request.match_info["full_name"],
        comment=body.get("comment"),
        properties=body.get("properties"),
        new_name=body.get("new_name"),
    )
    return respond(info.model_dump(mode="json"))


async def delete_schema(request: web.Request) -> web.Response:
    full_name = request.match_info["full_name"]
    await unity(request).delete_schema(full_name, force=flag(request, "force"))
    return respond({})


def add_routes(routes: web.RouteTableDef) -> None:
    p = API_PREFIX
    routes.get(f"{p}/metastore_summary")(metastore_summary)
    routes.post(f"{p}/catalogs")(create_catalog)
    routes.get(f"{p}/catalogs")(list_catalogs)
    routes.get(f"{p}/catalogs/{{name}}")(get_catalog)
    routes.patch(f"{p}/catalogs/{{name}}")(update_catalog)
    routes.delete(f"{p}/catalogs/{{name}}")(delete_catalog)
    routes.post(f"{p}/schemas")(create_schema)
    routes.get(f"{p}/schemas")(list_schemas)
    routes.get(f"{p}/schemas/{{full_name}}")(get_schema)
    routes.patch(f"{p}/schemas/{{full_name}}")(update_schema)
    routes.delete(f"{p}/schemas/{{full_name}}")(delete_schema)


__all__ = ["add_routes", "flag", "page", "required"]
