"""Issue 33: a principal with no grant could register an external table over a
managed table's storage (or ``file:///etc``) and get credentials for it.

Now creating a table needs Unity Catalog's privileges (``USE_CATALOG``,
``USE_SCHEMA``, ``CREATE_TABLE``; outside managed storage also
``CREATE_EXTERNAL_TABLE`` on an external location), and no table's location
equals, contains or lies inside another one's or the managed root, for the
admin too. Over plain HTTP and through Unity Catalog's Python SDK; every
refusal leaves the managed table exactly as it was and creates nothing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from unitycatalog.client import (
    CreateExternalLocation,
    CreateTable,
    DataSourceFormat,
    ExternalLocationsApi,
    GenerateTemporaryTableCredential,
    TableOperation,
    TablesApi,
    TableType,
    TemporaryCredentialsApi,
)
from unitycatalog.client.exceptions import ApiException

import raydelta
from tests.uc_api.conftest import (
    UCServerFixture,
    create_uc_table,
    data_file,
    post_commit,
    sdk_client,
    stage_commit,
)


def _external(name: str, location: str) -> dict[str, Any]:
    return {
        "catalog_name": "main",
        "schema_name": "default",
        "name": name,
        "table_type": "EXTERNAL",
        "data_source_format": "DELTA",
        "storage_location": location,
    }


def _state(server: UCServerFixture) -> tuple[Any, ...]:
    """The managed table as it stands, and every table the catalog knows."""
    handle = server.catalog.open_table("main.default.events")
    snapshot = handle.snapshot()
    return (
        snapshot.version,
        sorted(f.path for f in snapshot.add_files()),
        snapshot.metadata.model_dump(),
        sorted(e.name for e in server.catalog.list_tables()),
    )


@pytest.fixture
def managed(uc_server: UCServerFixture) -> dict[str, Any]:
    table = create_uc_table(uc_server)
    location = table["storage_location"]
    assert (
        post_commit(uc_server, table, stage_commit(location, 1, [data_file(location, [1])]))[0]
        == 200
    )
    return table


def test_no_grant_no_table_over_http(uc_server: UCServerFixture, managed: dict[str, Any]) -> None:
    before = _state(uc_server)
    nobody = uc_server.token_for("nobody")
    for where in (managed["storage_location"], "file:///etc", "/etc"):
        status, error = uc_server.request("POST", "/tables", _external("evil", where), token=nobody)
        assert (status, error["error_code"]) == (403, "PERMISSION_DENIED"), (where, error)
        assert "USE_CATALOG" in error["message"]
    # step 2 never possible: there is no such table, and the managed one's id is refused
    status, _ = uc_server.request("GET", "/tables/main.default.evil", token=uc_server.admin_token)
    assert status == 404
    read = {"table_id": managed["table_id"], "operation": "READ"}
    status, error = uc_server.request("POST", "/temporary-table-credentials", read, token=nobody)
    assert (status, error["error_code"]) == (403, "PERMISSION_DENIED")
    for operation in ("PATH_READ", "PATH_READ_WRITE", "PATH_CREATE_TABLE"):
        body = {"url": managed["storage_location"], "operation": operation}
        status, error = uc_server.request("POST", "/temporary-path-credentials", body, token=nobody)
        assert status in (400, 403), (operation, error)
    # a staging table (Unity Catalog's managed creation) needs the same privileges
    staging = {"catalog_name": "main", "schema_name": "default", "name": "staged"}
    status, error = uc_server.request("POST", "/staging-tables", staging, token=nobody)
    assert (status, error["error_code"]) == (403, "PERMISSION_DENIED")
    assert _state(uc_server) == before


def test_create_privileges_and_external_locations(
    uc_server: UCServerFixture, managed: dict[str, Any], tmp_path: Path
) -> None:
    before = _state(uc_server)
    creator = uc_server.token_for("creator")
    catalog, admin = uc_server.catalog, uc_server.admin_token
    catalog.grant("creator", "main", ["USE_CATALOG"], securable_type="catalog")
    status, error = uc_server.request("POST", "/tables", _external("x", "/etc"), token=creator)
    assert status == 403 and "USE_SCHEMA, CREATE_TABLE on schema 'main.default'" in error["message"]
    catalog.grant(
        "creator", "main.default", ["USE_SCHEMA", "CREATE_TABLE"], securable_type="schema"
    )
    # a managed table now: yes
    status, info = uc_server.request(
        "POST",
        "/tables",
        {
            "catalog_name": "main",
            "schema_name": "default",
            "name": "mine",
            "table_type": "MANAGED",
            "columns": [{"name": "id", "type_name": "LONG", "type_text": "bigint", "position": 0}],
        },
        token=creator,
    )
    assert status == 200, info
    # an external table over the managed table: the overlap is refused, before anything
    status, error = uc_server.request(
        "POST", "/tables", _external("evil", managed["storage_location"]), token=creator
    )
    assert (status, error["error_code"]) == (400, "INVALID_ARGUMENT"), error
    assert "main.default.events" in error["message"]
    # elsewhere: only inside an external location granting CREATE_EXTERNAL_TABLE
    status, error = uc_server.request("POST", "/tables", _external("etc", "/etc"), token=creator)
    assert status == 403 and "no external location holds it" in error["message"]
    landing = tmp_path / "landing"
    raydelta.create_table(str(landing / "t"), managed_schema())
    body = {"name": "landing", "url": str(landing), "comment": "ingest"}
    status, error = uc_server.request("POST", "/external-locations", body, token=creator)
    assert status == 403  # registering one is the admin's
    status, location = uc_server.request("POST", "/external-locations", body, token=admin)
    assert status == 200 and location["url"] == landing.as_uri(), location
    status, error = uc_server.request(
        "POST", "/tables", _external("t", str(landing / "t")), token=creator
    )
    assert (
        status == 403 and "CREATE_EXTERNAL_TABLE on external location 'landing'" in error["message"]
    )
    catalog.grant(
        "creator", "landing", ["CREATE_EXTERNAL_TABLE"], securable_type="external_location"
    )
    status, table = uc_server.request(
        "POST", "/tables", _external("t", str(landing / "t")), token=creator
    )
    assert status == 200, table
    read = {"table_id": table["table_id"], "operation": "READ_WRITE"}
    assert uc_server.request("POST", "/temporary-table-credentials", read, token=creator)[0] == 200
    # the admin is bound by the overlap rule too
    for where in (
        managed["storage_location"],
        str(landing / "t" / "sub"),
        str(landing / "t" / ".."),
    ):
        status, error = uc_server.request("POST", "/tables", _external("y", where), token=admin)
        assert (status, error["error_code"]) == (400, "INVALID_ARGUMENT"), (where, error)
    assert _state(uc_server)[:3] == before[:3]


def managed_schema() -> Any:
    import pyarrow as pa

    return pa.schema([("id", pa.int64())])


def test_no_grant_no_table_through_the_sdk(
    uc_server: UCServerFixture, managed: dict[str, Any]
) -> None:
    before = _state(uc_server)
    nobody = uc_server.token_for("nobody")

    async def scenario() -> None:
        async with sdk_client(uc_server, nobody) as client:
            tables = TablesApi(client)
            for where in (managed["storage_location"], "file:///etc"):
                with pytest.raises(ApiException) as refused:
                    await tables.create_table(
                        CreateTable(
                            name="evil",
                            catalog_name="main",
                            schema_name="default",
                            table_type=TableType.EXTERNAL,
                            data_source_format=DataSourceFormat.DELTA,
                            columns=[],
                            storage_location=where,
                        )
                    )
                assert refused.value.status == 403
                assert "PERMISSION_DENIED" in str(refused.value.body)
            with pytest.raises(ApiException) as refused:
                await TemporaryCredentialsApi(client).generate_temporary_table_credentials(
                    GenerateTemporaryTableCredential(
                        table_id=managed["table_id"], operation=TableOperation.READ
                    )
                )
            assert refused.value.status == 403
            with pytest.raises(ApiException) as refused:
                await ExternalLocationsApi(client).create_external_location(
                    CreateExternalLocation(name="mine", url="file:///", credential_name="c")
                )
            assert refused.value.status == 403

    asyncio.run(scenario())
    assert _state(uc_server) == before


def test_external_locations_over_the_sdk(uc_server: UCServerFixture, tmp_path: Path) -> None:
    create_uc_table(uc_server)

    async def scenario() -> None:
        async with sdk_client(uc_server, uc_server.admin_token) as client:
            api = ExternalLocationsApi(client)
            made = await api.create_external_location(
                CreateExternalLocation(
                    name="landing", url=str(tmp_path / "landing"), credential_name="vending"
                )
            )
            assert made.url == (tmp_path / "landing").as_uri()
            assert made.credential_name == "vending" and made.owner == "catalog-admin"
            for url in (
                str(tmp_path / "landing" / "inner"),  # inside another one
                str(tmp_path),  # around it (and around the managed root)
                str(uc_server.root / "x"),  # inside the managed root
                str(tmp_path / "landing") + "/",  # the same, spelled with a slash
            ):
                with pytest.raises(ApiException) as refused:
                    await api.create_external_location(
                        CreateExternalLocation(name="other", url=url, credential_name="vending")
                    )
                assert refused.value.status == 400, url
            listed = await api.list_external_locations()
            assert [x.name for x in listed.external_locations] == ["landing"]
            got = await api.get_external_location("landing")
            assert got.id == made.id and got.id

    asyncio.run(scenario())
    admin = uc_server.admin_token
    status, patched = uc_server.request(
        "PATCH", "/external-locations/landing", {"comment": "raw files"}, token=admin
    )
    assert status == 200 and patched["comment"] == "raw files"
    stranger = uc_server.token_for("stranger")
    status, listed = uc_server.request("GET", "/external-locations", token=stranger)
    assert status == 200 and listed["external_locations"] == []
    status, _ = uc_server.request("GET", "/external-locations/landing", token=stranger)
    assert status == 403
    status, _ = uc_server.request("DELETE", "/external-locations/landing", token=stranger)
    assert status == 403
    assert uc_server.request("DELETE", "/external-locations/landing", token=admin)[0] == 200
    status, error = uc_server.request("GET", "/external-locations/landing", token=admin)
    assert (status, error["error_code"]) == (404, "NOT_FOUND")
