"""``raydelta catalog serve``: a raydelta catalog behind Unity Catalog's REST API.

``raydelta catalog serve [--host 127.0.0.1] [--port 8080 (0: any free port)]
[--store PATH | --store postgresql://... [--root PATH]] [--name default] [--no-auth]``

Starts (or attaches to) the named catalog actor and serves it at
``http://HOST:PORT/api/2.1/unity-catalog`` until interrupted (SIGINT or SIGTERM). ``--store`` is
the catalog's root: its SQLite store, its principals and namespaces, and
its managed tables (default ``./raydelta-catalog``); or the URL of its store
(``postgresql://user@host:5432/db``, any scheme of
:data:`~raydelta.storage.catalog.stores.STORE_SCHEMES`), and then ``--root``
is where the rest goes (same default). Authorization is on
unless ``--no-auth``; when this process starts the catalog, the bootstrap
(admin) token is printed once on stderr (``admin token: ...``), the only
time it is shown. The first stdout line is the server's base URL.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any


def register(commands: Any, command: Callable[[str], Callable[[Any], Any]]) -> None:
    catalog = commands.add_parser("catalog", help="a raydelta catalog (Unity Catalog REST API)")
    actions = catalog.add_subparsers(dest="catalog_command", required=True)
    serve = actions.add_parser("serve", help="serve the catalog over Unity Catalog's REST API")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument(
        "--store",
        default=None,
        help="the catalog's root directory or URI, or its store's URL (postgresql://...)",
    )
    serve.add_argument(
        "--root", default=None, help="with a store URL: the catalog's root directory or URI"
    )
    serve.add_argument("--name", default="default", help="the catalog actor's name")
    serve.add_argument("--no-auth", action="store_true", help="every caller owns everything")
    command("catalog")(_catalog)


def _catalog(args: argparse.Namespace) -> int:
    import signal
    import threading

    from raydelta.actors.cluster import ensure_ray
    from raydelta.catalog import Catalog
    from raydelta.storage.catalog.stores import is_store_url

    if args.port < 0 or args.port > 65535:
        raise ValueError(f"--port must be 0-65535, got {args.port}")
    store_url = args.store if args.store is not None and is_store_url(args.store) else None
    if args.root is not None and args.store is not None and store_url is None:
        raise ValueError("--root goes with a store URL (--store postgresql://...), not a root")
    root = args.root if store_url is not None else args.store
    ensure_ray()
    catalog = Catalog(store=store_url, name=args.name, root=root, authorization=not args.no_auth)
    if catalog.token is not None:
        sys.stderr.write(f"admin token: {catalog.token}\n")
    server = catalog.serve(host=args.host, port=args.port)
    sys.stdout.write(f"{server.url}\n")
    sys.stdout.flush()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        while not done.wait(3600):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


__all__ = ["register"]
