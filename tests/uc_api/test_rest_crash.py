"""The catalog actor killed in the middle of a Unity Catalog commit over HTTP.

The actor runs with a fault file (:mod:`raydelta.actors.faults`): an armed
point makes its process exit at once, as a kill would. Ray restarts it and
re-sends the call in flight; the HTTP client sees one answer. Checked at
each point (before the ratification is durable, after it, mid-publish): the
client is answered 200, every acknowledged commit is in the log exactly
once with the staged bytes, and the next commit goes on from there.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from raydelta.actors.catalog.actor import CatalogActor, CatalogSettings, catalog_actor_name
from raydelta.actors.cluster import NAMESPACE
from raydelta.actors.faults import FAULT_FILE_ENV, arm
from raydelta.catalog import Catalog
from raydelta.storage.catalog.ratified_store import SqliteRatifiedStore
from raydelta.storage.table_location import normalize_uri
from tests.uc_api.conftest import (
    UCServerFixture,
    create_uc_table,
    data_file,
    get_commits,
    local_path,
    post_commit,
    stage_commit,
)

pytestmark = pytest.mark.slow  # an actor restart per case


@pytest.fixture
def faulty_server(ray_cluster: Any, tmp_path: Path) -> Iterator[tuple[UCServerFixture, Path]]:
    fault_file = tmp_path / "faults.json"
    arm(str(fault_file))
    name = f"uc-faulty-{uuid.uuid4().hex[:10]}"
    root = tmp_path / "warehouse"
    root.mkdir()
    CatalogActor.options(  # type: ignore[attr-defined]
        name=catalog_actor_name(name),
        namespace=NAMESPACE,
        lifetime="detached",
        runtime_env={"env_vars": {FAULT_FILE_ENV: str(fault_file)}},
    ).remote(
        SqliteRatifiedStore(str(root / "catalog.sqlite")),
        CatalogSettings(root=normalize_uri(str(root)), authorization=True),
    )
    catalog = Catalog(name=name, root=str(root), authorization=True)
    assert catalog.token is not None
    server = UCServerFixture(
        catalog=catalog, root=root, server=catalog.serve(), admin_token=catalog.token
    )
    yield server, fault_file
    server.server.stop()
    ray.kill(catalog.actor, no_restart=True)


@pytest.mark.parametrize(
    "point", ["catalog_before_ratify", "catalog_after_ratify", "catalog_mid_publish"]
)
def test_killed_mid_commit_exactly_once(
    faulty_server: tuple[UCServerFixture, Path], point: str
) -> None:
    server, fault_file = faulty_server
    table = create_uc_table(server)
    location = table["storage_location"]
    infos = []
    first = stage_commit(location, 1, [data_file(location, [1])])
    assert post_commit(server, table, first) == (200, {})
    infos.append(first)
    arm(str(fault_file), point)
    crashing = stage_commit(location, 2, [data_file(location, [2])])
    assert post_commit(server, table, crashing) == (200, {})  # Ray re-sends to the new process
    infos.append(crashing)
    deadline = time.monotonic() + 120
    while json.loads(fault_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert json.loads(fault_file.read_text()) == []  # the point was reached
    # the client, unsure, sends it again: still one commit
    assert post_commit(server, table, crashing) == (200, {})
    after = stage_commit(location, 3, [data_file(location, [3])])
    assert post_commit(server, table, after) == (200, {})
    infos.append(after)
    name = "main.default.events"
    assert ray.get(server.catalog.actor.wait_published.remote(name, 3, 120.0))
    log = local_path(location) / "_delta_log"
    published = sorted(p.name for p in log.glob("*.json"))
    assert published == [f"{v:020d}.json" for v in range(4)]
    for info in infos:
        staged = (log / "_staged_commits" / info["file_name"]).read_bytes()
        assert (log / f"{info['version']:020d}.json").read_bytes() == staged
    status, listed = get_commits(server, table)
    assert (status, listed) == (200, {"commits": [], "latest_table_version": 3})
    rows = server.catalog.open_table(name).to_arrow()
    assert sorted(rows.column("id").to_pylist()) == [1, 2, 3]
    txn_ids = [
        json.loads(line)["commitInfo"]["txnId"]
        for v in range(1, 4)
        for line in [(log / f"{v:020d}.json").read_text().splitlines()[0]]
    ]
    assert len(set(txn_ids)) == 3
