"""A staged commit naming a file path with a control character (NUL...) is
refused by both Unity Catalog commit routes, and the catalog-managed table
is left exactly as it was: the preview commits API (``POST
/delta/preview/commits``) and the Delta API's ``add-commit`` update. The
commit boundary's path rule (:mod:`raydelta.protocol.commit_paths`) holds
for staged commits of catalog-managed tables as for every other commit.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.uc_api.conftest import (
    UCServerFixture,
    create_uc_table,
    data_file,
    get_commits,
    local_path,
    post_commit,
    stage_commit,
)

V1 = "/delta/v1/catalogs/main/schemas/default"


def _bad_actions(location: str, case: str) -> list[dict[str, Any]]:
    add = data_file(location, [1])
    if case == "add":
        add["add"]["path"] = "part\x00one.parquet"
        return [add]
    if case == "add-encoded":
        add["add"]["path"] = "part%00one.parquet"
        return [add]
    if case == "remove":
        return [{"remove": {"path": "gone\n.parquet", "deletionTimestamp": 1, "dataChange": True}}]
    if case == "dv":
        add["add"]["deletionVector"] = {
            "storageType": "p",
            "pathOrInlineDv": location.rstrip("/") + "/dv\x01.bin",
            "offset": 1,
            "sizeInBytes": 34,
            "cardinality": 1,
        }
        return [add]
    raise AssertionError(case)


def _log_bytes(location: str) -> dict[str, bytes]:
    """Every published log file (staged commits are the client's, not the table)."""
    log = local_path(location) / "_delta_log"
    return {
        str(p.relative_to(log)): p.read_bytes()
        for p in sorted(log.rglob("*"))
        if p.is_file() and "_staged_commits" not in p.parts
    }


CASES = ["add", "add-encoded", "remove", "dv"]


@pytest.mark.parametrize("case", CASES)
def test_the_preview_commit_route_refuses_a_control_character_path(
    uc_server: UCServerFixture, case: str
) -> None:
    table = create_uc_table(uc_server)
    location = table["storage_location"]
    before = _log_bytes(location)
    bad = stage_commit(location, 1, _bad_actions(location, case))
    status, error = post_commit(uc_server, table, bad)
    assert (status, error["error_code"]) == (400, "INVALID_ARGUMENT"), error
    assert "control character" in error["message"], error
    assert get_commits(uc_server, table) == (200, {"commits": [], "latest_table_version": 0})
    assert _log_bytes(location) == before
    # the next good commit is version 1
    good = stage_commit(location, 1, [data_file(location, [2])])
    assert post_commit(uc_server, table, good) == (200, {})
    assert get_commits(uc_server, table)[1]["latest_table_version"] == 1


def test_the_delta_api_add_commit_refuses_a_nul_path(uc_server: UCServerFixture) -> None:
    table = create_uc_table(uc_server)
    location = table["storage_location"]
    admin = uc_server.admin_token
    status, loaded = uc_server.request("GET", f"{V1}/tables/events", token=admin)
    assert status == 200, loaded
    before = _log_bytes(location)
    bad = stage_commit(location, 1, _bad_actions(location, "add"))
    update = {
        "requirements": [{"type": "assert-table-uuid", "uuid": loaded["metadata"]["table-uuid"]}],
        "updates": [
            {
                "action": "add-commit",
                "commit": {
                    "version": 1,
                    "timestamp": bad["timestamp"],
                    "file-name": bad["file_name"],
                    "file-size": bad["file_size"],
                    "file-modification-timestamp": bad["file_modification_timestamp"],
                },
            }
        ],
    }
    status, error = uc_server.request("POST", f"{V1}/tables/events", update, token=admin)
    assert 400 <= status < 500, error
    assert "control character" in json.dumps(error), error
    status, loaded = uc_server.request("GET", f"{V1}/tables/events", token=admin)
    assert loaded["latest-table-version"] == 0 and loaded["commits"] == []
    assert _log_bytes(location) == before
