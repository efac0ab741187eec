"""What the catalog fault tests check after a crash: every acknowledged commit
is in the published log at its version, exactly once (shared by the SQLite and
PostgreSQL fault tests)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import ray

from raydelta.catalog import Catalog, CatalogTable
from raydelta.protocol.actions import AddFile, CommitInfo, parse_actions


def add(path: str) -> AddFile:
    return AddFile.model_validate(
        {
            "path": path,
            "partitionValues": {"date": "d"},
            "size": 1,
            "modificationTime": 0,
            "dataChange": True,
            "stats": json.dumps({"numRecords": 1}),
        }
    )


def published_txns(table: CatalogTable) -> dict[str, list[int]]:
    log = Path(table.uri.removeprefix("file://")) / "_delta_log"
    found: dict[str, list[int]] = {}
    for name in os.listdir(log):
        if len(name) == 25 and name.endswith(".json"):
            info = parse_actions((log / name).read_bytes())[0]
            assert isinstance(info, CommitInfo) and info.txn_id
            found.setdefault(info.txn_id, []).append(int(name[:20]))
    return found


def check(catalog: Catalog, table: CatalogTable, acknowledged: dict[str, int]) -> None:
    """Every acknowledged commit is there, at its version, published exactly once."""
    latest = table.version()
    assert ray.get(catalog.actor.wait_published.remote(table.table_name, latest))
    found = published_txns(table)
    assert sorted(v for vs in found.values() for v in vs) == list(range(latest + 1))
    for txn_id, version in acknowledged.items():
        assert found.get(txn_id) == [version], txn_id
    assert catalog.get_ratified_commits(table.table_name).commits == ()
    assert table.snapshot().num_files == latest
