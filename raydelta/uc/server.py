"""The Unity Catalog REST server in front of a :class:`raydelta.Catalog`.

:func:`create_app` builds the ``aiohttp.web`` application serving the part
of Unity Catalog's REST API (``/api/2.1/unity-catalog/...``) that Unity
Catalog's connectors and commit coordinator clients use; :func:`serve`
runs it on a background thread and returns a :class:`UCServer` handle
(``.url``, ``.stop()``). raydelta's own admin API (principals, and grants in
raydelta's privilege names) is served beside it under ``/api/raydelta/v1``
(:mod:`raydelta.uc.routes_permissions`).

Invariants:
- Every request is answered by one call to the catalog's Unity Catalog
  service, through its typed client (:func:`unity`,
  :class:`~raydelta.uc.client.UnityCatalogClient`), made with the request's
  bearer token (``Authorization: Bearer <token>``, the catalog's principals'
  tokens): the service authenticates and judges it, exactly as the catalog
  does raydelta's own clients, so HTTP adds no second rule set. The routes
  serialise the service's typed replies
  (:mod:`raydelta.protocol.unity_catalog`), spelling local locations
  ``file:///path`` (:func:`location_url`).
- Every failure, an unknown route or method included, is answered with
  Unity Catalog's JSON error (:mod:`raydelta.uc.errors`), never HTML.
- The server holds no state of its own: stopping and restarting it (or the
  catalog actor behind it) loses nothing a client was told succeeded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from raydelta.protocol.locations import file_url
from raydelta.uc.client import UnityCatalogClient
from raydelta.uc.errors import UCError, error_for

if TYPE_CHECKING:
    from raydelta.catalog import Catalog

logger = logging.getLogger(__name__)

API_PREFIX = "/api/2.1/unity-catalog"
"""Where Unity Catalog's REST API lives under the server's base URL."""

CATALOG_KEY: web.AppKey[Catalog] = web.AppKey("catalog")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def bearer_token(request: web.Request) -> str | None:
    """The request's bearer token (None when it sends none)."""
    header = request.headers.get("Authorization")
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise UCError("UNAUTHENTICATED", "the Authorization header must be 'Bearer <token>'")
    return token.strip()


def unity(request: web.Request) -> UnityCatalogClient:
    """The typed client of the catalog's Unity Catalog service, calling as the
    request's bearer token (:mod:`raydelta.uc.client`)."""
    return UnityCatalogClient(request.app[CATALOG_KEY].actor, bearer_token(request))


async def body_of(request: web.Request) -> dict[str, Any]:
    """The request's JSON object body (an empty one when it has none)."""
    if not request.can_read_body:
        return {}
    text = await request.text()
    if not text.strip():
        return {}
    try:
        body = json.loads(text)
    except ValueError:
        raise UCError("INVALID_ARGUMENT", "the request body is not JSON") from None
    if not isinstance(body, dict):
        raise UCError("INVALID_ARGUMENT", "the request body must be a JSON object")
    return body


def location_url(location: str) -> str:
    """A location as Unity Catalog's clients read it: local ones ``file:///path``
    (what Spark and Hadoop expect)."""
    return file_url(location) if location else location


def respond(document: Any, *, status: int = 200) -> web.Response:
    return web.json_response(document, status=status, dumps=_dumps)


def _dumps(document: Any) -> str:
    return json.dumps(document, separators=(",", ":"))


DELTA_API_PREFIX = f"{API_PREFIX}/delta/v1"


def error_response(error: UCError, request: web.Request) -> web.Response:
    """Unity Catalog's error body, or the Delta REST API's on its paths."""
    if request.path.startswith(DELTA_API_PREFIX):
        status, body = error.delta_body()
        if request.method == "HEAD":
            return web.Response(status=status)
        return respond(body, status=status)
    return respond(error.body(), status=error.status)


@web.middleware
async def uc_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure as Unity Catalog's JSON error (module docstring)."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status == 404:
            return error_response(
                UCError("NOT_FOUND", f"no such endpoint: {request.method} {request.path}"),
                request,
            )
        if exc.status == 405:
            return error_response(
                UCError(
                    "UNIMPLEMENTED",
                    f"method {request.method} is not supported on {request.path}",
                    status=405,
                ),
                request,
            )
        return error_response(UCError("INVALID_ARGUMENT", exc.reason, status=exc.status), request)
    except Exception as exc:
        uc_error = error_for(exc)
        if uc_error.status >= 500:
            logger.exception("%s %s failed", request.method, request.path)
        return error_response(uc_error, request)


def create_app(catalog: Catalog) -> web.Application:
    """The Unity Catalog REST application in front of ``catalog``."""
    from raydelta.uc import (
        routes_commits,
        routes_credentials,
        routes_delta,
        routes_external_locations,
        routes_namespaces,
        routes_permissions,
        routes_tables,
    )

    app = web.Application(middlewares=[uc_errors])
    app[CATALOG_KEY] = catalog
    routes = web.RouteTableDef()
    modules = (
        routes_namespaces,
        routes_tables,
        routes_credentials,
        routes_commits,
        routes_delta,
        routes_external_locations,
        routes_permissions,
    )
    for module in modules:
        module.add_routes(routes)
    app.router.add_routes(routes)
    return app


@dataclass
class UCServer:
    """A running server (:func:`serve`): ``url`` is its base URL, ``api`` the
    Unity Catalog API root under it."""

    host: str
    port: int
    _runner: web.AppRunner
    _loop: asyncio.AbstractEventLoop
    _thread: threading.Thread
    _stopped: bool = field(default=False)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def api(self) -> str:
        return self.url + API_PREFIX

    def stop(self) -> None:
        """Stop serving (idempotent); the catalog actor keeps running."""
        if self._stopped:
            return
        self._stopped = True
        future = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
        future.result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    def __enter__(self) -> UCServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"raydelta.uc.UCServer({self.url!r})"


def serve(catalog: Catalog, *, host: str = "127.0.0.1", port: int = 0) -> UCServer:
    """Serve ``catalog`` on ``host:port`` (0: a free port) from a background thread."""
    loop = asyncio.new_event_loop()
    started: dict[str, Any] = {}
    ready = threading.Event()

    async def start() -> None:
        runner = web.AppRunner(create_app(catalog), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        server = site._server
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        started["runner"] = runner
        started["port"] = sockets[0].getsockname()[1] if sockets else port

    def main() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(start())
        except BaseException as exc:
            started["error"] = exc
            ready.set()
            return
        ready.set()
        loop.run_forever()
        loop.close()

    thread = threading.Thread(target=main, name="raydelta-uc-server", daemon=True)
    thread.start()
    ready.wait()
    if "error" in started:
        raise started["error"]
    return UCServer(host, int(started["port"]), started["runner"], loop, thread)


__all__ = ["API_PREFIX", "UCServer", "bearer_token", "create_app", "location_url", "serve", "unity"]
