"""``raydelta catalog principals|grants|catalogs|schemas|tables``: the admin CLI
against a real server (in-process here: the CLI's own ``main`` speaking HTTP
to it), and ``catalog serve``'s authorization rules; the admin flow from the
shell only (server and CLI as subprocesses, delta's own JVM Unity Catalog
client committing) is in ``test_admin_flow_from_the_shell``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import raydelta
from raydelta.actors.catalog.maintenance import MAINTENANCE_PRINCIPAL
from raydelta.cli.app import main
from raydelta.cli.catalog import wanted_authorization
from tests.uc_api.conftest import (
    UCServerFixture,
    data_file,
    stage_commit,
    table_metadata,
    uc_request,
)

UC = "/api/2.1/unity-catalog"


def cli(capsys: Any, server: UCServerFixture, *argv: str, token: str | None = None) -> Any:
    """``raydelta catalog ARGV --json`` against ``server``: its JSON document."""
    code = main(
        ["catalog", *argv, "--url", server.url, "--token", token or server.admin_token, "--json"]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_admin_commands(uc_server: UCServerFixture, capsys: Any) -> None:
    assert cli(capsys, uc_server, "catalogs", "create", "main", "--comment", "c")["name"] == "main"
    assert cli(capsys, uc_server, "schemas", "create", "main.sales")["full_name"] == "main.sales"
    made = cli(
        capsys,
        uc_server,
        "tables",
        "create",
        "main.sales.orders",
        "--column",
        "id:bigint",
        "--column",
        "note:string",
    )
    assert [c["name"] for c in made["columns"]] == ["id", "note"]
    assert [c["name"] for c in cli(capsys, uc_server, "catalogs", "list")] == ["main"]
    assert [s["full_name"] for s in cli(capsys, uc_server, "schemas", "list", "main")] == [
        "main.sales"
    ]
    assert [t["name"] for t in cli(capsys, uc_server, "tables", "list", "main.sales")] == ["orders"]
    assert (
        cli(capsys, uc_server, "tables", "show", "main.sales.orders")["table_id"]
        == made["table_id"]
    )
    token = cli(capsys, uc_server, "principals", "create", "ana")["token"]
    # the catalog's own maintenance principal is listed like any other
    assert [p["name"] for p in cli(capsys, uc_server, "principals", "list")] == sorted(
        ["ana", "catalog-admin", MAINTENANCE_PRINCIPAL]
    )
    # grants in raydelta's names or Unity Catalog's; ana sees nothing before USE_CATALOG
    cli(
        capsys, uc_server, "grants", "grant", "table", "main.sales.orders", "ana", "SELECT", "write"
    )
    status, _ = uc_request("GET", uc_server.api + "/tables/main.sales.orders", token=token)
    assert status == 403
    cli(capsys, uc_server, "grants", "grant", "catalog", "main", "ana", "USE_CATALOG")
    cli(capsys, uc_server, "grants", "grant", "schema", "main.sales", "ana", "use_schema")
    assert uc_request("GET", uc_server.api + "/tables/main.sales.orders", token=token)[0] == 200
    shown = cli(
        capsys, uc_server, "grants", "show", "table", "main.sales.orders", "--principal", "ana"
    )
    assert shown == {
        "privilege_assignments": [{"principal": "ana", "privileges": ["read", "write"]}]
    }
    revoked = cli(
        capsys, uc_server, "grants", "revoke", "table", "main.sales.orders", "ana", "write"
    )
    assert revoked["privilege_assignments"] == [{"principal": "ana", "privileges": ["read"]}]
    # ana is no admin: refused with the typed error's name on stderr
    code = main(["catalog", "principals", "list", "--url", uc_server.url, "--token", token])
    assert code == 1 and capsys.readouterr().err.startswith("PermissionDeniedError: ")
    rotated = cli(capsys, uc_server, "principals", "rotate", "ana")["token"]
    assert uc_request("GET", uc_server.api + "/catalogs", token=token)[0] == 401
    assert uc_request("GET", uc_server.api + "/catalogs", token=rotated)[0] == 200
    cli(capsys, uc_server, "principals", "delete", "ana")
    assert uc_request("GET", uc_server.api + "/catalogs", token=rotated)[0] == 401
    cli(capsys, uc_server, "tables", "drop", "main.sales.orders")
    cli(capsys, uc_server, "schemas", "drop", "main.sales")
    cli(capsys, uc_server, "catalogs", "drop", "main")
    assert cli(capsys, uc_server, "catalogs", "list") == []
    # the URL and token may come from the environment; without a URL: a typed error
    os.environ["RAYDELTA_CATALOG_URL"] = uc_server.url
    os.environ["RAYDELTA_CATALOG_TOKEN"] = uc_server.admin_token
    try:
        assert main(["catalog", "catalogs", "list"]) == 0
    finally:
        del os.environ["RAYDELTA_CATALOG_URL"], os.environ["RAYDELTA_CATALOG_TOKEN"]
    capsys.readouterr()
    assert main(["catalog", "catalogs", "list"]) == 1
    assert capsys.readouterr().err.startswith("InvalidArgumentError: ")


def test_serve_never_ignores_the_authorization_setting() -> None:
    assert wanted_authorization(None, turn_on=False, turn_off=False) is True  # new: on
    assert wanted_authorization(None, turn_on=False, turn_off=True) is False
    assert wanted_authorization(True, turn_on=False, turn_off=False) is True
    with pytest.raises(raydelta.InvalidArgumentError, match="stays on"):
        wanted_authorization(True, turn_on=False, turn_off=True)
    with pytest.raises(raydelta.errors.AuthorizationDisabledError, match="--authorization"):
        wanted_authorization(False, turn_on=False, turn_off=False)
    assert wanted_authorization(False, turn_on=True, turn_off=False) is True
    assert wanted_authorization(False, turn_on=False, turn_off=True) is False


def _shell(*argv: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "raydelta.cli", "catalog", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _start_server(
    root: Path, env: dict[str, str], *flags: str
) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "raydelta.cli",
            "catalog",
            "serve",
            "--port",
            "0",
            "--store",
            str(root),
            "--name",
            "admin-flow",
            *flags,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    url = process.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:"), process.stderr.read() if process.stderr else url
    return process, url


def _stop(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.spark
def test_admin_flow_from_the_shell(spark: Any, tmp_path: Path) -> None:
    """Server and CLI as subprocesses. Delta's own JVM Unity Catalog client
    (``UCCommitCoordinatorClient`` over ``/delta/v1``) commits data as the
    principal granted WRITE without ALTER. The refusals go through the plain
    HTTP commit path (``/delta/preview/commits``, a staged file as delta
    writes it): delta's client answers a 403 with its transient-error retry
    loop (15 tries, backing off to a minute, about 7 minutes) before it
    gives up, too slow for a test."""
    from tests.uc_api.jvm_clients import JvmUCClient

    root = tmp_path / "warehouse"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    process, url = _start_server(root, env)
    try:
        admin = {**env, "RAYDELTA_CATALOG_URL": url}
        as_admin = ("--token-file", str(root / "admin-token"))
        _shell("catalogs", "create", "main", *as_admin, env=admin)
        _shell("schemas", "create", "main.default", *as_admin, env=admin)
        made = json.loads(
            _shell(
                "tables",
                "create",
                "main.default.events",
                "--column",
                "id:bigint",
                "--json",
                *as_admin,
                env=admin,
            )
        )
        writer = _shell("principals", "create", "writer", *as_admin, env=admin).strip()
        for grant in (
            ("catalog", "main", "writer", "USE_CATALOG"),
            ("schema", "main.default", "writer", "USE_SCHEMA"),
            ("table", "main.default.events", "writer", "READ", "WRITE"),
        ):
            _shell("grants", "grant", *grant, *as_admin, env=admin)
        shown = _shell("grants", "show", "table", "main.default.events", *as_admin, env=admin)
        assert "writer  read write" in shown.splitlines()

        location = made["storage_location"]
        client = JvmUCClient(spark, uri=url, token=writer, api="delta")
        table = client.table(location, name=("main", "default", "events"))
        assert table.commit(1, [data_file(location, [1])]).version == 1

        def commit(version: int, actions: list[dict[str, Any]]) -> tuple[int, Any]:
            body = {
                "table_id": made["table_id"],
                "table_uri": location,
                "commit_info": stage_commit(location, version, actions),
            }
            return uc_request("POST", url + UC + "/delta/preview/commits", body, token=writer)

        metadata = table_metadata(location)
        schema = json.loads(metadata["schemaString"])
        schema["fields"].append(
            {"name": "extra", "type": "string", "nullable": True, "metadata": {}}
        )
        changed = {"metaData": {**metadata, "schemaString": json.dumps(schema)}}
        status, error = commit(2, [changed])
        assert (status, error["error_code"]) == (403, "PERMISSION_DENIED")
        assert "ALTER" in error["message"]
        assert commit(2, [data_file(location, [2])]) == (200, {})  # data still commits
        _shell(
            "grants",
            "revoke",
            "table",
            "main.default.events",
            "writer",
            "WRITE",
            *as_admin,
            env=admin,
        )
        status, error = commit(3, [data_file(location, [3])])
        assert (status, error["error_code"]) == (403, "PERMISSION_DENIED")
        assert "WRITE" in error["message"]
        assert table.get_commits()[1] == 2  # delta's client reads the catalog's latest version
    finally:
        _stop(process)
    assert process.returncode == 0
