"""What the catalog answers and writes names In-Commit Timestamps
``inCommitTimestamp`` (as delta-spark, delta-kernel and Unity Catalog do),
never the spec text's ``inCommitTimestamps``: the Delta API's staging-table
answer (the protocol a client must write), and the version 0 the catalog
writes for a managed table created with columns, through either API.
"""

from __future__ import annotations

import json
from typing import Any

from tests.uc_api.conftest import UCServerFixture, create_uc_table, local_path

V1 = "/delta/v1/catalogs/main/schemas/default"
TYPO = "inCommitTimestamps"
RIGHT = "inCommitTimestamp"


def _namespace(server: UCServerFixture) -> None:
    admin = server.admin_token
    assert server.request("POST", "/catalogs", {"name": "main"}, token=admin)[0] == 200
    body = {"catalog_name": "main", "name": "default"}
    assert server.request("POST", "/schemas", body, token=admin)[0] == 200


def _version_zero_protocol(location: str) -> dict[str, Any]:
    first = local_path(location) / "_delta_log" / f"{0:020d}.json"
    for line in first.read_text().splitlines():
        action = json.loads(line)
        if "protocol" in action:
            return dict(action["protocol"])
    raise AssertionError(f"no protocol in {first}")


def test_the_staging_table_answer_names_in_commit_timestamp(uc_server: UCServerFixture) -> None:
    _namespace(uc_server)
    status, staged = uc_server.request(
        "POST", f"{V1}/staging-tables", {"name": "events"}, token=uc_server.admin_token
    )
    assert status == 200, staged
    required = staged["required-protocol"]
    assert RIGHT in required["writer-features"]
    assert TYPO not in json.dumps(staged)


def test_a_managed_table_created_with_columns_lists_in_commit_timestamp(
    uc_server: UCServerFixture,
) -> None:
    # the Unity Catalog API: POST /tables with columns, the catalog writes version 0
    info = create_uc_table(uc_server, "by_uc_api")
    protocol = _version_zero_protocol(info["storage_location"])
    assert RIGHT in protocol["writerFeatures"] and TYPO not in protocol["writerFeatures"]
    assert TYPO not in json.dumps(info)
    # the Delta API: POST .../tables with a schema
    schema = {
        "type": "struct",
        "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}],
    }
    body = {"name": "by_delta_api", "table-type": "MANAGED", "columns": schema}
    status, loaded = uc_server.request("POST", f"{V1}/tables", body, token=uc_server.admin_token)
    assert status == 200, loaded
    protocol = _version_zero_protocol(loaded["metadata"]["location"])
    assert RIGHT in protocol["writerFeatures"] and TYPO not in protocol["writerFeatures"]
    assert TYPO not in json.dumps(loaded)
