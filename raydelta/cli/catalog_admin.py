"""``raydelta catalog principals|grants|catalogs|schemas|tables``: administering a
running catalog server over HTTP (``raydelta catalog serve``).

Every command takes ``--url`` (or ``RAYDELTA_CATALOG_URL``; the server's base
URL, ``http://HOST:PORT``), ``--token`` (or ``RAYDELTA_CATALOG_TOKEN``) or
``--token-file PATH`` (the file ``catalog serve`` wrote the admin token
to), and ``--json`` (exactly one JSON document on stdout)::

    raydelta catalog principals list | create NAME | delete NAME | rotate NAME
    raydelta catalog grants show TYPE NAME [--principal P]
    raydelta catalog grants grant|revoke TYPE NAME PRINCIPAL PRIVILEGE...
    raydelta catalog catalogs list | show NAME | create NAME [--comment C] | drop NAME [--force]
    raydelta catalog schemas list CATALOG | show|create C.S | drop C.S [--force]
    raydelta catalog tables list C.S | show|drop C.S.T
    raydelta catalog tables create C.S.T --column NAME:TYPE... [--location URL]

``TYPE`` is ``catalog``, ``schema``, ``table``, ``external_location`` or
``metastore``; privileges are raydelta's (``read``, ``write``, ``alter``,
``own``, ``use_catalog``, ``use_schema``, ``create_schema``,
``create_table``...) or Unity Catalog's (``SELECT``, ``MODIFY``,
``MANAGE``, ``ALL_PRIVILEGES``, ``USE_CATALOG``...). Principals and grants
go through raydelta's admin API (``/api/raydelta/v1``), the rest through
Unity Catalog's REST API. A refused request exits non-zero with stderr
naming the error (``PermissionDeniedError: ...``, ``UnauthenticatedError:
...``, else ``CatalogRequestError: CODE (status): ...``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from raydelta.protocol.errors import (
    CatalogRequestError,
    InvalidArgumentError,
    PermissionDeniedError,
    UnauthenticatedError,
)

URL_VARIABLE = "RAYDELTA_CATALOG_URL"
TOKEN_VARIABLE = "RAYDELTA_CATALOG_TOKEN"
UC = "/api/2.1/unity-catalog"
ADMIN = "/api/raydelta/v1"
SECURABLE_TYPES = ("catalog", "schema", "table", "external_location", "metastore")


def connection_options() -> argparse.ArgumentParser:
    """The options every admin command takes (module docstring)."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--url", default=None, help=f"the server's base URL (${URL_VARIABLE})")
    options.add_argument("--token", default=None, help=f"a principal's token (${TOKEN_VARIABLE})")
    options.add_argument("--token-file", default=None, help="read the token from this file")
    options.add_argument("--json", action="store_true", help="one JSON document on stdout")
    return options


def register_admin(actions: Any) -> None:
    """Add the admin commands to ``raydelta catalog``'s subcommands."""
    common = connection_options()
    for noun, verbs in (
        ("principals", {"list": (), "create": ("name",), "delete": ("name",), "rotate": ("name",)}),
        ("catalogs", {"list": (), "show": ("name",), "create": ("name",), "drop": ("name",)}),
        (
            "schemas",
            {"list": ("catalog",), "show": ("name",), "create": ("name",), "drop": ("name",)},
        ),
        (
            "tables",
            {"list": ("schema",), "show": ("name",), "create": ("name",), "drop": ("name",)},
        ),
    ):
        parser = actions.add_parser(noun, help=f"{noun} of a running catalog server")
        verbs_parser = parser.add_subparsers(dest="verb", required=True)
        for verb, positional in verbs.items():
            sub = verbs_parser.add_parser(verb, parents=[common])
            for name in positional:
                sub.add_argument(name)
            if verb == "create" and noun in ("catalogs", "schemas"):
                sub.add_argument("--comment", default=None)
            if verb == "drop" and noun in ("catalogs", "schemas"):
                sub.add_argument("--force", action="store_true", help="with what it holds")
            if verb == "create" and noun == "tables":
                sub.add_argument("--column", action="append", default=[], metavar="NAME:TYPE")
                sub.add_argument("--location", default=None, help="an external table's URL")
                sub.add_argument("--comment", default=None)
    grants = actions.add_parser("grants", help="privileges on catalogs, schemas, tables")
    verbs_parser = grants.add_subparsers(dest="verb", required=True)
    show = verbs_parser.add_parser("show", parents=[common])
    show.add_argument("securable_type", choices=SECURABLE_TYPES)
    show.add_argument("name")
    show.add_argument("--principal", default=None)
    for verb in ("grant", "revoke"):
        sub = verbs_parser.add_parser(verb, parents=[common])
        sub.add_argument("securable_type", choices=SECURABLE_TYPES)
        sub.add_argument("name")
        sub.add_argument("principal")
        sub.add_argument("privileges", nargs="+")


