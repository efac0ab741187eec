"""``/delta/v1`` ``loadTable``'s optional ``metadata.last-commit-version`` and
``last-commit-timestamp-ms`` (Unity Catalog's ``api/delta.yaml``: the last
commit that changed the table's metadata, and its timestamp), read by Unity
Catalog's own Java SDK (``DeltaTablesApi.loadTable``, the
``unitycatalog-client`` jar delta-storage links against) and over plain HTTP.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.uc_api.conftest import create_uc_table, start_uc_server, stop_uc_server, uc_request

pytestmark = pytest.mark.spark

DELTA = "/delta/v1/catalogs/main/schemas/default/tables/events"


def test_last_metadata_commit_is_loaded(spark: Any, ray_cluster: Any, tmp_path: Path) -> None:
    from tests.uc_api.jvm_clients import ensure_uc_client_jars

    # authorization off: the Java SDK's client here sends no token
    server = start_uc_server(tmp_path / "warehouse", authorization=False)
    server.admin_token = "anyone"  # tokens are not checked when authorization is off
    try:
        create_uc_table(server)
        table = server.catalog.open_table("main.default.events")
        status, loaded = uc_request("GET", server.api + DELTA)
        assert status == 200 and loaded["metadata"]["last-commit-version"] == 0
        table.append(pa.table({"id": pa.array([1], pa.int64())}))  # v1: data only
        table.transaction().set_metadata(properties={"team": "a"}).commit()  # v2
        table.append(pa.table({"id": pa.array([2], pa.int64())}))  # v3: data only
        changed = next(e for e in table.history().entries if e.version == 2)
        status, loaded = uc_request("GET", server.api + DELTA)
        metadata = loaded["metadata"]
        assert loaded["latest-table-version"] == 3
        assert metadata["last-commit-version"] == 2
        assert metadata["last-commit-timestamp-ms"] == changed.timestamp

        ensure_uc_client_jars(spark)
        jvm = spark._jvm
        client = jvm.io.unitycatalog.client.ApiClient()
        client.updateBaseUri(server.api)
        api = jvm.io.unitycatalog.client.delta.api.DeltaTablesApi(client)
        read = api.loadTable("main", "default", "events").getMetadata()
        assert int(read.getLastCommitVersion()) == 2
        assert int(read.getLastCommitTimestampMs()) == changed.timestamp
    finally:
        stop_uc_server(server, tmp_path)
