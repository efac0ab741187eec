"""Temporary table and path credentials over HTTP (``/temporary-table-credentials``,
``/temporary-path-credentials``; the Delta API's ``.../credentials``).

Local paths get no cloud credential, only the normalized URL and an
expiration; S3 locations (moto's server on loopback) get temporary STS
credentials of the catalog's vending role (never the catalog's own keys),
and those credentials really read the table. Each call checks the privilege
its operation needs. (What the credentials are scoped to:
``tests/s3/test_vended_credentials.py``.)
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from unitycatalog.client import (
    GenerateTemporaryPathCredential,
    GenerateTemporaryTableCredential,
    PathOperation,
    TableOperation,
    TemporaryCredentialsApi,
)
from unitycatalog.client.exceptions import ApiException

import raydelta
from raydelta.protocol.privileges import Privilege
from tests.uc_api.conftest import (
    VENDING_ROLE,
    UCServerFixture,
    create_uc_table,
    sdk_client,
    start_uc_server,
    stop_uc_server,
)


def test_local_table_and_path_credentials(uc_server: UCServerFixture) -> None:
    table = create_uc_table(uc_server)
    reader = uc_server.token_for("reader", [Privilege.READ], table="main.default.events")
    location = table["storage_location"]
    # creating a table at a path needs an external location granting CREATE_EXTERNAL_TABLE
    landing = uc_server.root.parent / "landing"
    uc_server.catalog.create_external_location("landing", str(landing))
    uc_server.catalog.grant(
        "reader", "landing", ["CREATE_EXTERNAL_TABLE"], securable_type="external_location"
    )

    async def scenario() -> None:
        async with sdk_client(uc_server, reader) as client:
            api = TemporaryCredentialsApi(client)
            vended = await api.generate_temporary_table_credentials(
                GenerateTemporaryTableCredential(
                    table_id=table["table_id"], operation=TableOperation.READ
                )
            )
            assert vended.aws_temp_credentials is None
            assert vended.expiration_time > int(time.time() * 1000)
            with pytest.raises(ApiException) as denied:
                await api.generate_temporary_table_credentials(
                    GenerateTemporaryTableCredential(
                        table_id=table["table_id"], operation=TableOperation.READ_WRITE
                    )
                )
            assert denied.value.status == 403
            inside = await api.generate_temporary_path_credentials(
                GenerateTemporaryPathCredential(
                    url=location + "/_delta_log", operation=PathOperation.PATH_READ
                )
            )
            assert inside.expiration_time > int(time.time() * 1000)
            for operation in (PathOperation.PATH_READ_WRITE,):
                with pytest.raises(ApiException) as denied:
                    await api.generate_temporary_path_credentials(
                        GenerateTemporaryPathCredential(url=location, operation=operation)
                    )
                assert denied.value.status == 403
            # outside every table: only the catalog's owner
            with pytest.raises(ApiException) as denied:
                await api.generate_temporary_path_credentials(
                    GenerateTemporaryPathCredential(
                        url=str(uc_server.root / "elsewhere"), operation=PathOperation.PATH_READ
                    )
                )
            assert denied.value.status == 403
            fresh = await api.generate_temporary_path_credentials(
                GenerateTemporaryPathCredential(
                    url=str(landing / "new-table"),
                    operation=PathOperation.PATH_CREATE_TABLE,
                )
            )
            assert fresh.expiration_time > 0
            for overlapping in (location + "/sub", str(uc_server.root)):
                with pytest.raises(ApiException) as refused:  # inside a table, or holding one
                    await api.generate_temporary_path_credentials(
                        GenerateTemporaryPathCredential(
                            url=overlapping, operation=PathOperation.PATH_CREATE_TABLE
                        )
                    )
                assert refused.value.status == 400
            with pytest.raises(ApiException) as denied:  # a parent of tables: the owner's
                await api.generate_temporary_path_credentials(
                    GenerateTemporaryPathCredential(
                        url=str(uc_server.root), operation=PathOperation.PATH_READ
                    )
                )
            assert denied.value.status == 403
            with pytest.raises(ApiException) as unknown:
                await api.generate_temporary_table_credentials(
                    GenerateTemporaryTableCredential(
                        table_id="no-such-id", operation=TableOperation.READ
                    )
                )
            assert unknown.value.status == 404

    asyncio.run(scenario())
    status, body = uc_server.request(
        "POST",
        "/temporary-path-credentials",
        {"url": location, "operation": "PATH_READ"},
        token=uc_server.admin_token,
    )
    assert status == 200 and body["url"] == location


@pytest.mark.slow
def test_s3_credentials_read_the_table(ray_cluster: Any, s3_server: Any, tmp_path: Path) -> None:
    server = start_uc_server(
        tmp_path / "warehouse",
        storage_options=s3_server.storage_options,
        credential_role_arn=VENDING_ROLE,
    )
    try:
        uri = s3_server.new_table_uri("sales")
        data = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
        raydelta.create_table(uri, data.schema, storage_options=s3_server.storage_options).append(
            data
        )
        admin = server.admin_token
        assert server.request("POST", "/catalogs", {"name": "main"}, token=admin)[0] == 200
        body = {"catalog_name": "main", "name": "default"}
        assert server.request("POST", "/schemas", body, token=admin)[0] == 200
        status, table = server.request(
            "POST",
            "/tables",
            {
                "catalog_name": "main",
                "schema_name": "default",
                "name": "sales",
                "table_type": "EXTERNAL",
                "data_source_format": "DELTA",
                "columns": [],
                "storage_location": uri,
            },
            token=admin,
        )
        assert status == 200, table
        assert table["storage_location"] == uri
        assert [c["name"] for c in table["columns"]] == ["id"]
        reader = server.token_for("reader", [Privilege.READ], table="main.default.sales")
        status, vended = server.request(
            "POST",
            "/temporary-table-credentials",
            {"table_id": table["table_id"], "operation": "READ"},
            token=reader,
        )
        assert status == 200, vended
        aws = vended["aws_temp_credentials"]
        # STS credentials of the vending role, never the catalog's own keys
        assert aws["access_key_id"] != s3_server.storage_options["key"]
        assert aws["session_token"]
        # the vended credentials (plus the endpoint the client knows) read the table
        from deltalake import DeltaTable

        options = {
            "AWS_ENDPOINT_URL": s3_server.endpoint,
            "AWS_ACCESS_KEY_ID": aws["access_key_id"],
            "AWS_SECRET_ACCESS_KEY": aws["secret_access_key"],
            "AWS_SESSION_TOKEN": aws["session_token"],
            "AWS_REGION": s3_server.aws_options["AWS_REGION"],
            "AWS_ALLOW_HTTP": "true",
        }
        rows = DeltaTable(uri, storage_options=options).to_pyarrow_table()
        assert sorted(rows.column("id").to_pylist()) == [1, 2, 3]
        status, path = server.request(
            "POST",
            "/temporary-path-credentials",
            {"url": uri + "/_delta_log", "operation": "PATH_READ"},
            token=reader,
        )
        assert status == 200, path
        issued = path["aws_temp_credentials"]  # a credential of its own for the path
        assert issued["access_key_id"] not in (
            aws["access_key_id"],
            s3_server.storage_options["key"],
        )
        status, delta = server.request(
            "GET",
            "/delta/v1/catalogs/main/schemas/default/tables/sales/credentials?operation=READ",
            token=reader,
        )
        assert status == 200, delta
        (credential,) = delta["storage-credentials"]
        assert credential["config"]["s3.access-key-id"] != s3_server.storage_options["key"]
        assert credential["config"]["s3.session-token"]
        assert credential["prefix"] == uri
    finally:
        stop_uc_server(server, tmp_path)
