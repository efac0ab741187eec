"""Crash the Catalog actor at each crash point; retried clients get exactly-once results.

The actor is started here with ``RAYDELTA_FAULT_FILE`` in its environment
(:mod:`raydelta.actors.faults`): an armed point makes its process exit at once,
the first time it is reached. Ray restarts the actor (which recovers from the
SQLite store and the table's storage, republishing what was ratified and not
published) and re-sends the call in flight.

Points: ``catalog_before_ratify`` (inline: checked, nothing stored; staged:
the client's file written, not ratified), ``catalog_after_stage`` (a rebased
staged commit re-staged, not ratified), ``catalog_after_ratify`` (ratified,
no reply), ``catalog_mid_publish`` (``<v>.json`` written, not verified nor
marked published), ``catalog_recover`` (a crash while recovering).

Checks: the client's commit returns a version; the same ``txnId`` again returns
that version; every ratified version is published exactly once, contiguous,
each txnId once; acknowledged commits are all there.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import ray

from raydelta.actors.catalog.actor import CatalogActor, CatalogSettings, catalog_actor_name
from raydelta.actors.cluster import NAMESPACE
from raydelta.actors.faults import FAULT_FILE_ENV, arm
from raydelta.catalog import Catalog
from raydelta.storage.catalog.ratified_store import SqliteRatifiedStore
from raydelta.storage.table_location import normalize_uri
from tests.catalog.published_commits import add, check

SCHEMA = pa.schema([("date", pa.string()), ("value", pa.int64())])

pytestmark = pytest.mark.slow  # ~85 s: an actor restart (or two) per case


@pytest.fixture(scope="module")
def fault_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("catalog-faults") / "faults.json"


@pytest.fixture
def faulty(ray_cluster: Any, tmp_path: Path, fault_file: Path) -> Iterator[Catalog]:
    arm(str(fault_file))
    name = f"faulty-{uuid.uuid4().hex[:10]}"
    root = normalize_uri(str(tmp_path / "catalog"))
    store = SqliteRatifiedStore(str(tmp_path / "catalog" / "catalog.sqlite"))
    CatalogActor.options(  # type: ignore[attr-defined]
        name=catalog_actor_name(name),
        namespace=NAMESPACE,
        lifetime="detached",
        runtime_env={"env_vars": {FAULT_FILE_ENV: str(fault_file)}},
    ).remote(store, CatalogSettings(root=root))
    catalog = Catalog(name=name, root=str(tmp_path / "catalog"))
    yield catalog
    ray.kill(catalog.actor, no_restart=True)


@pytest.mark.parametrize(
    ("points", "mode"),
    [
        (["catalog_before_ratify"], "inline"),
        (["catalog_after_ratify"], "inline"),
        (["catalog_before_ratify"], "staged"),
        (["catalog_after_ratify"], "staged"),
        (["catalog_mid_publish"], "inline"),
        (["catalog_after_ratify", "catalog_recover"], "inline"),
    ],
)
def test_crash_points_exactly_once(
    faulty: Catalog, fault_file: Path, points: list[str], mode: str
) -> None:
    faulty.create_table("t", SCHEMA, partition_by=["date"])
    table = faulty.open_table("t", commit_mode=mode)  # type: ignore[arg-type]
    acknowledged = {}
    for i in range(2):
        txn = table.transaction().add(add(f"date=d/before-{i}.parquet"))
        acknowledged[txn.txn_id] = txn.commit()
    arm(str(fault_file), *points)
    txn = table.transaction().add(add("date=d/crash.parquet"))
    version = txn.commit()  # the actor dies; Ray restarts it and re-sends
    # The publisher thread publishes after the reply (commits are acknowledged
    # once ratified), so a point on its path may fire just after commit() returns.
    deadline = time.monotonic() + 120
    while json.loads(fault_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert json.loads(fault_file.read_text()) == []  # every point was reached
    assert version == 3
    assert txn.commit() == version  # a retry by the client: same version
    acknowledged[txn.txn_id] = version
    after = table.transaction().add(add("date=d/after.parquet"))
    acknowledged[after.txn_id] = after.commit()
    check(faulty, table, acknowledged)


def test_crash_after_restaging(faulty: Catalog, fault_file: Path) -> None:
    faulty.create_table("t", SCHEMA, partition_by=["date"])
    table = faulty.open_table("t", commit_mode="staged")
    first, second = table.transaction(), table.transaction()
    first.add(add("date=d/a.parquet"))
    second.add(add("date=d/b.parquet"))
    acknowledged = {first.txn_id: first.commit()}
    arm(str(fault_file), "catalog_after_stage")
    acknowledged[second.txn_id] = second.commit()  # re-staged, crash, re-sent
    assert json.loads(fault_file.read_text()) == []
    assert acknowledged[second.txn_id] == 2
    check(faulty, table, acknowledged)
    # the file re-staged before the crash was never ratified: garbage
    deleted = ray.get(faulty.actor.collect_staged_garbage.remote("t", None, older_than_s=0))
    assert len(deleted) == 1 and deleted[0].startswith(f"_staged_commits/{2:020d}.")
