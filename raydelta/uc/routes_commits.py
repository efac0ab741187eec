"""Unity Catalog's Delta commits endpoints (``/delta/preview/commits``), as
delta-storage 4.4.0's ``UCTokenBasedRestClient`` calls them.

- ``GET`` with a JSON body ``{table_id, table_uri, start_version,
  end_version?}``: the unbackfilled (ratified, not yet published) commits in
  the range, ``{commits: [{version, timestamp, file_name, file_size,
  file_modification_timestamp}], latest_table_version}``; the range may
  also come as query parameters.
- ``POST`` with ``{table_id, table_uri, commit_info?, latest_backfilled_version?,
  metadata?, uniform?}``: ratify the staged file ``commit_info.file_name``
  as version ``commit_info.version`` (an empty ``{}`` answer once durable).

Invariant: the catalog judges the staged file itself (its actions decide
the privileges needed); ``metadata`` in the request is informational only.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from raydelta.uc.errors import UCError
from raydelta.uc.routes_namespaces import required
from raydelta.uc.server import API_PREFIX, body_of, respond, unity


def _version(value: Any, key: str, *, optional: bool = False) -> int | None:
    if value is None or value == "":
        if optional:
            return None
        raise UCError("INVALID_ARGUMENT", f"{key} is required")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise UCError("INVALID_ARGUMENT", f"{key} must be an integer, got {value!r}") from None
    if number < 0 or isinstance(value, bool) or (isinstance(value, float) and value != number):
        raise UCError("INVALID_ARGUMENT", f"{key} must be a non-negative integer, got {value!r}")
    return number


async def get_commits(request: web.Request) -> web.Response:
    body = await body_of(request)
    merged = {**dict(request.query), **body}
    start = _version(merged.get("start_version", 0), "start_version")
    end = _version(merged.get("end_version"), "end_version", optional=True)
    if end is not None and start is not None and end < start:
        raise UCError("INVALID_ARGUMENT", f"end_version {end} is before start_version {start}")
    assert start is not None  # not optional
    answer = await unity(request).get_commits(
        str(required(merged, "table_id")), str(required(merged, "table_uri")), start, end
    )
    return respond(answer.model_dump(mode="json"))


async def commit(request: web.Request) -> web.Response:
    body = await body_of(request)
    info = body.get("commit_info")
    if info is not None and not isinstance(info, dict):
        raise UCError("INVALID_ARGUMENT", "commit_info must be an object")
    backfilled = _version(
        body.get("latest_backfilled_version"), "latest_backfilled_version", optional=True
    )
    if info is None and backfilled is None:
        raise UCError("INVALID_ARGUMENT", "a commit needs commit_info or latest_backfilled_version")
    if info is not None:
        info = {**info, "version": _version(info.get("version"), "commit_info.version")}
    await unity(request).commit(
        str(required(body, "table_id")), str(required(body, "table_uri")), info, backfilled
    )
    return respond({})


def add_routes(routes: web.RouteTableDef) -> None:
    routes.get(f"{API_PREFIX}/delta/preview/commits")(get_commits)
    routes.post(f"{API_PREFIX}/delta/preview/commits")(commit)


__all__ = ["add_routes"]
