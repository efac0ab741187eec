"""Authorization over HTTP: bearer tokens are the catalog's principals' tokens,
and every request is judged by the catalog's privileges.

The matrix: a missing token and a forged one are ``UNAUTHENTICATED`` (401);
a principal without the privilege is ``PERMISSION_DENIED`` (403). The data /
metadata split: a principal holding WRITE (and READ) but not ALTER commits
data-only commits, while a commit carrying ``metaData`` (a table property
or a schema change) or a ``protocol`` upgrade is refused with
``PERMISSION_DENIED`` naming ALTER, and the table stays exactly as it was.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from raydelta.protocol.privileges import Privilege
from tests.uc_api.conftest import (
    UCServerFixture,
    create_uc_table,
    data_file,
    get_commits,
    post_commit,
    stage_commit,
    table_metadata,
)

FORGED = "catalog-admin.not-the-secret"


def _table_state(server: UCServerFixture, table: dict[str, Any]) -> tuple[Any, ...]:
    status, listed = get_commits(server, table)
    assert status == 200
    handle = server.catalog.open_table("main.default.events")
    snapshot = handle.snapshot()
    return (
        listed["latest_table_version"],
        snapshot.metadata.configuration,
        snapshot.metadata.schema_string,
        snapshot.protocol.to_json_dict(),
        sorted(handle.to_arrow().column("id").to_pylist()),
    )


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/catalogs", None),
        ("POST", "/catalogs", {"name": "x"}),
        ("GET", "/tables/main.default.events", None),
        ("GET", "/delta/preview/commits", {"table_id": "t", "table_uri": "file:/t"}),
        ("POST", "/temporary-table-credentials", {"table_id": "t", "operation": "READ"}),
        ("GET", "/delta/v1/catalogs/main/schemas/default/tables/events", None),
    ],
)
def test_missing_and_forged_tokens_are_unauthenticated(
    uc_server: UCServerFixture, method: str, path: str, body: Any
) -> None:
    for token in (None, FORGED, "no-dot-at-all"):
        status, error = uc_server.request(method, path, body, token=token)
        assert status == 401, (token, error)
        if path.startswith("/delta/v1"):
            assert error["error"]["type"] == "NotAuthorizedException"
        else:
            assert error["error_code"] == "UNAUTHENTICATED"


def test_a_malformed_authorization_header_is_unauthenticated(uc_server: UCServerFixture) -> None:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(uc_server.api + "/catalogs")
    request.add_header("Authorization", f"Basic {uc_server.admin_token}")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=60)
    assert refused.value.code == 401
    assert json.loads(refused.value.read())["error_code"] == "UNAUTHENTICATED"


def test_privileges_per_table_and_namespace(uc_server: UCServerFixture) -> None:
    table = create_uc_table(uc_server)
    create_uc_table(uc_server, "other")
    stranger = uc_server.token_for("stranger")
    reader = uc_server.token_for("reader", [Privilege.READ], table="main.default.events")
    # namespaces are the catalog owner's to create
    status, error = uc_server.request("POST", "/catalogs", {"name": "mine"}, token=reader)
    assert (status, error["error_code"]) == (403, "PERMISSION_DENIED")
    assert "OWN" in error["message"]
    # a stranger sees no table; the reader sees its one
    status, error = uc_server.request("GET", "/tables/main.default.events", token=stranger)
    assert (status, error["error_code"]) == (403, "PERMISSION_DENIED")
    assert "READ" in error["message"]
    listing = "/tables?catalog_name=main&schema_name=default"
    assert uc_server.request("GET", listing, token=stranger)[1]["tables"] == []
    names = [t["name"] for t in uc_server.request("GET", listing, token=reader)[1]["tables"]]
    assert names == ["events"]
    assert uc_server.request("GET", "/tables/main.default.events", token=reader)[0] == 200
    # reading commits needs READ; committing needs WRITE
    assert get_commits(uc_server, table, token=reader)[0] == 200
    assert get_commits(uc_server, table, token=stranger)[0] == 403
    location = table["storage_location"]
    info = stage_commit(location, 1, [data_file(location, [1])])
    status, error = post_commit(uc_server, table, info, token=reader)
    assert (status, error["error_code"]) == (403, "PERMISSION_DENIED")
    assert "WRITE" in error["message"]
    # credentials follow the same privileges
    read = {"table_id": table["table_id"], "operation": "READ"}
    write = {"table_id": table["table_id"], "operation": "READ_WRITE"}
    assert uc_server.request("POST", "/temporary-table-credentials", read, token=reader)[0] == 200
    status, error = uc_server.request("POST", "/temporary-table-credentials", write, token=reader)
    assert (status, error["error_code"]) == (403, "PERMISSION_DENIED")
    # dropping needs OWN
    status, error = uc_server.request("DELETE", "/tables/main.default.events", token=reader)
    assert (status, error["error_code"]) == (403, "PERMISSION_DENIED")


def test_write_without_alter_commits_data_but_never_metadata(uc_server: UCServerFixture) -> None:
    table = create_uc_table(uc_server)
    location = table["storage_location"]
    writer = uc_server.token_for(
        "writer", [Privilege.READ, Privilege.WRITE], table="main.default.events"
    )
    info = stage_commit(location, 1, [data_file(location, [1])])
    assert post_commit(uc_server, table, info, token=writer) == (200, {})
    before = _table_state(uc_server, table)
    metadata = table_metadata(location)
    property_change = {
        **metadata,
        "configuration": {**metadata["configuration"], "delta.appendOnly": "true"},
    }
    schema = json.loads(metadata["schemaString"])
    schema["fields"].append({"name": "extra", "type": "string", "nullable": True, "metadata": {}})
    schema_change = {**metadata, "schemaString": json.dumps(schema)}
    protocol_upgrade = {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": ["catalogManaged", "deletionVectors"],
        "writerFeatures": ["catalogManaged", "inCommitTimestamp", "deletionVectors"],
    }
    refused = {
        "ALTER TABLE SET TBLPROPERTIES": [{"metaData": property_change}],
        "ADD COLUMNS": [{"metaData": schema_change}],
        "UPGRADE PROTOCOL": [{"protocol": protocol_upgrade}],
        "WRITE with a schema change": [
            {"metaData": schema_change},
            data_file(location, [2]),
        ],
    }
    for operation, actions in refused.items():
        proposal = stage_commit(location, 2, actions, operation=operation)
        status, error = post_commit(uc_server, table, proposal, token=writer)
        assert (status, error["error_code"]) == (403, "PERMISSION_DENIED"), (operation, error)
        assert "ALTER" in error["message"], error
        assert _table_state(uc_server, table) == before, operation
        # the Delta REST API judges the same file the same way
        update = {
            "updates": [
                {
                    "action": "add-commit",
                    "commit": {
                        "version": 2,
                        "timestamp": proposal["timestamp"],
                        "file-name": proposal["file_name"],
                        "file-size": proposal["file_size"],
                        "file-modification-timestamp": proposal["file_modification_timestamp"],
                    },
                },
                {"action": "set-properties", "updates": {"delta.appendOnly": "true"}},
            ]
        }
        status, error = uc_server.request(
            "POST", "/delta/v1/catalogs/main/schemas/default/tables/events", update, token=writer
        )
        assert status == 403 and error["error"]["type"] == "PermissionDeniedException", error
        assert _table_state(uc_server, table) == before, operation
    # a data-only commit at the same version still goes through
    info = stage_commit(location, 2, [data_file(location, [2])])
    assert post_commit(uc_server, table, info, token=writer) == (200, {})
    # the owner (ALTER implied) may change the properties
    proposal = stage_commit(
        location, 3, [{"metaData": property_change}], operation="SET TBLPROPERTIES"
    )
    assert post_commit(uc_server, table, proposal) == (200, {})
    after = _table_state(uc_server, table)
    assert after[0] == 3 and after[1]["delta.appendOnly"] == "true"
    assert after[4] == [1, 2]
