"""Where catalog tables may live and who may create them (Python face), and the
overlapping tables a catalog finds when it starts (issue 33).

- Creating a table needs ``CREATE_TABLE`` (a flat name: on the metastore; a
  ``c.s.t`` name: ``USE_CATALOG``, ``USE_SCHEMA``, ``CREATE_TABLE``), and
  outside the catalog's root ``CREATE_EXTERNAL_TABLE`` on an external
  location holding it; the admin needs no external location.
- No two tables' locations overlap, authorization on or off.
- Tables registered under the old rules whose locations overlap are
  reported (``Catalog.location_report``, ``raydelta status``) and get no
  credentials until an admin drops one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raydelta
from raydelta.actors.catalog.locations import LocationComparison
from raydelta.catalog import Catalog
from raydelta.storage.catalog.ratified_store import SqliteRatifiedStore

SCHEMA = pa.schema([("id", pa.int64())])
NewCatalog = Callable[..., Catalog]
REPO = Path(__file__).resolve().parents[2]


def test_creating_tables_needs_privileges(new_catalog: NewCatalog, tmp_path: Path) -> None:
    catalog = new_catalog(authorization=True)
    token = catalog.create_principal("p")
    with pytest.raises(raydelta.PermissionDeniedError) as refused:
        catalog.create_table("t", SCHEMA, token=token)
    assert refused.value.missing == ("create_table",)
    catalog.grant("p", "*", ["CREATE_TABLE"], securable_type="metastore")
    catalog.create_table("t", SCHEMA, token=token)
    assert catalog.open_table("t", token=token).version() == 0  # the creator owns it
    with pytest.raises(raydelta.PermissionDeniedError, match="lacks USE_CATALOG"):
        catalog.create_table("main.sales.t", SCHEMA, token=token)
    # outside the root: only inside an external location granting CREATE_EXTERNAL_TABLE
    ext = tmp_path / "ext"
    with pytest.raises(raydelta.PermissionDeniedError, match="no external location holds it"):
        catalog.create_table("u", SCHEMA, location=str(ext / "u"), token=token)
    with pytest.raises(raydelta.PermissionDeniedError):
        catalog.create_external_location("ext", str(ext), token=token)  # the admin's
    catalog.create_external_location("ext", str(ext), comment="external tables")
    catalog.grant("p", "ext", ["CREATE_EXTERNAL_TABLE"], securable_type="external_location")
    with pytest.raises(ValueError, match="cannot be granted on external location"):
        catalog.grant("p", "ext", ["USE_SCHEMA"], securable_type="external_location")
    catalog.create_table("u", SCHEMA, location=str(ext / "u"), token=token)
    assert [x["name"] for x in catalog.list_external_locations(token=token)] == ["ext"]
    # no overlap, whoever asks
    for where in (ext / "u", ext / "u" / "inner", ext):
        with pytest.raises(raydelta.LocationOverlapError):
            catalog.create_table("v", SCHEMA, location=str(where))
    plain = tmp_path / "plain"
    raydelta.create_table(str(ext / "u" / "plain"), SCHEMA)
    with pytest.raises(raydelta.LocationOverlapError):
        catalog.upgrade_table("up", str(ext / "u" / "plain"))
    raydelta.create_table(str(plain), SCHEMA)
    with pytest.raises(raydelta.PermissionDeniedError):
        catalog.upgrade_table("up", str(plain), token=token)  # outside every external location
    assert catalog.upgrade_table("up", str(plain)).version() == 1  # the admin may
    with pytest.raises(raydelta.InvalidArgumentError, match="holds tables"):
        catalog.drop_external_location("ext")
    catalog.drop_external_location("ext", force=True)
    assert catalog.list_external_locations() == []


def test_overlaps_are_refused_with_authorization_off(
    new_catalog: NewCatalog, tmp_path: Path
) -> None:
    catalog = new_catalog()
    catalog.create_table("a", SCHEMA, location=str(tmp_path / "a"))
    with pytest.raises(raydelta.LocationOverlapError) as refused:
        catalog.create_table("b", SCHEMA, location=str(tmp_path / "a" / "b"))
    assert refused.value.other == "a"
    assert [e.name for e in catalog.list_tables()] == ["a"]


def test_case_folding_where_the_file_system_folds_case() -> None:
    folding = LocationComparison("file:///w/root", folds_case=True)
    assert folding.location("/W/Table") == folding.location("file:///w/TABLE/")
    folding = LocationComparison("file:///w/root", folds_case=False)
    assert folding.location("/W/Table") != folding.location("/w/table")
    assert folding.location("s3://b/T") != folding.location("s3://b/t")  # S3 keys keep case


def test_overlapping_tables_found_at_start(ray_cluster: Any, tmp_path: Path) -> None:
    root = tmp_path / "catalog"
    root.mkdir()
    store = SqliteRatifiedStore(str(root / "catalog.sqlite"))
    registered = {  # as the old rules let anyone register them
        "outer": tmp_path / "data",
        "inner": tmp_path / "data" / "inner",
        "in-root": root / "external",
        "alone": tmp_path / "alone",
    }
    ids = {}
    for name, where in registered.items():
        ids[name] = str(uuid.uuid4())
        raydelta.create_table(str(where), SCHEMA)
        store.register_table(
            name, location=where.as_uri(), table_id=ids[name], catalog_managed=False
        )
    name = f"overlaps-{uuid.uuid4().hex[:8]}"
    catalog = Catalog(store, name=name, root=str(root), authorization=True)
    server = catalog.serve()
    try:
        report = catalog.location_report()
        pairs = {(e["table"], e["overlaps"]) for e in report}
        assert pairs == {("outer", "inner"), ("inner", "outer"), ("in-root", "<managed root>")}
        relations = {(e["table"], e["relation"]) for e in report}
        assert ("inner", "lies inside") in relations and ("outer", "contains") in relations

        address = ray_cluster.get_runtime_context().gcs_address
        status = subprocess.run(
            [sys.executable, "-m", "raydelta.cli", "status", "--address", address, "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )
        assert status.returncode == 0, status.stderr
        listed = [e for e in json.loads(status.stdout) if e.get("catalog") == name]
        assert {(e["table"], e["overlaps"]) for e in listed} == pairs
        text = subprocess.run(
            [sys.executable, "-m", "raydelta.cli", "status", "--address", address],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )
        assert "tables whose locations overlap" in text.stdout
        assert any(line.startswith(name) and " inner " in line for line in text.stdout.splitlines())

        from tests.uc_api.conftest import uc_request

        def credentials(table: str) -> tuple[int, Any]:
            body = {"table_id": ids[table], "operation": "READ"}
            return uc_request(
                "POST",
                server.api + "/temporary-table-credentials",
                body,
                token=catalog.token,
            )

        for table in ("outer", "inner", "in-root"):
            status_code, error = credentials(table)
            assert (status_code, error["error_code"]) == (400, "FAILED_PRECONDITION"), error
            assert "overlaps" in error["message"]
        assert credentials("alone")[0] == 200
        catalog.drop_table("inner")  # the admin resolves one overlap
        assert {e["table"] for e in catalog.location_report()} == {"in-root"}
        assert credentials("outer")[0] == 200
    finally:
        server.stop()
        from raydelta.actors.catalog.actor import catalog_actor_name
        from tests.actor_teardown import kill_actors_under
        from tests.catalog.conftest import kill_actor

        kill_actor(catalog_actor_name(name))
        kill_actors_under(tmp_path)
