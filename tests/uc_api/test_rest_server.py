"""``Catalog.serve``: the handle's ``url``/``api``, a catalog without authorization
(every caller owns everything, no token needed), ``stop()`` idempotent and final.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.uc_api.conftest import create_uc_table, start_uc_server, stop_uc_server, uc_request


def test_serve_without_authorization(ray_cluster: Any, tmp_path: Path) -> None:
    server = start_uc_server(tmp_path / "warehouse", authorization=False)
    try:
        assert server.url.startswith("http://127.0.0.1:") and server.url.rsplit(":", 1)[1].isdigit()
        assert server.api == server.url + "/api/2.1/unity-catalog"
        assert server.admin_token == ""  # nobody holds a token: none is needed
        server.admin_token = "anything"  # tokens are not checked when authorization is off
        table = create_uc_table(server)
        status, got = uc_request("GET", server.api + "/tables/main.default.events")
        assert status == 200 and got["table_id"] == table["table_id"]
        assert uc_request("GET", server.api + "/metastore_summary")[1]["metastore_id"]
        server.server.stop()
        server.server.stop()  # idempotent
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(server.api + "/catalogs", timeout=10)
        # the catalog outlives its server: a new one serves the same state
        server.server = server.catalog.serve()
        status, got = uc_request("GET", server.api + "/tables/main.default.events")
        assert status == 200 and got["table_id"] == table["table_id"]
    finally:
        stop_uc_server(server, tmp_path)
