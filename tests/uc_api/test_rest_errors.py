"""Unity Catalog-style errors: every failure is ``{"error_code", "message"}`` with
Unity Catalog's HTTP status (the Delta API's ``{"error": {...}}`` on
``/delta/v1``), an unknown route or method included; bad input changes nothing.
"""

from __future__ import annotations

import urllib.request
from typing import Any

from tests.uc_api.conftest import (
    UCServerFixture,
    create_uc_table,
    data_file,
    get_commits,
    post_commit,
    stage_commit,
)

CASES: list[tuple[str, str, Any, int, str]] = [
    ("GET", "/no/such/route", None, 404, "NOT_FOUND"),
    ("PUT", "/catalogs", {"name": "x"}, 405, "UNIMPLEMENTED"),
    ("GET", "/catalogs/absent", None, 404, "CATALOG_NOT_FOUND"),
    ("GET", "/schemas/main.absent", None, 404, "SCHEMA_NOT_FOUND"),
    ("GET", "/schemas?catalog_name=absent", None, 404, "CATALOG_NOT_FOUND"),
    ("GET", "/schemas", None, 400, "INVALID_ARGUMENT"),
    ("GET", "/tables/main.default.absent", None, 404, "TABLE_NOT_FOUND"),
    ("GET", "/tables/not-three-parts", None, 400, "INVALID_ARGUMENT"),
    ("GET", "/tables?catalog_name=main", None, 400, "INVALID_ARGUMENT"),
    ("GET", "/catalogs?max_results=-1", None, 400, "INVALID_ARGUMENT"),
    ("POST", "/catalogs", {}, 400, "INVALID_ARGUMENT"),
    ("POST", "/catalogs", {"name": "a.b"}, 400, "INVALID_ARGUMENT"),
    ("POST", "/catalogs", {"name": "main"}, 400, "CATALOG_ALREADY_EXISTS"),
    (
        "POST",
        "/schemas",
        {"catalog_name": "main", "name": "default"},
        400,
        "SCHEMA_ALREADY_EXISTS",
    ),
    ("POST", "/schemas", {"catalog_name": "absent", "name": "s"}, 404, "CATALOG_NOT_FOUND"),
    (
        "POST",
        "/tables",
        {"catalog_name": "main", "schema_name": "default", "name": "t", "table_type": "VIEW"},
        400,
        "INVALID_ARGUMENT",
    ),
    (
        "POST",
        "/tables",
        {
            "catalog_name": "main",
            "schema_name": "default",
            "name": "t",
            "table_type": "EXTERNAL",
            "data_source_format": "CSV",
        },
        400,
        "INVALID_ARGUMENT",
    ),
    (
        "POST",
        "/tables",
        {
            "catalog_name": "main",
            "schema_name": "default",
            "name": "t",
            "table_type": "MANAGED",
            "columns": [{"name": "c", "type_text": "no-such-type"}],
        },
        400,
        "INVALID_ARGUMENT",
    ),
    (
        "POST",
        "/temporary-table-credentials",
        {"table_id": "x", "operation": "FLY"},
        400,
        "INVALID_ARGUMENT",
    ),
    ("POST", "/delta/preview/commits", {"table_id": "x"}, 400, "INVALID_ARGUMENT"),
    (
        "GET",
        "/delta/preview/commits",
        {"table_id": "x", "table_uri": "file:/x"},
        404,
        "TABLE_NOT_FOUND",
    ),
]
"""(method, path, body, HTTP status, error_code): one server answers them all."""


def test_error_shapes(uc_server: UCServerFixture) -> None:
    create_uc_table(uc_server)
    for method, path, body, status, code in CASES:
        got, error = uc_server.request(method, path, body, token=uc_server.admin_token)
        assert (got, error["error_code"]) == (status, code), (method, path, error)
        assert isinstance(error["message"], str) and error["message"]


def test_bodies_that_are_not_json_objects(uc_server: UCServerFixture) -> None:
    for raw in (b"{not json", b"[1, 2]"):
        request = urllib.request.Request(uc_server.api + "/catalogs", data=raw, method="POST")
        request.add_header("Authorization", f"Bearer {uc_server.admin_token}")
        request.add_header("Content-Type", "application/json")
        try:
            urllib.request.urlopen(request, timeout=60)
            raise AssertionError("accepted")
        except urllib.error.HTTPError as error:
            assert error.code == 400
            assert b"INVALID_ARGUMENT" in error.read()


def test_bad_commits_change_nothing(uc_server: UCServerFixture) -> None:
    table = create_uc_table(uc_server)
    location = table["storage_location"]
    good = stage_commit(location, 1, [data_file(location, [1])])
    cases = {
        "a file that does not exist": {
            **good,
            "file_name": f"{1:020d}.{'0' * 8}-0000-0000-0000-{'0' * 12}.json",
        },
        "a name that is not a staged commit": {**good, "file_name": "00000000000000000001.json"},
        "a name of another version": {**good, "version": 2},
        "a path, not a name": {**good, "file_name": "../" + good["file_name"]},
        "a negative version": {**good, "version": -1},
    }
    for case, info in cases.items():
        status, error = post_commit(uc_server, table, info)
        assert (status, error["error_code"]) == (400, "INVALID_ARGUMENT"), (case, error)
    wrong_uri = {**table, "storage_location": "file:/somewhere/else"}
    status, error = post_commit(uc_server, wrong_uri, good)
    assert (status, error["error_code"]) == (400, "INVALID_ARGUMENT"), error
    status, error = post_commit(uc_server, table, None, latest_backfilled_version=7)
    assert (status, error["error_code"]) == (400, "INVALID_ARGUMENT"), error
    # a staged commit without an in-commit timestamp breaks the feature's rules
    broken = stage_commit(location, 1, [data_file(location, [5])])
    path = uc_server.root / location.split(str(uc_server.root), 1)[1].lstrip("/")
    staged = path / "_delta_log" / "_staged_commits" / broken["file_name"]
    staged.write_text(staged.read_text().replace('"inCommitTimestamp"', '"noTimestamp"'))
    broken["file_size"] = staged.stat().st_size
    status, error = post_commit(uc_server, table, broken)
    assert (status, error["error_code"]) == (400, "INVALID_ARGUMENT"), error
    status, listed = get_commits(uc_server, table)
    assert (status, listed) == (200, {"commits": [], "latest_table_version": 0})
    # the good one still commits as version 1
    assert post_commit(uc_server, table, good) == (200, {})
    assert get_commits(uc_server, table)[1]["latest_table_version"] == 1


def test_external_tables_take_no_commits(uc_server: UCServerFixture, tmp_path: Any) -> None:
    import pyarrow as pa

    import raydelta

    create_uc_table(uc_server)
    uri = str(tmp_path / "ext")
    raydelta.create_table(uri, pa.schema([("id", pa.int64())]))
    status, table = uc_server.request(
        "POST",
        "/tables",
        {
            "catalog_name": "main",
            "schema_name": "default",
            "name": "ext",
            "table_type": "EXTERNAL",
            "data_source_format": "DELTA",
            "storage_location": uri,
        },
        token=uc_server.admin_token,
    )
    assert status == 200, table
    info = stage_commit(table["storage_location"], 1, [])
    status, error = post_commit(uc_server, table, info)
    assert (status, error["error_code"]) == (400, "INVALID_ARGUMENT"), error
    assert "external" in error["message"]