class Server:
    """One catalog server, called with one token."""

    def __init__(self, args: argparse.Namespace) -> None:
        url = args.url or os.environ.get(URL_VARIABLE)
        if not url:
            raise InvalidArgumentError(f"the server's URL is needed: --url or ${URL_VARIABLE}")
        self.url = url.rstrip("/")
        token = args.token or os.environ.get(TOKEN_VARIABLE)
        if args.token_file:
            with open(args.token_file, encoding="utf-8") as handle:
                token = handle.read().strip()
        self.token = token

    def call(self, method: str, path: str, body: Any = None, **query: Any) -> Any:
        """The JSON reply to one request; a refusal raised as a typed error."""
        wanted = {k: str(v).lower() if isinstance(v, bool) else v for k, v in query.items()}
        params = urllib.parse.urlencode({k: v for k, v in wanted.items() if v is not None})
        request = urllib.request.Request(
            self.url + path + (f"?{params}" if params else ""),
            data=None if body is None else json.dumps(body).encode(),
            method=method,
        )
        request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=300) as response:
                raw = response.read()
        except urllib.error.HTTPError as error:
            raise _refusal(error.code, error.read()) from None
        except urllib.error.URLError as error:
            raise CatalogRequestError(f"cannot reach {self.url}: {error.reason}") from None
        return json.loads(raw) if raw.strip() else {}

    def pages(self, path: str, key: str, **query: Any) -> list[Any]:
        """Every item of a paged Unity Catalog list."""
        items: list[Any] = []
        token = None
        while True:
            reply = self.call("GET", path, page_token=token, **query)
            items.extend(reply.get(key) or [])
            token = reply.get("next_page_token")
            if not token:
                return items


def _refusal(status: int, raw: bytes) -> Exception:
    try:
        body = json.loads(raw)
    except ValueError:
        body = {}
    code = str(body.get("error_code", "")) if isinstance(body, dict) else ""
    message = str(body.get("message", raw[:200])) if isinstance(body, dict) else str(raw[:200])
    if code == "UNAUTHENTICATED":
        return UnauthenticatedError(message)
    if code == "PERMISSION_DENIED":
        return PermissionDeniedError(message)
    return CatalogRequestError(f"{code or 'HTTP'} ({status}): {message}", code, status)


