"""Unity Catalog's Delta REST API (``/delta/v1``), as delta-storage 4.4.0's
``UCDeltaTokenBasedRestClient`` (delta-spark's default) calls it: a managed
table created the Unity Catalog way (staging table, the client's own
``0.json``, create), loaded, committed with ``add-commit`` updates under an
``assert-table-uuid`` requirement, and the Delta API's error shape.
"""

from __future__ import annotations

from typing import Any

import ray

from tests.uc_api.conftest import (
    UCServerFixture,
    data_file,
    local_path,
    stage_commit,
    write_version_zero,
)

V1 = "/delta/v1/catalogs/main/schemas/default"


def _namespace(server: UCServerFixture) -> None:
    admin = server.admin_token
    assert server.request("POST", "/catalogs", {"name": "main"}, token=admin)[0] == 200
    body = {"catalog_name": "main", "name": "default"}
    assert server.request("POST", "/schemas", body, token=admin)[0] == 200


def _create(server: UCServerFixture, name: str = "events") -> dict[str, Any]:
    admin = server.admin_token
    status, staged = server.request("POST", f"{V1}/staging-tables", {"name": name}, token=admin)
    assert status == 200, staged
    assert staged["required-properties"]["io.unitycatalog.tableId"] == staged["table-id"]
    assert "catalogManaged" in staged["required-protocol"]["writer-features"]
    write_version_zero(staged["location"], staged["table-id"])
    request = {"name": name, "location": staged["location"], "table-type": "MANAGED"}
    status, loaded = server.request("POST", f"{V1}/tables", request, token=admin)
    assert status == 200, loaded
    assert loaded["metadata"]["table-uuid"] == staged["table-id"]
    return dict(loaded)


def _add_commit(info: dict[str, Any]) -> dict[str, Any]:
    return {
        "action": "add-commit",
        "commit": {
            "version": info["version"],
            "timestamp": info["timestamp"],
            "file-name": info["file_name"],
            "file-size": info["file_size"],
            "file-modification-timestamp": info["file_modification_timestamp"],
        },
    }


def test_config_lists_the_served_endpoints(uc_server: UCServerFixture) -> None:
    status, config = uc_server.request(
        "GET", "/delta/v1/config?catalog=main&protocol-versions=1.0", token=uc_server.admin_token
    )
    assert status == 200 and config["protocol-version"] == "1.0"
    assert "POST /v1/catalogs/{catalog}/schemas/{schema}/tables/{table}" in config["endpoints"]


def test_create_load_commit_through_the_delta_api(uc_server: UCServerFixture) -> None:
    _namespace(uc_server)
    loaded = _create(uc_server)
    table_id = loaded["metadata"]["table-uuid"]
    location = loaded["metadata"]["location"]
    assert loaded["latest-table-version"] == 0 and loaded["commits"] == []
    assert [f["name"] for f in loaded["metadata"]["columns"]["fields"]] == ["id"]
    admin = uc_server.admin_token
    ray.get(uc_server.catalog.actor.pause_publishing.remote(True))
    try:
        infos = []
        for version in (1, 2):
            info = stage_commit(location, version, [data_file(location, [version])])
            update = {
                "requirements": [{"type": "assert-table-uuid", "uuid": table_id}],
                "updates": [
                    _add_commit(info),
                    {"action": "set-latest-backfilled-version", "latest-published-version": 0},
                ],
            }
            status, answer = uc_server.request("POST", f"{V1}/tables/events", update, token=admin)
            assert status == 200, answer
            assert answer["latest-table-version"] == version
            infos.append(info)
            # the same request again (a lost reply): success, no second commit
            status, again = uc_server.request("POST", f"{V1}/tables/events", update, token=admin)
            assert (status, again["latest-table-version"]) == (200, version)
        status, loaded = uc_server.request("GET", f"{V1}/tables/events", token=admin)
        assert [c["version"] for c in loaded["commits"]] == [2, 1]  # newest first
        assert [c["file-name"] for c in loaded["commits"]] == [
            infos[1]["file_name"],
            infos[0]["file_name"],
        ]
    finally:
        ray.get(uc_server.catalog.actor.pause_publishing.remote(False))
    # a principal holding WRITE only commits, and is answered with the table
    writer = uc_server.token_for("writer", ["write"], table="main.default.events")
    info = stage_commit(location, 3, [data_file(location, [3])])
    status, answer = uc_server.request(
        "POST", f"{V1}/tables/events", {"updates": [_add_commit(info)]}, token=writer
    )
    assert status == 200 and answer["latest-table-version"] == 3, answer
    status, error = uc_server.request("GET", f"{V1}/tables/events", token=writer)
    assert status == 403 and error["error"]["type"] == "PermissionDeniedException"
    # a wrong table uuid: the requirement fails, nothing is committed
    info = stage_commit(location, 4, [data_file(location, [4])])
    update = {
        "requirements": [
            {"type": "assert-table-uuid", "uuid": "00000000-0000-0000-0000-000000000000"}
        ],
        "updates": [_add_commit(info)],
    }
    status, error = uc_server.request("POST", f"{V1}/tables/events", update, token=admin)
    assert status == 409, error
    assert error["error"]["type"] == "UpdateRequirementConflictException"
    # a taken version with another file: the Delta API's commit conflict
    rival = stage_commit(location, 2, [data_file(location, [99])])
    status, error = uc_server.request(
        "POST", f"{V1}/tables/events", {"updates": [_add_commit(rival)]}, token=admin
    )
    assert status == 409 and error["error"]["type"] == "CommitVersionConflictException", error
    assert ray.get(uc_server.catalog.actor.wait_published.remote("main.default.events", 3, 60.0))
    log = local_path(location) / "_delta_log"
    for info in infos:
        staged = (log / "_staged_commits" / info["file_name"]).read_bytes()
        assert (log / f"{info['version']:020d}.json").read_bytes() == staged
    rows = uc_server.catalog.open_table("main.default.events").to_arrow()
    assert sorted(rows.column("id").to_pylist()) == [1, 2, 3]


def test_delta_api_errors_and_head(uc_server: UCServerFixture) -> None:
    _namespace(uc_server)
    admin = uc_server.admin_token
    status, error = uc_server.request("GET", f"{V1}/tables/missing", token=admin)
    assert status == 404 and error["error"]["type"] == "NoSuchTableException", error
    assert error["error"]["code"] == 404
    status, error = uc_server.request("GET", f"{V1}/tables/missing")
    assert status == 401 and error["error"]["type"] == "NotAuthorizedException"
    _create(uc_server)
    assert uc_server.request("HEAD", f"{V1}/tables/events", token=admin)[0] == 204
    assert uc_server.request("HEAD", f"{V1}/tables/nope", token=admin)[0] == 404
    # a metadata update without the commit holding it is refused
    update = {"updates": [{"action": "set-properties", "updates": {"a": "b"}}]}
    status, error = uc_server.request("POST", f"{V1}/tables/events", update, token=admin)
    assert status == 400 and error["error"]["type"] == "InvalidParameterValueException"
    status, credentials = uc_server.request(
        "GET", f"{V1}/tables/events/credentials?operation=READ_WRITE", token=admin
    )
    assert status == 200
    (vended,) = credentials["storage-credentials"]
    assert vended["operation"] == "READ_WRITE" and vended["config"] == {}
    assert uc_server.request("DELETE", f"{V1}/tables/events", token=admin)[0] == 204
    assert uc_server.request("HEAD", f"{V1}/tables/events", token=admin)[0] == 404
