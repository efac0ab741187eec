"""Fixtures for the Unity Catalog REST API tests: a real server on loopback in
front of a real ``Catalog`` actor (authorization on).

``uc_server`` yields a :class:`UCServerFixture`:

- ``.url``: the base URL (``http://127.0.0.1:PORT``); ``.api``: ``url +
  "/api/2.1/unity-catalog"``;
- ``.catalog``: the :class:`raydelta.Catalog` behind it (holding the
  bootstrap token); ``.root``: the directory where its tables go;
- ``.admin_token``: the bootstrap principal's token (owns everything);
- ``.token_for(principal, privileges, *, table="*")``: create ``principal``,
  grant it ``privileges`` (on one table's full name, or every table) and
  return its token;
- ``.restart_server()``: stop the HTTP server and start a new one on the
  same port (the catalog actor keeps running).

``sdk_configuration(server, token)`` configures Unity Catalog's Python SDK
(``unitycatalog-client``, async) for a token; ``uc_request`` (and
``server.request``) sends raw HTTP with urllib and returns ``(status, json
body)``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from raydelta.actors.catalog import catalog_actor_name
from raydelta.actors.cluster import normalize_uri
from raydelta.catalog import Catalog
from raydelta.protocol.privileges import Privilege
from raydelta.uc.server import UCServer, serve
from tests.catalog.conftest import kill_actor, kill_table_actors


@dataclass
class UCServerFixture:
    """A running server and what the tests need about it (module docstring)."""

    catalog: Catalog
    root: Path
    server: UCServer
    admin_token: str
    _principals: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def api(self) -> str:
        return self.server.api

    def token_for(
        self,
        principal: str,
        privileges: Iterable[Privilege | str] | Privilege | str = (),
        *,
        table: str = "*",
    ) -> str:
        token = self.catalog.create_principal(principal, token=self.admin_token)
        if privileges:
            self.catalog.grant(principal, table, privileges, token=self.admin_token)
        self._principals.append(principal)
        return token

    def restart_server(self) -> None:
        port = self.server.port
        self.server.stop()
        self.server = serve(self.catalog, host="127.0.0.1", port=port)

    def request(
        self, method: str, path: str, body: Any = None, *, token: str | None = None
    ) -> tuple[int, Any]:
        return uc_request(method, self.api + path, body, token=token)


def uc_request(
    method: str, url: str, body: Any = None, *, token: str | None = None
) -> tuple[int, Any]:
    """One HTTP request with urllib: ``(status, parsed JSON body or None)``."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    return status, (json.loads(raw) if raw.strip() else None)


def start_uc_server(root: Path, *, authorization: bool = True, **options: Any) -> UCServerFixture:
    name = options.pop("name", f"uc-{uuid.uuid4().hex[:12]}")
    catalog = Catalog(name=name, root=str(root), authorization=authorization, **options)
    server = catalog.serve(host="127.0.0.1", port=0)
    return UCServerFixture(
        catalog=catalog, root=root, server=server, admin_token=catalog.token or ""
    )


def stop_uc_server(fixture: UCServerFixture, tmp_path: Path) -> None:
    fixture.server.stop()
    kill_actor(catalog_actor_name(fixture.catalog.name))
    kill_table_actors(normalize_uri(str(tmp_path)))


@pytest.fixture
def uc_server(ray_cluster: Any, tmp_path: Path) -> Iterator[UCServerFixture]:
    fixture = start_uc_server(tmp_path / "warehouse")
    yield fixture
    stop_uc_server(fixture, tmp_path)


def sdk_configuration(server: UCServerFixture, token: str | None) -> Any:
    """A ``Configuration`` of Unity Catalog's Python SDK for ``server`` and ``token``
    (use it as ``async with ApiClient(configuration) as client: ...``)."""
    from unitycatalog.client import Configuration

    configuration = Configuration(host=server.api)
    if token is not None:
        configuration.access_token = token
    return configuration