def _quoted(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def run_admin(args: argparse.Namespace) -> int:
    """Run one admin command (module docstring)."""
    server = Server(args)
    handler = {
        "principals": _principals,
        "grants": _grants,
        "catalogs": _catalogs,
        "schemas": _schemas,
        "tables": _tables,
    }[args.catalog_command]
    document, lines = handler(server, args)
    if args.json:
        sys.stdout.write(json.dumps(document) + "\n")
    else:
        for line in lines:
            sys.stdout.write(f"{line}\n")
    return 0


Reply = tuple[Any, list[str]]


def _principals(server: Server, args: argparse.Namespace) -> Reply:
    if args.verb == "list":
        listed = server.call("GET", f"{ADMIN}/principals")["principals"]
        return listed, [p["name"] for p in listed]
    if args.verb == "create":
        reply = server.call("POST", f"{ADMIN}/principals", {"name": args.name})
        return reply, [reply["token"]]
    if args.verb == "rotate":
        reply = server.call("POST", f"{ADMIN}/principals/{_quoted(args.name)}/token")
        return reply, [reply["token"]]
    server.call("DELETE", f"{ADMIN}/principals/{_quoted(args.name)}")
    return {"deleted": args.name}, [f"deleted principal {args.name}"]


def _grants(server: Server, args: argparse.Namespace) -> Reply:
    path = f"{ADMIN}/permissions/{args.securable_type}/{_quoted(args.name)}"
    if args.verb == "show":
        reply = server.call("GET", path, principal=args.principal)
    else:
        key = "add" if args.verb == "grant" else "remove"
        change = {"principal": args.principal, "add": [], "remove": [], key: args.privileges}
        reply = server.call("PATCH", path, {"changes": [change]})
    lines = [
        f"{a['principal']}  {' '.join(a['privileges'])}" for a in reply["privilege_assignments"]
    ]
    return reply, lines


def _described(reply: dict[str, Any]) -> list[str]:
    return [f"{k}  {json.dumps(v) if isinstance(v, dict | list) else v}" for k, v in reply.items()]


def _catalogs(server: Server, args: argparse.Namespace) -> Reply:
    if args.verb == "list":
        items = server.pages(f"{UC}/catalogs", "catalogs")
        return items, [c["name"] for c in items]
    if args.verb == "create":
        body = {"name": args.name, "comment": args.comment}
        reply = server.call("POST", f"{UC}/catalogs", body)
        return reply, _described(reply)
    path = f"{UC}/catalogs/{_quoted(args.name)}"
    if args.verb == "show":
        reply = server.call("GET", path)
        return reply, _described(reply)
    server.call("DELETE", path, force=args.force)
    return {"dropped": args.name}, [f"dropped catalog {args.name}"]


def _schemas(server: Server, args: argparse.Namespace) -> Reply:
    if args.verb == "list":
        items = server.pages(f"{UC}/schemas", "schemas", catalog_name=args.catalog)
        return items, [s["full_name"] for s in items]
    if args.verb == "create":
        catalog, _, name = args.name.partition(".")
        body = {"catalog_name": catalog, "name": name, "comment": args.comment}
        reply = server.call("POST", f"{UC}/schemas", body)
        return reply, _described(reply)
    path = f"{UC}/schemas/{_quoted(args.name)}"
    if args.verb == "show":
        reply = server.call("GET", path)
        return reply, _described(reply)
    server.call("DELETE", path, force=args.force)
    return {"dropped": args.name}, [f"dropped schema {args.name}"]


def _tables(server: Server, args: argparse.Namespace) -> Reply:
    if args.verb == "list":
        catalog, _, schema = args.schema.partition(".")
        items = server.pages(f"{UC}/tables", "tables", catalog_name=catalog, schema_name=schema)
        return items, [f"{t['catalog_name']}.{t['schema_name']}.{t['name']}" for t in items]
    if args.verb == "create":
        reply = server.call("POST", f"{UC}/tables", _table_body(args))
        return reply, _described(reply)
    path = f"{UC}/tables/{_quoted(args.name)}"
    if args.verb == "show":
        reply = server.call("GET", path)
        return reply, _described(reply)
    server.call("DELETE", path)
    return {"dropped": args.name}, [f"dropped table {args.name}"]


def _table_body(args: argparse.Namespace) -> dict[str, Any]:
    """Unity Catalog's ``CreateTable`` of ``tables create`` (a managed table
    unless ``--location``)."""
    parts = args.name.split(".")
    if len(parts) != 3 or not all(parts):
        raise InvalidArgumentError(f"expected catalog.schema.table, got {args.name!r}")
    columns = []
    for position, spec in enumerate(args.column):
        name, _, type_text = spec.partition(":")
        if not name or not type_text:
            raise InvalidArgumentError(f"--column takes NAME:TYPE (id:bigint), got {spec!r}")
        columns.append(
            {"name": name, "type_text": type_text, "position": position, "nullable": True}
        )
    body: dict[str, Any] = {
        "catalog_name": parts[0],
        "schema_name": parts[1],
        "name": parts[2],
        "table_type": "EXTERNAL" if args.location else "MANAGED",
        "data_source_format": "DELTA",
        "columns": columns,
        "comment": args.comment,
    }
    if args.location:
        body["storage_location"] = args.location
    return body


__all__ = ["register_admin", "run_admin"]
