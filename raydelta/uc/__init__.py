"""raydelta's catalog speaking Unity Catalog's REST API (``/api/2.1/unity-catalog``).

>>> import raydelta                                           # doctest: +SKIP
>>> server = raydelta.Catalog(root="/tmp/warehouse").serve(port=8080)
>>> server.url                                                # doctest: +SKIP
'http://127.0.0.1:8080'

See :mod:`raydelta.uc.server` (the application and its lifecycle),
:mod:`raydelta.uc.client` (the typed client of the catalog's Unity Catalog
service the routes call) and the route modules (namespaces, tables,
credentials, commits, the Delta REST API, external locations).
"""

from __future__ import annotations

from raydelta.uc.server import API_PREFIX, UCServer, create_app, serve

__all__ = ["API_PREFIX", "UCServer", "create_app", "serve"]
