"""Unity Catalog's permissions API (``GET``/``PATCH /permissions/{type}/{name}``)
through its own Python SDK (``unitycatalog-client`` 0.4.0, ``GrantsApi``, whose
models parse every reply) and plain HTTP; raydelta's admin API for principals.

Unity Catalog's rules checked here: privileges flow down catalog -> schema ->
table; a principal without ``USE CATALOG`` sees nothing of the catalog (nor,
without ``USE SCHEMA``, of the schema); ``ALL PRIVILEGES`` is everything but
ownership; names raydelta cannot enforce are refused, never dropped.
"""

from __future__ import annotations

import asyncio
from typing import Any

from unitycatalog.client import (
    GrantsApi,
    PermissionsChange,
    Privilege,
    SecurableType,
    UpdatePermissions,
)
from unitycatalog.client.exceptions import ApiException

from raydelta.actors.catalog.maintenance import MAINTENANCE_PRINCIPAL
from tests.uc_api.conftest import UCServerFixture, create_uc_table, sdk_client

ADMIN = "/api/raydelta/v1"


def admin_request(
    server: UCServerFixture, method: str, path: str, body: Any = None, *, token: str | None
) -> tuple[int, Any]:
    from tests.uc_api.conftest import uc_request

    return uc_request(method, server.url + ADMIN + path, body, token=token)


def test_grants_through_the_sdk_flow_down_and_need_use_catalog(
    uc_server: UCServerFixture,
) -> None:
    create_uc_table(uc_server)
    ana = uc_server.token_for("ana")
    admin = uc_server.admin_token

    async def scenario() -> None:
        async with sdk_client(uc_server, admin) as client:
            grants = GrantsApi(client)
            changed = await grants.update(
                SecurableType.SCHEMA,
                "main.default",
                UpdatePermissions(
                    changes=[
                        PermissionsChange(
                            principal="ana", add=[Privilege.USE_SCHEMA, Privilege.SELECT], remove=[]
                        )
                    ]
                ),
            )
            assert [(a.principal, set(a.privileges)) for a in changed.privilege_assignments] == [
                ("ana", {Privilege.USE_SCHEMA, Privilege.SELECT})
            ]
            listed = await grants.get(SecurableType.SCHEMA, "main.default")
            assert [a.principal for a in listed.privilege_assignments] == ["ana"]
            # SELECT on the schema reaches its table, but not before USE CATALOG
            status, error = uc_server.request("GET", "/tables/main.default.events", token=ana)
            assert (status, error["error_code"]) == (403, "PERMISSION_DENIED")
            assert "USE_CATALOG on catalog 'main'" in error["message"]
            assert uc_server.request("GET", "/catalogs", token=ana)[1]["catalogs"] == []
            listed = uc_server.request("GET", "/schemas?catalog_name=main", token=ana)[1]
            assert listed["schemas"] == []
            tables = "/tables?catalog_name=main&schema_name=default"
            assert uc_server.request("GET", tables, token=ana)[1]["tables"] == []
            status, _ = uc_server.request("GET", "/schemas/main.default", token=ana)
            assert status == 403
            await grants.update(
                SecurableType.CATALOG,
                "main",
                UpdatePermissions(
                    changes=[
                        PermissionsChange(principal="ana", add=[Privilege.USE_CATALOG], remove=[])
                    ]
                ),
            )
            assert uc_server.request("GET", "/tables/main.default.events", token=ana)[0] == 200
            names = [
                c["name"] for c in uc_server.request("GET", "/catalogs", token=ana)[1]["catalogs"]
            ]
            assert names == ["main"]
        async with sdk_client(uc_server, ana) as client:
            grants = GrantsApi(client)
            # a non-owner sees only its own assignment, and may not change any
            mine = await grants.get(SecurableType.CATALOG, "main")
            assert [(a.principal, a.privileges) for a in mine.privilege_assignments] == [
                ("ana", [Privilege.USE_CATALOG])
            ]
            try:
                await grants.update(
                    SecurableType.TABLE,
                    "main.default.events",
                    UpdatePermissions(
                        changes=[
                            PermissionsChange(principal="ana", add=[Privilege.MODIFY], remove=[])
                        ]
                    ),
                )
                raise AssertionError("a non-owner changed a grant")
            except ApiException as error:
                assert error.status == 403
        async with sdk_client(uc_server, admin) as client:
            grants = GrantsApi(client)
            await grants.update(
                SecurableType.CATALOG,
                "main",
                UpdatePermissions(
                    changes=[
                        PermissionsChange(principal="ana", add=[], remove=[Privilege.USE_CATALOG])
                    ]
                ),
            )
            assert (await grants.get(SecurableType.CATALOG, "main")).privilege_assignments == []

    asyncio.run(scenario())
    assert uc_server.request("GET", "/tables/main.default.events", token=ana)[0] == 403


