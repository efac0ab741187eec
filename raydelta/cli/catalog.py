"""``raydelta catalog``: serve a raydelta catalog behind Unity Catalog's REST
API, and administer a running one (:mod:`raydelta.cli.catalog_admin`).

``raydelta catalog serve [--host 127.0.0.1] [--port 8080 (0: any free port)]
[--store PATH | --store postgresql://... [--root PATH]] [--name default]
[--authorization | --no-auth] [--token-file PATH]``

Starts (or attaches to) the named catalog actor and serves it at
``http://HOST:PORT/api/2.1/unity-catalog`` (and raydelta's admin API at
``/api/raydelta/v1``) until interrupted (SIGINT or SIGTERM). ``--store`` is
the catalog's root: its SQLite store, its principals and namespaces, and
its managed tables (default ``./raydelta-catalog``); or the URL of its store
(``postgresql://user@host:5432/db``, any scheme of
:data:`~raydelta.storage.catalog.stores.STORE_SCHEMES`), and then ``--root``
is where the rest goes (same default). The first stdout line is the
server's base URL.

Authorization (security settings are never silently ignored):

- a new catalog has authorization on unless ``--no-auth``;
- a catalog that has it keeps it: ``--no-auth`` is refused;
- a catalog that ran without it is served so only when asked
  (``--no-auth``); ``--authorization`` turns it on (then it stays on).

The bootstrap (admin) token, issued when authorization is first turned on,
is never printed: it is written to ``--token-file`` (default
``<root>/admin-token`` for a local root, else ``./raydelta-catalog-admin-token``),
created with mode 0600, and stderr says where (``admin token written to
PATH``), so a log of the server's output holds no secret. Later starts
issue none: keep the file (``raydelta catalog principals rotate
catalog-admin --token-file PATH`` replaces the token, the old one then
stops working).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from raydelta.cli.catalog_admin import register_admin, run_admin
from raydelta.protocol.errors import AuthorizationDisabledError, InvalidArgumentError

TOKEN_FILE_NAME = "admin-token"
REMOTE_TOKEN_FILE = "raydelta-catalog-admin-token"


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
    auth = serve.add_mutually_exclusive_group()
    auth.add_argument(
        "--authorization",
        action="store_true",
        help="turn authorization on (needed for a catalog that ran without it)",
    )
    auth.add_argument("--no-auth", action="store_true", help="every caller owns everything")
    serve.add_argument(
        "--token-file", default=None, help="where the bootstrap admin token is written (0600)"
    )
    register_admin(actions)
    command("catalog")(_catalog)


def wanted_authorization(recorded: bool | None, *, turn_on: bool, turn_off: bool) -> bool:
    """Whether to serve with authorization (the module docstring's rules);
    ``recorded`` is what the catalog's root says (None: a new catalog)."""
    if recorded is True:
        if turn_off:
            raise InvalidArgumentError(
                "this catalog has authorization on, and it stays on: --no-auth is refused"
            )
        return True
    if recorded is False and not (turn_on or turn_off):
        raise AuthorizationDisabledError(
            "this catalog runs without authorization: pass --authorization to turn it on "
            "(it then stays on) or --no-auth to serve it without"
        )
    return not turn_off


def write_token_file(path: str, token: str) -> None:
    """``token`` into ``path``, readable by its owner only (mode 0600 from the
    moment the file exists)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(descriptor, 0o600)
        os.write(descriptor, f"{token}\n".encode())
    finally:
        os.close(descriptor)


def _token_file(args: argparse.Namespace, root_uri: str) -> str:
    if args.token_file:
        return str(args.token_file)
    if root_uri.startswith("file://"):
        return os.path.join(root_uri[len("file://") :], TOKEN_FILE_NAME)
    return REMOTE_TOKEN_FILE


def _catalog(args: argparse.Namespace) -> int:
    if args.catalog_command != "serve":
        return run_admin(args)
    import signal
    import threading

    from raydelta.actors.catalog.auth import Authorizer
    from raydelta.actors.cluster import ensure_ray
    from raydelta.catalog import DEFAULT_ROOT, Catalog
    from raydelta.storage.catalog.stores import is_store_url
    from raydelta.storage.table_location import normalize_uri

    if args.port < 0 or args.port > 65535:
        raise ValueError(f"--port must be 0-65535, got {args.port}")
    store_url = args.store if args.store is not None and is_store_url(args.store) else None
    if args.root is not None and args.store is not None and store_url is None:
        raise ValueError("--root goes with a store URL (--store postgresql://...), not a root")
    root = args.root if store_url is not None else args.store
    root_uri = normalize_uri(root or DEFAULT_ROOT)
    authorization = wanted_authorization(
        Authorizer.recorded(root_uri), turn_on=args.authorization, turn_off=args.no_auth
    )
    ensure_ray()
    catalog = Catalog(store=store_url, name=args.name, root=root, authorization=authorization)
    if catalog.authorization != authorization:
        raise InvalidArgumentError(
            f"catalog {args.name!r} is running already with authorization "
            f"{'on' if catalog.authorization else 'off'}"
        )
    if catalog.token is not None:
        path = _token_file(args, root_uri)
        write_token_file(path, catalog.token)
        sys.stderr.write(f"admin token written to {path} (mode 0600)\n")
    sys.stderr.write(f"authorization: {'on' if authorization else 'off'}\n")
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


__all__ = ["register", "wanted_authorization", "write_token_file"]
