"""Fixtures for the Unity Catalog REST API tests: a real server on loopback in
front of a real ``Catalog`` actor (authorization on).

``uc_server`` yields a :class:`UCServerFixture`:

- ``.url``: the base URL (``http://127.0.0.1:PORT``); ``.api``: ``url +
  "/api/2.1/unity-catalog"``;
- ``.catalog``: the :class:`raydelta.Catalog` behind it (holding the
  bootstrap token); ``.root``: the directory where its tables go;
- ``.admin_token``: the bootstrap principal's token (owns everything);
- ``.token_for(principal, privileges, *, table="*")``: create ``principal``,
  grant it ``privileges`` (on one table's full name, with the usage of its
  catalog and schema that Unity Catalog requires: :func:`grant_usage`; or
  every table) and return its token;
- ``.restart_server()``: stop the HTTP server and start a new one on the
  same port (the catalog actor keeps running).

``sdk_client(server, token)`` is a client of Unity Catalog's Python SDK
(``unitycatalog-client``, async) sending a token; ``uc_request`` (and
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

from raydelta.actors.catalog.actor import catalog_actor_name
from raydelta.catalog import Catalog
from raydelta.protocol.privileges import Privilege
from raydelta.uc.server import UCServer, serve
from tests.actor_teardown import kill_actors_under
from tests.catalog.conftest import kill_actor

VENDING_ROLE = "arn:aws:iam::123456789012:role/raydelta-vending"
"""The role test catalogs on S3 vend credentials from (moto's STS assumes any ARN)."""


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
            grant_usage(self.catalog, principal, table, token=self.admin_token)
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


def grant_usage(catalog: Catalog, principal: str, table: str, *, token: str) -> None:
    """Give ``principal`` what Unity Catalog needs before a table ``c.s.t`` is
    reachable at all: ``USE_CATALOG`` on ``c``, ``USE_SCHEMA`` on ``c.s``
    (nothing for other names)."""
    parts = table.split(".")
    if len(parts) != 3:
        return
    catalog.grant(principal, parts[0], ["USE_CATALOG"], securable_type="catalog", token=token)
    schema = f"{parts[0]}.{parts[1]}"
    catalog.grant(principal, schema, ["USE_SCHEMA"], securable_type="schema", token=token)


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
    kill_actors_under(tmp_path)


@pytest.fixture
def uc_server(ray_cluster: Any, tmp_path: Path) -> Iterator[UCServerFixture]:
    fixture = start_uc_server(tmp_path / "warehouse")
    yield fixture
    stop_uc_server(fixture, tmp_path)


def sdk_client(server: UCServerFixture, token: str | None) -> Any:
    """An ``ApiClient`` of Unity Catalog's Python SDK (``unitycatalog-client``,
    async) for ``server``, sending ``token`` as its bearer token (the SDK
    0.4.0 has no token setting of its own: it goes as a default header).
    Use it as ``async with sdk_client(server, token) as client: ...``."""
    from unitycatalog.client import ApiClient, Configuration

    configuration = Configuration(host=server.api)
    if token is None:
        return ApiClient(configuration)
    return ApiClient(configuration, header_name="Authorization", header_value=f"Bearer {token}")


# --- writing like a Unity Catalog client (delta-spark's coordinator) -----------------------

_last_ict = [0]


def next_ict() -> int:
    """A fresh in-commit timestamp (ms), strictly after every one handed out before."""
    import time

    _last_ict[0] = max(int(time.time() * 1000), _last_ict[0] + 1)
    return _last_ict[0]


def local_path(location: str) -> Path:
    """The local directory of a ``file:`` location."""
    if location.startswith("file://"):
        return Path(location[len("file://") :])
    if location.startswith("file:"):
        return Path(location[len("file:") :])
    return Path(location)


def data_file(location: str, ids: list[int]) -> dict[str, Any]:
    """Write a parquet file of ``ids`` (column ``id``) into the table; its ``add`` action."""
    import time

    import pyarrow as pa
    import pyarrow.parquet as pq

    name = f"part-{uuid.uuid4()}.parquet"
    path = local_path(location) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), path)
    stats = {"numRecords": len(ids)}
    if ids:
        stats.update(minValues={"id": min(ids)}, maxValues={"id": max(ids)}, nullCount={"id": 0})
    return {
        "add": {
            "path": name,
            "partitionValues": {},
            "size": path.stat().st_size,
            "modificationTime": int(time.time() * 1000),
            "dataChange": True,
            "stats": json.dumps(stats),
        }
    }