def test_permissions_over_plain_http(uc_server: UCServerFixture) -> None:
    create_uc_table(uc_server)
    uc_server.token_for("bo")
    admin = uc_server.admin_token
    path = "/permissions/table/main.default.events"
    change = {"changes": [{"principal": "bo", "add": ["ALL_PRIVILEGES"], "remove": []}]}
    status, listed = uc_server.request("PATCH", path, change, token=admin)
    assert status == 200, listed
    # ALL PRIVILEGES on a table: SELECT, MODIFY and MANAGE (ALTER), which has no
    # name in Unity Catalog OSS's enum: the admin API shows it, UC's leaves it out
    assert listed == {
        "privilege_assignments": [{"principal": "bo", "privileges": ["SELECT", "MODIFY"]}]
    }
    status, mine = admin_request(uc_server, "GET", path, token=admin)
    # the table's creator (the admin) owns it: shown by the admin API only
    assert mine == {
        "privilege_assignments": [
            {"principal": "bo", "privileges": ["read", "write", "alter"]},
            {"principal": "catalog-admin", "privileges": ["own"]},
        ]
    }
    status, owner = admin_request(uc_server, "GET", "/permissions/metastore/x", token=admin)
    # the metastore: its owner, and the catalog's maintenance principal (READ and WRITE)
    assert owner["privilege_assignments"] == [
        {"principal": "catalog-admin", "privileges": ["own"]},
        {"principal": MAINTENANCE_PRINCIPAL, "privileges": ["read", "write"]},
    ]
    remove = {"changes": [{"principal": "bo", "remove": ["MANAGE", "modify"]}]}
    assert uc_server.request("PATCH", path, remove, token=admin)[1] == {
        "privilege_assignments": [{"principal": "bo", "privileges": ["SELECT"]}]
    }
    assert uc_server.request("GET", path + "?principal=nobody", token=admin)[1] == {
        "privilege_assignments": []
    }
    # refused, with nothing changed: unknown or unenforceable names, unknown
    # principals, securables that do not exist or that raydelta does not hold
    for body, code in (
        ({"changes": [{"principal": "bo", "add": ["EXECUTE"], "remove": []}]}, 400),
        ({"changes": [{"principal": "bo", "add": ["USE CATALOG"], "remove": []}]}, 400),
        ({"changes": [{"principal": "ghost", "add": ["SELECT"], "remove": []}]}, 400),
        ({"changes": "SELECT"}, 400),
    ):
        status, error = uc_server.request("PATCH", path, body, token=admin)
        assert status == code, (body, error)
    status, _ = uc_server.request(
        "PATCH", "/permissions/table/main.default.none", change, token=admin
    )
    assert status == 404
    status, error = uc_server.request("GET", "/permissions/volume/main.default.v", token=admin)
    assert status == 400 and "not supported" in error["message"]
    assert uc_server.request("GET", path, token=admin)[1] == {
        "privilege_assignments": [{"principal": "bo", "privileges": ["SELECT"]}]
    }


def test_principals_over_the_admin_api(uc_server: UCServerFixture) -> None:
    admin = uc_server.admin_token
    status, made = admin_request(uc_server, "POST", "/principals", {"name": "cy"}, token=admin)
    assert status == 200 and made["name"] == "cy" and made["token"].startswith("cy.")
    status, error = admin_request(uc_server, "POST", "/principals", {"name": "cy"}, token=admin)
    assert (status, error["error_code"]) == (409, "ALREADY_EXISTS")
    status, listed = admin_request(uc_server, "GET", "/principals", token=admin)
    names = sorted(["catalog-admin", "cy", MAINTENANCE_PRINCIPAL])
    assert listed == {"principals": [{"name": name} for name in names]}
    # only the admin administers principals
    assert admin_request(uc_server, "GET", "/principals", token=made["token"])[0] == 403
    status, rotated = admin_request(uc_server, "POST", "/principals/cy/token", token=admin)
    assert status == 200 and rotated["token"] != made["token"]
    old = uc_server.request("GET", "/catalogs", token=made["token"])
    assert old[0] == 401
    assert uc_server.request("GET", "/catalogs", token=rotated["token"])[0] == 200
    assert admin_request(uc_server, "DELETE", "/principals/cy", token=admin)[0] == 200
    assert uc_server.request("GET", "/catalogs", token=rotated["token"])[0] == 401
    status, error = admin_request(uc_server, "DELETE", "/principals/catalog-admin", token=admin)
    assert status == 400 and "cannot be deleted" in error["message"]