def stage_commit(
    location: str,
    version: int,
    actions: list[dict[str, Any]],
    *,
    operation: str = "WRITE",
    ict: int | None = None,
) -> dict[str, Any]:
    """Write ``_delta_log/_staged_commits/<version>.<uuid>.json`` (commitInfo first, as
    delta-spark does) and return the ``commit_info`` a client sends for it."""
    stamp = next_ict() if ict is None else ict
    info = {
        "commitInfo": {
            "inCommitTimestamp": stamp,
            "timestamp": stamp,
            "operation": operation,
            "operationParameters": {},
            "isBlindAppend": all("add" in a for a in actions),
            "txnId": str(uuid.uuid4()),
            "engineInfo": "tests/uc_api",
        }
    }
    name = f"{version:020d}.{uuid.uuid4()}.json"
    staged = local_path(location) / "_delta_log" / "_staged_commits" / name
    staged.parent.mkdir(parents=True, exist_ok=True)
    staged.write_text("".join(json.dumps(a) + "\n" for a in [info, *actions]))
    status = staged.stat()
    return {
        "version": version,
        "timestamp": stamp,
        "file_name": name,
        "file_size": status.st_size,
        "file_modification_timestamp": int(status.st_mtime * 1000),
    }


def table_metadata(location: str) -> dict[str, Any]:
    """The ``metaData`` action of the table's published version 0."""
    first = local_path(location) / "_delta_log" / f"{0:020d}.json"
    for line in first.read_text().splitlines():
        action = json.loads(line)
        if "metaData" in action:
            return dict(action["metaData"])
    raise AssertionError(f"no metaData in {first}")


def create_uc_table(
    server: UCServerFixture,
    name: str = "events",
    *,
    token: str | None = None,
    catalog: str = "main",
    schema: str = "default",
) -> dict[str, Any]:
    """Create catalog ``catalog``, schema ``schema`` (if missing) and the managed
    table ``name`` (one ``id bigint`` column) over HTTP; its ``TableInfo``."""
    admin = server.admin_token
    server.request("POST", "/catalogs", {"name": catalog}, token=admin)
    server.request("POST", "/schemas", {"catalog_name": catalog, "name": schema}, token=admin)
    status, info = server.request(
        "POST",
        "/tables",
        {
            "catalog_name": catalog,
            "schema_name": schema,
            "name": name,
            "table_type": "MANAGED",
            "data_source_format": "DELTA",
            "columns": [{"name": "id", "type_name": "LONG", "type_text": "bigint", "position": 0}],
        },
        token=token or admin,
    )
    assert status == 200, info
    return dict(info)


def post_commit(
    server: UCServerFixture,
    table: dict[str, Any],
    commit_info: dict[str, Any] | None,
    *,
    token: str | None = None,
    latest_backfilled_version: int | None = None,
) -> tuple[int, Any]:
    body: dict[str, Any] = {"table_id": table["table_id"], "table_uri": table["storage_location"]}
    if commit_info is not None:
        body["commit_info"] = commit_info
    if latest_backfilled_version is not None:
        body["latest_backfilled_version"] = latest_backfilled_version
    return server.request("POST", "/delta/preview/commits", body, token=token or server.admin_token)


def get_commits(
    server: UCServerFixture,
    table: dict[str, Any],
    start_version: int = 0,
    end_version: int | None = None,
    *,
    token: str | None = None,
) -> tuple[int, Any]:
    body: dict[str, Any] = {
        "table_id": table["table_id"],
        "table_uri": table["storage_location"],
        "start_version": start_version,
    }
    if end_version is not None:
        body["end_version"] = end_version
    return server.request("GET", "/delta/preview/commits", body, token=token or server.admin_token)


def write_version_zero(location: str, table_id: str, *, ict: int | None = None) -> None:
    """Write a catalog-managed table's ``_delta_log/0.json`` as a Unity Catalog client
    does before it registers the table (one ``id bigint`` column)."""
    stamp = next_ict() if ict is None else ict
    schema = {
        "type": "struct",
        "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}],
    }
    actions = [
        {
            "commitInfo": {
                "inCommitTimestamp": stamp,
                "timestamp": stamp,
                "operation": "CREATE TABLE",
                "operationParameters": {},
                "isBlindAppend": True,
                "txnId": str(uuid.uuid4()),
            }
        },
        {
            "protocol": {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": ["catalogManaged"],
                "writerFeatures": ["catalogManaged", "inCommitTimestamp"],
            }
        },
        {
            "metaData": {
                "id": str(uuid.uuid4()),
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema),
                "partitionColumns": [],
                "configuration": {
                    "delta.enableInCommitTimestamps": "true",
                    "io.unitycatalog.tableId": table_id,
                },
                "createdTime": stamp,
            }
        },
    ]
    log = local_path(location) / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    (log / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
